"""Scheduler side: jenga's LCM pool behind per-group ``BlockPool``-compatible objects.

- :class:`JengaAllocator` owns one :class:`jenga.pools.lcm.LcmPagePool` (large pages of LCM bytes,
  per-type small pages carved from them, request-aware placement, large-page LRU eviction, the
  prefix-subset evictor). Large page 0 is reserved: every group's null block (id 0) lives there.
- :class:`JengaGroupPool` is group t's ``BlockPool``: its block ids are type t's small-page indices
  ``sid`` in the LCM pool. vLLM's per-type managers keep doing what they do (hits via
  ``find_longest_cache_hit``, hashes via ``cache_full_blocks``, freeing out-of-window blocks); this
  pool keeps jenga's state in step with vLLM's ``ref_cnt`` / ``block_hash``:
  ref_cnt > 0 ↔ *used*; ref_cnt == 0 with a hash ↔ *cached* (evictable, keyed (time, prefix));
  ref_cnt == 0 without a hash ↔ *empty*. Eviction is the pool's: when jenga reuses a cached small
  page (or a whole evictable large page) it calls ``on_evict`` and the block's hash is dropped.
- :class:`FacadePool` stands where the coordinator's shared ``BlockPool`` stood (capacity, usage,
  events) and answers in large pages.

Admission (``KVCacheManager.allocate_slots``): vLLM asks the coordinator how many blocks a step
needs, compares with the free count, then touches hit blocks and calls every group's
``get_new_blocks``. There is no rollback if a later group runs dry, so this plugin *reserves* at the
question: it pins the request's hit pages, then takes every group's new small pages from the pool
for that request (request-aware first; on failure undo and retry preferring existing small pages,
as ``jenga.manager_base.PagedManager._alloc_pages`` does), and answers "0 blocks needed" only if all of
them were placed. ``get_new_blocks`` then hands out exactly those pages, so it can never fail
half-way through a request's groups. A refused reservation changes nothing, as a refused
``allocate_slots`` changes nothing in vLLM (its ``KVCacheManager.allocate_slots`` compares counts
before it touches a block) and a failed ``allocate`` changes nothing in ``jenga/`` (the undo log of
``PagedManager._begin`` / ``_end``, jenga/journal.py): unless ``LcmPagePool.sure_fit`` says the pages
fit without evicting, the attempt runs under the pool's undo log, and the hashes of cached pages it
evicts are dropped only once the reservation succeeds; on refusal the log is replayed, so every
cached page (a preempted request's own sliding-window checkpoint, say) stays cached. A reservation
that ``LcmPagePool.cannot_fit`` proves impossible (more than the free and cached pages could give)
is refused before anything is tried.
"""

from __future__ import annotations

import inspect
from collections import Counter

from vllm.v1.core.block_pool import BlockPool

from jenga.journal import Journal
from jenga.pools.lcm import LcmPagePool
from jenga.spec import PageGeometry


