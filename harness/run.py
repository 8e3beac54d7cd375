"""One cell → one record (contract §4).

    python -m harness.run model=llama3_1_8b dataset=mmlu_pro gpu=h100 system=jenga backend=sim seed=0
    python -m harness.run -m system=vllm,jenga seed=0,1 mode=smoke       # Hydra multirun
    python -m harness.run --cfg job model=gemma3_12b                     # the composed config
    python -m harness.run --help                                         # config groups and options

A Hydra app on ``harness/conf/config.yaml`` (schema: :mod:`harness.config`); the drivers compose the
same config with :func:`harness.config.compose_cell` and call :func:`run_overrides`. The record goes
to ``{out_dir}/{backend}/{gpu}/{model}/{dataset}/{system}/seed{seed}-{config hash}/record.json``
with the per-step ``trace.csv`` beside it. The hash covers the whole resolved cell config (minus
``out_dir``/``force``) and the code fingerprint (``harness.records.code_fingerprint``), so neither a
changed setting nor changed code ever reuses a stale record. A finished record is
reused unless ``force=true``; an error writes ``failure.json`` beside the cell (never over a
finished record) and is returned as a record with ``status: failed``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

# Registers the cell schema in Hydra's ConfigStore before the app composes config.yaml.
from harness import config, models, workloads
from harness.backends import run_cell_of
from harness.records import (
    code_fingerprint,
    finished_record,
    make_record,
    record_dir,
    write_record,
    write_trace,
)
from harness.tools.waste import workload_waste


def cell_keys(cfg: DictConfig) -> dict[str, Any]:
    return {"model": cfg.model.name, "dataset": cfg.dataset.name, "gpu": cfg.gpu.name,
            "system": cfg.system.name, "backend": cfg.backend.name, "seed": int(cfg.seed)}


def config_dict(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config without the run-control keys (what the record's hash covers)."""
    d = OmegaConf.to_container(cfg, resolve=True)
    for k in ("out_dir", "force"):
        d.pop(k, None)
    return d


def cell_dir(cfg: DictConfig) -> Path:
    key = json.dumps(config_dict(cfg), sort_keys=True, default=str)
    # The code fingerprint is part of the key: a record made by different allocator/simulator code
    # is not reused (it stays on disk, it is just not current).
    return record_dir(cfg.out_dir, cell_keys(cfg), [key, f"code={code_fingerprint()}"])


def run_cell(cfg: DictConfig, overrides: list[str] | tuple[str, ...] = (), force: bool | None = None) -> dict[str, Any]:
    """Run (or reuse) one cell and return its record; ``force`` (default: ``cfg.force``) reruns a
    cell whose record exists."""
    out = cell_dir(cfg)
    rec_path, fail_path = out / "record.json", out / "failure.json"
    if not (cfg.get("force", False) if force is None else force):
        existing = finished_record(out)
        if existing is not None:
            existing["reused"] = True
            return existing
    cell = cell_keys(cfg)
    conf = config_dict(cfg)
    t0 = time.perf_counter()
    try:
        profile = models.load_profile(cfg.model)
        requests = workloads.build_workload(cfg)
        result = run_cell_of(cfg.backend.name)(cfg, profile, requests)
    except Exception as exc:  # noqa: BLE001 - any failure becomes a failure record
        err = f"{type(exc).__name__}: {exc}"
        rec = make_record(cell, overrides, None, conf, time.perf_counter() - t0, error=err)
        rec["traceback"] = traceback.format_exc(limit=8)
        write_record(fail_path, rec)
        return rec
    rec = make_record(cell, overrides, result, conf, time.perf_counter() - t0)
    # What reports need beyond the metrics, written when the cell runs so that no report recomposes
    # the cell: the trace's path and the workload's statistics (with its analytic uniform-paging waste).
    rec["trace_file"] = str(out / "trace.csv")
    rec["workload"] = workload_stats(profile, requests)
    write_trace(out / "trace.csv", result.trace)
    write_record(rec_path, rec)
    fail_path.unlink(missing_ok=True)
    return rec


def workload_stats(profile, requests) -> dict[str, Any]:
    """The cell's workload as served: request count, prompt/output/image-token totals and the
    analytic waste of uniform paging over its prompts (:func:`harness.tools.waste.workload_waste`)."""
    return {"num_requests": len(requests), "prompt_tokens": sum(r.prompt_len for r in requests),
            "output_tokens": sum(r.output_len for r in requests),
            "image_tokens": sum(r.num_image_tokens for r in requests),
            "analytic_waste_uniform": workload_waste(profile, requests)}


def run_overrides(overrides: list[str]) -> dict[str, Any]:
    """Compose a cell from Hydra overrides and run it; composition errors become failure records
    too (returned, not written: without a valid config there is no cell directory)."""
    try:
        cfg = config.compose_cell(overrides)
    except Exception as exc:  # noqa: BLE001
        keys = dict(o.split("=", 1) for o in overrides if "=" in o and o.split("=", 1)[0] in
                    ("model", "dataset", "gpu", "system", "backend", "seed"))
        rec = {k: keys.get(k) for k in ("model", "dataset", "gpu", "system", "backend", "seed")}
        rec.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": list(overrides)})
        return rec
    return run_cell(cfg, overrides)


def _print_record(rec: dict[str, Any]) -> None:
    keys = ("model", "dataset", "gpu", "system", "backend", "seed")
    print(" ".join(f"{k}={rec.get(k)}" for k in keys))
    if rec.get("status") != "ok":
        print(f"FAILED: {rec.get('error')}", file=sys.stderr)
        return
    print(f"throughput {rec['throughput_req_s']:.4g} req/s ({rec['output_tok_s']:.4g} out tok/s), "
          f"makespan {rec['makespan_s']:.4g} s{' (simulated)' if rec.get('simulated') else ''}, "
          f"waste {rec['waste_fraction']:.3f}, hit rate {rec['prefix_hit_rate']:.3f}, "
          f"preemptions {rec['preemptions']}{' [reused]' if rec.get('reused') else ''}")


@hydra.main(config_path=str(Path(__file__).resolve().parent / "conf"), config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> str:
    """The Hydra task: check the composed cell (one error naming the key), run it, print it. In a
    single run a failed cell exits 1; in a multirun (``-m``) it is reported and the sweep goes on."""
    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items() if k in config.GROUPS}
    overrides = list(hc.overrides.task)
    try:
        config.check_cell(cfg, choices)
        rec = run_cell(cfg, overrides)
    except config.ConfigError as exc:
        rec = {**{k: OmegaConf.select(cfg, f"{k}.name", default=None) for k in ("model", "dataset", "gpu", "system",
                                                                               "backend")},
               "seed": cfg.get("seed"), "status": "failed", "error": f"ConfigError: {exc}"}
    _print_record(rec)
    if rec.get("status") != "ok" and hc.mode == RunMode.RUN:
        sys.exit(1)
    return str(rec.get("status"))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.run [overrides] [-m] [--cfg job] [--help]``; returns the exit status."""
    saved = sys.argv
    if argv is not None:
        sys.argv = [sys.argv[0] if sys.argv else "harness.run", *argv]
    # compose_cell (the drivers' path) may have initialised Hydra in this process; the app
    # initialises its own, and compose_cell re-initialises after it.
    config.release_hydra()
    try:
        app()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
