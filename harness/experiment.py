"""Run an experiment file (contract §3): cells × systems × seeds → records → summary → figure.

    python -m harness.experiment experiments/fig13.yaml [mode=smoke] [gpu=l4] [backend=sim]
                                 [other Hydra overrides] [--jobs N] [--force] [--out DIR]

Each cell runs in its own process (joblib); a tqdm bar counts cells done / total. A failing cell
becomes a failure row and the sweep goes on; finished records are reused (``--force`` reruns).
Then it writes ``<out>/summary.csv``, prints the table with the geometric and arithmetic means of
the speedups (ours and the paper's) and draws ``<out>/<name>.png``. ``<out>`` defaults to
``results/<name>``; runs that are not the experiment's default (another mode, GPU or backend) get a
suffix on the file names (``summary_smoke_l4.csv``) so they never overwrite the reference outputs.

Reserved keys of a cell entry (everything else is a Hydra override): ``systems`` (replaces the
experiment's list for this model), ``baseline`` (the system speedups divide by; default ``vllm``:
Jamba's is ``static_partition`` since uniform paging cannot hold Mamba state), ``gpus`` (GPUs the
cell runs on; others skip it) and ``per_gpu`` (``{gpu: {override: value}}`` extra overrides).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from harness import analysis, plots

RESERVED = ("systems", "baseline", "gpus", "per_gpu", "name")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class CellRun:
    model: str
    system: str
    seed: int
    overrides: list[str]
    baseline: str = "vllm"


@dataclass
class Plan:
    name: str
    gpu: str
    mode: str
    backend: str
    runs: list[CellRun] = field(default_factory=list)
    baselines: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return str(v)


def plan(exp_path: str | Path, cli_overrides: list[str]) -> Plan:
    """Expand an experiment file into cell runs (no running)."""
    exp = OmegaConf.to_container(OmegaConf.load(exp_path), resolve=True)
    for key in ("name", "cells"):
        if key not in exp:
            raise ValueError(f"experiment {exp_path}: missing key {key!r}")
    cli = dict(o.split("=", 1) for o in cli_overrides if "=" in o)
    gpu = cli.pop("gpu", exp.get("gpu", "h100"))
    # seeds=0,1,2 on the command line replaces the file's seeds (summaries then carry 95 % CIs).
    seeds = [int(s) for s in cli.pop("seeds").split(",")] if "seeds" in cli else exp.get("seeds", [0])
    extra = [f"{k}={v}" for k, v in cli.items()]
    p = Plan(name=exp["name"], gpu=gpu, mode=cli.get("mode", "full"), backend=cli.get("backend", "sim"))
    for cell in exp["cells"]:
        model = cell.get("model")
        if model is None:
            raise ValueError(f"experiment {exp_path}: a cell has no 'model' key: {cell}")
        if cell.get("gpus") and gpu not in cell["gpus"]:
            p.skipped.append(f"{model} (not run on {gpu})")
            continue
        base = [f"{k}={_fmt(v)}" for k, v in cell.items() if k not in RESERVED]
        base += [f"{k}={_fmt(v)}" for k, v in (cell.get("per_gpu") or {}).get(gpu, {}).items()]
        baseline = cell.get("baseline", "vllm")
        model_name = next((o.split("=", 1)[1] for o in reversed(base) if o.startswith("model=")), model)
        p.baselines[model_name] = baseline
        for system in cell.get("systems") or exp.get("systems", ["vllm", "jenga"]):
            for seed in seeds:
                ov = [f"gpu={gpu}"] + base + [f"system={system}", f"seed={seed}"] + extra
                p.runs.append(CellRun(model_name, system, int(seed), ov, baseline))
    return p


def _run_one(overrides: list[str], force: bool) -> dict[str, Any]:
    # Imported in the worker process; any exception becomes a failure row, never kills the sweep.
    try:
        from harness.run import run_overrides

        return run_overrides(overrides + (["force=true"] if force else []))
    except BaseException as exc:  # noqa: BLE001
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": overrides}


def execute(p: Plan, jobs: int, force: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Run every cell, one process per cell (``jobs`` at a time), with a progress bar."""
    from joblib import Parallel, delayed
    from tqdm import tqdm

    records: list[dict[str, Any]] = []
    tasks = (delayed(_run_one)(r.overrides, force) for r in p.runs)
    par = Parallel(n_jobs=jobs, return_as="generator_unordered", backend="loky")
    with tqdm(total=len(p.runs), desc=f"{p.name} cells", unit="cell", disable=not progress,
              file=sys.stderr) as bar:
        for rec in par(tasks):
            records.append(rec)
            bar.update(1)
            if rec.get("status") != "ok":
                bar.write(f"cell failed: {rec.get('model')}/{rec.get('system')}: {rec.get('error')}")
    return records


