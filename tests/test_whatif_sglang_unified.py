"""``sglang_unified`` (jenga/baselines/sglang_unified.py): SGLang's --enable-unified-memory arena, the
behaviour its source documents (UnifiedKVPool, MultiEndedAllocator) and sglang#34441's failure, each
with a negative control."""

from __future__ import annotations

import random

import pytest
from conftest import req

import jenga
from jenga.baselines.sglang import sglang_split
from jenga.baselines.sglang_unified import HIGH, LOW, reported_capacity
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec, SpecError
from jenga.testing import check_invariants

MB = 10**6
SLOT = 53_600_000                       # sglang#34441: one Mamba slot needs 53.6 MB
FULL = FullAttentionSpec("full", 1, 723_000)
MAMBA = MambaSpec("mamba", 1, SLOT, state_bytes_per_layer=SLOT)
PAGE = 40 * 723_000                     # a 40-token full page: 28.92 MB


def test_arena_geometry_follows_unified_kv_pool():
    """Mamba grows up from the padding sink (min_slot_index = ceil(entry_max / entry) slots), full
    attention grows down from num_pages * page bytes; both start empty with the whole gap between."""
    mm = jenga.make_manager("sglang_unified", [FULL, MAMBA], 20 * PAGE + 123, tokens_per_page=40)
    ar = mm.pool
    assert [ar.band[t] for t in range(2)] == [HIGH, LOW]
    assert ar.low_base == SLOT                        # entry_max is the slot: one sink slot
    assert ar.high_top == ((20 * PAGE + 123) // 723_000 // 40) * PAGE == 20 * PAGE
    assert ar.gap_bytes == 20 * PAGE - SLOT
    # SWA + full (init_unified_swa_pools): SWA takes the low end, full the high end
    swa = SlidingWindowSpec("swa", 2, 4096, window=128)
    mm2 = jenga.make_manager("sglang_unified", [FullAttentionSpec("full", 1, 4096), swa], 1 << 26, tokens_per_page=1)
    assert [mm2.pool.band[t] for t in range(2)] == [HIGH, LOW]
    assert mm2.pool.low_base == 8192                  # entry_max (SWA: 2 x 4096 per token) = one SWA slot


def test_the_split_floats_where_the_static_pools_do_not():
    """A full-attention-only load takes every byte the Mamba side does not use: the static split
    stops at its 1/(1+r) share (the negative control)."""
    cap = 20 * PAGE
    static = sglang_split([FULL, MAMBA], cap, 40)
    uni = jenga.make_manager("sglang_unified", [FULL, MAMBA], cap, tokens_per_page=40)
    pools = jenga.make_manager("sglang_pools", [FULL, MAMBA], cap, tokens_per_page=40)

    def admitted(mm):
        n = 0
        while True:
            r = req(f"x{n}", [n * 10**4 + k for k in range(40 * 6)])   # 6 pages + 1 slot each
            if not mm.allocate(r, 240):
                return n
            n += 1
    a_uni, a_pools = admitted(uni), admitted(pools)
    # unified: (20 pages - the sink's slot) // (6 pages + a slot) = 2 requests
    assert a_uni == (20 * PAGE - SLOT) // (6 * PAGE + SLOT) == 2
    # static: the full pool's floor(F / 240) requests, F the ratio split's full tokens (400)
    assert a_pools == min(static["full_tokens"] // 240, static["mamba_slots"]) == 1
    assert a_uni > a_pools
    cap_info = reported_capacity(uni, 32768)
    assert cap_info["kv_capacity_tokens"] == static["full_tokens"]     # SGLang logs the same boot label
    assert cap_info["full_tokens_if_alone"] == (20 * PAGE - SLOT) // 723_000


def _sglang_34441(system: str, **opt) -> tuple[list[bool], object]:
    """Two finished prompts leave their full KV (8 pages) and Mamba states in the cache; then
    single-page requests arrive one by one. Each new state first takes the gap, then evicts cached
    states (Mamba's own cache, zero-sum); once those are gone only the full side holds evictable bytes."""
    mm = jenga.make_manager(system, [FULL, MAMBA], 20 * PAGE, tokens_per_page=40, enable_prefix_cache=True, **opt)
    for i in range(2):
        r = req(f"r{i}", [i * 1000 + k for k in range(160)])
        assert mm.lookup_prefix(r) == 0 and mm.allocate(r, 160)
        mm.begin_step()
        mm.free(r)
    ok = []
    for i in range(5):
        r = req(f"a{i}", [10**6 + i * 1000 + k for k in range(40)])
        mm.lookup_prefix(r)
        ok.append(mm.allocate(r, 40))
        mm.begin_step()
        check_invariants(mm)
    return ok, mm


def test_sglang_34441_gap_smaller_than_a_mamba_slot():
    """sglang#34441: the arena fully allocated, a 21.2 MB gap smaller than the 53.6 MB a Mamba slot
    needs, the full side holding evictable prefix KV that a Mamba shortfall never asks for."""
    ok, mm = _sglang_34441("sglang_unified")
    assert ok == [True, True, True, True, False]
    ar = mm.pool
    assert ar.gap_bytes == pytest.approx(21.2 * MB)   # the report's gap, to the byte
    assert ar.gap_bytes < SLOT
    assert ar.cached[1] == 0                          # no Mamba state left to evict (zero-sum exhausted)
    assert ar.cached[0] * PAGE > 3 * SLOT             # while the full side holds evictable KV
    u = mm.usage()
    assert u.free_bytes == ar.gap_bytes + SLOT        # free: the gap and the padding sink
    assert not ar.can_fit({1: 1}) and ar.can_fit({0: 3})   # a full page still fits (evicting its own)
    # the fix (sglang#36713): a Mamba byte shortfall evicts full KV, and every request is admitted
    ok_fix, mm_fix = _sglang_34441("sglang_unified", evict_full_for_mamba=True)
    assert ok_fix == [True] * 5 and mm_fix.pool.path_counts["evict_donor"] > 0
    # negative control: the static pools (sglang_pools) keep a Mamba pool of their own; the same
    # trace never starves it
    ok_static, _ = _sglang_34441("sglang_pools")
    assert ok_static == [True] * 5


def test_options_are_checked():
    with pytest.raises(SpecError, match="evict_full_for_mamba"):
        jenga.make_manager("sglang_unified", [FULL, MAMBA], 20 * PAGE, tokens_per_page=40, evict_full_for_mamba="yes")
    with pytest.raises(SpecError, match="unknown option"):
        jenga.make_manager("sglang_unified", [FULL, MAMBA], 20 * PAGE, tokens_per_page=40, unified=True)
    with pytest.raises(SpecError, match="padding sink"):
        jenga.make_manager("sglang_unified", [FULL, MAMBA], SLOT, tokens_per_page=40)


@pytest.mark.parametrize("mix", ["full+swa", "full+mamba", "full+swa+mamba"])
@pytest.mark.parametrize("evict_full", [False, True])
def test_random_streams_keep_the_allocator_invariants(mix, evict_full):
    """Seeded random streams (shared prefixes, chunked allocation, failed allocations, frees) with
    every allocator invariant checked after each operation, including the arena's own (bands add up,
    no overlap in the compacted layout, a failed allocate changes nothing)."""
    from jenga.testing import shared_prefix_stream
    specs = {"full+swa": [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=20)],
             "full+mamba": [FullAttentionSpec("full", 2, 64),
                            MambaSpec("mamba", 2, 1, state_bytes_per_layer=4000, conv_bytes_per_layer=400)],
             "full+swa+mamba": [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=20),
                                MambaSpec("mamba", 2, 1, state_bytes_per_layer=4000)]}[mix]
    for seed in range(4):
        rng = random.Random(seed)
        mm = jenga.make_manager("sglang_unified", specs, 40_000 * rng.choice([3, 6, 12]), tokens_per_page=4,
                                enable_prefix_cache=True, evict_full_for_mamba=evict_full)
        shared_prefix_stream(mm, rng, failed_alloc_changes_nothing=True)
        assert mm.pool.band_bytes[LOW] == sum(mm.pool.cached[t] * mm.pool.page_bytes[t]
                                              for t in range(len(specs)) if mm.pool.band[t] == LOW)


