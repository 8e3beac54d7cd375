"""``LcmPagePool.check``: the public invariant check the jenga_vllm plugin calls instead of reading
the pool's fields (issue 19 item 5). It holds over random streams (the fuzzer calls it after every
operation through ``jenga.testing.check_invariants``) and it is not blind: each corruption below
is caught."""

from __future__ import annotations

import pytest

from jenga.pools.lcm import LcmPagePool


def _pool():
    pool = LcmPagePool([2, 3], 4 * 6, request_aware=True, enable_cache=True)
    a = pool.alloc_many(0, "a", 4)           # large pages: one full, one partly carved for type 0
    b = pool.alloc_many(1, "b", 2)
    pool.to_cached(0, a[0], 1, 16)
    pool.free(0, a[3])
    return pool, a, b


def test_check_passes_and_agrees_with_a_callers_count():
    pool, a, b = _pool()
    pool.check()
    busy = {}
    for t, sid in [(0, s) for s in a[:3]] + [(1, s) for s in b]:
        lp = sid // pool.ratio[t]
        busy[(lp, t)] = busy.get((lp, t), 0) + 1
    pool.check(busy=busy)
    assert pool.num_free_small(0) == pool.nfree_slots[0] + pool.cached[0] + 3 * len(pool.free_large)
    assert pool.num_available_large() == len(pool.free_large) + len(pool.large_lru)
    assert pool.is_cached(0, a[0]) and not pool.is_cached(0, a[1]) and pool.caching


@pytest.mark.parametrize("corrupt", ["slot", "free_twice", "lru", "count", "caller"])
def test_check_catches_a_corruption(corrupt):
    pool, a, _ = _pool()
    lp = a[1] // pool.ratio[0]
    busy = None
    if corrupt == "slot":
        pool.lp_slots[lp].append(0)
    elif corrupt == "free_twice":
        pool.free_large.append(pool.free_large[-1])
    elif corrupt == "lru":
        pool.large_lru.set(lp, (0, 0))
    elif corrupt == "count":
        pool.nfree_slots[0] += 1
    else:
        busy = {(lp, 0): 99}
    with pytest.raises(AssertionError):
        pool.check(busy=busy)
