"""``sglang_unified``: SGLang's ``--enable-unified-memory`` -- one byte arena whose sub-pools grow
toward each other from opposite ends -- as a what-if system.

Engine followed: **SGLang** ``srt`` main as of 2026-08 (the unified pool of sglang#29678, before the
fix of sglang#36713; sglang#34441 is the report this rule reproduces). Source, by file and function:

- ``python/sglang/srt/mem_cache/unified_memory_pool.py``, ``UnifiedKVPool.__init__``: one ``uint8``
  buffer of ``total_bytes`` shared by exactly two sub-pools, one growing *up* from byte 0 and one
  growing *down* from the top; a sub-pool's slot ``s`` is one *envelope* holding that slot's data for
  all its layers (``SubPoolSpec.entry_bytes``; a page is ``page_size`` envelopes);
  ``max_slots = total_bytes // entry_bytes`` for each sub-pool (either may take the whole buffer), and
  slots ``[0, min_slot_index)`` with ``min_slot_index = ceil(entry_max / entry_bytes)`` are the
  padding sink (``entry_max``: the largest entry of the two).
- Same file, ``init_unified_mamba_pools``: full attention at the high-byte end (grow-down), the Mamba
  state at the low-byte end (grow-up); ``unified_mamba_buffer_bytes`` sizes the buffer as the static
  pools' footprint rearranged (token budget + ``(max_mamba_cache_size + 1)`` state slots + one KV
  page, rounded up to 4 KiB), and the log line says ``mamba_full_memory_ratio`` "governs the total
  budget only, not the runtime split". ``init_unified_swa_pools``: full at the high end, SWA at the
  low end, ``total_bytes = full_tokens * full_entry + swa_tokens * swa_entry`` from the same ratio
  split as the static pools. ``init_unified_mamba_swa_pools`` (three sub-pools, sglang#35177): Mamba
  low, SWA floating between, full high.
- ``python/sglang/srt/mem_cache/allocator/unified_sub_pool.py``, ``MultiEndedAllocator``: eager
  compaction on ``free`` keeps each sub-pool's byte range hole-free, so a sub-pool is one contiguous
  band from its end to its *frontier*; ``_current_gap_bytes`` is the free band between the two
  frontiers and ``_available_tokens`` allows ``gap_bytes // entry_bytes_per_page`` new pages. A page
  of cached (radix-tree) content stays inside its band until the tree cache evicts it.
- sglang#34441 (the report): on a Mamba shortfall ``alloc_req_slots`` only calls
  ``tree_cache.evict(EvictParams(num_tokens=0, mamba_num=...))`` -- Mamba evicts its *own* cached
  states, which is zero-sum for its footprint -- and never asks the full side, so with the gap
  (21.2 MB) smaller than one Mamba slot (53.6 MB) and the full band holding evictable prefix KV the
  allocation asserts (``Can not alloc mamba cache``) while the buffer is 100 % allocated. sglang#36713
  (merged later) evicts full KV for a Mamba byte shortfall; option ``evict_full_for_mamba=True``
  models the fixed engine. The mirror direction (a full shortfall evicting cached Mamba states) is
  untouched in both (sglang#34441's Limitations), so it is not modelled either.

Source check (behaviour modelled | engine file and function | agrees?):

====================================  ==========================================================  ==========
One buffer, two sub-pools from         ``unified_memory_pool.py`` ``UnifiedKVPool``; SGLang's test   agrees
opposite ends; ``max_slots = total //  ``test_min_slot_index_computed_from_entry_max`` (index doc
entry``; ``min_slot_index = ceil(      62876939235)
entry_max / entry)``
Eager compaction, one free gap         ``allocator/unified_sub_pool.py`` ``MultiEndedAllocator``     agrees
                                       (``_current_gap_bytes``, ``_available_tokens``)
Mamba shortfall evicts only Mamba      ``alloc_req_slots`` / sglang#34441; the fix sglang#36713      agrees
(``evict_full_for_mamba`` = the fix)   (option)
Boot labels = the static split         ``init_unified_mamba_pools`` / ``init_unified_swa_pools``     agrees;
                                       (the ratio "governs the total budget only")                   inherits
                                                                                                     the static
                                                                                                     split's fixes
State bytes in SGLang's dtypes, the    ``sglang_pools``' table (``mamba_utils.py``,                 **fixed**
running-request cap                    ``init_memory``)                                             (inherited)
A full eviction frees that prefix's    ``swa_radix_cache.py`` ``SWARadixCache.evict`` phase 1        **fixed**
SWA KV too (its bytes join the gap)    (``sglang_pools``' rule, inherited)                           (inherited)
An SWA eviction of a leaf frees its    ``SWARadixCache.evict`` phase 2 and                           **fixed**
full KV too, of an inner node only     ``_iteratively_delete_tombstone_leaf`` (``sglang_pools``'      (inherited,
its SWA KV (tombstone)                 page-level rule, inherited)                                   page level)
====================================  ==========================================================  ==========

What this module models, and where it simplifies:

- The arena is ``capacity_bytes`` (the same bytes the static ``sglang_pools`` split would get, so the
  two rules compare like for like; SGLang's extra slot, page and 4 KiB round-up are < 0.1 %). The
  low band starts after the padding sink (``min_slot_index`` envelopes of the low sub-pool, rounded
  up to its page); the high band's top is ``(total // entry_high // page) * page_bytes``.
- Allocation takes a page from the gap; on a shortfall it evicts the least recently used cached page
  of its *own* band (SGLang's tree-cache eviction for that component), and a Mamba shortfall may also
  evict the full band's cached pages only with ``evict_full_for_mamba``. A page fits only whole, so a
  gap smaller than one Mamba slot is stranded for Mamba (``usage().free_stranded_bytes``).
- Bands hold several layer types when the model has them (e.g. two full-attention specs): their bytes
  add up in one band, as SGLang's envelope holds every layer of the sub-pool.
- Three sub-pools (Mamba + SWA + full): SGLang's SWA band *floats* and is relocated to make room
  (``_float_open_short_side``); modelled as a band whose bytes simply count against the one gap (a
  float that always moves), an upper bound on what the real chain can place.
- Prefix caching, Mamba checkpoints and reported capacities: those of :class:`SglangPools`
  (``MambaRadixCache`` no_buffer, ``SWARadixCache``) -- the unified pool changes where bytes live,
  not what the radix caches keep.
"""

