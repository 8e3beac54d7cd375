"""The prefix-subset evictor: which cached (evictable) page goes first.

Order key of a cached small page: ``(last_access, -prefix_length)`` -- least recently used first
(timestamps are given per request, the same for every layer type: *balanced*), and among equal
timestamps the page ending at the longest prefix first (the same token carries the same prefix
length in every type: *aligned*), so what survives is a prefix that stays valid for every type.

Two levels, as in the paper's allocation steps: per type, an LRU of evictable small pages; and an
LRU of evictable *large* pages (every small page cached or empty), keyed by their newest small
page.

Both are binary heaps with lazy deletion (issue 20): an entry is the page's whole key, and it is
live while the page's current key is that entry. A page leaves the cache in O(1) (its key is
dropped; the stale entry is skipped when it reaches the top) and joins it in one C-level
``heappush`` -- a sorted container paid ~4 µs per insert, and a long-context cell caches and evicts
hundreds of thousands of pages. Keys are unique (they end with the page id), so the order is the
same total order a sorted list gives. A heap that is mostly stale entries is rebuilt from the live
keys (the values of the key maps: one C-level pass, not a Python test per entry); a released
run's keys wait in a pending list until the heap is next read, and evictions pop in batches (a
released run is thousands of pages).
"""

from __future__ import annotations

from collections import deque
from heapq import heapify, heappop, heappush
from itertools import repeat
from operator import neg

# LargePageLRU's integer keys: the timestamp's place, and the offset of -prefix_length in it.
_TS, _PLEN = 1 << 63, 1 << 62


def _consume(it) -> None:
    """Run an iterator of side effects to its end at C speed."""
    deque(it, maxlen=0)


