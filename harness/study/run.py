"""Running a study's cells and reporting: in this process / a joblib pool, or through a Hydra
launcher (joblib on one machine, Slurm via submitit), resumable — the one run path of every kind.

Every cell is an ordinary record of :func:`harness.run.run_cell` (cached under its config hash), so
an interrupted study resumes without redoing finished cells and a launcher's jobs are read back
from their records (:func:`collect`). :func:`run_study` runs a plan's cells, hands the records to
the kind's ``report`` and prints the tally.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm import tqdm

from harness.config import compose_cell
from harness.records import REPO_ROOT, finished_record, read_record
from harness.run import cell_dir, run_cell, run_overrides
from harness.study.inputs import inputs_for
from harness.study.kinds import KINDS, Kind
from harness.study.plan import Plan

LAUNCHERS = ("inline", "joblib", "slurm", "submitit_local")
# Outputs of smoke runs go here (git-ignored), never beside the committed references.
SMOKE_ROOT = REPO_ROOT / "results" / "smoke"


def default_out(name: str, mode: str) -> Path:
    """Where a study writes its summary and figure: ``results/<name>`` (the committed references) for
    full runs, ``results/smoke/<name>`` (git-ignored) for smoke runs."""
    return (SMOKE_ROOT if mode == "smoke" else REPO_ROOT / "results") / name


def prefetch_report(kind: Kind) -> None:
    """Import what the kind's report will need -- its module (pandas and matplotlib for a figure,
    ~0.7 s) and scipy.special (the seed CIs) -- while this process only waits on its pool
    (:func:`run_tasks`' ``while_waiting``): there it costs no wall time, after the cells it would
    (the report runs alone). A failed import is left for the report to raise."""
    try:
        kind.load()
        importlib.import_module("scipy.special")
    except Exception:  # noqa: BLE001, S110 - the report imports them again and says what failed
        pass


def run_one(overrides: list[str], force: bool = False, cfg: DictConfig | None = None) -> dict[str, Any]:
    """One cell's record; any exception becomes a failure record (the study goes on). Not
    BaseException: ctrl-C must stop the study. ``cfg``: the cell's config as the study's check
    composed it from ``overrides`` (the pool worker then does not compose it again)."""
    try:
        if cfg is None:
            return run_overrides(list(overrides) + (["force=true"] if force else []))
        return run_cell(cfg, list(overrides) + (["force=true"] if force else []), force=force or None)
    except Exception as exc:  # noqa: BLE001
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": list(overrides)}


def run_tasks(fn: Callable[..., Any], tasks: Sequence[tuple], jobs: int, desc: str, progress: bool = True,
              on_result: Callable[[Any, Any], None] | None = None,
              while_waiting: Callable[[], None] | None = None) -> list[Any]:
    """``[fn(*task) for task in tasks]`` in order, ``jobs`` processes at a time (1: in this
    process), with a tqdm bar on stderr. ctrl-C stops the pool (no task starts after it) and
    raises KeyboardInterrupt for :func:`harness.study.cli.guard`; finished cells keep their records,
    so a rerun resumes. ``on_result(bar, result)`` sees each result as it arrives;
    ``while_waiting()`` runs here once the pool has its first tasks (not without a pool)."""
    results: list[Any] = []
    with tqdm(total=len(tasks), desc=desc, unit="cell", disable=not progress, file=sys.stderr,
              dynamic_ncols=True) as bar:
        if jobs <= 1 or len(tasks) <= 1:
            for t in tasks:
                results.append(fn(*t))
                bar.update(1)
                if on_result:
                    on_result(bar, results[-1])
            return results
        from joblib import Parallel, delayed

        par = Parallel(n_jobs=jobs, return_as="generator", backend="loky", batch_size=1)
        gen = par(delayed(fn)(*t) for t in tasks)      # the first tasks are dispatched here
        try:
            if while_waiting is not None:
                while_waiting()
            for res in gen:
                results.append(res)
                bar.update(1)
                if on_result:
                    on_result(bar, res)
        except KeyboardInterrupt:
            # Kill the workers first: a worker hit by the same ctrl-C mid-handshake can leave
            # joblib's abort waiting on it; then joblib drops the queued cells.
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor().shutdown(wait=False, kill_workers=True)
            gen.close()
            raise
    return results


def run_inline(overrides: Sequence[list[str]], jobs: int, force: bool = False, progress: bool = True,
               desc: str = "cells", on_result=None, cfgs: Sequence[DictConfig] | None = None
               ) -> list[dict[str, Any]]:
    """Every cell with joblib (``jobs`` processes; 1 = in this process), records in plan order,
    a progress bar, ctrl-C stops the pool (:func:`run_tasks`). ``cfgs``: the cells' configs, checked
    and composed already (:func:`harness.study.cli.check_cells`), else each cell composes its own."""
    cfgs = list(cfgs) if cfgs is not None else [None] * len(overrides)
    return run_tasks(run_one, [(list(o), force, c) for o, c in zip(overrides, cfgs, strict=True)], jobs, desc,
                     progress, on_result)


def launcher_command(study: str | Path, n_cells: int, cli_overrides: list[str], launcher: str, jobs: int,
                     force: bool, sweep_dir: Path, hydra_args: Sequence[str] = ()) -> list[str]:
    """The ``harness.study.launch`` multirun command line for a Hydra launcher (``slurm`` and its
    local twin ``submitit_local``, the same submitit code path on this machine)."""
    if launcher not in ("joblib", "slurm", "submitit_local"):
        raise ValueError(f"launcher={launcher!r} has no Hydra launcher; allowed: ['joblib', 'slurm', 'submitit_local']")
    extra = "[" + ",".join(f"'{o}'" for o in cli_overrides) + "]"
    cmd = [sys.executable, "-m", "harness.study.launch", "-m", f"study={Path(study).resolve()}",
           f"cell=range(0,{n_cells})", f"cli={extra}", f"force={str(force).lower()}",
           f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}"]
    if launcher == "joblib":
        cmd.append(f"hydra.launcher.n_jobs={jobs}")
    return cmd + list(hydra_args)


def collect(overrides: Sequence[list[str]]) -> list[dict[str, Any]]:
    """Read every cell's record without running anything: the record, else its failure record,
    else a failure saying no launcher job finished the cell."""
    out = []
    for ov in overrides:
        try:
            d = cell_dir(compose_cell(list(ov)))
        except Exception as exc:  # noqa: BLE001
            out.append({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": list(ov)})
            continue
        rec = finished_record(d) or read_record(d / "failure.json") or \
            {"status": "failed", "error": f"no record: no launcher job finished this cell ({d})"}
        out.append({**rec, "reused": True} if rec.get("status") == "ok" else rec)
    return out


def run_launcher(study: str | Path, name: str, overrides: Sequence[list[str]], cli_overrides: list[str],
                 launcher: str, jobs: int, force: bool, hydra_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Run the cells through a Hydra launcher, then read the records back (nothing reruns here: a
    cell no job finished is a failure row; rerunning the study resumes it)."""
    sweep_dir = REPO_ROOT / "results" / name / "cells" / "hydra"
    cmd = launcher_command(study, len(overrides), cli_overrides, launcher, jobs, force, sweep_dir, hydra_args)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, check=False)
    if proc.returncode != 0:
        print(f"launcher exited with {proc.returncode}; collecting what finished", file=sys.stderr)
    return collect(overrides)


