"""Run a study: plan → cells (in process, or through a Hydra launcher) → records → report.

    python -m harness.sweeps experiments/<study>.yaml [mode=smoke] [gpu=l4] [seeds=0,1,2]
                             [other cell overrides] [--launcher inline|joblib|slurm] [--jobs N]
                             [--force] [--out DIR]

``--launcher inline`` (default): joblib processes from this process, one cell per task.
``--launcher joblib``: Hydra's joblib launcher (``python -m harness.sweeps.launch -m
cell=range(0,N) hydra/launcher=joblib``), one process per cell. ``--launcher slurm``: Hydra's
submitit launcher, one Slurm job per cell (``harness/conf/hydra/launcher/slurm.yaml``; pass
``--hydra "hydra.launcher.partition=... hydra.launcher.account=..."``). After a launcher run the records are read
back (each cell is an idempotent record of :func:`harness.run.run_cell`, so nothing reruns).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import cli
from harness.sweeps.plan import SweepPlan, plan

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = ("inline", "joblib", "slurm")


def run_one(overrides: list[str], force: bool = False) -> dict[str, Any]:
    """One cell's record; any exception becomes a failure record (the sweep goes on)."""
    try:
        from harness.run import run_overrides

        return run_overrides(list(overrides) + (["force=true"] if force else []))
    except Exception as exc:  # noqa: BLE001
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": list(overrides)}


def run_inline(p: SweepPlan, jobs: int, force: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Every cell with joblib (``jobs`` processes; 1 = in this process), records in plan order,
    a progress bar, ctrl-C stops the pool (:func:`harness.cli.run_tasks`)."""
    return cli.run_tasks(run_one, [(r.overrides, force) for r in p.runs], jobs, f"{p.name} cells", progress)


def launcher_command(study: str | Path, n_cells: int, cli: list[str], launcher: str, jobs: int,
                     force: bool, sweep_dir: Path, hydra_args: list[str] = ()) -> list[str]:
    """The ``harness.sweeps.launch`` multirun command line for a Hydra launcher."""
    if launcher not in ("joblib", "slurm"):
        raise ValueError(f"launcher={launcher!r} has no Hydra launcher; allowed: ['joblib', 'slurm']")
    extra = "[" + ",".join(f"'{o}'" for o in cli) + "]"
    cmd = [sys.executable, "-m", "harness.sweeps.launch", "-m", f"study={Path(study).resolve()}",
           f"cell=range(0,{n_cells})", f"cli={extra}", f"force={str(force).lower()}",
           f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}"]
    if launcher == "joblib":
        cmd.append(f"hydra.launcher.n_jobs={jobs}")
    return cmd + list(hydra_args)


def collect(p: SweepPlan) -> list[dict[str, Any]]:
    """Read every cell's record without running anything: the record, else its failure record,
    else a failure saying no launcher job finished the cell."""
    from harness.config import compose_cell
    from harness.records import finished_record, read_record
    from harness.run import cell_dir

    out = []
    for r in p.runs:
        try:
            d = cell_dir(compose_cell(r.overrides))
        except Exception as exc:  # noqa: BLE001
            out.append({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": r.overrides})
            continue
        rec = finished_record(d) or read_record(d / "failure.json") or \
            {"status": "failed", "error": f"no record: no launcher job finished this cell ({d})"}
        out.append({**rec, "reused": True} if rec.get("status") == "ok" else rec)
    return out


def run_launcher(study: str | Path, p: SweepPlan, cli: list[str], launcher: str, jobs: int, force: bool,
                 hydra_args: list[str] = ()) -> list[dict[str, Any]]:
    """Run the cells through a Hydra launcher, then read the records back (nothing reruns here: a
    cell no job finished is a failure row; rerunning the sweep resumes it)."""
    sweep_dir = REPO_ROOT / "results" / p.name / "cells" / "hydra"
    cmd = launcher_command(study, len(p.runs), cli, launcher, jobs, force, sweep_dir, hydra_args)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, check=False)
    if proc.returncode != 0:
        print(f"launcher exited with {proc.returncode}; collecting what finished", file=sys.stderr)
    return collect(p)


def main(argv: list[str] | None = None) -> int:
    return cli.guard(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    ap = cli.parser(__doc__, "python -m harness.sweeps")
    ap.add_argument("--launcher", choices=LAUNCHERS, default="inline")
    ap.add_argument("--hydra", default="", help="extra Hydra overrides for the launcher, space-separated "
                    "(e.g. 'hydra.launcher.partition=cpu hydra.launcher.timeout_min=20')")
    args = cli.parse(ap, argv)
    cli.load_study_file(args.experiment, "harness.sweeps")
    try:
        p = plan(args.experiment, args.overrides)
    except cli.UsageError:
        raise
    except ValueError as exc:   # a malformed axis or cell of the study file
        raise cli.UsageError(str(exc)) from None
    labels = [f"{r.model}/{r.params}/{r.system}/seed{r.seed}" for r in p.runs]
    cfgs = cli.check_cells(list(zip(labels, (r.overrides for r in p.runs))))
    if args.dry_run:
        return cli.print_dry_run(labels, cfgs, args.force)
    cli_overrides = list(args.overrides)
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    if args.launcher == "inline":
        records = run_inline(p, args.jobs, args.force, progress=not args.no_progress)
    else:
        records = run_launcher(args.experiment, p, cli_overrides, args.launcher, args.jobs, args.force, args.hydra.split())
    wall = time.perf_counter() - t0
    out = Path(args.out) if args.out else cli.default_out(p.name, p.mode)
    report = importlib.import_module(f"harness.sweeps.{p.kind}")
    summary = report.report(p, records, out)
    ok = sum(1 for r in records if r.get("status") == "ok")
    # Run in this sweep = written after it started (a launcher's cells come back as reused records).
    fresh = sum(1 for r in records if r.get("status") == "ok" and (r.get("provenance") or {}).get("time", "") >= started)
    print(f"\n{ok}/{len(records)} cells ok ({fresh} run, {ok - fresh} reused) in {wall:.1f} s wall "
          f"({args.launcher}, {args.jobs} jobs); wrote {out}")
    return 0 if summary is not None and ok == len(records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
