"""Run an experiment file (contract §3): cells × systems × seeds → records → summary → figure.

    python -m harness.study experiments/fig13.yaml [mode=smoke] [gpu=l4] [backend=sim] [seeds=0,1]
                            [other Hydra overrides] [--jobs N] [--force] [--out DIR] [--dry-run]

This module is the ``figure`` kind of :mod:`harness.study` (the one study pipeline): its plan
(cells × systems × seeds) and its report (summary, speedup means, bar figure).

Every cell's config is composed and checked before the first runs (a typo is one error and
nothing is written; the command line is parsed by :mod:`harness.cli`, shared by every driver).

Cells run through :mod:`harness.study.run` (joblib pool, or ``--launcher joblib|slurm``); a tqdm bar counts cells done / total. A failing cell
becomes a failure row and the sweep goes on; finished records are reused (``--force`` reruns).
Then it writes ``<out>/summary.csv``, prints the table with the geometric and arithmetic means of
the speedups (ours and the paper's) and draws ``<out>/<name>.png``. ``<out>`` defaults to
``results/<name>`` (smoke runs: ``results/smoke/<name>``, git-ignored); runs that are not the experiment's default (another mode, GPU or backend) get a
suffix on the file names (``summary_smoke_l4.csv``) so they never overwrite the reference outputs.

Reserved keys of a cell entry (everything else is a Hydra override): ``systems`` (replaces the
experiment's list for this model), ``baseline`` (the system speedups divide by; default ``vllm``:
Jamba's is ``static_partition`` since uniform paging cannot hold Mamba state), ``gpus`` (GPUs the
cell runs on; others skip it) and ``per_gpu`` (``{gpu: {override: value}}`` extra overrides).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness import analysis, cli, plots

RESERVED = ("systems", "baseline", "gpus", "per_gpu", "per_system", "name")


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


def plan(exp_path: str | Path | dict[str, Any], cli_overrides: list[str]) -> Plan:
    """Expand an experiment file (a path, or the file already loaded) into cell runs (no running).
    Bad seeds, an unknown mode or GPU, or a cell without ``model`` raise :class:`cli.UsageError`."""
    exp = exp_path if isinstance(exp_path, dict) else cli.load_study_file(exp_path, "harness.experiment")
    where = f"experiment {exp.get('name')}"
    if not isinstance(exp.get("cells"), list) or not exp["cells"]:
        raise cli.UsageError(f"{where}: 'cells' must be a non-empty list of cells")
    special, extra = cli.split_cli(cli_overrides)
    gpu = special.get("gpu", exp.get("gpu", "h100"))
    # seeds=0,1,2 on the command line replaces the file's seeds (summaries then carry 95 % CIs).
    seeds = cli.parse_seeds(special["seeds"], "command line") if "seeds" in special else \
        cli.parse_seeds(exp.get("seeds", [0]), where)
    mode = special.get("mode", "full")
    if "mode" in special:
        extra = [f"mode={mode}", *extra]
    backend = next((o.split("=", 1)[1] for o in reversed(extra) if o.startswith("backend=")), "sim")
    p = Plan(name=exp["name"], gpu=gpu, mode=mode, backend=backend)
    for cell in exp["cells"]:
        model = cell.get("model") if isinstance(cell, dict) else None
        if model is None:
            raise cli.UsageError(f"{where}: a cell has no 'model' key: {cell}")
        if cell.get("gpus") and gpu not in cell["gpus"]:
            p.skipped.append(f"{model} (not run on {gpu})")
            continue
        base = [f"{k}={_fmt(v)}" for k, v in cell.items() if k not in RESERVED]
        base += [f"{k}={_fmt(v)}" for k, v in (cell.get("per_gpu") or {}).get(gpu, {}).items()]
        baseline = cell.get("baseline", "vllm")
        model_name = next((o.split("=", 1)[1] for o in reversed(base) if o.startswith("model=")), model)
        p.baselines[model_name] = baseline
        per_system = cell.get("per_system") or {}
        systems = cell.get("systems") or exp.get("systems", ["vllm", "jenga"])
        unknown = sorted(set(per_system) - set(systems))
        if unknown:
            raise cli.UsageError(f"{where}: cell {model}: per_system names systems the cell does not run: "
                                 f"{unknown}; its systems: {list(systems)}")
        for system in systems:
            # per_system: where the artifact's command for one bar differs from the others'.
            own = [f"{k}={_fmt(v)}" for k, v in (per_system.get(system) or {}).items()]
            for seed in seeds:
                ov = [f"gpu={gpu}"] + base + own + [f"system={system}", f"seed={seed}"] + extra
                p.runs.append(CellRun(model_name, system, int(seed), ov, baseline))
    return p


def execute(p: Plan, args) -> list[dict[str, Any]]:
    """Run every cell (:func:`harness.study.run.run_cells`: inline joblib pool or a Hydra
    launcher) with a progress bar; records come back in plan order. Each distinct error is printed
    once, when it first happens; repeats are counted."""
    from harness.study.run import run_cells

    seen: dict[str, int] = {}

    def note(bar, rec: dict[str, Any]) -> None:
        if rec.get("status") != "ok":
            err = str(rec.get("error"))
            if err not in seen:
                bar.write(f"cell failed: {rec.get('model')}/{rec.get('system')} seed {rec.get('seed')}: {err}",
                          file=sys.stderr)
            seen[err] = seen.get(err, 0) + 1

    records = run_cells(args, args.experiment, p.name, [r.overrides for r in p.runs], note)
    for err, n in seen.items():
        if n > 1:
            print(f"{n} cells failed with: {err}", file=sys.stderr)
    return records


def suffix(p: Plan, default_gpu: str) -> str:
    parts = [x for x, d in ((p.mode, "full"), (p.gpu, default_gpu), (p.backend, "sim")) if x != d]
    return "".join(f"_{x}" for x in parts)


def format_table(summary: pd.DataFrame, smoke: bool = False) -> str:
    """The printed summary; a smoke run's carries none of the paper's columns (its tiny cells are
    not comparable with the paper's bars, so nothing of the paper is printed beside them)."""
    cols = ["model", "tp", "system", "seeds", "failed", "throughput_req_s", "speedup", "speedup_ci_lo", "speedup_ci_hi",
            "paper_speedup", "waste_fraction", "prefix_hit_rate", "mean_decode_batch", "preemptions", "kv_capacity_gib",
            "status"]
    df = summary[[c for c in cols if c in summary and not (smoke and c.startswith("paper_"))]].copy()
    with pd.option_context("display.width", 220, "display.max_columns", 20, "display.max_rows", 200):
        return df.to_string(index=False, float_format=lambda v: f"{v:.3f}")


def _x(v: float) -> str:
    return f"{v:.2f}×" if math.isfinite(v) else "n/a"


def report(p: Plan, records: list[dict[str, Any]], out_dir: Path, default_gpu: str) -> pd.DataFrame:
    """Write summary.csv and the figure (PNG + PDF); print the table and the means. Smoke runs are
    too small to compare with the paper: they print and draw no comparison."""
    figure = p.name
    summary = analysis.summarize(records, figure, p.baselines)
    if not summary.empty:
        # Plan order (models as listed, systems in the figure's order), not completion order.
        model_rank = {m: i for i, m in enumerate(dict.fromkeys(r.model for r in p.runs))}
        sys_rank = {s: i for i, s in enumerate(plots.SYSTEM_ORDER)}
        summary = summary.assign(_m=summary["model"].map(model_rank), _s=summary["system"].map(sys_rank))
        summary = summary.sort_values(["_m", "_s"], kind="stable").drop(columns=["_m", "_s"]).reset_index(drop=True)
    smoke = p.mode == "smoke"
    sfx = suffix(p, default_gpu)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not summary.empty:
        summary.to_csv(out_dir / f"summary{sfx}.csv", index=False)
    print(format_table(summary, smoke) if not summary.empty else "(no cells)")
    if not summary.empty and summary["speedup"].notna().any():
        m = analysis.means(summary)
        print(f"\nJenga speedup over {m['n_models']} models that ran ({p.gpu}, {p.backend}"
              f"{', simulated' if p.backend == 'sim' else ''}, mode={p.mode}): geometric mean {m['ours_geo']:.3f}, "
              f"arithmetic mean {m['ours_arith']:.3f}")
        sim = " (simulated)" if p.backend == "sim" else ""
        title = f"{p.name}: request throughput on {p.gpu.upper()}{sim}, mode={p.mode}; " \
                f"Jenga geo-mean {_x(m['ours_geo'])}"
        if smoke:
            print("smoke mode: tiny cells, not comparable with the paper's bars (no comparison printed or drawn)")
            title += " (smoke: not comparable with the paper)"
        elif m["n_paired"] == 0:
            print(f"the paper publishes no per-model bars for this figure on {p.gpu}: nothing to compare with")
        else:
            print(f"Paper's (published bars, {m['n_paired']} models): geometric mean {m['paper_geo']:.3f}, "
                  f"arithmetic mean {m['paper_arith']:.3f}; ours within ±10% of the paper: "
                  f"{m['within_10pct']}/{m['n_paired']}; Spearman rank agreement "
                  f"{analysis.rank_agreement(summary):.2f}")
            title += f" (paper {_x(m['paper_geo'])})"
        plots.speedup_bars(summary, out_dir / f"{p.name}{sfx}.png", title, show_paper=not smoke,
                           notes=plots.plan_notes(p.baselines, p.skipped))
    if p.skipped:
        print("skipped: " + "; ".join(p.skipped))
    return summary


def run(args, exp: dict[str, Any], p: Plan) -> int:
    """The ``figure`` kind of :mod:`harness.study`: run the planned cells, write the summary and
    the figure, print the run's tally. Exit status 1 only if nothing ran."""
    default_gpu = exp.get("gpu", "h100")
    t0 = time.perf_counter()
    records = execute(p, args)
    wall = time.perf_counter() - t0
    out = Path(args.out) if args.out else cli.default_out(p.name, p.mode)
    report(p, records, out, default_gpu)
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


def main(argv: list[str] | None = None) -> int:
    """Deprecated entry point: ``python -m harness.study`` runs every study file."""
    from harness.study.driver import main as study_main

    return study_main(argv)


if __name__ == "__main__":
    cli.warn_deprecated_alias("python -m harness.experiment")
    raise SystemExit(main())