def run_cells(args, study_path: str | Path, name: str, overrides: Sequence[list[str]], on_result=None,
              cfgs: Sequence[DictConfig] | None = None) -> list[dict[str, Any]]:
    """The cells of a planned study, by ``args.launcher`` (inline: joblib pool in this process, with
    the configs ``cfgs`` the study's check composed, when given)."""
    launcher = getattr(args, "launcher", "inline")
    if launcher == "inline":
        return run_inline(overrides, args.jobs, args.force, not args.no_progress, f"{name} cells", on_result, cfgs)
    hydra_args = (getattr(args, "hydra", "") or "").split()
    return run_launcher(study_path, name, overrides, list(args.overrides), launcher, args.jobs, args.force,
                        hydra_args)


def run_study(args, p: Plan, cfgs: Sequence[DictConfig] | None = None) -> int:
    """Run the planned cells (each distinct error printed once, when it first happens; repeats
    counted), hand the records to the kind's ``report`` and print the tally. Exit status 0 when
    every cell ran, or (a kind with ``partial_ok``: figures show failed bars) when some did."""
    seen: dict[str, int] = {}

    def note(bar, rec: dict[str, Any]) -> None:
        if rec.get("status") != "ok":
            err = str(rec.get("error"))
            if err not in seen:
                bar.write(f"cell failed: {rec.get('model')}/{rec.get('system')} seed {rec.get('seed')}: {err}",
                          file=sys.stderr)
            seen[err] = seen.get(err, 0) + 1

    kind = KINDS[p.kind]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records = run_cells(args, args.experiment, p.name, [r.overrides for r in p.runs], note, cfgs)
    wall = time.perf_counter() - t0
    for err, n in seen.items():
        if n > 1:
            print(f"{n} cells failed with: {err}", file=sys.stderr)
    out = Path(args.out) if args.out else default_out(p.name, p.mode)
    summary = kind.load().report(p, records, out, **inputs_for(kind.inputs, p))
    ok = [r for r in records if r.get("status") == "ok"]
    # Run in this study: inline, a record not reused; a launcher's cells all come back as read records,
    # so there, one written after the study started (provenance time, whole seconds).
    inline = getattr(args, "launcher", "inline") == "inline"
    fresh = [r for r in ok if not r.get("reused")] if inline else \
        [r for r in ok if (r.get("provenance") or {}).get("time", "") >= started]
    sim_s = sum(r.get("makespan_s") or 0.0 for r in fresh)
    print(f"\n{len(ok)}/{len(records)} cells ok ({len(fresh)} run, {len(ok) - len(fresh)} reused) in {wall:.1f} s "
          f"wall ({getattr(args, 'launcher', 'inline')}, {args.jobs} jobs)"
          + (f"; {sim_s:.0f} simulated serving seconds ({sim_s / wall:.1f} per wall second)" if fresh and wall else ""))
    oom = sum(1 for r in ok if r.get("num_ignored"))
    if oom:
        print(f"{oom} cell(s) OOM (some request never fits the KV pool; an outcome, as the paper's OOM bars)")
    if len(ok) < len(records):
        print(f"WARNING: {len(records) - len(ok)} cell(s) failed; see the status/error columns of the summary")
    print(f"wrote {out}")
    if summary is None or not ok:
        return 1
    return 0 if kind.partial_ok or len(ok) == len(records) else 1
