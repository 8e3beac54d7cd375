"""The common decode step taken ahead (``PagedManager._quiet_until``, issue 20): a request that
last allocated knows how many tokens it may reach with no held page changing and no page filling,
and ``allocate`` then only moves the clock and the accounting. It must change nothing observable:
checked in lockstep against the same manager with the look-ahead off, on random streams of every
system and layer mix, and on exact horizons."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jenga
from jenga.fuzz import MIXES, Req, _new_request, make_stream_manager
from jenga.interface import ImageSpan
from jenga.spec import ChunkedLocalSpec, FullAttentionSpec, MambaSpec, SlidingWindowSpec, TokenDropSpec
from jenga.testing import check_invariants, state_fingerprint


def _twins(seed: int, system: str, mix: str):
    """Two identical managers (same random draws), the second with the look-ahead off."""
    a, *_ = make_stream_manager(random.Random(seed), system, mix)
    b, *_ = make_stream_manager(random.Random(seed), system, mix)
    b._quiet_ok = False
    return a, b


def _lockstep(seed: int, system: str, mix: str, ops: int = 120) -> tuple[int, int]:
    """Drive both twins with one stream, mostly decode steps (1-3 tokens, as speculative decoding
    asks); after every operation both answered the same and hold the same state. Returns
    (decode steps, steps the look-ahead answered)."""
    a, b = _twins(seed, system, mix)
    rng = random.Random(seed + 1)
    running: list[tuple[Req, Req]] = []
    decodes = ahead = 0
    for i in range(ops):
        x = rng.random()
        if x < 0.15 or not running:
            r = _new_request(rng, i, mix)
            r2 = Req(r.request_id, list(r.prompt_token_ids), r.images, [], r.out_len)
            hits = a.lookup_prefix(r), b.lookup_prefix(r2)
            assert hits[0] == hits[1]
            n = len(r.prompt_token_ids) - hits[0]
            oks = a.allocate(r, n), b.allocate(r2, n)
            assert oks[0] == oks[1]
            if oks[0]:
                running.append((r, r2))
            else:
                a.free(r)
                b.free(r2)
        elif x < 0.9:
            r, r2 = rng.choice(running)
            n = rng.choice([1, 1, 1, 2, 3])
            rs = a.reqs[r.request_id]
            decodes += 1
            ahead += rs.T + n <= rs.quiet
            for req in (r, r2):
                req.output_token_ids += [3000 + i] * n
            oks = a.allocate(r, n), b.allocate(r2, n)
            assert oks[0] == oks[1]
            if not oks[0] or len(r.output_token_ids) >= 40:
                a.free(r)
                b.free(r2)
                running.remove((r, r2))
        else:
            r, r2 = running.pop(rng.randrange(len(running)))
            a.free(r)
            b.free(r2)
        assert state_fingerprint(a) == state_fingerprint(b), f"op {i}"
        assert a.usage() == b.usage()
    check_invariants(a)
    return decodes, ahead


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_look_ahead_changes_nothing_on_any_mix(mix):
    decodes = ahead = 0
    for seed in range(6):
        system = jenga.SYSTEM_NAMES[seed % len(jenga.SYSTEM_NAMES)]
        d, a = _lockstep(seed, system, mix)
        decodes, ahead = decodes + d, ahead + a
    assert decodes > 100
    # The look-ahead answers a good share of the decode steps where every type's policy is one it
    # bounds (pages of 1-8 tokens and windows of 4-9 here: short horizons), so the comparison is
    # not vacuous -- Mamba state included (its checkpoints are written inside the prompt only).
    if mix in ("full", "full+swa", "swa+swa", "full+chunked", "self+cross", "kv_sharing", "spec_decode",
               "token_drop", "mamba", "full+mamba"):
        assert ahead * 10 > decodes, (ahead, decodes)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), system=st.sampled_from(jenga.SYSTEM_NAMES),
       mix=st.sampled_from(sorted(MIXES)))
def test_look_ahead_changes_nothing_on_random_streams(seed, system, mix):
    _lockstep(seed, system, mix, ops=60)


def _horizon(specs, T0: int, cache: bool, tpp: int = 4, images=()) -> int:
    """The look-ahead of a request that prefilled ``T0 - 1`` tokens and decoded one (its held
    pages were computed with ``T0 - 1`` tokens computed)."""
    m = jenga.make_manager("jenga", specs, 1 << 24, tokens_per_page=tpp, enable_prefix_cache=cache)
    r = Req("r", list(range(T0 - 1)), images)
    assert m.allocate(r, T0 - 1)
    r.output_token_ids.append(7)
    assert m.allocate(r, 1)
    return m.reqs["r"].quiet


def test_exact_horizons():
    """Full attention, 4 tokens per page: at 5 tokens the held pages (2) stay until 8 tokens; with
    the prefix cache on, the step reaching 8 fills page 1 and registers it, so 7. At a page end
    (8) the next token needs a page: no look-ahead (8 itself). A sliding window of 6 (the last 5
    tokens read): at 10 tokens (9 computed) pages 1-2 are held, the start stays on page 1 until
    13 are computed, the end until 12 are allocated: 12."""
    full = [FullAttentionSpec("full", 1, 64)]
    assert _horizon(full, 5, cache=False) == 8
    assert _horizon(full, 5, cache=True) == 7
    assert _horizon(full, 8, cache=False) == 8
    assert _horizon([SlidingWindowSpec("swa", 1, 64, window=6)], 10, cache=False) == 12
    # A window of 2 reads the last token only: at 13 tokens (12 computed) the held start is page
    # 2 (token 11), but the next step computes 13 and starts at page 3: no look-ahead. At 14 (13
    # computed, page 3) it stays until 16 are computed; the end until 16 are allocated: 16.
    window2 = [SlidingWindowSpec("swa", 1, 64, window=2)]
    assert _horizon(window2, 13, cache=False) == 13
    assert _horizon(window2, 14, cache=False) == 16
    # A chunk of 4 tokens (one page): the start moves at each page end, with the end.
    assert _horizon([ChunkedLocalSpec("local", 1, 64, chunk=4)], 13, cache=False) == 16


def test_a_moving_window_start_bounds_the_horizon():
    """The start moves first: 8 tokens per page, a window of 6; at 11 tokens (10 computed) the
    held start is page 0 (token 5) and stays there while at most 12 are computed (token 7); with
    13 computed it is page 1. The end holds until 16 are allocated, so the start bounds it: 13
    (tokens computed stay below the allocated ones)."""
    assert _horizon([SlidingWindowSpec("swa", 1, 64, window=6)], 11, cache=False, tpp=8) == 13


def test_cross_attention_pages_never_bound_the_horizon():
    """Cross-attention KV is held whole from the first step: only the self-attention pages bound."""
    from jenga.spec import CrossAttentionSpec

    specs = [FullAttentionSpec("self", 1, 64), CrossAttentionSpec("cross", 1, 64)]
    assert _horizon(specs, 5, cache=False, images=(ImageSpan(1, 6, 2),)) == 8


def test_token_drop_horizons():
    """A token-drop budget (keep 1/4, at least 4 tokens, 2 sink tokens; 8 tokens per page) keeps the
    recent tokens from ``p - ceil(p / 4) + 2`` on, p computed. At 17 tokens (16 computed: from 14,
    page 1, the sink's page, so one interval [0, 3)) the recent start leaves page 1 with 19 computed
    (16): the held pages split in two there, 19. At 25 (24 computed: [0, 1) and [2, 4)) it reaches
    page 3 with 30 computed (24), before the end (32): 30. With a sink of 6 and 4 tokens per page,
    at 5 tokens the sink's pages still follow the tokens allocated: no look-ahead; at 6 the page
    end bounds it, 8."""
    quarter = [TokenDropSpec("drop", 1, 64, keep_ratio=0.25, min_tokens=4, sink=2)]
    assert _horizon(quarter, 17, cache=False, tpp=8) == 19
    assert _horizon(quarter, 25, cache=False, tpp=8) == 30
    sink6 = [TokenDropSpec("drop", 1, 64, keep_ratio=0.5, min_tokens=4, sink=6)]
    assert _horizon(sink6, 5, cache=False) == 5
    assert _horizon(sink6, 6, cache=False) == 8


def test_no_look_ahead_where_a_mamba_checkpoint_may_be_written():
    """A Mamba type's state pages never change while the request runs, so decode steps are taken
    ahead without bound (no token type here); but inside the prompt, with the prefix cache on, a
    step may write a checkpoint (every multiple of the checkpoint interval): no look-ahead there.
    A system with its own checkpoint rule (Marconi) never looks ahead."""
    spec = [MambaSpec("mamba", 2, 1, state_bytes_per_layer=300, conv_bytes_per_layer=20, checkpoint_interval=4)]
    for cache, want_ahead in ((False, True), (True, True)):
        m = jenga.make_manager("jenga", spec, 1 << 24, tokens_per_page=4, enable_prefix_cache=cache)
        r = Req("r", list(range(9)))
        assert m.allocate(r, 6)  # 6 of 9 prompt tokens
        assert (m.reqs["r"].quiet > 6) == (not cache)
        assert m.allocate(r, 3)
        m.begin_step()
        r.output_token_ids.append(7)
        assert m.allocate(r, 1)
        assert (m.reqs["r"].quiet > 10) == want_ahead
    m = jenga.make_manager("marconi", spec, 1 << 24, tokens_per_page=4, enable_prefix_cache=True)
    r = Req("r", list(range(9)))
    assert m.allocate(r, 9)
    r.output_token_ids.append(7)
    assert m.allocate(r, 1)
    assert m.reqs["r"].quiet == 10
