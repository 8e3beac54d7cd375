"""The sim backend with the real allocator, model zoo and workloads."""

from __future__ import annotations

import pytest

from harness.backends.sim import engine
from harness.config import compose_cell
from harness.models import load_profile
from harness.workloads import build_workload


def _run(system, *extra):
    cfg = compose_cell(["model=llama3_1_8b", "dataset=mmlu_pro", "mode=smoke", "dataset.num_requests=48",
                        "mode.max_requests=48", f"system={system}", *extra])
    return engine.run_cell(cfg, load_profile(cfg.model), build_workload(cfg)).metrics


@pytest.mark.parametrize("extra", [(), ("engine.kv_cache_bytes=1073741824",),
                                   ("engine.engine_version=v1", "engine.kv_cache_bytes=1073741824")])
def test_llama31_without_heterogeneity_same_throughput_under_jenga_and_vllm(extra):
    """One full-attention layer type: Jenga's large page equals vLLM's page, so the two systems
    must serve the same schedule (within 2 %), with and without memory pressure."""
    v, j = _run("vllm", *extra), _run("jenga", *extra)
    assert j["num_requests"] == v["num_requests"] == 48
    assert j["throughput_req_s"] == pytest.approx(v["throughput_req_s"], rel=0.02)
    assert j["waste_fraction"] < 0.05 and v["waste_fraction"] < 0.05


def test_memory_pressure_preempts_and_still_finishes_everything():
    # 256 MiB: a couple of requests at a time. v1 (no whole-prompt admission gate or watermark,
    # which under v0 leave a page spare and here avoid every preemption).
    m = _run("vllm", "engine.kv_cache_bytes=268435456", "engine.engine_version=v1")
    assert m["num_requests"] == 48 and m["num_ignored"] == 0
    assert m["preemptions"] > 0 and m["recomputed_tokens"] > 0
    assert m["prefix_hit_rate"] == 0.0