class PrefixSubsetEvictor:
    """Evictable small pages, per type (``per_type=True``) or in one shared queue."""

    def __init__(self, num_types: int, per_type: bool = True):
        self.per_type = per_type
        n = num_types if per_type else 1
        self._heaps: list[list[tuple]] = [[] for _ in range(n)]
        # Keys added in batches and not yet pushed, per heap: pushed (or heapified in) when the
        # heap is next read. The LCM pool reads a type's heap only to evict single small pages,
        # which it rarely does, so a released run usually costs a list extend, not a push per page.
        self._pending: list[list[tuple]] = [[] for _ in range(n)]
        self._key: list[dict[int, tuple]] = [{} for _ in range(num_types)]
        self._j = None  # jenga.journal.Journal while an allocation that may fail runs

    def __len__(self) -> int:
        return sum(map(len, self._key))

    def state_view(self) -> list[tuple]:
        """What the evictor holds, layout aside: every cached page's key, in eviction order."""
        return sorted(k for d in self._key for k in d.values())

    def count(self, t: int) -> int:
        return len(self._key[t])

    def contains(self, t: int, sid: int) -> bool:
        return sid in self._key[t]

    def timestamp(self, t: int, sid: int) -> int:
        return self._key[t][sid][0]

    def key_of(self, t: int, sid: int) -> tuple[int, int]:
        """Eviction key ``(last_access, -prefix_length)`` of a cached page (smaller goes first)."""
        key = self._key[t][sid]
        return key[0], key[1]

    def _heap(self, t: int) -> list:
        """Heap ``t``'s (or the shared one), with its pending keys in it."""
        h = t if self.per_type else 0
        heap, pending = self._heaps[h], self._pending[h]
        if pending:
            if 4 * len(pending) > len(heap):
                heap += pending
                heapify(heap)
            else:
                _consume(map(heappush, repeat(heap), pending))
            pending.clear()
        return heap

    def _push(self, key: tuple) -> None:
        t = key[2]
        heap = self._heaps[t if self.per_type else 0]
        heappush(heap, key)
        if len(heap) > 64 and len(heap) > 3 * self._live(t):
            self._compact(heap, t)

    def _live(self, t: int) -> int:
        return len(self._key[t]) if self.per_type else len(self)

    def _compact(self, heap: list, t: int) -> None:
        # The live entries are exactly the current keys (a duplicate live entry, left by an undone
        # allocation, is kept once: it names the same page with the same key).
        if self.per_type:
            heap[:] = self._key[t].values()
        else:
            heap[:] = [k for d in self._key for k in d.values()]
        heapify(heap)
        self._pending[t if self.per_type else 0].clear()

    def add(self, t: int, sid: int, ts: int, plen: int) -> None:
        key = (ts, -plen, t, sid)
        self._key[t][sid] = key
        self._push(key)
        if self._j is not None:
            self._j.call(self._unadd, t, sid)

    def add_many(self, t: int, sids, ts: int, plens) -> None:
        """:meth:`add` of ``(sid, plen)`` pairs at one timestamp (a released run of pages)."""
        keys = list(zip(repeat(ts), map(neg, plens), repeat(t), sids))
        self._key[t].update(zip(sids, keys))
        h = t if self.per_type else 0
        heap, pending = self._heaps[h], self._pending[h]
        pending += keys
        if self._j is not None:
            for s in sids:
                self._j.call(self._unadd, t, s)
        if len(heap) + len(pending) > 64 and len(heap) + len(pending) > 3 * self._live(t):
            self._compact(heap, t)

    def remove(self, t: int, sid: int) -> tuple[int, int]:
        """Take a page out (it was hit or evicted); returns its ``(ts, plen)``."""
        key = self._key[t].pop(sid)  # its heap entry is stale from now on
        if self._j is not None:
            self._j.call(self._unremove, key)
        return key[0], -key[1]

    def remove_many(self, t: int, sids) -> list[tuple[int, int]]:
        """:meth:`remove` of every page in ``sids``; their ``(ts, plen)`` in order."""
        if self._j is not None:
            return [self.remove(t, s) for s in sids]
        pop = self._key[t].pop
        return [(k[0], -k[1]) for k in map(pop, sids)]

    def pop_lru(self, k: int) -> list[tuple[int, int]]:
        """Take out the ``k`` first pages in eviction order (fewer when fewer are cached), as
        ``(type, sid)``; one shared queue or type 0's."""
        out = []
        if self._j is not None:
            while len(out) < k and (top := self.peek_lru()) is not None:
                self.remove(*top)
                out.append(top)
            return out
        heap, keys = self._heap(0), self._key
        while heap and len(out) < k:
            key = heappop(heap)
            d = keys[key[2]]
            if d.get(key[3]) == key:
                del d[key[3]]
                out.append((key[2], key[3]))
        return out

    def pop_cached(self, t: int, sids) -> list[int]:
        """Take out every page of ``sids`` that is cached (a large page evicted whole); returns
        them in ``sids``' order."""
        keys = self._key[t]
        out = [s for s in sids if s in keys]
        if self._j is None:
            for s in out:
                del keys[s]
        else:
            for s in out:
                self.remove(t, s)
        return out

    def _unadd(self, t: int, sid: int, _) -> None:
        del self._key[t][sid]

    def _unremove(self, key: tuple, *_) -> None:
        self._key[key[2]][key[3]] = key
        self._push(key)

    def _top(self, heap: list) -> tuple | None:
        keys = self._key
        while heap:
            k = heap[0]
            if keys[k[2]].get(k[3]) == k:
                return k
            heappop(heap)
        return None

    def in_order(self):
        """Every cached ``(type, sid)`` in eviction order (one shared queue only); the cache must
        not change while the generator is read."""
        assert not self.per_type, "in_order needs the shared queue (per_type=False)"
        keys = self._key
        # A set: an entry can be in the heap twice (a page taken out and put back with the same
        # key by an undone allocation) and both copies are then live.
        heap = list({k for k in self._heap(0) if keys[k[2]].get(k[3]) == k})
        heapify(heap)
        while heap:
            k = heappop(heap)
            yield k[2], k[3]

    def peek_lru(self, t: int | None = None) -> tuple[int, int] | None:
        """``(type, sid)`` of the page to evict next (of type ``t``, or overall)."""
        if not self.per_type and t is not None:
            for key in self.in_order():  # shared queue: first page of the wanted type
                if key[0] == t:
                    return key
            return None
        key = self._top(self._heap(t if self.per_type and t is not None else 0))
        return None if key is None else (key[2], key[3])


