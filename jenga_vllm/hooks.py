"""Where the plugin plugs into vLLM (0.32.x: module patches; 0.33.x: the config-builder route).

Hook points (mapped in ../shared/reference/vllm_plugin_feasibility.md):

- planning, engine core. 0.32: ``vllm.v1.core.kv_cache_utils`` functions ``get_kv_cache_groups``,
  ``get_kv_cache_config_from_groups``, ``_pool_bytes_per_block``,
  ``_max_memory_usage_bytes_from_groups``, looked up at call time by ``get_kv_cache_configs``.
  0.33: a ``DefaultKVCacheConfigBuilder`` subclass (``vllm/v1/core/kv_cache_planning.py``) selected
  through ``Platform.get_kv_cache_config_builder_cls``, plus the module-level
  ``_max_memory_usage_bytes_from_groups`` (it multiplies every group's blocks by one
  bytes-per-block). The 0.33 route runs on CPU against the official vllm 0.33.0 wheel at the
  planner, scheduler and view-construction level (``make test-vllm033``,
  tests/test_jenga_vllm_033.py); the model forward under 0.33 needs a GPU and is not run here.
- capacity: ``kv_cache_utils.get_max_concurrency_for_kv_cache_config`` (vLLM would count large
  pages as blocks in its start-up log and ``kv_cache_size_tokens``).
- scheduler: the module global ``vllm.v1.core.sched.scheduler.KVCacheManager`` is rebound to a
  subclass that calls :func:`jenga_vllm.install.install` (covers ``Scheduler`` and
  ``AsyncScheduler`` with no ``--scheduler-cls``); inert for stock configs.
- worker: ``allocate_kv_cache`` (as imported by the model runners) is wrapped to self-check every
  layer's view against the plan.

Every patched function checks :func:`jenga_vllm.enabled` when it runs, so a process can build a
stock engine and a Jenga engine one after the other.
"""

from __future__ import annotations

import logging
import sys

from jenga_vllm import flags, plan

log = logging.getLogger("jenga_vllm")


def _enabled() -> bool:
    return flags.enabled()


def _broken() -> bool:
    return flags.broken_layout()


def _log_plan(cfg) -> None:
    d = plan.describe(cfg)
    log.warning("jenga_vllm: %d large pages of %d B (small pages %s B, %s per large page, layers per group %s); "
                "true KV capacity %d tokens over %d usable bytes%s", d["num_large_pages"], d["large_page_bytes"],
                d["small_page_bytes"], d["small_pages_per_large"], d["layers_per_group"], d["token_capacity"],
                d["usable_bytes"], " [BROKEN LAYOUT: negative control]" if d["broken_layout"] else "")


def patch_planner_v032() -> None:
    import vllm.v1.core.kv_cache_utils as ku
    if getattr(ku, "_jenga_patched", False):
        return
    ku._jenga_patched = True
    orig_groups, orig_cfg = ku.get_kv_cache_groups, ku.get_kv_cache_config_from_groups
    orig_bpb, orig_max = ku._pool_bytes_per_block, ku._max_memory_usage_bytes_from_groups
    orig_conc = ku.get_max_concurrency_for_kv_cache_config

    def get_kv_cache_groups(vllm_config, kv_cache_spec):
        if not _enabled():
            return orig_groups(vllm_config, kv_cache_spec)
        return plan.jenga_groups(vllm_config, kv_cache_spec)

    def get_kv_cache_config_from_groups(vllm_config, groups, available_memory):
        if not _enabled() or not groups:
            return orig_cfg(vllm_config, groups, available_memory)
        num_large = available_memory // plan.large_page_bytes(groups)
        if vllm_config.cache_config.num_gpu_blocks_override is not None:
            num_large = vllm_config.cache_config.num_gpu_blocks_override
        cfg = plan.jenga_config(vllm_config, groups, num_large, broken=_broken())
        _log_plan(cfg)
        return cfg

    def _pool_bytes_per_block(vllm_config, groups):
        if not _enabled() or not groups:
            return orig_bpb(vllm_config, groups)
        return plan.large_page_bytes(groups)

    def _max_memory_usage_bytes_from_groups(vllm_config, groups):
        if not _enabled() or not groups:
            return orig_max(vllm_config, groups)
        return plan.max_usage_bytes(vllm_config, groups)

    def get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config):
        if isinstance(kv_cache_config, plan.JengaKVCacheConfig):
            return plan.max_concurrency(vllm_config, kv_cache_config)
        return orig_conc(vllm_config, kv_cache_config)

    ku.get_kv_cache_groups = get_kv_cache_groups
    ku.get_kv_cache_config_from_groups = get_kv_cache_config_from_groups
    ku._pool_bytes_per_block = _pool_bytes_per_block
    ku._max_memory_usage_bytes_from_groups = _max_memory_usage_bytes_from_groups
    ku.get_max_concurrency_for_kv_cache_config = get_max_concurrency_for_kv_cache_config


