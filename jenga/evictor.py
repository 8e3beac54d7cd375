"""The prefix-subset evictor: which cached (evictable) page goes first.

Order key of a cached small page: ``(last_access, -prefix_length)`` -- least recently used first
(timestamps are given per request, the same for every layer type: *balanced*), and among equal
timestamps the page ending at the longest prefix first (the same token carries the same prefix
length in every type: *aligned*), so what survives is a prefix that stays valid for every type.

Two levels, as in the paper's allocation steps: per type, an LRU of evictable small pages; and an
LRU of evictable *large* pages (every small page cached or empty), keyed by their newest small
page. Sorted containers keep every update O(log n).
"""

from __future__ import annotations

from sortedcontainers import SortedList


class PrefixSubsetEvictor:
    """Evictable small pages, per type (``per_type=True``) or in one shared queue."""

    def __init__(self, num_types: int, per_type: bool = True):
        self.per_type = per_type
        n = num_types if per_type else 1
        self._lists = [SortedList() for _ in range(n)]
        self._key: list[dict[int, tuple]] = [{} for _ in range(num_types)]
        self._j = None  # jenga.journal.Journal while an allocation that may fail runs

    def __len__(self) -> int:
        return sum(len(x) for x in self._lists)

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

    def add(self, t: int, sid: int, ts: int, plen: int) -> None:
        key = (ts, -plen, t, sid)
        self._key[t][sid] = key
        self._lists[t if self.per_type else 0].add(key)
        if self._j is not None:
            self._j.call(self._unadd, t, sid)

    def remove(self, t: int, sid: int) -> tuple[int, int]:
        """Take a page out (it was hit or evicted); returns its ``(ts, plen)``."""
        key = self._key[t].pop(sid)
        self._lists[t if self.per_type else 0].remove(key)
        if self._j is not None:
            self._j.call(self._unremove, key)
        return key[0], -key[1]

    def _unadd(self, t: int, sid: int, _) -> None:
        self._lists[t if self.per_type else 0].remove(self._key[t].pop(sid))

    def _unremove(self, key: tuple, *_) -> None:
        t, sid = key[2], key[3]
        self._key[t][sid] = key
        self._lists[t if self.per_type else 0].add(key)

    def in_order(self):
        """Every cached ``(type, sid)`` in eviction order (one shared queue only)."""
        assert not self.per_type, "in_order needs the shared queue (per_type=False)"
        return ((key[2], key[3]) for key in self._lists[0])

    def peek_lru(self, t: int | None = None) -> tuple[int, int] | None:
        """``(type, sid)`` of the page to evict next (of type ``t``, or overall)."""
        lst = self._lists[t if (self.per_type and t is not None) else 0]
        if not self.per_type and t is not None:
            for key in lst:  # shared queue: first page of the wanted type
                if key[2] == t:
                    return key[2], key[3]
            return None
        if not lst:
            return None
        key = lst[0]
        return key[2], key[3]


class LargePageLRU:
    """Evictable large pages keyed by the largest small-page key among their cached small pages."""

    def __init__(self) -> None:
        self._list = SortedList()
        self._key: dict[int, tuple] = {}
        self._j = None  # jenga.journal.Journal while an allocation that may fail runs

    def __len__(self) -> int:
        return len(self._key)

    def __contains__(self, lp: int) -> bool:
        return lp in self._key

    def set(self, lp: int, newest: tuple[int, int]) -> None:
        old = self._key.get(lp)
        key = (*newest, lp)
        if old is not None:
            if old == key:
                return
            self._list.remove(old)
        if self._j is not None:
            self._j.call(self._restore, lp, old)
        self._key[lp] = key
        self._list.add(key)

    def discard(self, lp: int) -> None:
        old = self._key.pop(lp, None)
        if old is not None:
            self._list.remove(old)
            if self._j is not None:
                self._j.call(self._restore, lp, old)

    def _restore(self, lp: int, old: tuple | None, _=None) -> None:
        cur = self._key.pop(lp, None)
        if cur is not None:
            self._list.remove(cur)
        if old is not None:
            self._key[lp] = old
            self._list.add(old)

    def newest_ts(self, lp: int) -> int:
        return self._key[lp][0]

    def peek_lru(self) -> int | None:
        return self._list[0][-1] if self._list else None