def _arena_state(ar):
    return (list(ar.used), list(ar.band_bytes), list(ar.next_sid), [list(f) for f in ar.free_sids],
            [sorted(s) for s in ar.live], dict(ar.path_counts))


@pytest.mark.parametrize("n", [1, 3, 7, 12])
def test_alloc_many_is_page_by_page_alloc(n):
    """The arena's batched ``alloc_many`` (the pages the gap holds taken in one pass) gives the ids,
    the state and the undo of ``n`` single ``alloc`` calls -- also when it runs out of gap part way
    (n = 12 > the 10 pages that fit: the rest evict or fall short one at a time). Negative control: a
    different count leaves a different state."""
    from jenga.journal import Journal

    def fresh():
        mm = jenga.make_manager("sglang_unified", [FULL, MAMBA], 12 * PAGE, tokens_per_page=40)
        ar = mm.pool
        a, b = ar.alloc(0, None), ar.alloc(0, None)   # free ids out of order: 1 then 0 on the free list
        ar.free(0, a)
        ar.free(0, b)
        return ar

    one, many = fresh(), fresh()
    before = _arena_state(many)
    ids = []
    for _ in range(n):                                 # the page-by-page loop: stops at the first shortfall
        sid = one.alloc(0, None)
        if sid is None:
            break
        ids.append(sid)
    j = Journal()
    many.begin(j)
    got = many.alloc_many(0, None, n)
    assert got == ids
    assert _arena_state(many) == _arena_state(one)
    j.undo()
    many.begin(None)
    assert _arena_state(many) == before
    other = fresh()
    other.alloc_many(0, None, 1 if n > 1 else 2)
    assert _arena_state(other) != _arena_state(one)
