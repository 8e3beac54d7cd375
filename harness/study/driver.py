"""``python -m harness.study``: the one entry point of every study (issue 10 item 1).

    python -m harness.study experiments/<name>.yaml [key=value ...] [--jobs N] [--force] [--out DIR]
                            [--dry-run] [--no-progress] [--launcher inline|joblib|slurm] [--hydra "..."]

plan (cells × axes × systems × seeds, by the file's ``kind:``, :mod:`harness.study.kinds`) →
every cell's config composed and checked before the first runs (:func:`harness.cli.check_cells`;
a typo is one error and nothing is written) → run (:mod:`harness.study.run`: ``--launcher
inline`` is a joblib pool in this process, ``joblib`` Hydra's joblib launcher, ``slurm`` Hydra's
submitit launcher, one Slurm job per cell — ``--hydra "hydra.launcher.partition=..."``) → the
kind's report (summary CSV with seed means and 95 % CIs, figure). Cells are cached records, so an
interrupted study resumes; ``--force`` reruns them.

Overrides: ``mode=smoke`` (small cells; outputs under ``results/smoke/<name>``), ``seeds=0,1,2``
(replaces the file's seeds), ``gpu=l4``, and any Hydra cell override (``dataset.num_requests=8``).
"""

from __future__ import annotations

import importlib
import time
from datetime import UTC, datetime
from pathlib import Path

from harness import cli
from harness.study import kinds
from harness.study.run import LAUNCHERS, run_cells


def parser():
    ap = cli.parser(__doc__, "python -m harness.study")
    ap.add_argument("--launcher", choices=LAUNCHERS, default="inline",
                    help="inline: joblib pool here (default); joblib: Hydra's joblib launcher; slurm: submitit")
    ap.add_argument("--hydra", default="", help="extra Hydra overrides for the launcher, space-separated "
                    "(e.g. 'hydra.launcher.partition=cpu hydra.launcher.timeout_min=20')")
    return ap


def main(argv: list[str] | None = None) -> int:
    return cli.guard(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = cli.parse(parser(), argv)
    study = cli.load_study_file(args.experiment, None)
    kind = kinds.kind_of(study, args.experiment)
    p, labels, overrides = kinds.plan_cells(args.experiment, study, args.overrides)
    cfgs = cli.check_cells(list(zip(labels, overrides)))
    if args.dry_run:
        return cli.print_dry_run(labels, cfgs, args.force)
    if kind.name == "figure":
        from harness import experiment

        return experiment.run(args, study, p)
    return _run_sweep(args, p, overrides)


def _run_sweep(args, p, overrides: list[list[str]]) -> int:
    """A kind planned by the sweep planner (every kind but figure): run, then the kind's report module."""
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    records = run_cells(args, args.experiment, p.name, overrides)
    wall = time.perf_counter() - t0
    out = Path(args.out) if args.out else cli.default_out(p.name, p.mode)
    summary = importlib.import_module(kinds.KINDS[p.kind].module).report(p, records, out)
    ok = sum(1 for r in records if r.get("status") == "ok")
    # Run in this sweep = written after it started (a launcher's cells come back as reused records).
    fresh = sum(1 for r in records if r.get("status") == "ok" and (r.get("provenance") or {}).get("time", "") >= started)
    print(f"\n{ok}/{len(records)} cells ok ({fresh} run, {ok - fresh} reused) in {wall:.1f} s wall "
          f"({args.launcher}, {args.jobs} jobs); wrote {out}")
    return 0 if summary is not None and ok == len(records) else 1
