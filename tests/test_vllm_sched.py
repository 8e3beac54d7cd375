"""backend=vllm_sched: vLLM's Scheduler + KVCacheManager driven on CPU with our step times.

Needs the optional vLLM install; `make test` skips these (see the skip reason), `make test-vllm` runs them.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.vllm.plan import have_vllm
from harness.backends.vllm.tiny import tiny_profile
from harness.config import compose_cell
from harness.workloads.request import Request

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]

KV_BYTES = 2_400_000  # 146 blocks (16 tokens x 4 layers x 256 B) with the hybrid manager off, 292 on


def cell(system: str, *extra: str):
    return compose_cell([f"system={system}", "backend=vllm_sched", "gpu=h100", "engine.engine_version=v1",
                         "engine.max_num_seqs=16", "engine.max_num_batched_tokens=2048",
                         "engine.enable_chunked_prefill=true", "engine.enable_prefix_caching=true",
                         "engine.max_model_len=2048", f"engine.kv_cache_bytes={KV_BYTES}", *extra])


def workload(n: int, prefix: int, suffix: int, out: int, gap: float = 0.0, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    shared = rng.integers(3, 1000, prefix).astype(np.int32)
    return [Request(f"r{i}", i * gap, np.concatenate([shared, rng.integers(3, 1000, suffix).astype(np.int32)]), out)
            for i in range(n)]


def run(system: str, reqs, *extra: str):
    from harness.backends.vllm import sched as vllm_sched
    return vllm_sched.run_cell(cell(system, *extra), tiny_profile(), reqs)


def test_hybrid_manager_on_doubles_blocks_and_concurrency_at_equal_bytes():
    reqs = workload(16, 256, 768, 64)
    off, on = run("vllm", reqs), run("hybrid_groups", reqs)
    assert off.meta["kv_cache"]["num_blocks"] == 146 and on.meta["kv_cache"]["num_blocks"] == 292
    assert [g["spec"] for g in off.meta["kv_cache"]["kv_cache_groups"]] == ["FullAttentionSpec"]
    assert sorted(g["spec"] for g in on.meta["kv_cache"]["kv_cache_groups"]) == ["FullAttentionSpec",
                                                                                  "SlidingWindowSpec"]
    assert off.meta["allocator"].startswith("vllm_kv_cache_manager") and not off.meta["hybrid_kv_cache_manager"]
    assert on.meta["allocator"] == "vllm_hybrid_kv_cache_manager"
    for r in (off, on):
        assert r.metrics["num_requests"] == 16 and r.metrics["num_ignored"] == 0
        # time is our step-time model: the makespan is the sum of the steps' durations
        assert r.metrics["makespan_s"] == pytest.approx(sum(row["dt_s"] for row in r.trace))
    assert on.metrics["mean_running"] > off.metrics["mean_running"]
    assert on.metrics["throughput_req_s"] > off.metrics["throughput_req_s"]
    # hybrid off keeps out-of-window tokens of the sliding layers: half the layers waste most bytes
    assert off.metrics["waste_fraction"] > 0.2 > on.metrics["waste_fraction"] >= 0.0


def test_jenga_on_vllm_sched_runs_the_plugin_and_says_so():
    r = run("jenga", workload(2, 0, 64, 4))
    assert r.meta["requested_system"] == "jenga" and r.meta["allocator"].startswith("jenga_lcm")
    assert r.meta["kv_cache"]["jenga"]["layers_per_group"] == [2, 2]  # one group per layer type


@pytest.mark.parametrize("system", ["vllm", "hybrid_groups"])
def test_prefix_hits_are_exact_when_requests_do_not_overlap(system):
    # Each request arrives after the previous one finished; a 500-token shared prefix gives
    # floor(500/16)*16 = 496 hit tokens to every request but the first (dense retention keeps
    # every sliding-window block, so the hybrid manager can hit as far as full attention).
    reqs = workload(8, 500, 524, 8, gap=100.0)
    r = run(system, reqs, "+backend.options.prefix_cache_retention_interval=dense")
    assert r.metrics["prefix_hit_tokens"] == 7 * 496
    assert r.metrics["prompt_tokens"] == 8 * 1024
    assert r.metrics["prefix_hit_rate"] == pytest.approx(7 * 496 / (8 * 1024))
    assert r.metrics["preemptions"] == 0 and r.metrics["recomputed_tokens"] == 0


def test_retention_interval_is_pinned_and_changes_sliding_window_hits():
    reqs = workload(8, 500, 524, 8, gap=100.0)
    dense = run("hybrid_groups", reqs, "+backend.options.prefix_cache_retention_interval=dense")
    engine_default = run("hybrid_groups", reqs)
    assert engine_default.meta["scheduler"]["prefix_cache_retention_interval"] == 0
    assert dense.meta["scheduler"]["prefix_cache_retention_interval"] is None
    # retention 0 keeps only replay / junction checkpoints of sliding-window blocks: fewer hits here
    assert engine_default.metrics["prefix_hit_tokens"] < dense.metrics["prefix_hit_tokens"]


def test_memory_pressure_preempts_and_recomputes_with_hybrid_off():
    reqs = workload(8, 0, 400, 800)  # 25 prompt blocks each admit 5, decoding then outgrows the pool
    off = run("vllm", reqs)
    assert off.metrics["num_ignored"] == 0
    assert off.metrics["preemptions"] > 0 and off.metrics["recomputed_tokens"] > 0
    assert off.trace[-1]["preemptions"] == off.metrics["preemptions"]


def test_systems_vllm_has_no_allocator_for_are_refused():
    with pytest.raises(ValueError, match="max_page.*allowed systems.*backend=sim"):
        run("max_page", workload(1, 0, 16, 1))


def test_unknown_backend_option_is_refused():
    with pytest.raises(ValueError, match="bogus.*allowed"):
        run("vllm", workload(1, 0, 16, 1), "+backend.options.bogus=1")


def _tiny_mamba():
    import dataclasses

    from jenga.spec import FullAttentionSpec, MambaSpec
    # 1 attention : 3 Mamba layers; one layer's Mamba state (20 KiB) > a 16-token attention page (4 KiB)
    kinds = ("mamba", "mamba", "full", "mamba")
    specs = (FullAttentionSpec("full", 1, 256), MambaSpec("mamba", 3, 20480, state_bytes_per_layer=20480,
                                                          conv_bytes_per_layer=4096))
    return dataclasses.replace(tiny_profile(), name="tiny_mamba", architecture="JambaForCausalLM",
                               layer_kinds=kinds, specs=specs)


def test_mamba_hybrid_runs_with_the_hybrid_manager_and_is_refused_without():
    from harness.backends.vllm import sched as vllm_sched
    reqs = workload(8, 256, 256, 16)
    r = vllm_sched.run_cell(cell("hybrid_groups"), _tiny_mamba(), reqs)
    groups = r.meta["kv_cache"]["kv_cache_groups"]
    assert {g["spec"] for g in groups} == {"MambaSpec", "FullAttentionSpec"}
    # vLLM raises the attention block until one attention page covers one layer's Mamba state:
    # ceil(20480 / (16 * 256)) = 5 -> 80 tokens, and every group's page is 80 * 256 = 20480 bytes
    assert {g["block_size"] for g in groups if g["spec"] == "FullAttentionSpec"} == {80}
    assert {g["page_size_bytes"] for g in groups} == {20480}
    assert r.metrics["num_requests"] == 8 and r.metrics["num_ignored"] == 0
    with pytest.raises(ValueError, match="Failed to promote"):
        vllm_sched.run_cell(cell("vllm"), _tiny_mamba(), reqs)
