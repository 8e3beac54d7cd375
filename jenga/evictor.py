"""The prefix-subset evictor: which cached (evictable) page goes first.

Order key of a cached small page: ``(last_access, -prefix_length)`` -- least recently used first
(timestamps are given per request, the same for every layer type: *balanced*), and among equal
timestamps the page ending at the longest prefix first (the same token carries the same prefix
length in every type: *aligned*), so what survives is a prefix that stays valid for every type.

Two levels, as in the paper's allocation steps: per type, an LRU of evictable small pages; and an
LRU of evictable *large* pages (every small page cached or empty), keyed by their newest small
page.

Both keep their keys in *runs* (issue 20): a run is a list of keys sorted so its last entry goes
first, and a binary heap orders the runs by that entry. A released request hands thousands of
pages to the cache at one timestamp, in prefix order, so they are one run: joining the cache is a
sort of an already-ordered list, and eviction pops them off the run's end, comparing each with
the next run's head, instead of one ``heappush`` and one ``heappop`` (each ~17 tuple comparisons
in a heap of 100k pages) per page. Merging sorted runs by their heads gives the same total order
a sorted list or a heap of every key gives (keys are unique: they end with the page id).
Deletion is lazy: an entry is live while it is its page's current key; a page leaves the cache in
O(1) (its key is dropped; the stale entry is skipped when it reaches a run's end). When the runs
hold mostly stale entries they are rebuilt as one sorted run of the live keys -- or, when nothing
read the queue since it was built, dropped until its next read. When many runs are under the heap
and the heap pops since the last merge cost what merging would (they interleave key by key), the
next one merges them all.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush, heapreplace
from itertools import chain, count, repeat
from operator import neg


def pins_by_type(pinned) -> dict[int, list[int]]:
    """The cached pages a hit pins, per type: ``pinned`` as the manager passes it (``{t: [sid,
    ...]}``: an admission's hit pins thousands, so no pair per page) or as ``(t, sid)`` pairs."""
    if isinstance(pinned, dict):
        return pinned
    out: dict[int, list[int]] = {}
    for t, sid in pinned:
        out.setdefault(t, []).append(sid)
    return out


# LargePageLRU's integer keys: the timestamp's place, and the offset of -prefix_length in it.
_TS, _PLEN = 1 << 63, 1 << 62


# Runs under one heap from which a new run may merge them all (_Runs.flush) ...
_MERGE_AT = 16
# ... once the heap pops since the last merge have cost what the merge would (rent or buy: never
# more than twice the better of merging and not merging). A pop (one stretch of ``pop_first``)
# costs about as much as sorting this many entries into a merge; microbenchmarked, CPython 3.11:
# ~3 us per pop, sorting reverse-sorted runs ~0.33 us per tuple key, ~0.036 us per integer key.
_POP_COST_TUPLE, _POP_COST_INT = 10, 80

_consume = deque(maxlen=0).extend  # runs an iterator of side effects to its end at C speed


class _Runs:
    """Keys in sorted runs under a heap of run heads (see the module docstring): ``add`` one key,
    ``push`` a reverse-sorted run, ``first(live)`` the smallest key ``live`` accepts (stale
    entries met on the way are dropped), ``rebuild(keys)`` one run of the live keys, ``drop()``
    forget them all until the owner rebuilds (``built`` False)."""

    __slots__ = ("_seq", "built", "heap", "loose", "pending", "pop_cost", "pops", "reads", "size")

    def __init__(self, pop_cost: int = _POP_COST_TUPLE) -> None:
        self.heap: list[tuple] = []     # (head key, sequence number, run); run[-1] is the head
        self.pending: list[list] = []   # runs not yet in the heap (pushed when the heap is read)
        self.loose: list = []           # single keys not yet in the heap (one run when it is read)
        self.size = 0                   # entries in every run, live or stale
        self.reads = 0                  # reads (flushes) since the last rebuild
        self.built = True               # False: dropped, the owner rebuilds it before a read
        self.pops = 0                   # heap pops in pop_first since the last merge
        self.pop_cost = pop_cost        # a pop's cost in entries merged (_POP_COST_*)
        self._seq = count()

    def add(self, key) -> None:
        """Add one key (the keys added between two reads become one run)."""
        self.loose.append(key)
        self.size += 1

    def push(self, run: list) -> None:
        """Add a run sorted in reverse (its smallest key last)."""
        if run:
            self.pending.append(run)
            self.size += len(run)

    def flush(self) -> list[tuple]:
        """The heap, with what was added since the last read in it as one run: the runs and
        single keys merged by one sort (timsort merges the reverse-sorted runs at C speed). One
        run per read matters: a request releases every layer type's pages at one timestamp, and
        the types' runs interleave key by key (aligned eviction), so apart they would cost a
        heap operation per page."""
        self.reads += 1
        pending, loose = self.pending, self.loose
        if loose or len(pending) > 1:
            pending[:] = [sorted(chain(chain.from_iterable(pending), loose), reverse=True)]
            self.loose = []
        if pending:
            run = pending.pop()
            heap = self.heap
            if len(heap) >= _MERGE_AT and self.pops * self.pop_cost >= self.size:
                # Many runs under the heap interleave key by key (stale pages of many requests,
                # released at one timestamp with overlapping prefix lengths): one sort merges
                # them (timsort, at C speed, over runs already sorted), so eviction takes long
                # stretches again instead of a heap operation every few keys. Runs that do not
                # interleave cost few pops, and are left apart.
                run = sorted(chain(run, chain.from_iterable([r for _, _, r in heap])), reverse=True)
                heap.clear()
                self.pops = 0
            heappush(heap, (run[-1], next(self._seq), run))
        return self.heap

    def rebuild(self, live_keys) -> None:
        run = sorted(live_keys, reverse=True)
        self.drop()
        self.built = True
        self.push(run)

    def drop(self) -> None:
        """Forget every entry (``built`` False): the owner, who holds the live keys, rebuilds the
        queue before its next read, and adds nothing meanwhile."""
        self.heap, self.pending, self.loose, self.size, self.reads, self.built = [], [], [], 0, 0, False

    def first(self, live) -> object | None:
        """The smallest live key (stale entries met on the way are dropped)."""
        heap = self.flush()
        while heap:
            head, seq, run = heap[0]
            if live(head):
                return head
            run.pop()
            self.size -= 1
            if run:
                heapreplace(heap, (run[-1], seq, run))
            else:
                heappop(heap)
        return None

    def pop_first(self, k: int, take_stretch) -> None:
        """Hand keys in order to ``take_stretch`` until ``k`` were live or none is left. It gets a
        list of keys in order, at most as many as are still wanted, takes every live one (a key
        twice in it is live once) and returns how many it took. Each run's entries go while they
        precede the next run's head: that stretch, found by galloping from the run's end, goes
        in slices of at most the keys still wanted, so exactly the keys a one-by-one walk would
        visit are handed over, in its order (a released request's pages are one run: a flat
        pool's eviction takes hundreds per run, a comprehension's work each; issue 20)."""
        heap = self.flush()
        got = taken = 0
        while heap and got < k:
            self.pops += 1
            _, seq, run = heappop(heap)
            n = len(run)
            if heap:
                # The stretch: run[lo:], the entries not above the next run's head (the run is
                # sorted in reverse). Gallop from the end, then bisect the last step.
                bound = heap[0][0]
                step, hi = 1, n  # run[hi:] is known to be in the stretch
                while step <= hi and not run[hi - step] > bound:
                    hi -= step
                    step <<= 1
                lo = max(0, hi - step + 1)  # run[lo - 1] > bound (or lo == 0)
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if run[mid] > bound:
                        lo = mid + 1
                    else:
                        hi = mid
                avail = n - lo
            else:
                avail = n
            while avail and got < k:
                m = min(avail, k - got)
                chunk = run[-m:]
                del run[-m:]
                chunk.reverse()
                got += take_stretch(chunk)
                avail -= m
                taken += m
            if run:
                heappush(heap, (run[-1], seq, run))
        self.size -= taken

    def all_entries(self):
        self.flush()
        for _, _, run in self.heap:
            yield from run


class PrefixSubsetEvictor:
    """Evictable small pages, per type (``per_type=True``) or in one shared queue."""

    def __init__(self, num_types: int, per_type: bool = True):
        self.per_type = per_type
        n = num_types if per_type else 1
        self._runs: list[_Runs] = [_Runs() for _ in range(n)]
        self._key: list[dict[int, tuple]] = [{} for _ in range(num_types)]
        self._live = self._live_fn()  # whether a run entry is still its page's key
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

    def count_cached(self, pages) -> int:
        """How many of the distinct pages ``pages`` (:func:`pins_by_type`) are cached: one C-level
        set intersection per type (an admission's hit pins thousands; issue 20)."""
        n = 0
        for t, sids in pins_by_type(pages).items():
            keys = self._key[t]
            if keys and sids:
                n += len(keys.keys() & sids)
        return n

    def timestamp(self, t: int, sid: int) -> int:
        return self._key[t][sid][0]

    def key_of(self, t: int, sid: int) -> tuple[int, int]:
        """Eviction key ``(last_access, -prefix_length)`` of a cached page (smaller goes first)."""
        key = self._key[t][sid]
        return key[0], key[1]

    def _live_fn(self):
        keys = self._key
        return lambda k: keys[k[2]].get(k[3]) == k

    # The liveness test closes over this evictor's own key dicts: a copy (``copy.deepcopy`` of a
    # pool, a pickle) must build its own, never share the original's (a shared one reads the
    # original's keys and evicts pages the copy no longer caches).
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_live"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._live = self._live_fn()

    def _live_keys(self, h: int):
        return self._key[h].values() if self.per_type else [k for d in self._key for k in d.values()]

    def _queue(self, h: int) -> _Runs:
        """Queue ``h``, for a read: rebuilt from the live keys first if it was dropped."""
        q = self._runs[h]
        if not q.built:
            q.rebuild(self._live_keys(h))
        return q

    def _add_run(self, h: int, run: list | None, key: tuple | None = None) -> None:
        """Push a reverse-sorted run (or one ``key``) into queue ``h``; rebuild the queue when it
        is mostly stale -- or drop it, when nothing read it since it was last built: a queue no
        eviction reads (a type whose small page is the large page: its pages leave the cache
        with their large page, never through this queue; issue 20) then costs no sort, and the
        first read rebuilds it from the live keys, the order a kept queue would give."""
        q = self._runs[h]
        if not q.built:
            return
        if run is None:
            q.add(key)
        else:
            q.push(run)
        live = len(self._key[h]) if self.per_type else len(self)
        if q.size > 64 and q.size > 3 * live:
            if not q.reads:
                q.drop()
                return
            # The live entries are exactly the current keys (a duplicate live entry, left by an
            # undone allocation, is kept once: it names the same page with the same key).
            q.rebuild(self._live_keys(h))

    def add(self, t: int, sid: int, ts: int, plen: int) -> None:
        key = (ts, -plen, t, sid)
        self._key[t][sid] = key
        self._add_run(t if self.per_type else 0, None, key)
        if self._j is not None:
            self._j.call(self._unadd, t, sid)

    def add_many(self, t: int, sids, ts: int, plens) -> None:
        """:meth:`add` of ``(sid, plen)`` pairs at one timestamp (a released run of pages)."""
        keys = list(zip(repeat(ts), map(neg, plens), repeat(t), sids))
        self._key[t].update(zip(sids, keys))
        if self._j is not None:
            for s in sids:
                self._j.call(self._unadd, t, s)
        h = t if self.per_type else 0
        if self._runs[h].built:
            # Prefix lengths grow along a released run, so its keys come in reverse order
            # already: the sort is one pass.
            keys.sort(reverse=True)
            self._add_run(h, keys)

    def remove(self, t: int, sid: int) -> tuple[int, int]:
        """Take a page out (it was hit or evicted); returns its ``(ts, plen)``."""
        key = self._key[t].pop(sid)  # its run entry is stale from now on
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
        keys = self._key

        def take_stretch(chunk: list) -> int:
            # Live (still the page's key) and taken in one pass: a key met twice is gone the
            # second time (pop returns the key, a true tuple).
            live = [key for key in chunk if keys[key[2]].get(key[3]) == key and keys[key[2]].pop(key[3])]
            out.extend([(key[2], key[3]) for key in live])
            return len(live)

        self._queue(0).pop_first(k, take_stretch)
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
        self._add_run(key[2] if self.per_type else 0, None, key)

    def in_order(self):
        """Every cached ``(type, sid)`` in eviction order (one shared queue only); the cache must
        not change while the generator is read."""
        assert not self.per_type, "in_order needs the shared queue (per_type=False)"
        live = self._live
        # A set: an entry can be in the runs twice (a page taken out and put back with the same
        # key by an undone allocation) and both copies are then live.
        for k in sorted({k for k in self._queue(0).all_entries() if live(k)}):
            yield k[2], k[3]

    def take_lru(self, t: int) -> tuple[int, int] | None:
        """:meth:`peek_lru` of type ``t`` then :meth:`remove` of that page, nothing logged (per-type
        queues): a pool that evicts one page at a time (SGLang's unified arena)."""
        assert self.per_type and self._j is None, "take_lru: per-type queues, no undo log"
        key = self._queue(t).first(self._live)
        if key is None:
            return None
        del self._key[t][key[3]]  # its run entry is stale from now on
        return t, key[3]

    def peek_lru(self, t: int | None = None) -> tuple[int, int] | None:
        """``(type, sid)`` of the page to evict next (of type ``t``, or overall)."""
        if not self.per_type and t is not None:
            for key in self.in_order():  # shared queue: first page of the wanted type
                if key[0] == t:
                    return key
            return None
        key = self._queue(t if self.per_type and t is not None else 0).first(self._live)
        return None if key is None else (key[2], key[3])


class LargePageLRU:
    """Evictable large pages keyed by the largest small-page key among their cached small pages
    (sorted runs under a heap with lazy deletion, as :class:`PrefixSubsetEvictor`).

    A key ``(last_access, -prefix_length, lp)`` is held as one integer with the same order,
    ``(last_access * 2**63 + 2**62 - prefix_length) * num_large + lp`` (prefix lengths below
    2**62 tokens): runs and heap compare integers, not tuples item by item -- a long-context cell
    evicts ~150k large pages from an LRU of ~130k (issue 20)."""

    def __init__(self, num_large: int = 1 << 40) -> None:
        self._runs = _Runs(_POP_COST_INT)
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

    def _add_run(self, run: list[int] | None, key: int = 0) -> None:
        q = self._runs
        if run is None:
            q.add(key)
        else:
            q.push(run)
        if q.size > 64 and q.size > 3 * len(self._key):
            q.rebuild(self._key.values())

    def set(self, lp: int, newest: tuple[int, int]) -> None:
        old = self._key.get(lp)
        key = self.code(newest, lp)
        if old == key:
            return
        if self._j is not None:
            self._j.call(self._restore, lp, old)
        self._key[lp] = key
        self._add_run(None, key)

    def add_new_many(self, lps: list[int], keys: list[int]) -> None:
        """:meth:`set` of large pages that are not in the LRU (each just turned evictable), with
        their keys (:meth:`code`); no undo log."""
        self._key.update(zip(lps, keys))
        self._add_run(sorted(keys, reverse=True))

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

    def _restore(self, lp: int, old: int | None, _=None) -> None:
        self._key.pop(lp, None)
        if old is not None:
            self._key[lp] = old
            self._add_run(None, old)

    def pop_lru(self, k: int) -> list[int]:
        """Take out the ``k`` least recently used large pages (fewer when fewer), in order; no
        undo log may be open."""
        assert self._j is None, "pop_lru runs without an undo log"
        keys, n, out = self._key, self._n, []

        def take_stretch(chunk: list) -> int:
            # pop returns the key, a positive integer (its 2**62 term), so a live key is taken in
            # the same pass; a key met twice is gone the second time.
            got = [lp for key in chunk if keys.get(lp := key % n) == key and keys.pop(lp)]
            out.extend(got)
            return len(got)

        self._runs.pop_first(k, take_stretch)
        return out

    def newest_ts(self, lp: int) -> int:
        return self._key[lp] // self._n // _TS

    def peek_lru(self) -> int | None:
        keys, n = self._key, self._n
        key = self._runs.first(lambda k: keys.get(k % n) == k)
        return None if key is None else key % n
