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
        r = alloc.ratios[t]
        for b in g.blocks[r:]:  # large page 0 (null blocks) is reserved
            key = (t, b.block_id)
            assert b.ref_cnt == holders[key], f"group {t} block {b.block_id}: ref_cnt {b.ref_cnt} != holders {holders[key]}"
            ev = pool.is_cached(t, b.block_id)
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
    # The LCM pool checks its own records against what vLLM's blocks hold (large page 0 holds
    # the null blocks and stays out of circulation).
    pool.check(busy=dict(per_lp), skip=(0,))