class JengaAllocator:
    """The shared LCM pool, the per-request reservations and the pinned hits of one engine."""

    def __init__(self, cfg, enable_caching: bool):
        self.cfg = cfg
        # jenga's page geometry of the groups (the same LCM the pool is carved by).
        self.geometry = PageGeometry(16, {str(t): int(p) for t, p in enumerate(cfg.small_page_bytes)})
        self.ratios = [self.geometry.small_pages_per_large(str(t)) for t in range(len(cfg.small_page_bytes))]
        self.pool = LcmPagePool(list(cfg.small_page_bytes), cfg.num_blocks * cfg.large_page_bytes,
                                request_aware=True, enable_cache=enable_caching)
        assert self.pool.num_large == cfg.num_blocks
        self.pool.reserve_large(0)
        self.pool.on_evict = self._on_evict
        self.groups: list[JengaGroupPool] = []
        self.clock = 0
        self.current: str | None = None            # request whose blocks are being allocated
        self.reserved: dict[int, list[int]] = {}   # group -> sids reserved for ``reserved_for``
        self.reserved_for: str | None = None
        self.pinned: dict[tuple[int, int], tuple[int, int]] = {}  # (group, sid) -> old eviction key
        self.stats = Counter()
        self.lp_types_seen: dict[int, set[int]] = {}  # large page -> types it has served
        self.deferred: list[tuple[int, int]] | None = None  # evicted under an undo log, hash not yet dropped

    # -- hooks ---------------------------------------------------------------------------------------
    def _on_evict(self, t: int, sid: int) -> None:
        if self.deferred is not None:
            self.deferred.append((t, sid))
            return
        self.groups[t].drop_hash(sid)
        self.stats["evicted_small_pages"] += 1

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def note_large(self, t: int, sid: int) -> None:
        lp = sid // self.ratios[t]
        seen = self.lp_types_seen.setdefault(lp, set())
        if t not in seen:
            if seen:
                self.stats["large_pages_moved_between_types"] += 1
            seen.add(t)

    # -- admission -----------------------------------------------------------------------------------
    def release_stale(self) -> None:
        """Drop a reservation / pins left by an ``allocate_slots`` that returned early."""
        pool = self.pool
        for t, sids in self.reserved.items():
            for sid in sids:
                pool.free(t, sid)
                self.stats["reservation_returned"] += 1
        self.reserved, self.reserved_for = {}, None
        for (t, sid), key in self.pinned.items():
            pool.to_cached(t, sid, *key)
        self.pinned = {}

    def reserve(self, request_id: str, new_pages: list[int], hits: list[list]) -> bool:
        """Pin ``hits`` (blocks vLLM will touch) and place ``new_pages[t]`` small pages per group."""
        pool = self.pool
        self.release_stale()
        for t, blocks in enumerate(hits):
            for b in blocks:
                if b.ref_cnt == 0 and not b.is_null and (t, b.block_id) not in self.pinned:
                    self.pinned[(t, b.block_id)] = pool.from_cached(t, b.block_id)
        demand = {t: n for t, n in enumerate(new_pages) if n > 0}
        if demand and pool.cannot_fit(demand):
            # Sure to fail even after evicting every cached page: refuse without trying. On a tight
            # budget about a third of the refusals end here, each of which would otherwise place
            # hundreds of pages under the undo log and undo them (Gemma-3 no_full_isl, 18 %).
            self.release_stale()
            self.stats["refused"] += 1
            self.stats["refused_at_once"] += 1
            return False
        journal = None
        if demand and not pool.sure_fit(demand, request_id):
            journal, self.deferred = Journal(), []
            pool.begin(journal)
        try:
            ok = self._place(request_id, new_pages)
        finally:
            deferred, self.deferred = self.deferred, None
            if journal is not None:
                pool.begin(None)
        if ok:
            for t, sid in deferred or ():
                self._on_evict(t, sid)
            return True
        if journal is not None:
            journal.undo()  # the evicted cached pages are cached again; their hashes were kept
        self.release_stale()
        self.stats["refused"] += 1
        return False

    def _place(self, request_id: str, new_pages: list[int]) -> bool:
        """Take ``new_pages[t]`` small pages per group for ``request_id`` (request-aware, then tight)."""
        pool = self.pool
        for tight in (False, True):
            got: dict[int, list[int]] = {}
            ok = True
            for t, n in enumerate(new_pages):
                for _ in range(n):
                    sid = pool.alloc(t, request_id, tight)
                    if sid is None:
                        ok = False
                        break
                    got.setdefault(t, []).append(sid)
                if not ok:
                    break
            if ok:
                for t, sids in got.items():
                    for sid in sids:
                        self.note_large(t, sid)
                self.reserved, self.reserved_for = got, request_id
                self.stats["retry_tight_ok" if tight else "admitted"] += 1
                return True
            for t, sids in got.items():
                for sid in sids:
                    pool.free(t, sid)
        return False

    def can_fit(self, new_pages: list[int]) -> bool:
        """The full-sequence admission gate (no reservation): jenga's own conservative estimate."""
        return self.pool.can_fit({t: n for t, n in enumerate(new_pages) if n > 0})

    def take(self, t: int, n: int) -> list[int]:
        """``n`` small pages of group t for ``current``: the reservation first, else the pool."""
        out: list[int] = []
        if self.reserved_for is not None and self.reserved_for == self.current:
            mine = self.reserved.get(t, [])
            out, self.reserved[t] = mine[:n], mine[n:]
        while len(out) < n:
            sid = self.pool.alloc(t, self.current, True)
            if sid is None:
                raise RuntimeError(f"jenga_vllm: group {t} ran out of small pages outside an admitted "
                                   f"reservation (request {self.current}); the admission estimate and the "
                                   "allocation disagree -- please report")
            self.note_large(t, sid)
            self.stats["unreserved_pages"] += 1
            out.append(sid)
        return out

    def release_owner(self, request_id: str) -> None:
        self.pool.release_owner(request_id)

    # -- reports -------------------------------------------------------------------------------------
    def num_available_large(self) -> int:
        return self.pool.num_available_large()

    def summary(self) -> dict:
        p = self.pool
        return {"num_large_pages": p.num_large, "free_large_pages": p.num_large - p.large_pages_used,
                "used_small_pages": list(p.used), "cached_small_pages": list(p.cached),
                "path_counts": dict(p.path_counts), **dict(self.stats)}


