"""jenga_vllm: Jenga's LCM allocator inside vLLM as a plugin (issue 11).

- planning and refusals, on vLLM's own spec classes (fast);
- scheduler-level stress through ``backend=vllm_sched`` at tight budgets with the pool's invariants
  checked after every step (``backend.options.check_invariants``);
- the real engine, bit for bit: ``python -m harness.tools.vllm_plugin_check`` in a fresh process (random
  weights in safetensors; the plugin vs stock vLLM with the hybrid manager on and off; a broken
  layout that must change outputs; large pages moving between types; prefix hits through the plugin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from harness.backends.vllm.plan import have_vllm
from harness.backends.vllm.tiny import tiny_profile
from harness.config import compose_cell
from harness.workloads.request import Request

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]


def _spec_dict(n_sliding: int, n_full: int, block: int = 16, dtype=None):
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    dtype = dtype or torch.float32
    out = {}
    for i in range(n_sliding + n_full):
        cls = SlidingWindowSpec if i < n_sliding else FullAttentionSpec
        kw = {"sliding_window": 256} if i < n_sliding else {}
        out[f"model.layers.{i}.self_attn.attn"] = cls(block_size=block, num_kv_heads=1, head_size=32, dtype=dtype, **kw)
    return out


def _vllm_config(tmp_path):
    from harness.backends.vllm.plan import EngineKnobs, make_vllm_config, write_proxy_model_dir
    prof = tiny_profile()
    return make_vllm_config(prof, EngineKnobs(hybrid=True, enable_prefix_caching=True, max_model_len=512),
                            write_proxy_model_dir(prof, 512, tmp_path))


def test_plan_is_one_group_per_type_with_lcm_large_pages(tmp_path):
    from jenga_vllm.plan import JengaKVCacheConfig, check_plan, plan_for_scheduler
    vc = _vllm_config(tmp_path)
    cfg = plan_for_scheduler(vc, _spec_dict(3, 2), 100 * 24576 + 5)
    assert isinstance(cfg, JengaKVCacheConfig)
    # 3 sliding + 2 full layers of 16 x 256 B pages: small pages 12 KiB and 8 KiB, no padding layer
    assert [len(g.layer_names) for g in cfg.kv_cache_groups] == [3, 2]
    assert cfg.small_page_bytes == (12288, 8192) and cfg.large_page_bytes == 24576 and cfg.ratios == (2, 3)
    assert cfg.num_blocks == 100  # large pages; the 5-byte tail is not a page
    assert [cfg.num_blocks_of(t) for t in cfg.kv_cache_tensors] == [200, 300]
    assert [(t.layer_stride, t.block_stride, t.offset) for t in cfg.kv_cache_tensors] == [(4096, 12288, 0),
                                                                                          (4096, 8192, 0)]
    assert {t.size for t in cfg.kv_cache_tensors} == {100 * 24576}
    # small page sid of type t sits where jenga's LCM pool says it does
    from jenga.pools.lcm import LcmPagePool
    pool = LcmPagePool(list(cfg.small_page_bytes), 100 * 24576)
    for t, tensor in enumerate(cfg.kv_cache_tensors):
        for sid in (0, 1, 2, 7, 199):
            assert sid * tensor.block_stride == pool.page_offset(t, sid)
    # true capacity: 99 usable large pages (page 0 holds the null blocks), 5 x 256 B per token
    assert cfg.usable_bytes == 99 * 24576 and cfg.bytes_per_token() == 5 * 256
    # the negative control's plan fails the self-check
    broken = plan_for_scheduler(vc, _spec_dict(3, 2), 100 * 24576, broken=True)
    with pytest.raises(AssertionError, match="page-layer"):
        check_plan(broken)


def test_refusals_name_the_reason(tmp_path):
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    from jenga_vllm.plan import JengaRefusal, plan_for_scheduler
    vc = _vllm_config(tmp_path)
    specs = _spec_dict(1, 1)
    specs["model.layers.9.mamba"] = MambaSpec(block_size=16, shapes=((64,),), dtypes=(torch.float32,))
    with pytest.raises(JengaRefusal, match="Mamba / linear-attention"):
        plan_for_scheduler(vc, specs, 1 << 20)
    mixed = _spec_dict(1, 0) | {"model.layers.5.self_attn.attn": next(iter(_spec_dict(0, 1, dtype=torch.bfloat16).values()))}
    with pytest.raises(JengaRefusal, match="mixed-precision KV"):
        plan_for_scheduler(vc, mixed, 1 << 20)
    vc.parallel_config.pipeline_parallel_size = 2
    with pytest.raises(JengaRefusal, match="pipeline parallelism"):
        plan_for_scheduler(vc, _spec_dict(1, 1), 1 << 20)


def test_plugin_is_inert_unless_enabled_and_refuses_other_vllm_versions(monkeypatch):
    import vllm

    import jenga_vllm
    monkeypatch.delenv("JENGA_VLLM", raising=False)
    import vllm.v1.core.kv_cache_utils as ku
    before = ku.get_kv_cache_groups
    jenga_vllm.register()  # disabled: touches nothing
    assert ku.get_kv_cache_groups is before
    monkeypatch.setattr(vllm, "__version__", "0.31.2")
    with pytest.raises(RuntimeError, match=r"supports vLLM 0\.32\.x and 0\.33\.x; this is vLLM 0\.31\.2"):
        jenga_vllm.check_version()
    monkeypatch.setenv("JENGA_VLLM", "1")
    with pytest.raises(RuntimeError, match="Unset JENGA_VLLM"):
        jenga_vllm.register()


# -- scheduler-level stress: vLLM's real Scheduler, jenga's pool, invariants after every step ---------

def _stress_cell(system: str, kv_bytes: int, *extra: str):
    return compose_cell([f"system={system}", "backend=vllm_sched", "gpu=h100", "engine.engine_version=v1",
                         "engine.max_num_seqs=16", "engine.max_num_batched_tokens=512",
                         "engine.enable_chunked_prefill=true", "engine.enable_prefix_caching=true",
                         "engine.max_model_len=1100", f"engine.kv_cache_bytes={kv_bytes}", *extra])


def _stress_workload(seed: int = 0) -> list[Request]:
    """Two groups of requests sharing different prefixes, arriving in bursts, mixed lengths."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(3, 1000, 256).astype(np.int32) for _ in range(2)]
    reqs = []
    for i in range(20):
        body = rng.integers(3, 1000, int(rng.integers(64, 700))).astype(np.int32)
        prompt = np.concatenate([prefixes[i % 2], body]) if i % 3 else body
        reqs.append(Request(f"s{i}", 0.02 * (i // 5), prompt, int(rng.integers(8, 120))))
    return reqs


@pytest.mark.parametrize("kv_bytes,retention", [(1_300_000, "dense"), (2_600_000, "0")])
def test_stress_tight_budgets_keep_jenga_invariants_every_step(kv_bytes, retention):
    from harness.backends.vllm import sched as vllm_sched
    prof = tiny_profile(num_layers=5)  # 3 sliding + 2 full: ratios 2 and 3 per large page
    cell = _stress_cell("jenga", kv_bytes, "+backend.options.check_invariants=true",
                        f"+backend.options.prefix_cache_retention_interval={retention}")
    r = vllm_sched.run_cell(cell, prof, _stress_workload())
    m, alloc = r.metrics, r.meta["jenga_allocator"]
    assert r.meta["allocator"].startswith("jenga_lcm") and r.meta["kv_cache"]["jenga"]["small_pages_per_large"] == [2, 3]
    assert m["num_requests"] == 20 and m["num_ignored"] == 0
    assert alloc.get("unreserved_pages", 0) == 0, "every page came from an admission-time reservation"
    assert alloc["large_pages_moved_between_types"] > 0
    assert m["prefix_hit_tokens"] > 0
    assert alloc["used_small_pages"] == [0, 0]  # everything freed at the end
    if kv_bytes == 1_300_000:
        # tight: jenga's admission refuses steps and vLLM preempts, with the invariants intact
        assert alloc.get("refused", 0) > 0 and m["preemptions"] > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kv_bytes", [1_300_000, 1_700_000])
def test_stress_random_workloads_keep_invariants(seed, kv_bytes):
    from harness.backends.vllm import sched as vllm_sched
    cell = _stress_cell("jenga", kv_bytes, "+backend.options.check_invariants=true",
                        "+backend.options.prefix_cache_retention_interval=dense")
    r = vllm_sched.run_cell(cell, tiny_profile(num_layers=5), _stress_workload(seed))
    assert r.metrics["num_ignored"] == 0 and r.meta["jenga_allocator"]["used_small_pages"] == [0, 0]
    assert r.meta["jenga_allocator"].get("unreserved_pages", 0) == 0


def test_watermark_refusals_after_a_reservation_return_the_pages():
    # vLLM checks its watermark after asking how many blocks a step needs: a reservation made for a
    # step vLLM then refuses must go back to the pool (release_stale) with the invariants intact.
    from harness.backends.vllm import sched as vllm_sched
    cell = _stress_cell("jenga", 1_700_000, "+backend.options.check_invariants=true",
                        "+backend.options.scheduler.watermark=0.2",
                        "+backend.options.prefix_cache_retention_interval=dense")
    r = vllm_sched.run_cell(cell, tiny_profile(num_layers=5), _stress_workload(2))
    alloc = r.meta["jenga_allocator"]
    assert r.metrics["num_ignored"] == 0 and alloc["used_small_pages"] == [0, 0]
    assert alloc["reservation_returned"] > 0


def test_one_layer_type_runs_under_the_unitary_coordinator():
    import dataclasses

    from harness.backends.vllm import sched as vllm_sched
    from jenga.spec import FullAttentionSpec
    full = dataclasses.replace(tiny_profile(), name="tiny_full", architecture="LlamaForCausalLM",
                               layer_kinds=("full",) * 4, specs=(FullAttentionSpec("full", 4, 256),))
    cell = _stress_cell("jenga", 1_300_000, "+backend.options.check_invariants=true")
    r = vllm_sched.run_cell(cell, full, _stress_workload())
    assert r.meta["kv_cache"]["jenga"]["layers_per_group"] == [4] and r.metrics["num_ignored"] == 0
    assert r.metrics["prefix_hit_tokens"] > 0


def test_vllm_sched_jenga_is_the_plugin_and_says_so():
    from harness.backends.vllm import sched as vllm_sched
    r = vllm_sched.run_cell(_stress_cell("jenga", 2_400_000), tiny_profile(), _stress_workload()[:4])
    assert r.meta["requested_system"] == "jenga" and r.meta["allocator"].startswith("jenga_lcm")
    assert not r.meta["hybrid_kv_cache_manager"]
    groups = r.meta["kv_cache"]["kv_cache_groups"]
    assert sorted((g["spec"], g["num_layers"]) for g in groups) == [("FullAttentionSpec", 2), ("SlidingWindowSpec", 2)]


def test_vllm_sched_jenga_current_is_the_plugin_like_jenga():
    """jenga_current (Jenga's LCM pool under vLLM 0.32's rules on backend=sim) is what the plugin is
    inside vLLM: on vllm_sched it runs the plugin, step for step as system=jenga. Negative control:
    vllm_current runs vLLM's hybrid manager (another allocator, another record)."""
    from harness.backends.vllm import sched as vllm_sched
    # 1.3 MB is too tight for the hybrid manager's padded groups (vLLM refuses to start), not for the plugin
    runs = {s: vllm_sched.run_cell(_stress_cell(s, kv, "+backend.options.check_invariants=true"),
                                   tiny_profile(num_layers=5), _stress_workload())
            for s, kv in (("jenga", 1_300_000), ("jenga_current", 1_300_000), ("vllm_current", 2_600_000))}
    cur, jenga, hybrid = runs["jenga_current"], runs["jenga"], runs["vllm_current"]
    assert cur.meta["requested_system"] == "jenga_current" and cur.meta["allocator"] == jenga.meta["allocator"]
    assert cur.meta["allocator"].startswith("jenga_lcm") and not cur.meta["hybrid_kv_cache_manager"]
    assert cur.meta["jenga_allocator"] == jenga.meta["jenga_allocator"]
    assert cur.trace == jenga.trace and cur.metrics == jenga.metrics
    assert cur.meta["jenga_allocator"]["large_pages_moved_between_types"] > 0  # the pool did real work
    assert hybrid.meta["allocator"] == "vllm_hybrid_kv_cache_manager" and hybrid.meta["jenga_allocator"] is None


def test_a_refused_reservation_evicts_nothing():
    """vLLM's allocate_slots refuses before it touches a block, and a failed jenga allocate is undone
    (jenga/journal.py); so a refused plugin reservation must leave every cached page cached with its
    hash (before this rule, a refused chunk evicted a preempted request's own sliding-window
    checkpoint and its resume missed). Negative control: a reservation that succeeds does evict."""
    from types import SimpleNamespace

    from jenga_vllm.pool import JengaAllocator

    dropped = []
    cfg = SimpleNamespace(small_page_bytes=[2, 1], large_page_bytes=2, num_blocks=5)  # large page 0: null blocks
    alloc = JengaAllocator(cfg, enable_caching=True)
    alloc.groups = [SimpleNamespace(drop_hash=lambda sid, t=t: dropped.append((t, sid))) for t in range(2)]
    pool = alloc.pool
    a = [pool.alloc(0, "a") for _ in range(2)]
    for i, sid in enumerate(a):
        pool.to_cached(0, sid, 1, i + 1)   # a finished: two cached large pages
    pool.alloc(0, "b")                     # b runs: one large page left free
    before = (list(pool.free_large), list(pool.cached), list(pool.used), dict(pool.path_counts))
    assert not alloc.reserve("c", [4, 0], [[], []])  # needs 4 large pages, 3 obtainable
    assert dropped == [] and alloc.stats["refused"] == 1
    assert (list(pool.free_large), list(pool.cached), list(pool.used), dict(pool.path_counts)) == before
    assert alloc.reserve("c", [3, 0], [[], []])      # fits by evicting a's two cached pages
    assert sorted(dropped) == sorted((0, sid) for sid in a) and pool.cached == [0, 0]


# -- the real engine, bit for bit -------------------------------------------------------------------

@pytest.fixture(scope="module")
def plugin_check(tmp_path_factory):
    out = tmp_path_factory.mktemp("plugin_check") / "check.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("JENGA_VLLM", None)
    proc = subprocess.run([sys.executable, "-m", "harness.tools.vllm_plugin_check", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert out.exists(), f"plugin-check crashed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    res = json.loads(out.read_text())
    res["returncode"], res["stdout"] = proc.returncode, proc.stdout
    return res


def test_engine_outputs_are_bit_identical_to_stock_vllm_hma_on_and_off(plugin_check):
    for name, d in plugin_check["models"].items():
        assert d["identical_hma_on"] == d["sequences"], (name, d["differ_hma_on"], d["max_dlogprob_hma_on"])
        assert d["identical_hma_off"] == d["sequences"], (name, d["differ_hma_off"], d["max_dlogprob_hma_off"])
        assert d["max_dlogprob_hma_on"] == 0.0 == d["max_dlogprob_hma_off"]
    assert set(plugin_check["models"]) == {"llama_swa", "gemma2", "llama4_chunked"}  # softcaps; chunked-local


def test_plugin_groups_have_no_padding_layers(plugin_check):
    d = plugin_check["models"]["llama_swa"]["groups"]
    assert d["jenga"] == [3, 2]            # one group per layer type
    assert d["hma_on"] == [2, 1, 2]        # vLLM's hybrid manager splits to equal page sizes
    assert d["hma_off"] == [5]


def test_chunked_local_plus_full_runs_as_two_types_and_chunking_is_real(plugin_check):
    # Llama 4 text: 4 chunked-local (RoPE) + 1 full (NoPE) layers from the harness's config writer.
    d = plugin_check["models"]["llama4_chunked"]
    assert d["groups"]["jenga"] == [4, 1]              # one group per layer type
    assert d["groups"]["hma_on"] == [1, 1, 1, 1, 1]    # vLLM: equal page sizes -> 1-layer groups
    assert d["groups"]["hma_off"] == [5]
    # control: the same weights with chunking off answer differently, so the CPU backend really
    # attended within chunks in the arms that agree bit for bit
    assert d["chunk_control_changed"] == d["sequences"] and d["chunk_control_max_dlogprob"] > 0.01


def test_broken_layout_changes_every_sequence(plugin_check):
    for d in plugin_check["models"].values():
        assert d["broken_changed"] == d["sequences"] and d["broken_max_dlogprob"] > 0.01


def test_large_pages_move_between_types_and_prefix_hits_go_through_the_plugin(plugin_check):
    llama = plugin_check["models"]["llama_swa"]
    assert llama["jenga"]["large_pages_moved_between_types"] > 0
    assert llama["jenga"]["path_counts"]["evict_large"] > 0  # jenga's large-page LRU eviction ran
    for d in plugin_check["models"].values():
        hits = d["prefix_hit_tokens"]
        assert hits["jenga"] > 0 and hits["jenga"] == hits["hma_on"]  # vLLM's per-type managers decide hits


def test_plugin_check_prints_its_one_line_and_exits_zero(plugin_check):
    assert plugin_check["ok"] and plugin_check["returncode"] == 0
    line = plugin_check["stdout"].strip().splitlines()[-1]
    n = sum(d["sequences"] for d in plugin_check["models"].values())
    assert line.startswith(f"plugin-check: {n}/{n} sequences identical to HMA on, {n}/{n} to HMA off; "
                           f"broken layout changed {n}/{n}; large pages moved between types: ")
