"""``UnifiedArenaPool.cannot_fit``: the SGLang unified arena refuses an allocation that must fail at
once (issue 20) -- an admission whose hit pins every cached page its first type may evict, with
the gap too small, was tried page by page and undone (a third of sglang#34441's what-if time).
The refusal must change nothing: the rule with the bound and its twin without it (a ``cannot_fit``
that never refuses, so every such allocation is tried and undone) are driven in lockstep by random streams and
hold the same state after every operation, and the bound does fire on them (not vacuous). A
negative control: a bound that also refuses allocations that fit is caught by the same check."""

from __future__ import annotations

import numpy as np
import pytest
from test_sglang_unrolled import MIXES, _capacity, _lockstep

from jenga.baselines.sglang_unified import SglangUnified, UnifiedArenaPool
from jenga.spec import FullAttentionSpec, SlidingWindowSpec
from jenga.testing import StubRequest


def _pair(specs, capacity: int, bound=None):
    """The rule as registered (or with ``bound(pool)`` as its pool's cannot_fit), its twin that tries
    every allocation, and how often the first one's bound refused one."""
    make = {"tokens_per_page": 1, "enable_prefix_cache": True}
    a, b = SglangUnified(specs, capacity, **make), SglangUnified(specs, capacity, **make)
    fired = [0]
    judge = bound(a.pool) if bound else a.pool.cannot_fit

    def counted(demand, pinned=(), released=()):
        out = judge(demand, pinned, released)
        fired[0] += out
        return out

    a.pool.cannot_fit = counted
    b.pool.cannot_fit = lambda demand, pinned=(), released=(): False  # never sure: every such allocation is tried
    return a, b, fired


@pytest.mark.parametrize("mix", ["full+swa", pytest.param("2full+2swa", marks=pytest.mark.slow),
                                 pytest.param("full+swa+mamba", marks=pytest.mark.slow)])
def test_a_refused_allocation_is_one_that_fails(mix):
    specs = MIXES[mix]
    fired = 0
    for seed in range(4):
        a, b, n = _pair(specs, _capacity(specs, 90 + 30 * seed))
        _lockstep(a, b, seed, ops=150)
        fired += n[0]
    assert fired > 0, "the streams never reach the bound: the lockstep check says nothing"


def test_negative_control_a_bound_that_refuses_too_much_is_caught():
    """Refusing every allocation that evicting could serve (a wrong bound) changes what the rule
    admits: the lockstep check must see it."""
    specs = MIXES["full+swa"]
    caught = 0
    for seed in range(4):
        a, b, _ = _pair(specs, _capacity(specs, 120),
                        bound=lambda pool: lambda demand, pinned=(), released=(): not pool.sure_fit(demand))
        try:
            _lockstep(a, b, seed, ops=150)
        except AssertionError:
            caught += 1
    assert caught > 0


def test_the_first_type_test_fires_exactly():
    """A hand-made arena: the SWA band full of cached pages the full side may not evict, the gap
    short of one full page; a demand led by the full type is refused, one page fewer than the gap
    holds is not, and trying the refused one indeed fails."""
    specs = [FullAttentionSpec("full", 1, 64), SlidingWindowSpec("swa", 1, 64, window=4)]
    mm = SglangUnified(specs, 64 * 100, tokens_per_page=1, enable_prefix_cache=True)
    pool: UnifiedArenaPool = mm.pool
    full = next(t for t, st in enumerate(mm.types) if st.name == "full")
    r = StubRequest("r", np.arange(1, 25, dtype=np.int32))
    assert mm.allocate(r, 24)
    mm.free(r)  # its pages are cached now: the full band's and the SWA band's
    left = pool.gap_bytes // pool.page_bytes[full]
    # Pin every cached full page: the full side has nothing left to evict.
    cached_full = [s for s in range(pool.next_sid[full]) if pool.evictor.contains(full, s)]
    assert cached_full
    pins = {full: cached_full}
    assert pool.cannot_fit({full: left + 1}, pins)
    assert not pool.cannot_fit({full: left}, pins)
    assert not pool.cannot_fit({full: left + 1})  # unpinned, the cached full pages could go
    # Trying it: pin, then take -- the gap's pages and no more (nothing is left to evict).
    pool.on_evict = lambda t, sid: None
    for sid in cached_full:
        pool.from_cached(full, sid)
    assert len(pool.alloc_many(full, "s", left + 1)) == left