# Settings of the coordinator's pool that a group pool must keep (when this vLLM's BlockPool has them):
# v0.33.0 block_pool.py BlockPool.__init__ takes num_hash_lookahead_tokens (the managers read
# ``block_pool.num_hash_lookahead_tokens`` for hashes and Mamba checkpoints) next to 0.32's medium.
# The metrics collector is handed over by install() through GroupMetrics.
_INHERITED = ("num_hash_lookahead_tokens", "medium")


class _BlockId:
    __slots__ = ("block_id",)

    def __init__(self, block_id: int):
        self.block_id = block_id


class GroupMetrics:
    """vLLM's ``KVCacheMetricsCollector`` (``--kv-cache-metrics``) keys blocks by ``block_id``, one
    flat id space; a group pool's ids are its own small-page indices, so they are shifted by
    ``offset`` (the block counts of the groups before it) to stay distinct."""

    def __init__(self, collector, offset: int):
        self.collector, self.offset = collector, offset

    def on_block_allocated(self, b) -> None:
        self.collector.on_block_allocated(_BlockId(self.offset + b.block_id))

    def on_block_accessed(self, b) -> None:
        self.collector.on_block_accessed(_BlockId(self.offset + b.block_id))

    def on_block_evicted(self, b) -> None:
        self.collector.on_block_evicted(_BlockId(self.offset + b.block_id))

    def reset(self) -> None:
        self.collector.reset()


