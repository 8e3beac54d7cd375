"""The oracle's pool: cache bookkeeping without addresses (``jenga.baselines.oracle``).

A page id only names a cache entry or a request's block and costs nothing by itself, so ``alloc``
always succeeds; byte feasibility is the manager's ``_fits``. Cached content costs its exact data
bytes and is evicted only when the bytes are needed (:meth:`ExactPool.evict_until`).
"""

from __future__ import annotations

from jenga.evictor import PrefixSubsetEvictor
from jenga.journal import journal_flat_pool
from jenga.pools.lcm import EvictHook


class ExactPool:
    """Cache bookkeeping without addresses: used/cached page counts, exact cached bytes, one LRU queue.

    Same interface as the page pools (``alloc``, ``free``, ``to_cached``, ``from_cached``,
    ``can_fit``, counters) so the paged manager runs unchanged; ``alloc`` always succeeds (byte
    feasibility is the manager's ``_fits``)."""

    num_large = 0
    large_pages_used = 0

    def __init__(self, page_bytes: list[int], capacity_bytes: int, enable_cache: bool = False):
        nt = len(page_bytes)
        self.page_bytes = list(page_bytes)
        self.large_page_bytes = max(page_bytes)
        self.capacity_bytes = capacity_bytes
        self.used = [0] * nt
        self.cached = [0] * nt
        self.cached_bytes = 0
        self.data: dict[tuple[int, int], int] = {}  # exact bytes a page would occupy once cached
        self.evictor = PrefixSubsetEvictor(nt, per_type=False) if enable_cache else None
        self.on_evict: EvictHook = lambda t, sid: None
        self.path_counts = {"evict": 0}
        self._next = 0
        self._j = None

    def begin(self, j) -> None:
        """Log every change into ``j`` until ``begin(None)`` (see jenga/journal.py)."""
        journal_flat_pool(self, j)
        if j is not None:
            j.attr(self, "cached_bytes")
            j.attr(self, "_next")

    def sure_fit(self, demand: dict[int, int], owner: object = None) -> bool:
        return True  # page names never run out; bytes are the manager's _fits

    def set_data(self, key: tuple[int, int], data: int) -> None:
        """Record what a page costs once cached (first writer wins)."""
        if key not in self.data:
            if self._j is not None:
                self._j.item(self.data, key)
            self.data[key] = data

    def stranded_bytes(self) -> int:
        return 0

    def can_fit(self, demand: dict[int, int]) -> bool:
        return True

    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        return [self.alloc(t, owner) for _ in range(n)]

    def alloc(self, t: int, owner: object, tight: bool = False) -> int:
        sid = self._next
        self._next += 1
        self.used[t] += 1
        return sid

    def free(self, t: int, sid: int) -> None:
        self.used[t] -= 1
        if self._j is not None:
            self._j.item(self.data, (t, sid))
        self.data.pop((t, sid), None)

    def to_cached(self, t: int, sid: int, ts: int, plen: int) -> None:
        self.set_data((t, sid), self.page_bytes[t])
        b = self.data[(t, sid)]
        self.used[t] -= 1
        self.cached[t] += 1
        self.cached_bytes += b
        self.evictor.add(t, sid, ts, plen)

    def from_cached(self, t: int, sid: int) -> tuple[int, int]:
        key = self.evictor.remove(t, sid)
        self.cached[t] -= 1
        self.used[t] += 1
        self.cached_bytes -= self.data[(t, sid)]
        return key

    def release_owner(self, owner: object) -> None:
        return None

    def evict_until(self, limit: int, keep: set[tuple[int, int]] = frozenset()) -> None:
        """Evict cached pages in LRU order (skipping ``keep``) until ``cached_bytes <= limit``."""
        excess = self.cached_bytes - limit
        if excess <= 0:
            return
        victims = []
        for t, sid in self.evictor.in_order():
            if (t, sid) in keep:
                continue
            victims.append((t, sid))
            excess -= self.data[(t, sid)]
            if excess <= 0:
                break
        for t, sid in victims:
            self.evictor.remove(t, sid)
            self.cached[t] -= 1
            if self._j is not None:
                self._j.item(self.data, (t, sid))
            self.cached_bytes -= self.data.pop((t, sid))
            self.on_evict(t, sid)
            self.path_counts["evict"] += 1
