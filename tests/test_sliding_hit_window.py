"""Hit validation against a widened sliding window (``SlidingPolicy.hit_extra_tokens``, option
``sliding_hit_extra_tokens``): the artifact's v1 fork, when the paper's numbers were recorded,
asked a hit for ``cdiv(W + 192 - 1, block)`` contiguous cached blocks (specialized_manager.py
``SlidingWindowManager.__init__``, commits 014d69f..e71d61b). With retention equal to that extra,
a request that decoded ``n`` tokens no longer gives its sibling the prompt's hit."""

from __future__ import annotations

import pytest
from conftest import rehit_sliding_bytes, req

from harness.backends.sim.engine import system_options
from harness.config import compose_cell
from jenga import FullAttentionSpec, SlidingWindowSpec, SpecError, make_manager
from jenga.policies import SlidingPolicy
from jenga.testing import check_invariants

SPEC = SlidingWindowSpec("sw", 1, 8, window=4)


@pytest.mark.parametrize("extra, pages", [(0, [(5, 8)]), (2, [(3, 8)]), (100, [(0, 8)])])
def test_required_pages_widen_by_extra(extra, pages):
    """Window 4, hit 8: the real window needs tokens 5-7; ``extra`` more below (clamped at 0: a run
    from the start is a hit however short, as the fork's ``_find_longest_cache_hit`` keeps it)."""
    assert SlidingPolicy(SPEC, hit_extra_tokens=extra).required_pages(8, 1) == pages


def test_fork_block_count():
    """Gemma-3's window 1024, 16-token blocks, 192 extra: the fork's ``cdiv(1024 + 192 - 1, 16)``
    = 76 contiguous blocks end at the hit, at any block-aligned hit length."""
    pol = SlidingPolicy(SlidingWindowSpec("sw", 1, 8, window=1024), retain_tokens=192, hit_extra_tokens=192)
    for L in (1216, 5008, 70_096):
        (a, b), = pol.required_pages(L, 16)
        assert (a, b) == (L // 16 - 76, L // 16)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "192"])
def test_bad_extra_names_the_key(bad):
    with pytest.raises(SpecError, match="sliding_hit_extra_tokens"):
        make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     sliding_hit_extra_tokens=bad)


def _sibling_hit(retain: int, extra: int) -> int:
    """r1 (8-token prompt) decodes 2 tokens and is still running when its sibling r2 (same prompt
    + another token) looks up; a filler prefill evicts the stale pages first."""
    m = make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     enable_prefix_cache=True, sliding_retention_tokens=retain,
                     sliding_hit_extra_tokens=extra)
    r1 = req("r1", list(range(1, 8)) + [100])
    assert m.allocate(r1, 8)
    for tok in (200, 201):
        r1.output_token_ids.append(tok)
        assert m.allocate(r1, 1)
    assert m.allocate(req("f", list(range(1000, 1024))), 24)
    hit = m.lookup_prefix(req("r2", list(range(1, 8)) + [100, 300]))
    check_invariants(m)
    return hit


def test_widened_validation_cancels_retention():
    """Retention 2 with the real window (the fork after 2025-08-16): the sibling hits the whole
    prompt. Retention 2 validated against the widened window (the fork the paper ran): the 2
    decoded tokens pushed 2 of the needed 5 pages out, so the prompt's hit is lost -- as with no
    retention at all."""
    assert _sibling_hit(2, 0) == 8
    assert _sibling_hit(2, 2) < 8
    assert _sibling_hit(0, 0) < 8


def test_widened_validation_still_hits_a_finished_prompt():
    """Negative control: a request that finished at its prompt (nothing decoded) leaves its whole
    widened window cached, so the extra does not remove every hit."""
    m = make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     enable_prefix_cache=True, sliding_retention_tokens=2, sliding_hit_extra_tokens=2)
    r1 = req("r1", list(range(1, 11)))
    assert m.allocate(r1, 10)
    m.free(r1)
    assert m.lookup_prefix(req("r2", list(range(1, 11)) + [50])) == 10


@pytest.mark.parametrize("system, version, extra", [("jenga", "v1", 192), ("jenga", "v0", None),
                                                    ("max_page", "v1", 192), ("static_partition", "v1", 192),
                                                    ("vllm", "v1", None), ("hybrid_groups", "v1", None)])
def test_systems_take_the_forks_validation_per_engine(system, version, extra):
    cfg = compose_cell([f"system={system}", f"engine.engine_version={version}"])
    assert system_options(cfg.system, cfg.engine).get("sliding_hit_extra_tokens") == extra


def test_unknown_engine_key_names_it():
    cfg = compose_cell(["system=jenga", "+system.options_by_engine.v2={sliding_hit_extra_tokens: 1}"])
    with pytest.raises(ValueError, match="options_by_engine"):
        system_options(cfg.system, cfg.engine)


def test_hit_request_holds_the_run_its_hit_validated():
    """The fork's hit returns the whole contiguous run (W - 1 + extra tokens) and frees only below
    the widened window: a request admitted with a hit of 10 holds [10 - 3 - 3, 11) = 7 pages, not
    only the real window [7, 11) (which would drop the 3 pages a later lookup of the same prefix
    needs, e.g. after a preemption)."""
    m = make_manager("jenga", [FullAttentionSpec("full", 1, 8), SPEC], 8 * 64, tokens_per_page=1,
                     enable_prefix_cache=True, sliding_retention_tokens=3, sliding_hit_extra_tokens=3)
    assert rehit_sliding_bytes(m) == 7 * 8