class JengaGroupPool(BlockPool):
    """Group t's ``BlockPool``: block id = type t's small-page index in the LCM pool."""

    def __init__(self, alloc: JengaAllocator, t: int, hash_block_size: int, enable_kv_cache_events: bool,
                 like: BlockPool | None = None):
        ratio = alloc.ratios[t]
        params = inspect.signature(BlockPool.__init__).parameters
        extra = {k: getattr(like, k) for k in _INHERITED if k in params and hasattr(like, k)}
        super().__init__(num_gpu_blocks=alloc.pool.num_large * ratio, enable_caching=alloc.pool.caching,
                         hash_block_size=hash_block_size, enable_kv_cache_events=enable_kv_cache_events, **extra)
        # Free lists live in the LCM pool; vLLM's linked list would only duplicate them.
        self.free_block_queue = type(self.free_block_queue)([])
        self.alloc, self.t = alloc, t

    def drop_hash(self, sid: int) -> None:
        self._maybe_evict_cached_block(self.blocks[sid])

    def get_new_blocks(self, num_blocks: int):
        ret = [self.blocks[sid] for sid in self.alloc.take(self.t, num_blocks)]
        for b in ret:
            # A reused cached page had its hash dropped by on_evict; an empty one never had one.
            assert b.ref_cnt == 0 and b.block_hash is None, f"group {self.t} block {b.block_id} handed out twice"
            b.ref_cnt = 1
            if self.metrics_collector:
                # as BlockPool.get_new_blocks: a reused block's residency ends, a new one starts
                self.metrics_collector.on_block_evicted(b)
                self.metrics_collector.on_block_allocated(b)
        return ret

    def touch(self, blocks) -> None:
        a = self.alloc
        for b in blocks:
            if b.is_null:
                # The null block is never pooled and its ref_cnt is not kept (v0.33.0 block_pool.py
                # BlockPool.touch / free_blocks skip it; 0.33's trim_null_head drops a sliding-window
                # table's leading null blocks before freeing, so counting them here would only grow).
                continue
            if b.ref_cnt == 0:
                key = (self.t, b.block_id)
                if a.pinned.pop(key, None) is None:  # pinned at admission: already used in the pool
                    a.pool.from_cached(self.t, b.block_id)
            b.ref_cnt += 1
            if self.metrics_collector:
                self.metrics_collector.on_block_accessed(b)

    def free_blocks(self, ordered_blocks) -> None:
        blocks = list(ordered_blocks)
        ts = self.alloc.tick()
        pool, t, n = self.alloc.pool, self.t, len(blocks)
        for i, b in enumerate(blocks):
            if b.is_null:
                continue  # never pooled, ref_cnt not kept (see touch)
            if b.pool is not self:
                b.pool.free_blocks([b])
                continue
            b.ref_cnt -= 1
            if b.ref_cnt:
                continue
            if b.block_hash is not None and self.enable_caching:
                # vLLM orders blocks to evict first at the front (a request's tail): jenga's key is
                # (time, -prefix length), so the front gets the longest prefix length.
                pool.to_cached(t, b.block_id, ts, n - i)
            else:
                pool.free(t, b.block_id)

    def get_num_free_blocks(self) -> int:
        return self.alloc.pool.num_free_small(self.t)

    def get_usage(self) -> float:
        return self.alloc.pool.used[self.t] / max(1, self.num_gpu_blocks - self.alloc.ratios[self.t])

    def reset_prefix_cache(self) -> bool:
        p = self.alloc.pool
        if any(p.used):
            return False
        for sid in [s for s in range(len(self.blocks)) if p.is_cached(self.t, s)]:
            p.from_cached(self.t, sid)
            self.drop_hash(sid)
            p.free(self.t, sid)
        return True

    def evict_blocks(self, block_ids) -> None:
        raise NotImplementedError("jenga_vllm: block ids are per group; KV connectors are refused")

    def unpin_blocks(self, blocks, on_reuse) -> None:
        raise NotImplementedError("jenga_vllm: unpin_blocks (HiSparse) is not supported")


class FacadePool:
    """Stands in for the coordinator's shared pool; counts large pages."""

    def __init__(self, alloc: JengaAllocator, enable_caching: bool, enable_kv_cache_events: bool):
        self.alloc = alloc
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.num_gpu_blocks = alloc.pool.num_large
        self.null_block = None
        self.hash_block_size = alloc.groups[0].hash_block_size if alloc.groups else None

    def __getattr__(self, name: str):
        # A one-type model gets vLLM's UnitaryKVCacheCoordinator, which reads its single pool through
        # the coordinator's; with several types every manager uses its own pool.
        groups = self.__dict__.get("alloc").groups
        if len(groups) == 1:
            return getattr(groups[0], name)
        raise AttributeError(f"jenga_vllm FacadePool has no {name!r}: with several layer types each "
                             "manager's own pool answers")

    def get_num_free_blocks(self) -> int:
        return self.alloc.num_available_large()

    def get_usage(self) -> float:
        p = self.alloc.pool
        geo = self.alloc.geometry
        used = sum(n * b for n, b in zip(p.used, geo.small_page_bytes.values()))
        total = (p.num_large - 1) * geo.large_page_bytes
        return used / total if total else 0.0

    def get_cached_block(self, block_hash, kv_cache_group_ids):
        out = []
        for g in kv_cache_group_ids:
            hit = self.alloc.groups[g].get_cached_block(block_hash, [g])
            if hit is None:
                return None
            out.extend(hit)
        return out

    def free_blocks(self, ordered_blocks) -> None:
        by_pool: dict = {}
        for b in ordered_blocks:
            by_pool.setdefault(b.pool, []).append(b)
        for pool, blocks in by_pool.items():
            pool.free_blocks(blocks)

    def take_events(self):
        ev = []
        for g in self.alloc.groups:
            ev.extend(g.take_events())
        return ev

    def reset_prefix_cache(self) -> bool:
        return all([g.reset_prefix_cache() for g in self.alloc.groups])  # noqa: C419 - reset every pool

    def evict_blocks(self, block_ids) -> None:
        raise NotImplementedError("jenga_vllm: block ids are per group; KV connectors are refused")