def suffix(p: Plan, default_gpu: str) -> str:
    parts = [x for x, d in ((p.mode, "full"), (p.gpu, default_gpu), (p.backend, "sim")) if x != d]
    return "".join(f"_{x}" for x in parts)


def format_table(summary: pd.DataFrame) -> str:
    cols = ["model", "system", "throughput_req_s", "speedup", "paper_speedup", "waste_fraction", "hit_rate",
            "mean_decode_batch", "preemptions", "kv_capacity_gib", "status"]
    df = summary[[c for c in cols if c in summary]].copy()
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 200):
        return df.to_string(index=False, float_format=lambda v: f"{v:.3f}")


def report(p: Plan, records: list[dict[str, Any]], out_dir: Path, default_gpu: str) -> pd.DataFrame:
    """Write summary.csv and the figure; print the table and the means."""
    figure = p.name
    summary = analysis.summarize(records, figure, p.baselines)
    if not summary.empty:
        # Plan order (models as listed, systems in the figure's order), not completion order.
        model_rank = {m: i for i, m in enumerate(dict.fromkeys(r.model for r in p.runs))}
        sys_rank = {s: i for i, s in enumerate(plots.SYSTEM_ORDER)}
        summary = summary.assign(_m=summary["model"].map(model_rank), _s=summary["system"].map(sys_rank))
        summary = summary.sort_values(["_m", "_s"], kind="stable").drop(columns=["_m", "_s"]).reset_index(drop=True)
    sfx = suffix(p, default_gpu)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not summary.empty:
        summary.to_csv(out_dir / f"summary{sfx}.csv", index=False)
    print(format_table(summary) if not summary.empty else "(no cells)")
    if not summary.empty and "speedup" in summary:
        m = analysis.means(summary)
        print(f"\nJenga speedup over {m['n_models']} models that ran ({p.gpu}, {p.backend}"
              f"{', simulated' if p.backend == 'sim' else ''}): geometric mean {m['ours_geo']:.3f}, "
              f"arithmetic mean {m['ours_arith']:.3f}")
        print(f"Paper's (published bars, {m['n_paired']} models): geometric mean {m['paper_geo']:.3f}, "
              f"arithmetic mean {m['paper_arith']:.3f}; ours within ±10% of the paper: "
              f"{m['within_10pct']}/{m['n_paired']}; Spearman rank agreement "
              f"{analysis.rank_agreement(summary):.2f}")
        sim = " (simulated)" if p.backend == "sim" else ""
        title = f"{p.name}: end-to-end request throughput on {p.gpu.upper()}{sim}, mode={p.mode}\n" \
                f"ours: geo-mean {m['ours_geo']:.2f}× / arith {m['ours_arith']:.2f}×; " \
                f"paper: geo-mean {m['paper_geo']:.2f}× / arith {m['paper_arith']:.2f}×"
        plots.speedup_bars(summary, out_dir / f"{p.name}{sfx}.png", title)
    if p.skipped:
        print("skipped: " + "; ".join(p.skipped))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("experiment")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (mode=smoke gpu=l4 backend=sim ...)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--force", action="store_true", help="rerun cells even if a record exists")
    ap.add_argument("--out", default=None, help="summary/figure directory (default results/<name>)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    p = plan(args.experiment, args.overrides)
    default_gpu = OmegaConf.load(args.experiment).get("gpu", "h100")
    t0 = time.perf_counter()
    records = execute(p, args.jobs, args.force, progress=not args.no_progress)
    wall = time.perf_counter() - t0
    out = Path(args.out) if args.out else REPO_ROOT / "results" / p.name
    summary = report(p, records, out, default_gpu)
    ok = [r for r in records if r.get("status") == "ok"]
    sim_s = sum(r.get("makespan_s") or 0.0 for r in ok if not r.get("reused"))
    fresh = sum(1 for r in ok if not r.get("reused"))
    print(f"\n{len(ok)}/{len(records)} cells ok ({fresh} run, {len(ok) - fresh} reused) in {wall:.1f} s wall"
          + (f"; {sim_s:.0f} simulated serving seconds ({sim_s / wall:.1f} per wall second)" if fresh else ""))
    oom = sum(1 for r in ok if r.get("num_ignored"))
    if oom:
        print(f"{oom} cell(s) OOM (some request never fits the KV pool; an outcome, as the paper's OOM bars)")
    if len(ok) < len(records):
        print(f"WARNING: {len(records) - len(ok)} cell(s) failed; see the status/error columns of the summary")
    print(f"wrote {out}")
    # Failed cells are reported, not fatal: the exit status is an error only if nothing ran.
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
