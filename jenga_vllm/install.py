"""Put jenga's allocator under a constructed ``KVCacheManager`` (engine core, scheduler side).

vLLM builds its coordinator and one ``SingleTypeKVCacheManager`` per group as usual; this swaps
each manager's pool for a :class:`~jenga_vllm.pool.JengaGroupPool`, the coordinator's shared pool
for a :class:`~jenga_vllm.pool.FacadePool`, and wraps four coordinator calls:

- ``get_num_blocks_to_allocate``: the admission question. Per group, vLLM's own manager says how
  many blocks the step needs (new pages plus hit pages that are eviction candidates); the plugin
  pins those hits and reserves the new pages in the LCM pool for this request (see pool.py), and
  answers 0 (fits) or more than is free (does not);
- each manager's ``allocate_new_blocks``: tells the pool which request it serves (request-aware
  placement: the request's own partly used large page first, paper §4.3);
- ``free`` / ``pop_blocks_for_free``: the request's large pages are no longer tied to it;
- ``new_step_starts``: a reservation left by an ``allocate_slots`` that returned early goes back.

Everything else -- prefix-hit decisions, hashing, sliding-window freeing, retention -- stays vLLM's.
"""

from __future__ import annotations

import functools

from jenga_vllm.plan import JengaKVCacheConfig, JengaRefusal
from jenga_vllm.pool import FacadePool, GroupMetrics, JengaAllocator, JengaGroupPool


def _arg(args, kwargs, name: str, pos: int, default=None):
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else default


def _hits_to_pin(mgr, request_id: str, blocks, total_computed_tokens: int) -> list:
    """The hit blocks vLLM's ``add_local_computed_blocks`` will touch that are eviction candidates
    (the same count ``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` adds)."""
    if request_id in mgr.num_cached_block or not blocks:
        return []
    skipped = mgr.get_num_skipped_tokens(total_computed_tokens) // mgr.block_size
    skipped = max(0, skipped - len(mgr.req_to_blocks.get(request_id, ())))
    return [b for b in blocks[skipped:] if b.ref_cnt == 0 and not b.is_null]


def install(kv_cache_manager, kv_cache_config) -> JengaAllocator | None:
    """Swap the pools of ``kv_cache_manager`` for jenga's; no-op for a stock config."""
    if not isinstance(kv_cache_config, JengaKVCacheConfig):
        return None
    if getattr(kv_cache_manager, "jenga", None) is not None:
        # Already installed: the hooked scheduler module's KVCacheManager did it (hooks.patch_scheduler),
        # and a driver such as backend=vllm_sched calls install() again in a process where the entry
        # point ran (vLLM loads general plugins from EngineArgs and the model registry too).
        return kv_cache_manager.jenga
    coord = kv_cache_manager.coordinator
    if getattr(coord, "enable_partial_hash_hits", False):
        raise JengaRefusal("jenga_vllm cannot serve this engine: partial-hash prefix hits copy blocks "
                           "(copy-on-write) over one flat block-id space")
    old = coord.block_pool
    caching = bool(old.enable_caching)
    alloc = JengaAllocator(kv_cache_config, caching)
    events = bool(getattr(old, "enable_kv_cache_events", False))
    managers = coord.single_type_managers
    assert len(managers) == len(kv_cache_config.ratios), "one manager per jenga group"
    collector = getattr(old, "metrics_collector", None)
    offset = 0
    for t, mgr in enumerate(managers):
        pool = JengaGroupPool(alloc, t, old.hash_block_size, events, like=mgr.block_pool)
        if collector is not None:
            pool.metrics_collector = GroupMetrics(collector, offset)
        offset += pool.num_gpu_blocks
        alloc.groups.append(pool)
        mgr.block_pool = pool
        mgr._null_block = pool.null_block
        orig = mgr.allocate_new_blocks

        @functools.wraps(orig)
        def allocate_new_blocks(request_id, *a, _orig=orig, **k):
            alloc.current = request_id
            return _orig(request_id, *a, **k)

        mgr.allocate_new_blocks = allocate_new_blocks
    facade = FacadePool(alloc, caching, events)
    coord.block_pool = facade
    kv_cache_manager.block_pool = facade
    if hasattr(coord, "verify_and_split_kv_cache_groups"):
        coord.verify_and_split_kv_cache_groups()  # groups are split by pool identity: one per type now

    recorded: list[int] = [0] * len(managers)
    for t, mgr in enumerate(managers):
        orig_n = mgr.get_num_blocks_to_allocate

        def counted(*a, _orig=orig_n, _t=t, **k):
            n = _orig(*a, **k)
            recorded[_t] += n
            return n

        mgr.get_num_blocks_to_allocate = counted

    orig_gnb = coord.get_num_blocks_to_allocate

    @functools.wraps(orig_gnb)
    def get_num_blocks_to_allocate(*a, **k):
        for t in range(len(recorded)):
            recorded[t] = 0
        orig_gnb(*a, **k)
        rid = _arg(a, k, "request_id", 0)
        new_computed = _arg(a, k, "new_computed_blocks", 2) or [()] * len(managers)
        total_computed = _arg(a, k, "total_computed_tokens", 4, 0)
        hits = [_hits_to_pin(m, rid, new_computed[t], total_computed) for t, m in enumerate(managers)]
        new_pages = [recorded[t] - len(hits[t]) for t in range(len(managers))]
        assert min(new_pages) >= 0, f"jenga_vllm: negative page demand {new_pages}"
        if _arg(a, k, "apply_admission_cap", 7, False):
            fits = alloc.can_fit(new_pages)  # full-sequence gate: an estimate, nothing reserved
        else:
            fits = alloc.reserve(rid, new_pages, hits)
        return 0 if fits else facade.get_num_free_blocks() + 1

    coord.get_num_blocks_to_allocate = get_num_blocks_to_allocate

    for name in ("free", "pop_blocks_for_free"):
        orig_f = getattr(coord, name)

        @functools.wraps(orig_f)
        def freeing(request_id, *a, _orig=orig_f, **k):
            out = _orig(request_id, *a, **k)
            alloc.release_owner(request_id)
            return out

        setattr(coord, name, freeing)

    orig_step = coord.new_step_starts

    @functools.wraps(orig_step)
    def new_step_starts(*a, **k):
        alloc.release_stale()
        return orig_step(*a, **k)

    coord.new_step_starts = new_step_starts
    kv_cache_manager.jenga = alloc
    return alloc
