"""Shared plumbing of the studies: study files, cell composition, a hookable sim loop, summaries.

Standard cells (the micro-experiments) go through :func:`harness.run.run_overrides`, so they are
cached records like any figure cell. Studies that change what a step does (speculative decoding,
vision-encoder re-runs, Marconi admission) run :func:`run_loop`, which is the sim engine's own
discrete-event loop (``harness.backends.sim.engine.run_loop``) with its two hooks -- the step cost and the
step completion. Their rows carry the same metric names and a provenance block.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from harness import cli
from harness.backends.sim import engine
from harness.records import provenance

REPO_ROOT = cli.REPO_ROOT
PROVENANCE_COLS = ("git_rev", "dirty", "time", "config_hash")
# The study module of each study kind, told by the first key its file requires.
_MODULE_OF_KEYS = {"parts": "harness.studies.micro", "pairs": "harness.studies.specdec",
                   "workloads": "harness.studies.mamba_prefix", "models": "harness.studies.vlm_embed"}


# -- study files and CLI ---------------------------------------------------------------------------
@dataclass
class StudyArgs:
    """Parsed command line of a study: its file, mode, extra Hydra overrides and output folder."""

    path: Path
    study: dict[str, Any]
    mode: str
    overrides: list[str]
    out: Path
    jobs: int
    force: bool
    dry_run: bool = False
    progress: bool = True

    @property
    def smoke(self) -> bool:
        return self.mode == "smoke"

    @property
    def suffix(self) -> str:
        return "" if self.mode == "full" else f"_{self.mode}"


def load_study(path: str | Path, required: Iterable[str], driver: str | None = None) -> dict[str, Any]:
    """An experiments/*.yaml study file as a plain dict; a missing, malformed or (``driver``
    given) another driver's file, or a missing key, is one :class:`harness.cli.UsageError`."""
    study = cli.load_study_file(path, driver)
    for key in ("name", *required):
        if key not in study:
            raise cli.UsageError(f"study {path}: missing key {key!r} (required: {['name', *required]})")
    return study


def parse_args(doc: str, required: Iterable[str], argv: list[str] | None = None) -> StudyArgs:
    """The shared command line (:mod:`harness.cli`): the study file checked whole (missing,
    malformed, another driver's file, bad seeds) and the command-line overrides composed once
    before any work; a problem is one :class:`harness.cli.UsageError`."""
    required = tuple(required)
    args = cli.parse(cli.parser(doc), argv)
    # The kind whose study module calls this: its file's ``kind:`` must match.
    driver = _MODULE_OF_KEYS.get(required[0])
    study = load_study(args.experiment, required, driver)
    special, extra = cli.split_cli(args.overrides)
    mode = special.get("mode", "full")
    if "seeds" in special:
        # seeds=0,1,2 replaces the study's seed list (every part of it)
        study["seeds"] = cli.parse_seeds(special["seeds"], "command line")
        study["seeds_from_cli"] = True
    elif "seeds" in study:
        study["seeds"] = cli.parse_seeds(study["seeds"], f"study {args.experiment}")
    if "gpu" in special:
        extra.insert(0, f"gpu={special['gpu']}")
    # The overrides every cell gets, composed once now: a typo'd key or an out-of-range value is one
    # error before the first cell runs.
    cli.check_cells([("the command line", [f"mode={mode}", *extra])])
    out = Path(args.out) if args.out else cli.default_out(study["name"], mode)
    return StudyArgs(Path(args.experiment), study, mode, extra, out, args.jobs, args.force,
                     dry_run=args.dry_run, progress=not args.no_progress)


def print_tasks(tasks: list[tuple]) -> int:
    """``--dry-run`` of a study: its tasks, nothing run (study rows are not cached records yet)."""
    for t in tasks:
        print("to run  " + " ".join(str(x) for x in t if not isinstance(x, (list, dict)))[:200])
    print(f"{len(tasks)} tasks (dry run: nothing ran)")
    return 0


guard = cli.guard


def grid(values: list, smoke: bool, keep: int = 2) -> list:
    """A study grid; smoke mode keeps its first ``keep`` points (tests and CI)."""
    return list(values)[:keep] if smoke else list(values)


def overrides_of(cell: dict[str, Any]) -> list[str]:
    """Hydra overrides from a ``{key: value}`` cell (lists as ``[a,b]``, booleans lower-case)."""
    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(fmt(x) for x in v) + "]"
        return str(v)
    return [f"{k}={fmt(v)}" for k, v in cell.items()]


def compose(overrides: list[str]) -> DictConfig:
    from harness.config import compose_cell

    return compose_cell(overrides)


def parallel(fn: Callable[..., dict], tasks: list[tuple], jobs: int, progress: bool = True,
             desc: str = "cells") -> list[dict]:
    """Run ``fn(*task)`` for every task, ``jobs`` processes at a time (order kept), with a progress
    bar; ctrl-C stops the pool (:func:`harness.cli.run_tasks`)."""
    return cli.run_tasks(fn, tasks, jobs, desc, progress)


# -- the loop: the sim engine's own, with its step-cost / step-completion hooks -----------------------
StepCost = engine.StepCost
Complete = engine.Complete
run_loop = engine.run_loop


def loop_metrics(sched, trace: list[dict], agg: dict, capacity: int) -> dict[str, Any]:
    """The record's metric fields (contract §4) from a finished :func:`run_loop`, marked simulated."""
    return {**engine.loop_metrics(sched, trace, agg, capacity), "simulated": True}


# -- rows, summaries, figures ------------------------------------------------------------------------
def with_provenance(row: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Add the provenance columns (git revision, dirty tree, time, hash of the cell's config)."""
    p = provenance()
    key = json.dumps(config, sort_keys=True, default=str)
    row.update({"git_rev": p.get("git_rev"), "dirty": p.get("dirty"), "time": p.get("time"),
                "config_hash": hashlib.sha256(key.encode()).hexdigest()[:12]})
    return row


def failed_row(keys: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    return {**keys, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}


def write_summary(rows: list[dict[str, Any]], args: StudyArgs, wall_s: float) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / f"summary{args.suffix}.csv", index=False)
    ok = int((df.get("status", pd.Series(["ok"] * len(df))) == "ok").sum())
    print(f"{args.study['name']}: {ok}/{len(df)} cells ok in {wall_s:.1f} s wall (mode={args.mode}); "
          f"wrote {args.out / f'summary{args.suffix}.csv'}")
    return df


def aggregate(df: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """Mean over seeds of each metric per ``keys`` group, with its Student-t 95 % interval
    (``<metric>_ci_lo`` / ``_ci_hi``; NaN with one seed) and ``seeds`` (the ok runs): the one seed
    aggregation, :func:`harness.analysis.aggregate_seeds`. Failed rows are left out."""
    from harness.analysis import aggregate_seeds

    ok = df[df["status"] == "ok"] if "status" in df else df.assign(status="ok")
    present = [m for m in metrics if m in ok]
    agg = aggregate_seeds(ok, keys, present)
    if agg.empty:
        return agg
    return agg[list(keys) + ["seeds"] + [c for m in present for c in (m, f"{m}_ci_lo", f"{m}_ci_hi")]]


def yerr(agg: pd.DataFrame, metric: str, scale: float = 1.0):
    """Matplotlib error-bar extents of an aggregated metric (None where the CI is undefined)."""
    lo = (agg[metric] - agg[f"{metric}_ci_lo"]) * scale
    hi = (agg[f"{metric}_ci_hi"] - agg[metric]) * scale
    if lo.isna().all():
        return None
    return [lo.fillna(0).to_numpy(), hi.fillna(0).to_numpy()]


def write_means(df: pd.DataFrame, args: StudyArgs, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """``summary_mean.csv``: one row per cell over its seeds (mean and 95 % CI of each metric)."""
    agg = aggregate(df, keys, metrics)
    agg.to_csv(args.out / f"summary_mean{args.suffix}.csv", index=False)
    return agg


def report(rows: list[dict[str, Any]], args: StudyArgs, wall_s: float, keys: list[str],
           metrics: list[str], plot: Callable[[pd.DataFrame], None]) -> int:
    """The end of every study: summary and seed means written, means printed, figure drawn
    (``plot(df)``); exit code 0 only if every cell succeeded."""
    df = write_summary(rows, args, wall_s)
    agg = write_means(df, args, keys, metrics)
    print(agg[[c for c in agg if not c.endswith(("_ci_lo", "_ci_hi"))]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))
    plot(df)
    return 0 if (df["status"] == "ok").all() else 1


def finish_figure(fig, legend_ax, title: str, path: Path, ncol: int = 3) -> None:
    """Shared legend under the panels, a suptitle (which says "simulated"), save, close."""
    import matplotlib.pyplot as plt

    handles, labels = legend_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, ncol), fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def figure_path(args: StudyArgs) -> Path:
    return args.out / f"{args.study['name']}{args.suffix}.png"


def timer() -> Callable[[], float]:
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0


def sim_label(mode: str) -> str:
    return f"simulated (sim backend), mode={mode}"