def make_builder_v033():
    """The 0.33 ``KVCacheConfigBuilder`` (subclass of v0.33.0's
    ``kv_cache_planning.DefaultKVCacheConfigBuilder``; vLLM's ``get_kv_cache_configs`` calls
    ``get_kv_cache_groups`` once, ``_get_pool_bytes_per_block`` for the block count, then
    ``get_kv_cache_config_from_groups`` with that count; the GPU runner's
    ``_init_minimal_kv_cache_for_profiling`` calls the same two hooks in the worker)."""
    from vllm.v1.core.kv_cache_planning import DefaultKVCacheConfigBuilder

    class JengaKVCacheConfigBuilder(DefaultKVCacheConfigBuilder):
        def get_kv_cache_groups(self, vllm_config, kv_cache_spec):
            return plan.jenga_groups(vllm_config, kv_cache_spec)

        def get_kv_cache_config_from_groups(self, vllm_config, groups, num_blocks):
            if not groups:
                return super().get_kv_cache_config_from_groups(vllm_config, groups, num_blocks)
            cfg = plan.jenga_config(vllm_config, groups, num_blocks, broken=_broken())
            _log_plan(cfg)
            return cfg

        def _get_pool_bytes_per_block(self, vllm_config, groups):
            # One block id of the engine core = one large page (kv_cache_planning.py:
            # _pool_bytes_per_block_from_builder divides the KV bytes by this).
            return plan.large_page_bytes(groups) if groups else None

        def _get_max_memory_usage_bytes_from_groups(self, vllm_config, groups):  # later vLLMs: a method
            return plan.max_usage_bytes(vllm_config, groups)

    return JengaKVCacheConfigBuilder


def patch_planner_v033() -> None:
    import vllm.v1.core.kv_cache_planning as kp
    from vllm.platforms import current_platform
    if getattr(kp, "_jenga_patched", False):
        return
    kp._jenga_patched = True
    builder = make_builder_v033()
    sys.modules["jenga_vllm"].JengaKVCacheConfigBuilder = builder
    pcls = type(current_platform)
    orig_sel = pcls.get_kv_cache_config_builder_cls  # bound to the platform class

    def get_kv_cache_config_builder_cls(cls, vllm_config):
        if _enabled():
            return "jenga_vllm.JengaKVCacheConfigBuilder"
        return orig_sel(vllm_config)

    pcls.get_kv_cache_config_builder_cls = classmethod(get_kv_cache_config_builder_cls)
    if hasattr(kp, "_max_memory_usage_bytes_from_groups"):
        # v0.33.0: a module function, builder first, looked up at call time by get_kv_cache_configs
        # (the admission check's partial), _estimate_max_model_len_from_groups and auto-fit.
        orig_max = kp._max_memory_usage_bytes_from_groups

        def _max_usage(b, vllm_config, groups, _orig=orig_max):
            groups = [g for g in groups if not getattr(g, "host_resident", False)]
            if isinstance(b, builder) and groups:
                return plan.max_usage_bytes(vllm_config, groups)
            return _orig(b, vllm_config, groups)

        _max_usage.jenga_wraps = orig_max  # vLLM's own function (tests compare against it)
        kp._max_memory_usage_bytes_from_groups = _max_usage
    # v0.33.0: kv_cache_utils.get_kv_cache_capacity (called by update_kv_cache_capacity, the
    # start-up log and cache_config.kv_cache_size_tokens) looks this name up at call time.
    import vllm.v1.core.kv_cache_utils as ku
    orig_conc = ku.get_max_concurrency_for_kv_cache_config

    def conc(vllm_config, kv_cache_config, _orig=orig_conc):
        if isinstance(kv_cache_config, plan.JengaKVCacheConfig):
            return plan.max_concurrency(vllm_config, kv_cache_config)
        return _orig(vllm_config, kv_cache_config)

    ku.get_max_concurrency_for_kv_cache_config = conc


def patch_scheduler() -> None:
    """Every ``Scheduler`` / ``AsyncScheduler`` builds a manager that installs jenga's pools when
    handed a :class:`~jenga_vllm.plan.JengaKVCacheConfig` (and changes nothing otherwise)."""
    import vllm.v1.core.sched.scheduler as sm
    base = sm.KVCacheManager
    if getattr(base, "_jenga", False):
        return
    from jenga_vllm.install import install

    class JengaKVCacheManager(base):
        _jenga = True

        def __init__(self, kv_cache_config, *a, **k):
            super().__init__(kv_cache_config, *a, **k)
            alloc = install(self, kv_cache_config)
            if alloc is not None:
                log.warning("jenga_vllm: LCM allocator installed under vLLM's scheduler (%d groups)",
                            len(alloc.groups))

    sm.KVCacheManager = JengaKVCacheManager


def patch_worker_views() -> None:
    """Self-check every layer's view right after the worker allocates the KV cache."""
    import importlib
    for name in ("vllm.v1.worker.utils", "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.attn_utils"):
        try:
            mod = importlib.import_module(name)
        except ImportError:  # a runner this build does not ship
            log.info("jenga_vllm: %s not importable; its KV views are not self-checked", name)
            continue
        orig = getattr(mod, "allocate_kv_cache", None)
        if orig is None or getattr(orig, "_jenga", False):
            continue

        def allocate_kv_cache(kv_cache_config, *a, _orig=orig, **k):
            caches = _orig(kv_cache_config, *a, **k)
            if isinstance(kv_cache_config, plan.JengaKVCacheConfig):
                plan.check_views(kv_cache_config, caches)
                log.warning("jenga_vllm: view self-check passed for %d layers", len(caches))
            return caches

        allocate_kv_cache._jenga = True
        allocate_kv_cache.__wrapped__ = orig
        mod.allocate_kv_cache = allocate_kv_cache
