"""Jenga's two-level LCM page pool (the other pools: ``flat.py``, ``exact.py``; interface: ``jenga.pools.PagePool``).

- :class:`LcmPagePool` -- Jenga's two-level allocator. Memory is cut into *large pages* of
  LCM(small-page sizes); a large page is carved into small pages of one type at a time and goes back
  to the shared pool when all its small pages are free. Request-aware: a large page is tied to the
  request that took it, so that request's later small pages fill it first (paper §4.3). With the
  prefix cache on, allocation follows the paper's five steps (§5.4).
- :class:`~jenga.pools.flat.FlatPagePool` -- one page size for every type (PagedAttention,
  max-page, today's vLLM hybrid groups) and :class:`~jenga.pools.flat.PartitionedPool` (a fixed
  flat pool per type, the static partition), in ``pools/flat.py``.

A small page is identified by ``(type index, sid)``. Its state is *used* (some request holds it;
reference counts live in the manager), *cached* (holds prefix-cache content, evictable) or *empty*.
Pools call ``on_evict(t, sid)`` before reusing a cached page so the manager can drop its hash.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from itertools import chain, islice, repeat
from operator import itemgetter, le

from jenga.evictor import LargePageLRU, PrefixSubsetEvictor, pins_by_type
from jenga.journal import Journal
from jenga.policies import cdiv

EvictHook = Callable[[int, int], None]
_first, _second = itemgetter(0), itemgetter(1)


def _append(lst: list, x, _=None) -> None:
    lst.append(x)


def _pop(lst: list, *_) -> None:
    lst.pop()


class LcmPagePool:
    """Two-level LCM allocator over ``capacity_bytes``; ``page_bytes[t]`` = small page of type t."""

    def __init__(self, page_bytes: list[int], capacity_bytes: int, request_aware: bool = True,
                 enable_cache: bool = False):
        self.page_bytes = list(page_bytes)
        self.large_page_bytes = math.lcm(*page_bytes)
        self.ratio = [self.large_page_bytes // p for p in page_bytes]
        self.capacity_bytes = capacity_bytes
        self.num_large = capacity_bytes // self.large_page_bytes
        self.request_aware = request_aware
        n, nt = self.num_large, len(page_bytes)
        self.free_large = list(range(n - 1, -1, -1))
        self.lp_type = [-1] * n
        self.lp_owner: list[object] = [None] * n
        self.lp_used = [0] * n
        self.lp_cached = [0] * n
        # Largest eviction key (ts, -plen) among each large page's cached small pages, or None when
        # unknown (a cached page left): kept as pages join the cache so the large-page LRU key is
        # not a scan of the page's slots at every release (issue 20).
        self.lp_newest: list[tuple[int, int] | None] = [None] * n
        self.lp_slots: list[list[int] | None] = [None] * n
        self.partial: list[dict[int, None]] = [{} for _ in range(nt)]
        self.owner_partial: dict[tuple[int, object], dict[int, None]] = {}
        self.owner_lps: dict[object, set[int]] = {}
        self.nfree_slots = [0] * nt
        self.used = [0] * nt
        self.cached = [0] * nt
        self.evictor = PrefixSubsetEvictor(nt) if enable_cache else None
        self.large_lru = LargePageLRU(n) if enable_cache else None
        self.evl_cached = [0] * nt  # cached small pages inside evictable large pages
        self.on_evict: EvictHook = lambda t, sid: None
        # Optional: on_evict of a list of (t, sid) at once (the manager's batch hook).
        self.on_evict_many: Callable[[list[tuple[int, int]]], None] | None = None
        self.path_counts = {k: 0 for k in ("request_hit", "new_large", "evict_large", "steal",
                                           "any_free_small", "evict_small")}
        self._j: Journal | None = None

    # -- undo log (jenga/journal.py): a failed allocation leaves the pool as it found it ------------
    def begin(self, j: Journal | None) -> None:
        """Log every change into ``j`` until ``begin(None)``."""
        self._j = j
        if self.evictor is not None:
            self.evictor._j = j
            self.large_lru._j = j
        if j is not None:
            for x in (self.nfree_slots, self.used, self.cached, self.evl_cached, self.path_counts):
                j.contents(x)

    def sure_fit(self, demand: dict[int, int], owner: object) -> bool:
        """True when ``alloc`` cannot fail for ``demand`` (pages per type, taken in type order):
        the owner's free slots (or any free slot of the type without request-awareness), then new
        large pages from the free list -- the first steps of every allocation order, no eviction."""
        need = 0
        for t, n in demand.items():
            r = self.ratio[t]
            if r > 1:
                if self.request_aware:
                    own = self.owner_partial.get((t, owner))
                    if own:
                        n -= sum(len(self.lp_slots[lp]) for lp in own)
                else:
                    n -= self.nfree_slots[t]
            if n > 0:
                need += cdiv(n, r)
        return need <= len(self.free_large)

    def sure_fit_evicting(self, demand: dict[int, int], owner: object, pinned=(), released=()) -> bool:
        """A sound bound: True only when ``alloc`` of ``demand`` (pages per type, taken in type
        order, after the cached pages ``pinned`` -- :func:`~jenga.evictor.pins_by_type` -- are hit) cannot fail and
        :meth:`can_fit` agrees, evicting whole large pages if needed. False when unsure.

        Counts the owner's free slots, then whole large pages that are free or evictable (the
        request-aware order takes its own page, then a new large page, then evicts the LRU large
        page, before any other step). Unlike :meth:`can_fit` it counts no empty slot of another
        large page: an evictable large page's empty slots are taken by evicting it, so counting
        both counts them twice (``can_fit`` says yes and the allocation fails; the negative control
        in tests/test_sure_bound.py). An owner's partial page that is evictable (its used slots
        were cached) is spent when its slots are taken, and a pinned hit's large page stops being
        evictable, so each is one large page fewer. Releases the allocation makes first only add
        room; ``released`` -- used pages, ``(t, sid)``, that the allocation releases first and no
        other request holds -- counts the ones whose small page is a whole large page (each comes
        back free or evictable). Without request-awareness or without the cache this is
        :meth:`sure_fit`."""
        if self.sure_fit(demand, owner):
            return True
        lru = self.large_lru
        if lru is None or not self.request_aware or not len(lru):
            return False
        lp_slots, ratio = self.lp_slots, self.ratio
        avail = len(self.free_large) + len(lru) + sum(1 for t, _ in released if ratio[t] == 1)
        need = 0
        for t, n in demand.items():
            r = ratio[t]
            if r > 1:
                own = self.owner_partial.get((t, owner))
                if own:
                    for lp in own:
                        n -= len(lp_slots[lp])
                        if lp in lru:
                            avail -= 1
            if n > 0:
                need += cdiv(n, r)
        if need > avail:
            return False
        # The large pages of the pinned hits (a hit pins thousands of pages): per type, its pages
        # themselves where a small page is a large page, else one comprehension.
        lps: set[int] = set()
        for t, sids in pins_by_type(pinned).items():
            r = ratio[t]
            lps.update(sids if r == 1 else [s // r for s in sids])
        return need <= avail - lru.count_in(lps)

    def _touch(self, lp: int) -> None:
        """Log the large page's whole record before it changes."""
        slots = self.lp_slots[lp]
        self._j.call(self._restore_lp, lp, (self.lp_type[lp], self.lp_owner[lp], self.lp_used[lp],
                                            self.lp_cached[lp], None if slots is None else list(slots)))

    def _restore_lp(self, lp: int, rec: tuple, _=None) -> None:
        self.lp_type[lp], self.lp_owner[lp], self.lp_used[lp], self.lp_cached[lp], slots = rec
        self.lp_newest[lp] = None
        self.lp_slots[lp] = None if slots is None else list(slots)

    def _pop_free_large(self) -> int:
        lp = self.free_large.pop()
        if self._j is not None:
            self._j.call(_append, self.free_large, lp)
        return lp

    def _push_free_large(self, lp: int) -> None:
        self.free_large.append(lp)
        if self._j is not None:
            self._j.call(_pop, self.free_large)

    # -- queries -------------------------------------------------------------------------------------
    def page_offset(self, t: int, sid: int) -> int:
        r = self.ratio[t]
        return (sid // r) * self.large_page_bytes + (sid % r) * self.page_bytes[t]

    @property
    def caching(self) -> bool:
        """Whether cached (evictable) pages are kept: the prefix cache is on."""
        return self.evictor is not None

    def is_cached(self, t: int, sid: int) -> bool:
        """Whether small page ``(t, sid)`` holds evictable prefix-cache content."""
        return self.evictor is not None and self.evictor.contains(t, sid)

    def num_free_small(self, t: int) -> int:
        """Small pages of type ``t`` obtainable without touching a used page: free slots of carved
        large pages, cached pages, and whole free large pages carved for ``t``."""
        return self.nfree_slots[t] + self.cached[t] + self.ratio[t] * len(self.free_large)

    def num_available_large(self) -> int:
        """Large pages an allocation can take whole: free ones and evictable ones."""
        return len(self.free_large) + (len(self.large_lru) if self.large_lru is not None else 0)

    def check(self, busy: dict[tuple[int, int], int] | None = None, skip=()) -> None:
        """Assert the pool's own invariants (AssertionError naming the first broken one): a large
        page is free iff none of its small pages is used or cached, and then carries no type or
        slots; a carved one has its type's ``ratio`` slots, free + used + cached; it is in the
        large-page LRU iff it is evictable (nothing used, something cached); the per-type free-slot
        counts add up. ``busy`` (optional): ``(large page, type) -> small pages`` some caller holds
        or caches there (the jenga_vllm plugin counts them from vLLM's blocks): each carved large
        page must agree and hold one type only. Large pages in ``skip`` are not checked (a reserved
        one). A public seam, so callers need not read the pool's fields."""
        free = set(self.free_large)
        assert len(free) == len(self.free_large), "large page freed twice"
        skip, evl = set(skip), [0] * len(self.page_bytes)
        assert not (free & skip), "a reserved large page went into circulation"
        for lp in range(self.num_large):
            if lp in skip:
                continue
            used_cached = self.lp_used[lp] + self.lp_cached[lp]
            assert (lp in free) == (used_cached == 0), f"large page {lp}: free={lp in free} busy={used_cached}"
            if lp in free:
                assert self.lp_type[lp] == -1 and self.lp_slots[lp] is None, f"free large page {lp} carved"
                continue
            t = self.lp_type[lp]
            assert len(self.lp_slots[lp]) + used_cached == self.ratio[t], f"large page {lp} slots"
            if busy is not None:
                assert used_cached == busy.get((lp, t), 0), \
                    f"large page {lp}: pool counts {used_cached}, caller {busy.get((lp, t), 0)}"
                for other in range(len(self.page_bytes)):
                    assert other == t or not busy.get((lp, other)), f"large page {lp} holds pages of types {t} and {other}"
            if self.large_lru is not None:
                if self.lp_newest[lp] is not None:
                    ev, base = self.evictor, lp * self.ratio[t]
                    keys = [ev.key_of(t, base + s) for s in range(self.ratio[t]) if ev.contains(t, base + s)]
                    assert keys and self.lp_newest[lp] == max(keys), f"large page {lp}: newest cached key"
                evictable = self.lp_used[lp] == 0 and self.lp_cached[lp] > 0
                assert (lp in self.large_lru) == evictable, f"large page {lp} evictable={evictable}"
                if evictable:
                    evl[t] += self.lp_cached[lp]
        assert self.large_lru is None or evl == self.evl_cached, f"evictable cached counts {self.evl_cached} != {evl}"
        assert sum(self.nfree_slots) == sum(len(s) for s in self.lp_slots if s is not None), "free slot counts"

    def stranded_bytes(self) -> int:
        """Free bytes only one type can use (free small pages in partly used large pages), plus the
        tail of the capacity that is not a whole large page."""
        tail = self.capacity_bytes - self.num_large * self.large_page_bytes
        return tail + sum(n * p for n, p in zip(self.nfree_slots, self.page_bytes))

    @property
    def large_pages_used(self) -> int:
        return self.num_large - len(self.free_large)

    def can_fit(self, demand: dict[int, int]) -> bool:
        """Conservative: True only if the pages in ``demand`` (type -> count) surely fit."""
        avail = len(self.free_large) + (len(self.large_lru) if self.large_lru is not None else 0)
        need = 0
        for t, n in demand.items():
            have = self.nfree_slots[t]
            if self.evictor is not None:
                have += self.cached[t] - self.evl_cached[t]
            if n > have:
                need += cdiv(n - have, self.ratio[t])
        return need <= avail

    def cannot_fit(self, demand: dict[int, int], pinned=(), released=()) -> bool:
        """True when ``demand`` (pages per type) cannot fit even by evicting every cached page: an
        upper bound on what any allocation order can take. Type t gets at most its free and cached
        small pages plus ``ratio[t]`` per large page that is free or could be freed (a large page of
        another type u comes free only when all its ``ratio[u]`` slots are free or cached); and all
        types together at most the free and cached bytes. ``pinned``: pages (``pins_by_type``) a prefix
        hit pins before the allocation -- the cached ones among them are no longer evictable.
        ``released``: used pages, ``(t, sid)``, the allocation lets go first and no other request
        holds -- each becomes a free or cached slot of its type (a large page whose slots all come
        free counts the same as its slots or as a free large page: ``ratio * page_bytes`` is the
        large page). Lets a caller refuse at once instead of trying (and undoing) an allocation
        that must fail."""
        spare = [self.nfree_slots[u] + self.cached[u] for u in range(len(self.page_bytes))]
        for t, _ in released:
            spare[t] += 1
        if pinned and self.evictor is not None:
            contains = self.evictor.contains
            for t, sids in pins_by_type(pinned).items():
                spare[t] -= sum(1 for sid in sids if contains(t, sid))
        freeable = [s // r for s, r in zip(spare, self.ratio)]
        free_large, total_free = len(self.free_large), sum(freeable)
        need_bytes = 0
        for t, n in demand.items():
            if n > spare[t] + self.ratio[t] * (free_large + total_free - freeable[t]):
                return True
            need_bytes += n * self.page_bytes[t]
        have_bytes = free_large * self.large_page_bytes + sum(s * p for s, p in zip(spare, self.page_bytes))
        return need_bytes > have_bytes

    def reserve_large(self, lp: int) -> None:
        """Take free large page ``lp`` out of circulation for good (an engine that keeps a null
        block at small page 0 of every type -- vLLM does -- needs large page 0 to hold them)."""
        self.free_large.remove(lp)

    # -- allocation ----------------------------------------------------------------------------------
    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        """``n`` pages of type ``t``: exactly what ``n`` calls of :meth:`alloc` return, up to the
        first None (so a shorter list means the pool ran dry). Whole free large pages for a type
        whose small page is the large page are taken in one slice (vLLM's ``get_new_blocks(n)``
        does the same with its free queue); everything else goes page by page."""
        fl = self.free_large
        if self.ratio[t] == 1 and self._j is None:
            k = min(n, len(fl))
            out = fl[len(fl) - k:]
            out.reverse()  # pop() order
            del fl[len(fl) - k:]
            self.path_counts["new_large"] += k
            # Out of free large pages: each next page is the LRU evictable large page, evicted
            # (it goes to the free list) and taken at once, as alloc does.
            if len(out) < n and self.large_lru is not None:
                k = self._evict_lru_large(n - len(out))
                if k:
                    out += fl[len(fl) - k:]  # each evicted page is taken as soon as it is free
                    del fl[len(fl) - k:]
                    self.path_counts["evict_large"] += k
            lp_type, lp_slots, lp_used = self.lp_type, self.lp_slots, self.lp_used
            for lp in out:
                lp_type[lp] = t
                lp_slots[lp] = []
                lp_used[lp] = 1
            self.used[t] += len(out)
            return out
        out = []
        alloc = self.alloc
        if self._j is None and not tight and self.request_aware and self.ratio[t] > 1:
            # The request-aware order, a large page at a time: its own partial page (every slot it
            # has is taken before the next step is asked), then a new large page, then the LRU
            # evictable one -- the same pages and path counts as ``n`` calls of alloc (the first
            # slot of a new large page is counted "new_large"/"evict_large", the rest
            # "request_hit"), without one call chain per small page (issue 20).
            pc, fl, lru, owner_partial, lp_slots = (self.path_counts, self.free_large, self.large_lru,
                                                    self.owner_partial, self.lp_slots)
            key, r = (t, owner), self.ratio[t]
            while len(out) < n:
                d = owner_partial.get(key)
                if d:
                    lp, path = next(reversed(d)), None
                elif n - len(out) >= r and (fl or (lru is not None and len(lru))):
                    out += self._take_whole_large(t, owner, (n - len(out)) // r)
                    continue
                elif fl:
                    lp, path = self._new_large(t, owner), "new_large"
                elif lru is not None and len(lru):
                    self._evict_large(lru.peek_lru())
                    lp, path = self._new_large(t, owner), "evict_large"
                else:
                    break  # the later steps (any free small page, evict a small page) go one by one
                k = min(n - len(out), len(lp_slots[lp]))
                if path is None:
                    pc["request_hit"] += k
                else:
                    pc[path] += 1
                    pc["request_hit"] += k - 1
                out += self._take_slots(lp, t, k)
        for _ in range(n - len(out)):
            sid = alloc(t, owner, tight)
            if sid is None:
                break
            out.append(sid)
        return out

    def _take_whole_large(self, t: int, owner: object, m: int) -> list[int]:
        """Up to ``m`` whole large pages for ``owner``'s pages of type ``t`` (no undo log, the
        owner has no partial page of the type): free ones in pop order, then the LRU evictable
        ones -- each taken as soon as it is evicted -- carved and filled at once. The same pages,
        slots, path counts and state as the page-at-a-time loop of :meth:`alloc_many` (a new
        large page that is filled leaves the partial lists as it found them); returns the small
        pages in its order."""
        fl, r, pc = self.free_large, self.ratio[t], self.path_counts
        a = min(m, len(fl))
        lps = fl[len(fl) - a:]
        lps.reverse()  # pop() order
        del fl[len(fl) - a:]
        pc["new_large"] += a
        if a < m and self.large_lru is not None:
            e = self._evict_lru_large(m - a)
            if e:
                lps += fl[len(fl) - e:]  # each evicted page is taken as soon as it is free
                del fl[len(fl) - e:]
                pc["evict_large"] += e
        k = len(lps)
        pc["request_hit"] += k * (r - 1)
        lp_type, lp_owner, lp_slots, lp_used = self.lp_type, self.lp_owner, self.lp_slots, self.lp_used
        for lp in lps:
            lp_type[lp] = t
            lp_owner[lp] = owner
            lp_slots[lp] = []
            lp_used[lp] = r
        self.used[t] += k * r
        if owner is not None:
            self.owner_partial.pop((t, owner), None)
            self.owner_lps.setdefault(owner, set()).update(lps)
        return list(chain.from_iterable([range(lp * r, lp * r + r) for lp in lps]))

    def _take_slots(self, lp: int, t: int, k: int) -> list[int]:
        """:meth:`_take_slot` ``k`` times (no undo log): the slots it would pop, in its order."""
        if self.lp_used[lp] == 0 and self.large_lru is not None:
            self._lru_discard(lp, t)
        slots = self.lp_slots[lp]
        taken = slots[len(slots) - k:]
        del slots[len(slots) - k:]
        taken.reverse()
        self.nfree_slots[t] -= k
        self.lp_used[lp] += k
        self.used[t] += k
        if not slots:
            self._unlist_partial(lp, t)
        base = lp * self.ratio[t]
        return [base + s for s in taken]

    def free_many(self, t: int, sids) -> None:
        """:meth:`free` of every page in ``sids``, in order."""
        free = self.free
        for sid in sids:
            free(t, sid)

    def alloc(self, t: int, owner: object, tight: bool = False) -> int | None:
        """One small page of type ``t`` for ``owner`` (a request id), or None if nothing is left.
        ``tight`` prefers existing small pages over new large pages (used when retrying an
        allocation that must not waste large pages)."""
        if self.ratio[t] == 1:
            # A small page that is a whole large page: nothing to share or tie, one level suffices,
            # and request-awareness has nothing to choose. Out of free large pages, the evictable
            # large page that goes is the least recently used cached page of *any* type (step 3
            # before step 5): the per-type small-page LRU would keep stale pages of other types.
            # Both variants take this path, so at ratio 1 they are identical (tests/test_jenga_oracle.py).
            path = "new_large"
            if not self.free_large and self.large_lru is not None and len(self.large_lru):
                self._evict_large(self.large_lru.peek_lru())
                path = "evict_large"
            if self.free_large:
                lp = self._pop_free_large()
                if self._j is not None:
                    self._touch(lp)
                self.lp_type[lp] = t
                self.lp_slots[lp] = []
                self.lp_used[lp] = 1
                self.used[t] += 1
                self.path_counts[path] += 1
                return lp
        aware = self.request_aware
        if aware:
            sid = self._from_dict(self.owner_partial.get((t, owner)), t, "request_hit")
            if sid is not None:
                return sid
        # Request-aware (paper §5.4): own page → empty large → evict large → any empty small → evict
        # small. Without request-awareness a free small page of the type comes first, then the same
        # order as Jenga (cached content is evicted only once no free memory is left, as in Jenga,
        # so the ablation isolates placement). ``tight`` retries fill existing pages before anything.
        if tight:
            order = ("any", "evict_small", "new", "evict_large")
        elif aware:
            order = ("new", "evict_large", "any", "evict_small")
        else:
            order = ("any", "new", "evict_large", "evict_small")
        for step in order:
            if step == "new" and self.free_large:
                self.path_counts["new_large"] += 1
                return self._take_slot(self._new_large(t, owner if aware else None), t)
            if step == "evict_large" and self.large_lru is not None and len(self.large_lru):
                lp = self.large_lru.peek_lru()
                self._evict_large(lp)
                self.path_counts["evict_large"] += 1
                return self._take_slot(self._new_large(t, owner if aware else None), t)
            if step == "any" and self.partial[t]:
                lp = next(reversed(self.partial[t]))
                other = self.lp_owner[lp]
                self.path_counts["steal" if other is not None and other != owner else "any_free_small"] += 1
                return self._take_slot(lp, t)
            if step == "evict_small" and self.evictor is not None and self.evictor.count(t):
                _, sid = self.evictor.peek_lru(t)
                self._evict_small(t, sid)
                self.path_counts["evict_small"] += 1
                return sid
        return None

    def _from_dict(self, d: dict | None, t: int, path: str) -> int | None:
        if not d:
            return None
        lp = next(reversed(d))
        self.path_counts[path] += 1
        return self._take_slot(lp, t)

    def _new_large(self, t: int, owner: object) -> int:
        lp = self._pop_free_large()
        r = self.ratio[t]
        j = self._j
        if j is not None:
            self._touch(lp)
            j.contents(self.partial[t])
            if owner is not None:
                self._log_owner(t, owner)
        self.lp_type[lp] = t
        self.lp_owner[lp] = owner
        self.lp_slots[lp] = list(range(r - 1, -1, -1))
        self.nfree_slots[t] += r
        self.partial[t][lp] = None
        if owner is not None:
            self.owner_partial.setdefault((t, owner), {})[lp] = None
            self.owner_lps.setdefault(owner, set()).add(lp)
        return lp

    def _log_owner(self, t: int, owner: object) -> None:
        """Log the owner's partial-page dict and large-page set before they change."""
        j = self._j
        j.item(self.owner_partial, (t, owner))
        d = self.owner_partial.get((t, owner))
        if d is not None:
            j.contents(d)
        j.item(self.owner_lps, owner)
        lps = self.owner_lps.get(owner)
        if lps is not None:
            j.contents(lps)

    def _take_slot(self, lp: int, t: int) -> int:
        if self._j is not None:
            self._touch(lp)
        if self.lp_used[lp] == 0 and self.large_lru is not None:
            self._lru_discard(lp, t)  # an empty slot beside cached ones: no longer evictable
        slots = self.lp_slots[lp]
        s = slots.pop()
        self.nfree_slots[t] -= 1
        self.lp_used[lp] += 1
        self.used[t] += 1
        if not slots:
            self._unlist_partial(lp, t)
        return lp * self.ratio[t] + s

    def _unlist_partial(self, lp: int, t: int) -> None:
        owner = self.lp_owner[lp]
        if self._j is not None:
            self._j.contents(self.partial[t])
            if owner is not None:
                self._log_owner(t, owner)
        self.partial[t].pop(lp, None)
        if owner is not None:
            d = self.owner_partial.get((t, owner))
            if d is not None:
                d.pop(lp, None)
                if not d:
                    del self.owner_partial[(t, owner)]

    def _return_slot(self, lp: int, t: int, s: int) -> None:
        if self._j is not None:
            self._touch(lp)
            self._j.contents(self.partial[t])
            if self.lp_owner[lp] is not None:
                self._log_owner(t, self.lp_owner[lp])
        slots = self.lp_slots[lp]
        slots.append(s)
        self.nfree_slots[t] += 1
        if self.lp_used[lp] + self.lp_cached[lp] == 0:
            self._release_large(lp, t)
        elif len(slots) == 1:
            self.partial[t][lp] = None
            owner = self.lp_owner[lp]
            if owner is not None:
                self.owner_partial.setdefault((t, owner), {})[lp] = None

    def _release_large(self, lp: int, t: int, push: bool = True) -> None:
        self._unlist_partial(lp, t)
        self.nfree_slots[t] -= len(self.lp_slots[lp])  # an evicted large page had cached slots too
        owner = self.lp_owner[lp]
        if self._j is not None:
            self._touch(lp)
            if owner is not None:
                self._log_owner(t, owner)
        if owner is not None:
            self.owner_lps[owner].discard(lp)
        self.lp_owner[lp] = None
        self.lp_slots[lp] = None
        self.lp_type[lp] = -1
        if push:
            self._push_free_large(lp)

    # -- state changes -------------------------------------------------------------------------------
    def free(self, t: int, sid: int) -> None:
        """A used page becomes empty."""
        if self.ratio[t] == 1 and self.lp_owner[sid] is None:
            if self._j is not None:
                self._touch(sid)
            self.lp_used[sid] = 0
            self.used[t] -= 1
            self.lp_slots[sid] = None
            self.lp_type[sid] = -1
            self._push_free_large(sid)
            return
        lp, s = divmod(sid, self.ratio[t])
        if self._j is not None:
            self._touch(lp)
        self.lp_used[lp] -= 1
        self.used[t] -= 1
        self._return_slot(lp, t, s)
        if self.large_lru is not None:
            self._maybe_evictable(lp, t)

    def to_cached(self, t: int, sid: int, ts: int, plen: int) -> None:
        """A used page becomes cached (evictable) with eviction key (ts, plen)."""
        lp = sid // self.ratio[t]
        if self._j is not None:
            self._touch(lp)
        self.lp_used[lp] -= 1
        self.used[t] -= 1
        c = self.lp_cached[lp]
        self.lp_cached[lp] = c + 1
        self.cached[t] += 1
        self.evictor.add(t, sid, ts, plen)
        key = (ts, -plen)
        if c == 0:
            self.lp_newest[lp] = key
        else:
            cur = self.lp_newest[lp]
            if cur is not None and key > cur:
                self.lp_newest[lp] = key
        if self.lp_used[lp] == 0:
            self._maybe_evictable(lp, t)

    def cache_many(self, t: int, sids: list[int], ts: int, plens: list[int]) -> None:
        """:meth:`to_cached` of every page in ``sids`` (prefix lengths ``plens``) at one timestamp,
        with no undo log: a released run of pages. The order of the pages does not matter: a
        large page turns evictable when its last used page leaves, and no later page of the run
        can be in it."""
        if self._j is not None:
            for sid, p in zip(sids, plens):
                self.to_cached(t, sid, ts, p)
            return
        if not sids:
            return
        self.evictor.add_many(t, sids, ts, plens)
        r, lp_used, lp_cached, lp_newest = self.ratio[t], self.lp_used, self.lp_cached, self.lp_newest
        n = len(sids)
        self.used[t] -= n
        self.cached[t] += n
        if r == 1:
            # Each page is a whole large page, used until now (so nothing of it was cached): each
            # turns evictable with its own key -- set at C speed, no Python step per page.
            for sid, p in zip(sids, plens):
                lp_used[sid] = 0
                lp_cached[sid] = 1
                lp_newest[sid] = (ts, -p)
            self.large_lru.add_new_many(sids, self.large_lru.codes(ts, plens, sids))
            self.evl_cached[t] += n
            return
        lps = [sid // r for sid in sids]
        if all(map(le, plens, islice(plens, 1, None))):
            # Per large page, not per page: its count of pages in the run moves from used to
            # cached at once, and the newest key the run gives it is its first page's (same
            # timestamp, prefix lengths never decreasing along the run).
            first = dict(zip(reversed(lps), reversed(plens)))
            moves = [(lp, n, first[lp]) for lp, n in Counter(lps).items()]
        else:
            moves = zip(lps, repeat(1), plens)
        idle = []
        for lp, n, p in moves:
            u = lp_used[lp] - n
            lp_used[lp] = u
            c = lp_cached[lp]
            lp_cached[lp] = c + n
            key = (ts, -p)
            if c == 0:
                lp_newest[lp] = key
            else:
                cur = lp_newest[lp]
                if cur is not None and key > cur:
                    lp_newest[lp] = key
            if u == 0:
                idle.append(lp)
        # _maybe_evictable of each large page whose last used page left: its newest key is known
        # (every cached page of it joined in this run or kept the key current).
        ready, keys, evl, code = [], [], 0, self.large_lru.code
        for lp in idle:
            newest = lp_newest[lp]
            if newest is None:
                self._maybe_evictable(lp, t)
            else:
                ready.append(lp)
                keys.append(code(newest, lp))
                evl += lp_cached[lp]
        self.large_lru.add_new_many(ready, keys)
        self.evl_cached[t] += evl

    def uncache_many(self, t: int, sids: list[int]) -> list[tuple[int, int]]:
        """:meth:`from_cached` of every page in ``sids`` (a hit pins them), with no undo log;
        returns their old eviction keys."""
        if self._j is not None:
            return [self.from_cached(t, sid) for sid in sids]
        r, lru, evl = self.ratio[t], self.large_lru, self.evl_cached
        lp_used, lp_cached, lp_newest = self.lp_used, self.lp_cached, self.lp_newest
        out = self.evictor.remove_many(t, sids)
        # Per large page, in C-level passes: the evictable ones stop being evictable (their cached
        # pages leave the count of evictable ones first), then their pages move to used.
        cnt = Counter([sid // r for sid in sids]) if r > 1 else dict.fromkeys(sids, 1)
        evl[t] -= sum([lp_cached[lp] for lp in lru.discard_present(cnt)])
        for lp, n in cnt.items():
            lp_cached[lp] -= n
            lp_newest[lp] = None
            lp_used[lp] += n
        self.cached[t] -= len(sids)
        self.used[t] += len(sids)
        return out

    def _maybe_evictable(self, lp: int, t: int) -> None:
        """After a page of ``lp`` stopped being used: all-cached-or-empty large pages are evictable,
        keyed by their most valuable small page (newest timestamp, then shortest prefix), so large
        pages are evicted LRU and, among equals, the one ending the longest prefix first."""
        if self.lp_used[lp] == 0 and self.lp_cached[lp] > 0:
            newest = self.lp_newest[lp]
            if newest is None:
                base, ev = lp * self.ratio[t], self.evictor
                newest = max(ev.key_of(t, base + s) for s in range(self.ratio[t]) if ev.contains(t, base + s))
                self.lp_newest[lp] = newest
            self.large_lru.set(lp, newest)
            self.evl_cached[t] += self.lp_cached[lp]

    def from_cached(self, t: int, sid: int) -> tuple[int, int]:
        """A cached page is hit: it becomes used. Returns its old eviction key (ts, plen)."""
        lp = sid // self.ratio[t]
        if self._j is not None:
            self._touch(lp)
        self._lru_discard(lp, t)
        key = self.evictor.remove(t, sid)
        self.lp_cached[lp] -= 1
        self.lp_newest[lp] = None
        self.cached[t] -= 1
        self.lp_used[lp] += 1
        self.used[t] += 1
        return key

    def _lru_discard(self, lp: int, t: int) -> None:
        if lp in self.large_lru:
            self.large_lru.discard(lp)
            self.evl_cached[t] -= self.lp_cached[lp]

    def _evict_small(self, t: int, sid: int) -> None:
        """Evict a cached page and hand it, used, to the caller."""
        self.from_cached(t, sid)
        self.on_evict(t, sid)

    def _evict_lru_large(self, k: int) -> int:
        """:meth:`_evict_large` of the ``k`` least recently used evictable large pages (fewer when
        fewer), in LRU order, with no undo log; they end on the free list in that order. Returns
        how many. (Evicting one changes no other page's LRU key, so the pages are the ones ``k``
        rounds of peek-and-evict would pick.)"""
        lps = self.large_lru.pop_lru(k)
        lp_type, lp_cached, lp_newest, ratio = self.lp_type, self.lp_cached, self.lp_newest, self.ratio
        evl, cached, evictor = self.evl_cached, self.cached, self.evictor
        evicted = []  # (t, sid), for one on_evict_many call (each type's pages in eviction order)
        types = [lp_type[lp] for lp in lps]
        for t in dict.fromkeys(types):
            mine = lps if types.count(t) == len(types) else [lp for lp, u in zip(lps, types) if u == t]
            r = ratio[t]
            if r == 1:
                # Whole-large-page pages: each holds one cached page, is tied to no request (alloc
                # never ties them) and has no free slot, so releasing it is four stores, done at C
                # speed for the lot.
                evictor.pop_cached(t, mine)
                evicted += zip(repeat(t), mine)
                evl[t] -= len(mine)
                cached[t] -= len(mine)
                lp_slots = self.lp_slots
                for lp in mine:
                    lp_cached[lp] = 0
                    lp_newest[lp] = None
                    lp_slots[lp] = None
                    lp_type[lp] = -1
                continue
            # Every slot of the type's large pages in one pop_cached (the same pages, in the same
            # order, as one call per large page: their slots are disjoint).
            evl[t] -= sum([lp_cached[lp] for lp in mine])
            gone = evictor.pop_cached(t, [s for lp in mine for s in range(lp * r, lp * r + r)])
            evicted += zip(repeat(t), gone)
            cached[t] -= len(gone)
            for lp in mine:
                lp_cached[lp] = 0
                lp_newest[lp] = None
                self._release_large(lp, t, push=False)
        self.free_large += lps  # in LRU order, as one eviction at a time leaves them
        if self.on_evict_many is not None:
            self.on_evict_many(evicted)
        else:
            for t, sid in evicted:
                self.on_evict(t, sid)
        return len(lps)

    def _evict_large(self, lp: int) -> None:
        t = self.lp_type[lp]
        if self._j is not None:
            self._touch(lp)
        self._lru_discard(lp, t)
        base = lp * self.ratio[t]
        gone = self.evictor.pop_cached(t, range(base, base + self.ratio[t]))
        on_evict = self.on_evict
        for sid in gone:
            on_evict(t, sid)
        self.cached[t] -= len(gone)
        self.lp_cached[lp] = 0
        self.lp_newest[lp] = None
        self._release_large(lp, t)

    def release_owner(self, owner: object) -> None:
        """The request is gone: its large pages are no longer tied to it."""
        for lp in self.owner_lps.pop(owner, ()):
            t = self.lp_type[lp]
            self.lp_owner[lp] = None
            self.owner_partial.pop((t, owner), None)
