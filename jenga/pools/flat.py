"""Single-level page pools for the baselines: one page size shared by every type
(:class:`FlatPagePool`), or one fixed pool per type (:class:`PartitionedPool`).

Same interface as :class:`jenga.pools.lcm.LcmPagePool` (``alloc``, ``free``, ``to_cached``,
``from_cached``, ``can_fit``, counters), so the paged manager runs unchanged on top of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from jenga.evictor import PrefixSubsetEvictor
from jenga.journal import Journal, journal_flat_pool
from jenga.pools.lcm import EvictHook, _append, _first, _pop, _second


class CachedPages:
    """The cached-page half of a pool whose cached pages only move between its per-type ``used``
    and ``cached`` counts and one :class:`PrefixSubsetEvictor` (the flat pool, SGLang's unified
    arena): a cached page keeps its place, so caching or hitting it touches nothing else."""

    used: list[int]
    cached: list[int]
    evictor: PrefixSubsetEvictor

    def to_cached(self, t: int, sid: int, ts: int, plen: int) -> None:
        self.used[t] -= 1
        self.cached[t] += 1
        self.evictor.add(t, sid, ts, plen)

    def from_cached(self, t: int, sid: int) -> tuple[int, int]:
        key = self.evictor.remove(t, sid)
        self.cached[t] -= 1
        self.used[t] += 1
        return key

    def cache_many(self, t: int, sids: list[int], ts: int, plens: list[int]) -> None:
        """:meth:`to_cached` of every page in ``sids`` at one timestamp."""
        self.used[t] -= len(sids)
        self.cached[t] += len(sids)
        self.evictor.add_many(t, sids, ts, plens)

    def uncache_many(self, t: int, sids: list[int]) -> list[tuple[int, int]]:
        """:meth:`from_cached` of every page in ``sids``; their old eviction keys."""
        self.cached[t] -= len(sids)
        self.used[t] += len(sids)
        return self.evictor.remove_many(t, sids)

    def drop_cached_many(self, t: int, sids: list[int]) -> None:
        """:meth:`from_cached` then ``free`` of every page in ``sids``, in order, nothing logged:
        cached pages an eviction rule takes out with another (SGLang's radix nodes)."""
        self.evictor.remove_many(t, sids)
        self.cached[t] -= len(sids)
        self.used[t] += len(sids)
        for sid in sids:
            self.free(t, sid)


class FlatPagePool(CachedPages):
    """Equal-size pages shared by every type; one free stack and one LRU queue of cached pages."""

    def __init__(self, num_types: int, page_bytes: int, capacity_bytes: int, enable_cache: bool = False,
                 base_offset: int = 0):
        self.page_bytes_flat = page_bytes
        self.page_bytes = [page_bytes] * num_types
        self.capacity_bytes = capacity_bytes
        self.num_pages = capacity_bytes // page_bytes
        self.base_offset = base_offset
        self.free_pages = list(range(self.num_pages - 1, -1, -1))
        self.used = [0] * num_types
        self.cached = [0] * num_types
        self.evictor = PrefixSubsetEvictor(num_types, per_type=False) if enable_cache else None
        self.on_evict: EvictHook = lambda t, sid: None
        # Optional: on_evict of a list of (t, sid) at once (the manager's batch hook).
        self.on_evict_many: Callable[[list[tuple[int, int]]], None] | None = None
        self.path_counts = {"new_page": 0, "evict": 0}
        self._j: Journal | None = None

    def begin(self, j: Journal | None) -> None:
        """Log every change into ``j`` until ``begin(None)`` (see jenga/journal.py)."""
        journal_flat_pool(self, j)

    def sure_fit(self, demand: dict[int, int], owner: object = None) -> bool:
        """True when ``alloc`` cannot fail: enough free pages without evicting."""
        return sum(demand.values()) <= len(self.free_pages)

    def fits_exactly(self, demand: dict[int, int], pinned=(), released=()) -> bool:
        """Exactly whether ``alloc`` of ``demand`` succeeds once the cached pages ``pinned``
        (``jenga.evictor.pins_by_type``) are hit and the used pages ``released`` (``(t, sid)``, held
        by no other request) are let go: a flat pool takes a free page, else evicts any cached one,
        so it fits iff the free pages, the cached pages left after the pins and the released pages
        (each comes back free or cached) cover it. Lets the manager return a doomed admission
        before pinning thousands of hit pages (MAX page), and take a running request's step that
        fits only with the pages it releases without an undo log (issue 20)."""
        ev = self.evictor
        room = len(self.free_pages) + len(released)
        if ev is not None:
            room += len(ev) - ev.count_cached(pinned)
        return sum(demand.values()) <= room

    large_page_bytes = property(lambda self: self.page_bytes_flat)
    num_large = property(lambda self: self.num_pages)
    large_pages_used = property(lambda self: self.num_pages - len(self.free_pages))

    def page_offset(self, t: int, sid: int) -> int:
        return self.base_offset + sid * self.page_bytes_flat

    def stranded_bytes(self) -> int:
        return self.capacity_bytes - self.num_pages * self.page_bytes_flat

    def can_fit(self, demand: dict[int, int]) -> bool:
        return sum(demand.values()) <= len(self.free_pages) + (len(self.evictor) if self.evictor else 0)

    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        """``n`` pages: what ``n`` calls of :meth:`alloc` return, up to the first None."""
        fp = self.free_pages
        if self._j is None and n <= len(fp):
            out = fp[len(fp) - n:]
            out.reverse()  # pop() order
            del fp[len(fp) - n:]
            self.used[t] += n
            self.path_counts["new_page"] += n
            return out
        if self._j is None:
            # Every free page, then the LRU cached pages evicted in one pass: alloc's two steps.
            out = fp[::-1]
            fp.clear()
            self.path_counts["new_page"] += len(out)
            gone = self.evictor.pop_lru(n - len(out)) if self.evictor is not None else []
            for t0, c in Counter(map(_first, gone)).items():
                self.cached[t0] -= c
            self.path_counts["evict"] += len(gone)
            evict_many = self.on_evict_many
            if evict_many is not None:
                evict_many(gone)
            else:
                for t0, sid in gone:
                    self.on_evict(t0, sid)
            out += map(_second, gone)
            self.used[t] += len(out)
            return out
        out = []
        for _ in range(n):
            sid = self.alloc(t, owner, tight)
            if sid is None:
                break
            out.append(sid)
        return out

    def alloc(self, t: int, owner: object, tight: bool = False) -> int | None:
        if self.free_pages:
            self.path_counts["new_page"] += 1
            self.used[t] += 1
            sid = self.free_pages.pop()
            if self._j is not None:
                self._j.call(_append, self.free_pages, sid)
            return sid
        if self.evictor is not None and len(self.evictor):
            t0, sid = self.evictor.peek_lru()
            self.evictor.remove(t0, sid)
            self.cached[t0] -= 1
            self.on_evict(t0, sid)
            self.used[t] += 1
            self.path_counts["evict"] += 1
            return sid
        return None

    def free(self, t: int, sid: int) -> None:
        self.used[t] -= 1
        self.free_pages.append(sid)
        if self._j is not None:
            self._j.call(_pop, self.free_pages)

    def drop_cached_many(self, t: int, sids: list[int]) -> None:
        """:meth:`CachedPages.drop_cached_many`: the pages join the free stack in order."""
        self.evictor.remove_many(t, sids)
        self.cached[t] -= len(sids)
        self.free_pages += sids

    def release_owner(self, owner: object) -> None:
        return None


class PartitionedPool:
    """One :class:`FlatPagePool` per type, sized once at start (static partition)."""

    def __init__(self, page_bytes: list[int], shares_bytes: list[int], capacity_bytes: int,
                 enable_cache: bool = False):
        nt = len(page_bytes)
        self.page_bytes = list(page_bytes)
        self.capacity_bytes = capacity_bytes
        self.pools: list[FlatPagePool] = []
        base = 0
        for t in range(nt):
            self.pools.append(FlatPagePool(nt, page_bytes[t], shares_bytes[t], enable_cache, base))
            base += shares_bytes[t]
        self._tail = capacity_bytes - base
        self.large_page_bytes = max(page_bytes)
        self._on_evict: EvictHook = lambda t, sid: None

    @property
    def on_evict(self) -> EvictHook:
        return self._on_evict

    @on_evict.setter
    def on_evict(self, fn: EvictHook) -> None:
        self._on_evict = fn
        for p in self.pools:
            p.on_evict = fn

    @property
    def on_evict_many(self):
        return self.pools[0].on_evict_many if self.pools else None

    @on_evict_many.setter
    def on_evict_many(self, fn) -> None:
        for p in self.pools:
            p.on_evict_many = fn

    used = property(lambda self: [p.used[t] for t, p in enumerate(self.pools)])
    cached = property(lambda self: [p.cached[t] for t, p in enumerate(self.pools)])
    num_large = property(lambda self: sum(p.num_pages for p in self.pools))
    large_pages_used = property(lambda self: sum(p.large_pages_used for p in self.pools))

    @property
    def path_counts(self) -> dict[str, int]:
        out = {"new_page": 0, "evict": 0}
        for p in self.pools:
            for k, v in p.path_counts.items():
                out[k] += v
        return out

    def page_offset(self, t: int, sid: int) -> int:
        return self.pools[t].page_offset(t, sid)

    def stranded_bytes(self) -> int:
        """A partition's idle pages only its own type can use: all free bytes are stranded."""
        return self._tail + sum(p.stranded_bytes() + len(p.free_pages) * p.page_bytes_flat for p in self.pools)

    def can_fit(self, demand: dict[int, int]) -> bool:
        return all(self.pools[t].can_fit({t: n}) for t, n in demand.items())

    def begin(self, j: Journal | None) -> None:
        for p in self.pools:
            p.begin(j)

    def sure_fit(self, demand: dict[int, int], owner: object = None) -> bool:
        return all(self.pools[t].sure_fit({t: n}) for t, n in demand.items())

    def fits_exactly(self, demand: dict[int, int], pinned=(), released=()) -> bool:
        """:meth:`FlatPagePool.fits_exactly` per partition (a partition's cache holds only its own
        type's pages, so the others' pins count nothing there, and only its own released pages
        come back to it)."""
        return all(self.pools[t].fits_exactly({t: n}, pinned, [p for p in released if p[0] == t])
                   for t, n in demand.items())

    def alloc(self, t: int, owner: object, tight: bool = False) -> int | None:
        return self.pools[t].alloc(t, owner)

    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        return self.pools[t].alloc_many(t, owner, n)

    def free(self, t: int, sid: int) -> None:
        self.pools[t].free(t, sid)

    def to_cached(self, t: int, sid: int, ts: int, plen: int) -> None:
        self.pools[t].to_cached(t, sid, ts, plen)

    def from_cached(self, t: int, sid: int) -> tuple[int, int]:
        return self.pools[t].from_cached(t, sid)

    def cache_many(self, t: int, sids: list[int], ts: int, plens: list[int]) -> None:
        self.pools[t].cache_many(t, sids, ts, plens)

    def uncache_many(self, t: int, sids: list[int]) -> list[tuple[int, int]]:
        return self.pools[t].uncache_many(t, sids)

    def release_owner(self, owner: object) -> None:
        return None
