"""Page pools: the mechanism half of every allocator (which bytes belong to whom), behind one
interface, :class:`PagePool`, that :class:`jenga.manager_base.PagedManager` drives.

- :class:`~jenga.pools.lcm.LcmPagePool` (``lcm.py``) -- Jenga's two-level LCM pool;
- :class:`~jenga.pools.flat.FlatPagePool` (``flat.py``) -- one page size for every type;
- :class:`~jenga.pools.flat.PartitionedPool` (``flat.py``) -- a fixed flat pool per type;
- :class:`~jenga.pools.exact.ExactPool` (``exact.py``) -- the oracle's byte-exact bookkeeping.

A small page is named ``(type index t, sid)``; its state is *used* (reference counts live in the
manager), *cached* (prefix-cache content, evictable) or *empty*.

Runs of pages (issue 20): a long-context request takes, caches and releases thousands of pages per
layer type at once, so besides the per-page protocol below a pool may offer batch forms the
manager uses when present -- ``cache_many(t, sids, ts, plens)`` (``to_cached`` of a released
run at one timestamp), ``uncache_many(t, sids)`` (``from_cached`` of a hit; returns the old keys)
and an ``on_evict_many`` attribute the manager sets (``on_evict`` of a list of ``(t, sid)``);
the flat pools and SGLang's arena also offer ``drop_cached_many(t, sids)`` (``from_cached`` then
``free`` of each page, in order: cached pages an eviction rule takes out with another).
Each must leave the pool exactly as the per-page calls in order would (tests/test_sim_digest.py,
``make fuzz``); ``alloc_many`` already takes ``n`` pages at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from jenga.journal import Journal
from jenga.pools.exact import ExactPool
from jenga.pools.flat import FlatPagePool, PartitionedPool
from jenga.pools.lcm import EvictHook, LcmPagePool


@runtime_checkable
class PagePool(Protocol):
    """What the paged manager needs from a pool (a new system's ``make_pool`` returns one)."""

    used: list[int]             # pages of each type held by requests
    cached: list[int]           # pages of each type holding evictable prefix-cache content
    num_large: int              # large pages (or pages) in the pool; 0 for the exact pool
    large_pages_used: int
    path_counts: dict[str, int]  # how allocations were served (new page, eviction, ...)
    on_evict: Callable[[int, int], None]  # called with (t, sid) before a cached page is reused

    def begin(self, j: Journal | None) -> None:
        """Log every change into ``j`` (undone if the allocation fails) until ``begin(None)``."""

    def sure_fit(self, demand: dict[int, int], owner: object) -> bool:
        """True when ``demand`` (new pages per type) fits without evicting anything."""

    def can_fit(self, demand: dict[int, int]) -> bool:
        """True when ``demand`` fits, evicting cached pages if needed."""

    def alloc(self, t: int, owner: object, tight: bool = False) -> int | None:
        """One page of type ``t`` for ``owner`` (None when full); ``tight`` prefers partly used
        large pages over new ones."""

    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        """Up to ``n`` pages of type ``t`` (fewer when full)."""

    def free(self, t: int, sid: int) -> None:
        """Return a used page to the empty state."""

    def to_cached(self, t: int, sid: int, ts: int, plen: int) -> None:
        """A used page becomes cached, with eviction key (last access ``ts``, prefix length ``plen``)."""

    def from_cached(self, t: int, sid: int) -> tuple[int, int]:
        """A cached page is used again (a prefix hit); returns its eviction key."""

    def release_owner(self, owner: object) -> None:
        """``owner`` finished: forget its request-aware placement."""

    def stranded_bytes(self) -> int:
        """Free bytes that some type cannot use (fragmentation across types)."""


__all__ = ["EvictHook", "ExactPool", "FlatPagePool", "LcmPagePool", "PagePool", "PartitionedPool"]
