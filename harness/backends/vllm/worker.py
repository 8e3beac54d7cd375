"""The child process of ``backend=vllm``: one real vLLM engine, one cell, then exit.

``python -m harness.backends.vllm.worker WORKDIR`` (run with the interpreter of the vLLM venv) reads
``WORKDIR/spec.json`` (engine arguments) and ``WORKDIR/requests.json`` (exact prompt token ids,
output lengths, arrival times), drives ``LLMEngine`` step by step, and writes
``WORKDIR/result.json``: per-request wall timestamps, one row per engine step from a stat logger
(running / waiting requests, KV usage, prefix-cache hits and queries of the step, preemptions),
and what vLLM resolved at start-up (KV cache groups and specs, block sizes, number of blocks,
whether the hybrid KV cache manager is in effect, versions, device).

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the resolved KV
cache config can be read from the live scheduler instead of parsed from logs. Errors are written
to ``result.json`` as ``{"error": ...}`` with a non-zero exit code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

from harness.backends.vllm.plan import describe_kv_cache_config, vllm_versions


def _resolved(engine) -> dict:
    """What vLLM decided at start-up, read from the live engine core."""
    vc = engine.vllm_config
    out: dict = {
        "num_gpu_blocks": vc.cache_config.num_gpu_blocks,
        "block_size": vc.cache_config.block_size,
        "disable_hybrid_kv_cache_manager": vc.scheduler_config.disable_hybrid_kv_cache_manager,
        "prefix_cache_retention_interval": getattr(vc.cache_config, "prefix_cache_retention_interval", None),
        "enable_prefix_caching": vc.cache_config.enable_prefix_caching,
        "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
        "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": vc.scheduler_config.max_num_seqs,
        "max_model_len": vc.model_config.max_model_len,
        "kv_cache_dtype": str(vc.cache_config.cache_dtype),
        "model_dtype": str(vc.model_config.dtype),
        "architecture": list(getattr(vc.model_config, "architectures", []) or []),
        "tensor_parallel_size": vc.parallel_config.tensor_parallel_size,
    }
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    sched = getattr(core, "scheduler", None)
    if sched is not None:
        kvc = sched.kv_cache_config
        out["kv_cache"] = describe_kv_cache_config(kvc)
        mgr = sched.kv_cache_manager
        out["coordinator"] = type(mgr.coordinator).__name__
        out["hybrid_kv_cache_manager_in_effect"] = len(kvc.kv_cache_groups) > 1
        out["scheduler_block_size"] = getattr(sched, "block_size", None)
        alloc = getattr(mgr, "jenga", None)
        out["jenga_allocator"] = alloc.summary() if alloc is not None else None
        if os.environ.get("JENGA_VLLM") == "1" and alloc is None:
            raise RuntimeError("system=jenga / jenga_current asked for the jenga_vllm plugin (JENGA_VLLM=1) but the engine runs "
                               "vLLM's own KV cache manager: the vllm.general_plugins entry point is not installed "
                               "in this venv (pip install -e . from the repository) or VLLM_PLUGINS excludes it")
    return out


def _device() -> str:
    import platform

    import torch
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def run(workdir: Path) -> dict:
    spec = json.loads((workdir / "spec.json").read_text())
    reqs = json.loads((workdir / "requests.json").read_text())
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm import EngineArgs, SamplingParams
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.metrics.loggers import StatLoggerBase

    allowed = {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(spec["engine_args"]) - allowed)
    if unknown:
        raise ValueError(f"unknown vLLM engine argument(s) {unknown} for vLLM {vllm_versions()}; "
                         "see `vllm serve --help` (EngineArgs fields) for the allowed names")
    steps: list[dict] = []
    clock = {"t0": None}

    class StepLogger(StatLoggerBase):
        """Keeps one row per engine step (the counters in SchedulerStats are per-step deltas)."""

        def __init__(self, vllm_config, engine_index: int = 0) -> None:
            self.vllm_config = vllm_config

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            if scheduler_stats is None or clock["t0"] is None:
                return
            pcs = scheduler_stats.prefix_cache_stats
            steps.append({
                "time_s": time.perf_counter() - clock["t0"],
                "num_running": scheduler_stats.num_running_reqs, "num_waiting": scheduler_stats.num_waiting_reqs,
                "kv_cache_usage": scheduler_stats.kv_cache_usage,
                "prefix_hits": pcs.hits, "prefix_queries": pcs.queries,
                "preempted_hits": getattr(pcs, "preempted_hits", 0),
                "preempted_queries": getattr(pcs, "preempted_queries", 0),
                "preemptions": iteration_stats.num_preempted_reqs if iteration_stats else 0,
                "num_generation_tokens": iteration_stats.num_generation_tokens if iteration_stats else 0,
                "num_prompt_tokens": iteration_stats.num_prompt_tokens if iteration_stats else 0,
            })

        def log_engine_initialized(self) -> None:
            pass

    t_start = time.perf_counter()
    engine = LLMEngine.from_engine_args(EngineArgs(**spec["engine_args"]), stat_loggers=[StepLogger])
    startup_s = time.perf_counter() - t_start
    resolved = _resolved(engine)

    order = sorted(range(len(reqs)), key=lambda i: reqs[i]["arrival_time"])
    pending = [reqs[i] for i in order][::-1]
    first: dict[str, float] = {}
    finish: dict[str, float] = {}
    base = reqs[order[0]]["arrival_time"] if reqs else 0.0
    clock["t0"] = t0 = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        now = time.perf_counter() - t0
        while pending and pending[-1]["arrival_time"] - base <= now:
            r = pending.pop()
            n = int(r["output_len"])
            # Greedy: the token values do not matter (ignore_eos), and per-request seeded
            # generators are slow and unsupported on some CPU paths.
            sp = SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False, temperature=0.0)
            engine.add_request(r["request_id"], {"prompt_token_ids": r["prompt_token_ids"]}, sp)
        if not engine.has_unfinished_requests():
            time.sleep(max(0.0, pending[-1]["arrival_time"] - base - now))
            continue
        for o in engine.step():
            t = time.perf_counter() - t0
            if o.outputs and o.outputs[0].token_ids and o.request_id not in first:
                first[o.request_id] = t
            if o.finished:
                finish[o.request_id] = t
                first.setdefault(o.request_id, t)
    run_s = time.perf_counter() - t0
    if resolved.get("jenga_allocator") is not None:  # the allocator's counters after the run
        resolved["jenga_allocator"] = engine.engine_core.engine_core.scheduler.kv_cache_manager.jenga.summary()
    return {"startup_s": startup_s, "run_s": run_s, "resolved": resolved, "steps": steps,
            "requests": [{"request_id": r["request_id"], "arrival_s": r["arrival_time"] - base,
                          "first_token_s": first.get(r["request_id"]), "finish_s": finish.get(r["request_id"])}
                         for r in reqs],
            "versions": vllm_versions(), "device": _device()}


def main(argv: list[str]) -> int:
    workdir = Path(argv[1])
    try:
        result = run(workdir)
        code = 0
    except Exception as e:  # noqa: BLE001 - the parent records any failure of this cell
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        code = 2
    (workdir / "result.json").write_text(json.dumps(result))
    return code


if __name__ == "__main__":  # the guard matters: vLLM may start helpers with spawn
    sys.exit(main(sys.argv))
