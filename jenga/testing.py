"""Invariant checks for any :class:`jenga.manager_base.PagedManager` (used by the tests; cheap enough to
call from a debugging harness, O(pages in use)).

Checks: no byte owned twice; every page state (used / cached / empty) agrees with the pool's
counters and the requests' page tables; a large page is free iff all its small pages are; the
usage breakdown sums to capacity; held data never falls below needed bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from jenga.manager_base import PagedManager
from jenga.pools.exact import ExactPool
from jenga.pools.flat import PartitionedPool
from jenga.pools.lcm import LcmPagePool


def owned_intervals(mgr: PagedManager) -> list[tuple[int, int, str]]:
    """(start, end, owner) of every used or cached small page."""
    out = []
    refs = set()
    for t, refd in enumerate(mgr.ref):
        for sid in refd:
            refs.add((t, sid))
    cached = set()
    for t in range(len(mgr.types)):
        for sid in mgr.page_key[t]:
            if (t, sid) not in refs:
                cached.add((t, sid))
    for t, sid in refs | cached:
        off = mgr.pool.page_offset(t, sid)
        out.append((off, off + mgr.types[t].page_bytes, f"{mgr.types[t].name}:{sid}"))
    return out


def check_invariants(mgr: PagedManager) -> None:
    """Raise AssertionError when any allocator invariant is broken."""
    u = mgr.usage()
    u.check()
    pool = mgr.pool
    if isinstance(pool, ExactPool):
        _check_exact(mgr)
        return
    # 1. No byte owned twice, and everything inside the capacity.
    iv = sorted(owned_intervals(mgr))
    for (a0, a1, na), (b0, b1, nb) in pairwise(iv):
        assert a1 <= b0, f"pages overlap: {na} [{a0},{a1}) and {nb} [{b0},{b1})"
    assert not iv or iv[-1][1] <= mgr.capacity_bytes
    # 2. Reference counts = holders in the page tables; pool counters agree.
    refs = _check_refcounts(mgr)
    used = Counter(t for t, _ in refs)
    for t in range(len(mgr.types)):
        assert pool.used[t] == used[t], f"type {t}: pool.used {pool.used[t]} != referenced {used[t]}"
        cached_t = sum(1 for sid in mgr.page_key[t] if (t, sid) not in refs)
        assert pool.cached[t] == cached_t, f"type {t}: pool.cached {pool.cached[t]} != {cached_t}"
        for key, sid in mgr.index[t].items():
            assert mgr.page_key[t].get(sid) == key, "cache index and page keys disagree"
        # A held page with a key owns it (a key changes owner only while its owner is unheld), so
        # a release finds its registered pages in the index (PagedManager._release_token_run).
        for sid in (s for u, s in refs if u == t):
            key = mgr.page_key[t].get(sid)
            assert key is None or mgr.index[t].get(key) == sid or sid in mgr.copy_key[t], \
                f"type {t}: held page {sid} has key {key} owned by {mgr.index[t].get(key)}"
    if not mgr.enable_prefix_cache:
        assert sum(pool.cached) == 0
    # 3. Two-level: a large page is free iff all its small pages are.
    if isinstance(pool, LcmPagePool):
        free = set(pool.free_large)
        assert len(free) == len(pool.free_large), "large page freed twice"
        per_lp: Counter = Counter()
        for t, sid in refs:
            per_lp[(sid // pool.ratio[t], t)] += 1
        for lp in range(pool.num_large):
            busy = pool.lp_used[lp] + pool.lp_cached[lp]
            assert (lp in free) == (busy == 0), f"large page {lp}: free={lp in free} busy={busy}"
            if lp in free:
                assert pool.lp_type[lp] == -1 and pool.lp_slots[lp] is None
                continue
            t = pool.lp_type[lp]
            assert pool.lp_used[lp] == per_lp[(lp, t)], f"large page {lp} used count"
            assert len(pool.lp_slots[lp]) + busy == pool.ratio[t], f"large page {lp} slots"
        assert sum(pool.nfree_slots) == sum(len(s) for s in pool.lp_slots if s is not None)
        if pool.large_lru is not None:
            evl = [0] * len(mgr.types)
            for lp in range(pool.num_large):
                evictable = pool.lp_used[lp] == 0 and pool.lp_cached[lp] > 0
                assert (lp in pool.large_lru) == evictable, f"large page {lp} evictable={evictable}"
                if evictable:
                    evl[pool.lp_type[lp]] += pool.lp_cached[lp]
            assert evl == pool.evl_cached, f"evictable-large cached counts {pool.evl_cached} != {evl}"
        pool.check()  # the public check the jenga_vllm plugin relies on must agree with the above
    elif isinstance(pool, PartitionedPool):
        for t, p in enumerate(pool.pools):
            assert len(p.free_pages) + p.used[t] + p.cached[t] == p.num_pages
    elif hasattr(pool, "check"):  # a pool with its own invariants (sglang_unified's arena)
        pool.check()
    else:
        assert len(pool.free_pages) + sum(pool.used) + sum(pool.cached) == pool.num_pages
    # 4. Held data covers what is needed (no request is short of a page it reads).
    for rs in mgr.reqs.values():
        needed, held = rs.contrib
        assert needed <= held, f"request {rs.rid}: needed {needed} > held {held} bytes"
    assert u.needed_bytes + u.unneeded_bytes + u.fragmentation_bytes == sum(
        n * st.page_bytes for n, st in zip(pool.used, mgr.types))


def _check_refcounts(mgr: PagedManager) -> Counter:
    """Reference counts = holders in the page tables (and one-step transients, held last checkpoints); returns the counts."""
    holders: Counter = Counter()
    for rs in mgr.reqs.values():
        for t, pages in enumerate(rs.pages):
            for sid in pages.values():
                holders[(t, sid)] += 1
        for t, sid, *_ in rs.transients:
            holders[(t, sid)] += 1
        for t, sid, *_ in rs.held_ckpts:
            holders[(t, sid)] += 1
    refs = Counter({(t, sid): r for t, d in enumerate(mgr.ref) for sid, r in d.items()})
    assert holders == refs, f"refcounts {dict(refs)} != holders {dict(holders)}"
    return refs


def _check_exact(mgr: PagedManager) -> None:
    """The oracle: reference counts = holders, cached bytes = sum of the cached pages' exact bytes,
    running bytes = needed bytes (nothing more), within capacity."""
    pool = mgr.pool
    refs = _check_refcounts(mgr)
    cached = [(t, sid) for t in range(len(mgr.types)) for sid in mgr.page_key[t] if (t, sid) not in refs]
    assert sum(pool.cached) == len(cached) == (len(pool.evictor) if pool.evictor else 0)
    assert pool.cached_bytes == sum(pool.data[k] for k in cached)
    assert sum(pool.used) == len(refs)
    assert mgr._running() + pool.cached_bytes <= mgr.capacity_bytes
    assert mgr.tot_needed == sum(rs.contrib[0] for rs in mgr.reqs.values())


# Fields that are caches or wiring, not state: lazily extended hashes and image bases, the undo
# log, eviction callbacks, the immutable policies/specs.
_NOT_STATE = frozenset({"hasher", "_bases", "image_held", "_j", "on_evict", "_on_evict", "policy", "acct", "specs", "types",
                        "geometry", "_tinfo", "hashes", "_evictions", "_lookup_stamp",
                        # the last prefix search's pages and the count of owner changes it was
                        # made at (prefix._cached_prefix_pages): a memo, not state
                        "_found", "_owner_changes",
                        # caches of values the pool can recompute (LcmPagePool.lp_newest,
                        # UnifiedArenaPool.page_offset's compacted layout; SglangPools' bound
                        # references for its unrolled eviction)
                        "lp_newest", "_layout", "_evict_ctx",
                        # switches and bound helpers: the arena's batch-allocation switch
                        # (UnifiedArenaPool.lean), the evictor's liveness test
                        "lean", "_live",
                        # how far a request may decode by the common step alone, and whether the
                        # manager looks ahead so (PagedManager._quiet_until): derived, not state
                        "quiet", "_quiet_ok", "_quiet_bpt"})


# Dicts only ever looked up (never iterated by the allocator): their insertion order is not state.
_LOOKUP_ONLY = frozenset({"ref", "page_key", "index", "shared_data", "_key", "data", "owner_lps", "owner_partial",
                          "pending"})


def state_fingerprint(mgr) -> object:
    """Everything a manager holds (pool, cache index, requests, counters), as nested plain values
    in their real order, so that two fingerprints are equal iff nothing observable changed --
    used to check that a failed ``allocate`` changes nothing. O(state); for tests."""
    return _dump(mgr, 0)


def _dump(x, depth: int, unordered: bool = False):
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return x
    if depth > 12:
        raise ValueError("state too deep to fingerprint")
    if isinstance(x, (list, tuple)) or type(x).__name__ == "SortedList":
        return [_dump(v, depth + 1, unordered) for v in x]
    if isinstance(x, dict):
        out = [(_dump(k, depth + 1), _dump(v, depth + 1)) for k, v in x.items()]
        return sorted(out, key=repr) if unordered else out
    if isinstance(x, (set, frozenset)):
        return sorted((_dump(v, depth + 1) for v in x), key=repr)
    if callable(x) and not hasattr(x, "__dict__") and not hasattr(x, "__slots__"):
        return None
    if hasattr(x, "state_view"):  # a container whose layout is not its state (the evictors' heaps)
        return [type(x).__name__, _dump(x.state_view(), depth + 1)]
    fields = {}
    names = list(getattr(x, "__dict__", {}))
    for cls in type(x).__mro__:
        names += [n for n in getattr(cls, "__slots__", ()) if hasattr(x, n)]
    for n in sorted(set(names)):
        if n in _NOT_STATE:
            continue
        v = getattr(x, n)
        if callable(v) and not hasattr(v, "__slots__") and not isinstance(v, (list, dict, set)):
            continue
        fields[n] = _dump(v, depth + 1, n in _LOOKUP_ONLY)
    return (type(x).__name__, fields)


@dataclass
class StubRequest:
    """A minimal :class:`jenga.interface.RequestView` for tests and benchmarks."""

    request_id: str
    prompt_token_ids: np.ndarray
    images: tuple = ()
    output_token_ids: list = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


def shared_prefix_stream(mm, rng, ops: int = 60, failed_alloc_changes_nothing: bool = False) -> None:
    """Drive ``mm`` with a random stream of requests that share three prompt prefixes (admit with
    a prefix lookup, grow, free, one engine step per operation), checking the manager's
    invariants after every operation and once everything is freed; with
    ``failed_alloc_changes_nothing`` a failed growth must leave the state as it found it. The
    what-if rules' property tests share it."""
    prefixes = [[rng.randrange(1, 50) for _ in range(rng.randrange(8, 120))] for _ in range(3)]
    running = []
    for i in range(ops):
        if running and rng.random() < 0.4:
            mm.free(running.pop(rng.randrange(len(running))))
        elif running and rng.random() < 0.5:
            r = rng.choice(running)
            before = state_fingerprint(mm) if failed_alloc_changes_nothing else None
            if not mm.allocate(r, rng.randrange(1, 9)) and before is not None:
                assert state_fingerprint(mm) == before, "a failed allocate changed state"
        else:
            tokens = rng.choice(prefixes) + [rng.randrange(50, 99) for _ in range(rng.randrange(1, 40))]
            r = StubRequest(f"r{i}", np.asarray(tokens, dtype=np.int32))
            hit = mm.lookup_prefix(r)
            assert 0 <= hit < len(r.prompt_token_ids)
            if mm.allocate(r, len(r.prompt_token_ids) - hit):
                running.append(r)
        mm.begin_step()
        check_invariants(mm)
    for r in running:
        mm.free(r)
    check_invariants(mm)
