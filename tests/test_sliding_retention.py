"""Sliding-window retention past the window (the artifact's forks keep 192 tokens; SlidingPolicy
``retain_tokens``): exact held pages, hits still validated against the real window, and the
sibling-hit case it exists for (a request decoded a few tokens; its sibling shares the prompt)."""

from __future__ import annotations

import pytest
from conftest import rehit_sliding_bytes, req

from jenga import FullAttentionSpec, SlidingWindowSpec, SpecError, make_manager
from jenga.policies import SlidingPolicy
from jenga.testing import check_invariants

SPEC = SlidingWindowSpec("sw", 1, 8, window=4)


@pytest.mark.parametrize("retain, prev, lo", [(0, 10, 7), (2, 10, 5), (2, 4, 0), (100, 10, 0)])
def test_held_lower_end_moves_back_by_retain(retain, prev, lo):
    """Window 4: the next token reads the last 3, so [prev-3, ...) is needed; ``retain`` more are
    held (one token per page)."""
    pol = SlidingPolicy(SPEC, retain_tokens=retain)
    assert pol.held_intervals(None, prev, prev + 1, 1) == [(lo, prev + 1)]
    # needed bytes and required pages (hit validation) do not move: retention is held, not needed
    assert pol.needed_bytes(None, prev, prev + 1) == SlidingPolicy(SPEC).needed_bytes(None, prev, prev + 1)
    assert pol.required_pages(8, 1) == [(5, 8)]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "192"])
def test_bad_retention_names_the_key(bad):
    with pytest.raises(SpecError, match="sliding_retention_tokens"):
        make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     sliding_retention_tokens=bad)


def test_systems_without_retention_reject_the_option():
    with pytest.raises(SpecError, match="sliding_retention_tokens"):
        make_manager("vllm", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     sliding_retention_tokens=2)


def _sibling_hit(retain: int) -> int:
    """r1 (prompt 8 tokens) decodes 2 tokens and is still running when its sibling r2 (same 8-token
    article + another question) looks up. Window 4 needs tokens 5-7 for a hit of 8."""
    specs = [FullAttentionSpec("full", 1, 8), SPEC]
    m = make_manager("jenga", specs, 8 * 64, tokens_per_page=1, enable_prefix_cache=True,
                     sliding_retention_tokens=retain)
    article = list(range(1, 8))
    r1 = req("r1", article + [100])
    assert m.allocate(r1, 8)
    for tok in (200, 201):
        r1.output_token_ids.append(tok)
        assert m.allocate(r1, 1)
    # another article's prefill (24 tokens: 48 pages, 44 free) evicts 4 stale pages, the
    # highest-prefix ones first
    filler = req("f", list(range(1000, 1000 + 24)))
    assert m.allocate(filler, 24)
    r2 = req("r2", article + [100, 300])
    hit = m.lookup_prefix(r2)
    check_invariants(m)
    return hit


def test_retention_keeps_the_sibling_hit_after_decode():
    """Negative control first: without retention r1's window has moved 2 tokens past the prompt,
    the sliding pages of tokens 5-6 were released stale and evicted, so the longest valid hit
    falls to the start; with retention 2 the window of the prompt is still held: hit 8."""
    assert _sibling_hit(0) < 8
    assert _sibling_hit(2) == 8


def test_hit_request_holds_nothing_below_its_hit_window():
    """A request admitted with a hit pins exactly the pages the hit needs (nothing in the retention
    range below them, which it never computed)."""
    specs = [FullAttentionSpec("full", 1, 8), SPEC]
    m = make_manager("jenga", specs, 8 * 64, tokens_per_page=1, enable_prefix_cache=True,
                     sliding_retention_tokens=3)
    # held sliding pages: the window of 10 ([7, 10)) plus the new token -> 4 pages, not 4 + 3
    assert rehit_sliding_bytes(m) == 4 * 8


@pytest.mark.parametrize("first, ts", [(True, -1), (False, 2)])
def test_stale_pages_first_sets_the_early_release_timestamp(first, ts):
    """Jenga's update_last_access (the paper's hook) gives pages released out of the window the
    stale timestamp, below every other, so they go first; ``stale_pages_first=False`` (a what-if
    knob) gives them their release time like any other page. Window 4, one token per page: growing
    a 10-token request to 11 (the manager's second step: time 2) releases its out-of-window pages;
    the full type's pages stay held."""
    mm = make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                      enable_prefix_cache=True, stale_pages_first=first)
    r = req("a", list(range(1, 11)))
    assert mm.allocate(r, 10)
    assert mm.allocate(r, 1)
    sw = 1
    cached = [s for s in range(64) if mm.pool.is_cached(sw, s)]
    assert cached and {mm.pool.evictor.timestamp(sw, s) for s in cached} == {ts}
    check_invariants(mm)
