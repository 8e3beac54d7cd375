"""Running a study's cells: in this process / a joblib pool, or through a Hydra launcher (joblib
on one machine, Slurm via submitit), resumable.

Every cell is an ordinary record of :func:`harness.run.run_cell` (cached under its config hash), so
an interrupted study resumes without redoing finished cells and a launcher's jobs are read back
from their records (:func:`collect`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import cli

LAUNCHERS = ("inline", "joblib", "slurm")


def run_one(overrides: list[str], force: bool = False) -> dict[str, Any]:
    """One cell's record; any exception becomes a failure record (the study goes on). Not
    BaseException: ctrl-C must stop the study."""
    try:
        from harness.run import run_overrides

        return run_overrides(list(overrides) + (["force=true"] if force else []))
    except Exception as exc:  # noqa: BLE001
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "overrides": list(overrides)}


def run_inline(overrides: Sequence[list[str]], jobs: int, force: bool = False, progress: bool = True,
               desc: str = "cells", on_result=None) -> list[dict[str, Any]]:
    """Every cell with joblib (``jobs`` processes; 1 = in this process), records in plan order,
    a progress bar, ctrl-C stops the pool (:func:`harness.cli.run_tasks`)."""
    return cli.run_tasks(run_one, [(list(o), force) for o in overrides], jobs, desc, progress, on_result)


def launcher_command(study: str | Path, n_cells: int, cli_overrides: list[str], launcher: str, jobs: int,
                     force: bool, sweep_dir: Path, hydra_args: Sequence[str] = ()) -> list[str]:
    """The ``harness.study.launch`` multirun command line for a Hydra launcher."""
    if launcher not in ("joblib", "slurm"):
        raise ValueError(f"launcher={launcher!r} has no Hydra launcher; allowed: ['joblib', 'slurm']")
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
    from harness.config import compose_cell
    from harness.records import finished_record, read_record
    from harness.run import cell_dir

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
    sweep_dir = cli.REPO_ROOT / "results" / name / "cells" / "hydra"
    cmd = launcher_command(study, len(overrides), cli_overrides, launcher, jobs, force, sweep_dir, hydra_args)
    proc = subprocess.run(cmd, cwd=cli.REPO_ROOT, check=False)
    if proc.returncode != 0:
        print(f"launcher exited with {proc.returncode}; collecting what finished", file=sys.stderr)
    return collect(overrides)


def run_cells(args, study_path: str | Path, name: str, overrides: Sequence[list[str]], on_result=None
              ) -> list[dict[str, Any]]:
    """The cells of a planned study, by ``args.launcher`` (inline: joblib pool in this process)."""
    launcher = getattr(args, "launcher", "inline")
    if launcher == "inline":
        return run_inline(overrides, args.jobs, args.force, not args.no_progress, f"{name} cells", on_result)
    hydra_args = (getattr(args, "hydra", "") or "").split()
    return run_launcher(study_path, name, overrides, list(args.overrides), launcher, args.jobs, args.force,
                        hydra_args)
