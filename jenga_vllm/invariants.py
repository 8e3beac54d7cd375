"""Invariants of jenga's pool under vLLM, checked by tests after every scheduler step.

The same two-level rules as :func:`jenga.testing.check_invariants` (no byte owned twice, a large
page is free iff all its small pages are, evictable large pages are exactly the all-cached-or-empty
ones), plus the bridge to vLLM's blocks: a small page is *used* iff its block's ``ref_cnt`` > 0 (or
it is reserved for the request being admitted), *cached* iff ``ref_cnt`` == 0 with a hash, and the
blocks vLLM's managers hold for running requests are exactly the referenced ones.
"""

from __future__ import annotations

from collections import Counter


def check_invariants(kv_cache_manager) -> None:
    alloc = kv_cache_manager.jenga
    pool = alloc.pool
    coord = kv_cache_manager.coordinator
    reserved = {(t, sid) for t, sids in alloc.reserved.items() for sid in sids}
    pinned = set(alloc.pinned)
    holders: Counter = Counter()
    for t, mgr in enumerate(coord.single_type_managers):
        assert mgr.block_pool is alloc.groups[t], f"group {t} lost its jenga pool"
        for blocks in mgr.req_to_blocks.values():
            for b in blocks:
                if not b.is_null:
                    holders[(t, b.block_id)] += 1
    used = Counter()
    cached = Counter()
    per_lp: Counter = Counter()
    for t, g in enumerate(alloc.groups):
        r = pool.ratio[t]
        for b in g.blocks[r:]:  # large page 0 (null blocks) is reserved
            key = (t, b.block_id)
            assert b.ref_cnt == holders[key], f"group {t} block {b.block_id}: ref_cnt {b.ref_cnt} != holders {holders[key]}"
            ev = pool.evictor is not None and pool.evictor.contains(t, b.block_id)
            if b.ref_cnt > 0 or key in reserved or key in pinned:
                assert not ev, f"group {t} block {b.block_id} is used and evictable"
                used[t] += 1
                per_lp[(b.block_id // r, t)] += 1
            elif b.block_hash is not None:
                assert ev, f"group {t} block {b.block_id} is cached in vLLM but not evictable in jenga"
                cached[t] += 1
                per_lp[(b.block_id // r, t)] += 1
            else:
                assert not ev, f"group {t} block {b.block_id} is empty but listed as cached"
    for t in range(len(alloc.groups)):
        assert pool.used[t] == used[t], f"type {t}: pool.used {pool.used[t]} != {used[t]}"
        assert pool.cached[t] == cached[t], f"type {t}: pool.cached {pool.cached[t]} != {cached[t]}"
    free = set(pool.free_large)
    assert len(free) == len(pool.free_large), "large page freed twice"
    assert 0 not in free, "large page 0 (null blocks) went into circulation"
    for lp in range(1, pool.num_large):
        busy = pool.lp_used[lp] + pool.lp_cached[lp]
        assert (lp in free) == (busy == 0), f"large page {lp}: free={lp in free} busy={busy}"
        if lp in free:
            assert pool.lp_type[lp] == -1 and pool.lp_slots[lp] is None
            continue
        t = pool.lp_type[lp]
        assert busy == per_lp[(lp, t)], f"large page {lp}: pool counts {busy}, blocks {per_lp[(lp, t)]}"
        assert len(pool.lp_slots[lp]) + busy == pool.ratio[t], f"large page {lp} slots"
        for other in range(len(alloc.groups)):
            assert other == t or per_lp[(lp, other)] == 0, f"large page {lp} holds pages of types {t} and {other}"
        if pool.large_lru is not None:
            evictable = pool.lp_used[lp] == 0 and pool.lp_cached[lp] > 0
            assert (lp in pool.large_lru) == evictable, f"large page {lp} evictable={evictable}"
    assert sum(pool.nfree_slots) == sum(len(s) for s in pool.lp_slots if s is not None)