from __future__ import annotations

from operator import mul

from jenga.baselines.sglang import SglangPools, max_running_requests, sglang_split
from jenga.evictor import PrefixSubsetEvictor, pins_by_type
from jenga.journal import Journal
from jenga.pools.flat import CachedPages
from jenga.spec import FullAttentionSpec, MambaSpec, SpecError

ENGINE_VERSION = ("SGLang srt main 2026-08 (--enable-unified-memory: UnifiedKVPool + MultiEndedAllocator, "
                  "sglang#29678; before sglang#36713's Mamba-shortfall fix)")

LOW, FLOAT, HIGH = 0, 1, 2  # band of a type: grows up from byte 0, floats between, grows down from the top


def _pop(lst, *_):
    lst.pop()


def _append(lst, x, _=None):
    lst.append(x)


def _discard(s, x, _=None):
    s.discard(x)


def _add(s, x, _=None):
    s.add(x)


class UnifiedArenaPool(CachedPages):
    """One byte arena; each type's pages live in the band of its sub-pool, bands packed from their
    end (eager compaction), the free *gap* between them shared (see the module docstring).

    The :class:`jenga.pools.PagePool` interface; page ids are per type (a type's sids are virtual,
    like SGLang's virtual slot ids: compaction moves bytes, never ids)."""

    def __init__(self, page_bytes: list[int], bands: list[int], entry_bytes: list[int], capacity_bytes: int,
                 tokens_per_page: list[int], enable_cache: bool = False, donors: dict[int, set[int]] | None = None):
        n = len(page_bytes)
        self.page_bytes = list(page_bytes)
        self.band = list(bands)
        self.capacity_bytes = capacity_bytes
        # donors[b]: the other bands a shortfall of band b may evict cached pages from
        self.donors = {b: set(d) for b, d in (donors or {}).items()}
        entry_max = max(entry_bytes)
        low = [t for t in range(n) if bands[t] == LOW]
        high = [t for t in range(n) if bands[t] == HIGH]
        # UnifiedKVPool: min_slot_index = ceil(entry_max / entry); the grow-up pool starts at its
        # min_page_index = ceil(min_slot_index / page_size); the grow-down pool's top is its
        # num_pages * page bytes, num_pages = (total // entry) // page_size.
        if low:
            t = low[0]
            min_slot = -(-entry_max // entry_bytes[t])
            self.low_base = -(-min_slot // tokens_per_page[t]) * page_bytes[t]
        else:
            self.low_base = entry_max  # the slot-0 sink still sits at byte 0
        if high:
            t = high[0]
            self.high_top = (capacity_bytes // entry_bytes[t] // tokens_per_page[t]) * page_bytes[t]
        else:
            self.high_top = capacity_bytes
        if self.high_top <= self.low_base:
            raise SpecError(f"capacity_bytes ({capacity_bytes}) leaves no room in the unified arena past its "
                            f"padding sink ({self.low_base} B)")
        self.usable_bytes = self.high_top - self.low_base
        self.band_bytes = [0, 0, 0]
        self.used = [0] * n
        self.cached = [0] * n
        self.next_sid = [0] * n
        self.free_sids: list[list[int]] = [[] for _ in range(n)]
        self.live: list[set[int]] = [set() for _ in range(n)]
        self.evictor = PrefixSubsetEvictor(n, per_type=True) if enable_cache else None
        self.on_evict = lambda t, sid: None
        self.path_counts = {"new_page": 0, "evict": 0, "evict_donor": 0, "shortfall": 0}
        self.num_large = 0
        self.large_pages_used = 0
        self.large_page_bytes = max(page_bytes)
        self._j: Journal | None = None
        self._layout: dict | None = None
        # alloc_many's evicting pages through _alloc_evicting (off: one alloc() call each; the
        # manager sets it from its ``unrolled`` switch, and tests compare the two).
        self.lean = True
        # The types whose cached pages a shortfall of each type may evict (fixed at start).
        self._victim_types = [[u for u in range(n) if bands[u] in self._allowed(t)] for t in range(n)]

    # -- the gap ------------------------------------------------------------------------------------
    @property
    def gap_bytes(self) -> int:
        """Free bytes between the frontiers (``MultiEndedAllocator._current_gap_bytes``)."""
        return self.usable_bytes - sum(self.band_bytes)

    def _evictable(self, t: int) -> int:
        return self.evictor.count(t) if self.evictor is not None else 0

    def _cached_band_bytes(self) -> list[int]:
        """Bytes of cached (evictable) pages per band."""
        out = [0, 0, 0]
        for t in range(len(self.page_bytes)):
            out[self.band[t]] += self._evictable(t) * self.page_bytes[t]
        return out

    def _allowed(self, t: int) -> set[int]:
        b = self.band[t]
        return {b} | self.donors.get(b, set())

    def begin(self, j: Journal | None) -> None:
        self._j = j
        if self.evictor is not None:
            self.evictor._j = j
        if j is not None:
            for x in (self.used, self.cached, self.path_counts, self.band_bytes, self.next_sid):
                j.contents(x)

    def sure_fit(self, demand: dict[int, int], owner: object = None) -> bool:
        """Sound: every page of ``demand`` fits in the gap, whatever the order."""
        return sum(n * self.page_bytes[t] for t, n in demand.items()) <= self.gap_bytes

    def sure_fit_evicting(self, demand: dict[int, int], owner: object, pinned=(), released=()) -> bool:
        """A sound bound: True only when :meth:`alloc` of ``demand`` (pages per type, taken in type
        order, after the cached pages ``pinned`` -- ``jenga.evictor.pins_by_type`` -- are hit) cannot fail, so the
        manager needs no undo log. Type t's room is the gap plus the cached bytes of the bands it
        may evict: evicting there moves bytes from cached to the gap (room unchanged), evicting
        elsewhere (a cascade) only adds to the gap, and every page taken before t's, of any type,
        spends gap. So it fits when, for each t in order, the bytes of every page up to t's are
        within that room (which also makes :meth:`can_fit` agree). ``released`` (pages released
        first) only adds room and is not counted."""
        if self.sure_fit(demand, owner):
            return True
        ev = self.evictor
        if ev is None:
            return False
        cached = self._cached_band_bytes()
        for t, sids in pins_by_type(pinned).items():
            cached[self.band[t]] -= self.page_bytes[t] * sum(1 for sid in sids if ev.contains(t, sid))
        gap, need = self.gap_bytes, 0
        for t in sorted(demand):
            need += demand[t] * self.page_bytes[t]
            if need > gap + sum(cached[b] for b in self._allowed(t)):
                return False
        return True

    def cannot_fit(self, demand: dict[int, int], pinned=(), released=()) -> bool:
        """True only when :meth:`alloc` of ``demand`` (pages per type, taken in type order, after the
        cached pages ``pinned`` are hit and the used pages ``released`` -- ``(t, sid)``, held by
        no other request -- are let go) must fail, so the manager refuses it at once instead of
        trying it page by page and undoing it. Two sound tests:

        - bytes: every page placed comes from the gap or from cached pages freed on the way (an
          eviction and its cascade free only cached, unheld pages; a released page may come back
          free), so more bytes than the gap, the cached bytes the pins leave and the released
          bytes together cannot be placed;
        - the first type in order with pages to take evicts only its victim types' cached pages
          (:meth:`_victim`): when the pins leave none of them and no released page is one of
          them, it evicts nothing -- so nothing cascades either -- and has the gap and what the
          released pages may free, no more. (A Gemma-3 admission whose hit pins every cached full
          page, with the SWA band full of cached pages the full side may not evict: the
          ``arxiv_qa`` what-if tried 9 such admissions in 16 requests, page by page and undone,
          a third of the rule's time.)"""
        todo = [t for t in sorted(demand) if demand[t] > 0]
        if not todo:
            return False
        ev, pb, gap = self.evictor, self.page_bytes, self.gap_bytes
        left = [0] * len(pb)
        if ev is not None:
            pins = pins_by_type(pinned)
            for u in range(len(pb)):
                left[u] = ev.count(u) - (ev.count_cached({u: pins[u]}) if pins.get(u) else 0)
        let_go = sum(pb[t] for t, _ in released)  # bytes the released pages may free at most
        if sum(demand[t] * pb[t] for t in todo) > gap + sum(map(mul, pb, left)) + let_go:
            return True
        t0 = todo[0]
        victims = self._victim_types[t0]
        if any(left[u] for u in victims) or any(t in victims for t, _ in released):
            return False
        return demand[t0] * pb[t0] > gap + let_go

    def can_fit(self, demand: dict[int, int]) -> bool:
        """Bytes suffice counting the cached pages each band may evict (an upper bound: a page must
        fit whole, which only trying tells; the manager's undo log covers a failed try)."""
        ev = self._cached_band_bytes()
        need = [0, 0, 0]
        for t, n in demand.items():
            need[self.band[t]] += n * self.page_bytes[t]
        gap = self.gap_bytes
        for t, n in demand.items():
            if n and need[self.band[t]] > gap + sum(ev[b] for b in self._allowed(t)):
                return False
        reach = set().union(*(self._allowed(t) for t, n in demand.items() if n)) if demand else set()
        return sum(need) <= gap + sum(ev[b] for b in reach)

    # -- pages --------------------------------------------------------------------------------------
    def _victim(self, t: int) -> tuple[int, int] | None:
        """The least recently used cached page among the bands a shortfall of ``t`` may evict."""
        ev = self.evictor
        if ev is None:
            return None
        best, best_key = None, None
        for u in self._victim_types[t]:
            if not ev.count(u):
                continue
            v = ev.peek_lru(u)
            key = ev.key_of(*v)
            if best_key is None or key < best_key:
                best, best_key = v, key
        return best

    def alloc(self, t: int, owner: object, tight: bool = False) -> int | None:
        need = self.page_bytes[t]
        while self.gap_bytes < need:
            v = self._victim(t)
            if v is None:
                self.path_counts["shortfall"] += 1
                return None
            u, sid = v
            self.evictor.remove(u, sid)
            self.cached[u] -= 1
            self.path_counts["evict" if self.band[u] == self.band[t] else "evict_donor"] += 1
            self.on_evict(u, sid)
            self._release(u, sid)
        fs = self.free_sids[t]
        if fs:
            sid = fs.pop()
            if self._j is not None:
                self._j.call(_append, fs, sid)
        else:
            sid = self.next_sid[t]
            self.next_sid[t] += 1
        self.live[t].add(sid)
        if self._j is not None:
            self._j.call(_discard, self.live[t], sid)
        self.used[t] += 1
        self.band_bytes[self.band[t]] += need
        self.path_counts["new_page"] += 1
        self._layout = None
        return sid

    def alloc_many(self, t: int, owner: object, n: int, tight: bool = False) -> list[int]:
        """``n`` pages of type ``t``, as ``n`` calls of :meth:`alloc` would give them (same ids, same
        order, same journal entries): the pages the gap holds without evicting are taken in one pass,
        the rest one at a time (each may evict)."""
        need = self.page_bytes[t]
        k = min(n, self.gap_bytes // need) if need > 0 else 0
        out: list[int] = []
        if k > 0:
            fs, live, j = self.free_sids[t], self.live[t], self._j
            r = min(k, len(fs))
            if r:
                out = fs[len(fs) - r:][::-1]  # fs.pop() r times
                del fs[len(fs) - r:]
            if k > r:
                start = self.next_sid[t]
                out += range(start, start + k - r)
                self.next_sid[t] = start + k - r
            live.update(out)
            if j is not None:
                for i, sid in enumerate(out):
                    if i < r:
                        j.call(_append, fs, sid)
                    j.call(_discard, live, sid)
            self.used[t] += k
            self.band_bytes[self.band[t]] += need * k
            self.path_counts["new_page"] += k
            self._layout = None
        if n > k:
            if self._j is None and self.evictor is not None and self.lean:
                out += self._alloc_evicting(t, n - k)
            else:
                for _ in range(n - k):
                    sid = self.alloc(t, owner, tight)
                    if sid is None:
                        break
                    out.append(sid)
        return out

    def _alloc_evicting(self, t: int, n: int) -> list[int]:
        """:meth:`alloc` ``n`` times with nothing logged (up to the first shortfall): each page
        evicts while the gap is short, then takes its id -- the same steps in the same order
        (an eviction's hook may free more pages, whose ids and bytes the next page sees), with
        the lookups hoisted out of the loop. With SGLang's 1-token pages a long prompt allocates
        ~100k pages per type, most of them evicting (issue 20)."""
        need, bt = self.page_bytes[t], self.band[t]
        ev, band, bb, pc = self.evictor, self.band, self.band_bytes, self.path_counts
        usable, cached, fs, live = self.usable_bytes, self.cached, self.free_sids[t], self.live[t]
        victim, release = self._victim, self._release
        vt = self._victim_types[t]
        # One victim type (the rule): its LRU page found and taken out in one call.
        take = ev.take_lru if len(vt) == 1 and ev.per_type else None
        out: list[int] = []
        for _ in range(n):
            while usable - sum(bb) < need:
                v = take(vt[0]) if take is not None else victim(t)
                if v is None:
                    pc["shortfall"] += 1
                    return out
                u, sid = v
                if take is None:
                    ev.remove(u, sid)
                cached[u] -= 1
                pc["evict" if band[u] == bt else "evict_donor"] += 1
                self.on_evict(u, sid)
                release(u, sid)
            if fs:
                sid = fs.pop()
            else:
                sid = self.next_sid[t]
                self.next_sid[t] += 1
            live.add(sid)
            self.used[t] += 1
            bb[bt] += need
            pc["new_page"] += 1
            self._layout = None
            out.append(sid)
        return out

    def _release(self, t: int, sid: int) -> None:
        """A page leaves its band: compaction closes the hole, the bytes join the gap."""
        self.band_bytes[self.band[t]] -= self.page_bytes[t]
        self.live[t].discard(sid)
        self.free_sids[t].append(sid)
        if self._j is not None:
            self._j.call(_add, self.live[t], sid)
            self._j.call(_pop, self.free_sids[t])
        self._layout = None

    def free(self, t: int, sid: int) -> None:
        self.used[t] -= 1
        self._release(t, sid)

    def release_owner(self, owner: object) -> None:
        return None

    def stranded_bytes(self) -> int:
        """Gap bytes the largest page (a Mamba slot, usually) cannot use, plus the sink and the
        high end's grid remainder."""
        return self.gap_bytes % self.large_page_bytes + self.low_base + (self.capacity_bytes - self.high_top)

    # -- layout (tests and diagnostics: the compacted byte ranges) ------------------------------------
    def page_offset(self, t: int, sid: int) -> int:
        if self._layout is None:
            lay: dict = {}
            lo = self.low_base
            for u in range(len(self.page_bytes)):
                if self.band[u] == LOW:
                    for s in sorted(self.live[u]):
                        lay[(u, s)] = lo
                        lo += self.page_bytes[u]
            for u in range(len(self.page_bytes)):
                if self.band[u] == FLOAT:
                    for s in sorted(self.live[u]):
                        lay[(u, s)] = lo
                        lo += self.page_bytes[u]
            hi = self.high_top
            for u in range(len(self.page_bytes)):
                if self.band[u] == HIGH:
                    for s in sorted(self.live[u]):
                        hi -= self.page_bytes[u]
                        lay[(u, s)] = hi
            self._layout = lay
        return self._layout[(t, sid)]

    def check(self) -> None:
        """The pool's own invariants: bands add up to their pages, the gap is never negative, every
        cached page is in the evictor."""
        n = len(self.page_bytes)
        per = [0, 0, 0]
        for t in range(n):
            assert len(self.live[t]) == self.used[t] + self.cached[t], f"type {t}: live pages != used + cached"
            assert not (self.live[t] & set(self.free_sids[t])), f"type {t}: a live page is also free"
            per[self.band[t]] += len(self.live[t]) * self.page_bytes[t]
            if self.evictor is not None:
                assert self.evictor.count(t) == self.cached[t], f"type {t}: evictor != cached"
        assert per == self.band_bytes, f"band bytes {self.band_bytes} != pages {per}"
        assert self.gap_bytes >= 0, "bands overlap"


def band_of(spec) -> int:
    """SGLang's sub-pool of a layer type: Mamba at the low end, full attention at the high end,
    sliding-window (and the other token-based kinds, as ``sglang_pools`` splits them) between."""
    if isinstance(spec, MambaSpec):
        return LOW
    if type(spec) is FullAttentionSpec:
        return HIGH
    return FLOAT


class SglangUnified(SglangPools):
    """SGLang's unified memory pool (see the module docstring)."""

    system_name = "sglang_unified"
    engine_version = ENGINE_VERSION
    option_names = SglangPools.option_names + ("evict_full_for_mamba",)

    def make_pool(self, **options):
        # The ratio split is SGLang's boot label (max_total_num_tokens, the SWA tokens, the Mamba
        # slots): it sizes the buffer, not the runtime split (init_unified_mamba_pools' log line).
        self.split = sglang_split(self.specs, self.capacity_bytes, self.tokens_per_page,
                                  options.get("swa_full_tokens_ratio", 0.8), options.get("mamba_full_memory_ratio", 0.9))
        evict_full = options.get("evict_full_for_mamba", False)
        if not isinstance(evict_full, bool):
            raise SpecError(f"evict_full_for_mamba must be true or false, got {evict_full!r}")
        self.evict_full_for_mamba = evict_full
        bands = [band_of(s) for s in self.specs]
        kinds = set(bands)
        # Two sub-pools: whichever is not full attention grows up from byte 0 (Mamba, or SWA in
        # init_unified_swa_pools); with three, SWA floats between Mamba and full.
        if kinds == {FLOAT, HIGH}:
            bands = [LOW if b == FLOAT else b for b in bands]
        elif kinds == {FLOAT}:
            bands = [LOW] * len(bands)
        entry = [st.page_bytes if isinstance(s, MambaSpec) else st.page_bytes // st.tokens_per_page
                 for st, s in zip(self.types, self.specs)]
        donors = {LOW: {HIGH}} if (evict_full and MambaSpec in {type(s) for s in self.specs}) else {}
        self.arena = UnifiedArenaPool([st.page_bytes for st in self.types], bands, entry, self.capacity_bytes,
                                      [1 if isinstance(s, MambaSpec) else st.tokens_per_page
                                       for st, s in zip(self.types, self.specs)],
                                      self.enable_prefix_cache, donors)
        self.arena.lean = self.unrolled
        return self.arena


def reported_capacity(mm: SglangUnified, max_model_len: int) -> dict:
    """SGLang's boot labels for ``mm`` (the static split's ``max_total_num_tokens``, SWA tokens and
    Mamba slots: the unified pool logs the same token counts, "boot labels / conserve caps") and,
    since the runtime split floats, a max concurrency at ``max_model_len`` from the arena's bytes:
    usable arena / what one such request holds (every full token, a window of SWA tokens, one state),
    at most ``max_running_requests`` (init_memory sizes the request pool before either pool kind)."""
    sp = mm.split
    per_req = 0
    for s in mm.specs:
        if isinstance(s, MambaSpec):
            per_req += s.state_bytes
        elif type(s) is FullAttentionSpec:
            per_req += s.bytes_per_token * max_model_len
        elif s.token_based:
            per_req += s.bytes_per_token * min(getattr(s, "window", max_model_len), max_model_len)
    usable = mm.arena.usable_bytes
    cap = max_running_requests(sp, max_model_len)  # init_memory's max_num_reqs, as for the static pools
    conc = min(usable / per_req, cap) if per_req else 0.0
    full_bpt = sum(s.bytes_per_token for s in mm.specs if type(s) is FullAttentionSpec)
    return {**sp, "max_concurrency": conc, "max_running_requests": cap, "arena_bytes": mm.capacity_bytes,
            "full_tokens_if_alone": int(usable // full_bpt) if full_bpt else 0,
            "kv_capacity_tokens": sp["full_tokens"] or sp["swa_tokens"]}