class LargePageLRU:
    """Evictable large pages keyed by the largest small-page key among their cached small pages
    (a heap with lazy deletion, as :class:`PrefixSubsetEvictor`).

    A key ``(last_access, -prefix_length, lp)`` is held as one integer with the same order,
    ``(last_access * 2**63 + 2**62 - prefix_length) * num_large + lp`` (prefix lengths below
    2**62 tokens): the heap compares integers, not tuples item by item -- a long-context cell
    evicts ~150k large pages from a heap of ~130k (issue 20)."""

    def __init__(self, num_large: int = 1 << 40) -> None:
        self._heap: list[int] = []
        self._key: dict[int, int] = {}
        self._n = max(1, num_large)
        self._j = None  # jenga.journal.Journal while an allocation that may fail runs

    def code(self, newest: tuple[int, int], lp: int) -> int:
        """The key of large page ``lp`` whose newest small-page key is ``newest``."""
        return (newest[0] * _TS + _PLEN + newest[1]) * self._n + lp

    def codes(self, ts: int, plens, lps) -> list[int]:
        """:meth:`code` of each large page of ``lps`` whose newest key is ``(ts, -plen)``."""
        n, base = self._n, ts * _TS + _PLEN
        return [(base - p) * n + lp for p, lp in zip(plens, lps)]

    def __len__(self) -> int:
        return len(self._key)

    def state_view(self) -> list[int]:
        """What the LRU holds, layout aside: every evictable large page's key, in eviction order."""
        return sorted(self._key.values())

    def __contains__(self, lp: int) -> bool:
        return lp in self._key

    def count_in(self, lps: set[int]) -> int:
        """How many of the large pages ``lps`` are evictable."""
        return len(self._key.keys() & lps)

    def _push(self, key: tuple) -> None:
        heap = self._heap
        heappush(heap, key)
        if len(heap) > 64 and len(heap) > 3 * len(self._key):
            self._compact()

    def _compact(self) -> None:
        heap = self._heap
        heap[:] = self._key.values()
        heapify(heap)

    def set(self, lp: int, newest: tuple[int, int]) -> None:
        old = self._key.get(lp)
        key = self.code(newest, lp)
        if old == key:
            return
        if self._j is not None:
            self._j.call(self._restore, lp, old)
        self._key[lp] = key
        self._push(key)

    def add_new_many(self, lps: list[int], keys: list[int]) -> None:
        """:meth:`set` of large pages that are not in the LRU (each just turned evictable), with
        their keys (:meth:`code`); no undo log."""
        self._key.update(zip(lps, keys))
        heap = self._heap
        _consume(map(heappush, repeat(heap), keys))
        if len(heap) > 64 and len(heap) > 3 * len(self._key):
            self._compact()

    def discard_present(self, lps) -> list[int]:
        """:meth:`discard` of each of ``lps`` (no undo log); returns the ones that were evictable."""
        keys = self._key
        gone = [lp for lp in lps if lp in keys]
        for lp in gone:
            del keys[lp]
        return gone

    def discard(self, lp: int) -> None:
        old = self._key.pop(lp, None)
        if old is not None and self._j is not None:
            self._j.call(self._restore, lp, old)

    def _restore(self, lp: int, old: tuple | None, _=None) -> None:
        self._key.pop(lp, None)
        if old is not None:
            self._key[lp] = old
            self._push(old)

    def pop_lru(self, k: int) -> list[int]:
        """Take out the ``k`` least recently used large pages (fewer when fewer), in order; no
        undo log may be open."""
        assert self._j is None, "pop_lru runs without an undo log"
        heap, keys, out = self._heap, self._key, []
        while heap and len(out) < k:
            # The next ``k - len(out)`` entries at once (each live one is taken, so no more are
            # popped than one at a time would pop); an entry is live while it is its page's key.
            n = self._n
            for key in list(map(heappop, repeat(heap, min(k - len(out), len(heap))))):
                lp = key % n
                if keys.get(lp) == key:
                    del keys[lp]
                    out.append(lp)
        return out

    def newest_ts(self, lp: int) -> int:
        return self._key[lp] // self._n // _TS

    def peek_lru(self) -> int | None:
        heap, keys, n = self._heap, self._key, self._n
        while heap:
            k = heap[0]
            if keys.get(k % n) == k:
                return k % n
            heappop(heap)
        return None
