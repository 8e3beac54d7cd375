"""``python -m harness.study``: the one entry point of every study.

    python -m harness.study experiments/<name>.yaml [key=value ...] [--jobs N] [--force] [--out DIR]
                            [--dry-run] [--no-progress] [--launcher inline|joblib|slurm] [--hydra "..."]

plan (cells × axes × systems × seeds, :mod:`harness.study.plan`; the file's ``kind:`` picks the
report, :mod:`harness.study.kinds`) → every cell's config composed and checked before the first runs
(:func:`check_cells`; a typo is one error and nothing is written) → run (:mod:`harness.study.run`:
``--launcher inline`` is a joblib pool in this process, ``joblib`` Hydra's joblib launcher,
``slurm`` Hydra's submitit launcher, one Slurm job per cell — ``--hydra
"hydra.launcher.partition=..."``) → the kind's report (summary CSV with seed means and 95 % CIs,
figure). Cells are cached records, so an interrupted study resumes; ``--force`` reruns them.

Overrides: ``mode=smoke`` (small cells; outputs under ``results/smoke/<name>``), ``seeds=0,1,2``
(replaces the file's seeds), ``gpu=l4``, and any Hydra cell override (``dataset.num_requests=8``).
Flags and overrides mix in any order. Errors are one ``error:`` line and exit status 2
(:func:`guard`); ctrl-C stops the pool (exit 130) and a rerun resumes from the finished records.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from yaml import YAMLError

from harness.config import ConfigError, compose_cell, copy_config, options, other_groups, validate
from harness.records import REPO_ROOT, finished_record
from harness.run import cell_dir
from harness.study import plan as planner
from harness.study import run
from harness.study.kinds import DEFAULT_KIND, KINDS
from harness.study.run import LAUNCHERS
from harness.study.whatif import run as whatif_run


class UsageError(ValueError):
    """A bad command line or study file: one message, exit status 2, nothing written."""


# -- arguments ---------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m harness.study``."""
    ap = argparse.ArgumentParser(prog="python -m harness.study", description=__doc__.strip().split("\n")[0])
    ap.add_argument("experiment", help="the study file (experiments/<name>.yaml)")
    ap.add_argument("overrides", nargs="*", help="key=value: mode=smoke, seeds=0,1, gpu=l4, Hydra cell overrides")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every core)")
    ap.add_argument("--force", action="store_true", help="rerun cells even if a finished record exists")
    ap.add_argument("--out", default=None, help="summary/figure folder (default results/<name>; smoke: results/smoke/<name>)")
    ap.add_argument("--dry-run", action="store_true", help="list the cells (and which are cached) and run nothing")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--launcher", choices=LAUNCHERS, default="inline",
                    help="inline: joblib pool here (default); joblib: Hydra's joblib launcher; slurm: submitit on "
                    "Slurm; submitit_local: the same submitit code path, jobs as local processes")
    ap.add_argument("--hydra", default="", help="extra Hydra overrides for the launcher, space-separated "
                    "(e.g. 'hydra.launcher.partition=cpu hydra.launcher.timeout_min=20')")
    return ap


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Flags and overrides in any order; every positional after the file must be ``key=value``."""
    args = ap.parse_intermixed_args(list(argv) if argv is not None else None)
    if args.jobs < 1:
        ap.error(f"argument --jobs: {args.jobs} is not a positive number of processes (use 1 to run in this process)")
    check_override_syntax(args.overrides)
    return args


def check_override_syntax(overrides: Iterable[str]) -> None:
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if ("=" not in o and not o.startswith("~")) or not key:
            raise UsageError(f"unknown argument {o!r}: after the study file every argument is key=value "
                             "(mode=smoke, seeds=0,1, gpu=l4, dataset.num_requests=8) or a --flag")


def check_special(overrides: Iterable[str]) -> None:
    """``mode=`` and ``gpu=`` on the command line name real config options (read live from
    ``harness/conf``)."""
    special, _ = planner.split_cli(list(overrides))
    if "mode" in special and special["mode"] not in options("mode"):
        raise UsageError(f"unknown mode {special['mode']!r}; valid mode names: {options('mode')}")
    if "gpu" in special and special["gpu"] not in options("gpu"):
        raise UsageError(f"unknown gpu {special['gpu']!r}; valid gpu names: {options('gpu')}")


# -- study files -------------------------------------------------------------------------------------
def load_study_file(path: str | Path) -> dict[str, Any]:
    """A study file as a dict: one :class:`UsageError` if it is missing, not YAML, not a mapping,
    has no ``name`` or an unknown ``kind``."""
    path = Path(path)
    if not path.is_file():
        near = sorted(p.name for p in (REPO_ROOT / "experiments").glob("*.yaml"))
        raise UsageError(f"study file {str(path)!r} not found; files in experiments/: {near}")
    try:
        node = OmegaConf.load(path)
        study = OmegaConf.to_container(node, resolve=True)
    except (YAMLError, OmegaConfBaseException, UnicodeDecodeError) as exc:
        first = " ".join(str(exc).split())[:300]
        raise UsageError(f"cannot read study file {path}: {type(exc).__name__}: {first}") from None
    if not isinstance(study, dict):
        raise UsageError(f"study file {path} must be a YAML mapping (name:, cells:, ...), not a {type(study).__name__}")
    if "name" not in study:
        raise UsageError(f"study file {path}: missing key 'name'")
    kind = study.get("kind", DEFAULT_KIND)
    if kind not in KINDS:
        raise UsageError(f"{path}: kind={kind!r} is not a study kind; valid kinds: {sorted(KINDS)}")
    return study


# -- checks before any work ---------------------------------------------------------------------------
def check_cells(cells: Sequence[tuple[str, list[str]]], jobs: int = 1,
                while_waiting: Callable[[], None] | None = None) -> list[Any]:
    """Compose every cell's config (``(label, overrides)``) before the first one runs. Returns the
    configs; raises one :class:`UsageError` listing each distinct problem once (a typo shared by
    42 cells is one line, not 42). Cells that differ only in ``seed=`` are composed once (Hydra's
    compose is the slow part, ~0.2 s each) and get their seed set on a copy, then checked again;
    cells that differ only in the system share one Hydra compose too, so they are composed in one
    process, one task each family. With ``jobs`` > 1 the families run in the study's process pool
    (the one its cells then run in, so its workers have started by then); ``while_waiting`` runs
    in this process while they compose (:func:`harness.study.run.run_tasks`)."""
    keys: dict[tuple, list[str]] = {}
    for _label, overrides in cells:
        key, seeds = _split_seed(overrides)
        keys.setdefault(key, list(key) + seeds[-1:])
    # Compositions that differ only in the system go to one worker together: it composes the
    # first whole and derives the others from it (harness.config._other_system).
    families: dict[tuple, list[tuple]] = {}
    for key, ov in keys.items():
        families.setdefault(other_groups(ov), []).append(key)
    done = run.run_tasks(_compose_all, [([keys[k] for k in fam],) for fam in families.values()],
                         jobs if len(families) > 1 else 1, "compose", False, while_waiting=while_waiting)
    composed = {k: cfg for fam, cfgs in zip(families.values(), done) for k, cfg in zip(fam, cfgs)}
    cfgs, problems = [], {}
    for label, overrides in cells:
        key, seeds = _split_seed(overrides)
        try:
            base = composed[key]
            if isinstance(base, ConfigError):
                raise base
            cfg = copy_config(base)
            if seeds:
                value = OmegaConf.create({"seed": seeds[-1].split("=", 1)[1]}).seed
                try:
                    cfg.seed = int(value)
                except (TypeError, ValueError):
                    raise ConfigError(f"seed={value!r} is not a whole number") from None
                validate(cfg)
            cfgs.append(cfg)
        except ConfigError as exc:
            problems.setdefault(str(exc), []).append(label)
    if problems:
        lines = [f"{msg}  [{len(labels)} cell(s), e.g. {labels[0]}]" for msg, labels in problems.items()]
        n = sum(len(v) for v in problems.values())
        raise UsageError(f"{n} of {len(cells)} cells cannot run; nothing was run or written:\n  " + "\n  ".join(lines))
    return cfgs


def _split_seed(overrides: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """(the overrides but ``seed=``, the ``seed=`` overrides): cells equal but for the seed share one
    composition."""
    return tuple(o for o in overrides if not o.startswith("seed=")), [o for o in overrides if o.startswith("seed=")]


def _compose_all(family: list[list[str]]) -> list[Any]:
    """:func:`_compose_or_error` of each override list, in one process (see check_cells)."""
    return [_compose_or_error(ov) for ov in family]


def _compose_or_error(overrides: list[str]) -> Any:
    """One cell's composed config, or the :class:`ConfigError` that names its problem (returned, so
    that a pool worker hands it back like a result)."""
    try:
        return compose_cell(overrides)
    except ConfigError as exc:
        return exc


def print_dry_run(labels: Sequence[str], cfgs: Sequence[Any], force: bool = False) -> int:
    """One line per cell: cached (a finished record exists and would be reused) or to run."""
    cached = 0
    for label, cfg in zip(labels, cfgs):
        d = cell_dir(cfg)
        hit = finished_record(d) is not None
        cached += hit
        state = "rerun (--force)" if hit and force else "cached" if hit else "to run"
        print(f"{state:<16} {label}  {d}")
    todo = len(cfgs) if force else len(cfgs) - cached
    print(f"{len(cfgs)} cells: {cached} cached, {todo} to run (dry run: nothing ran)")
    return 0


def guard(main: Callable[[], int]) -> int:
    """Run a driver's body: a :class:`UsageError` is one ``error:`` line (exit 2), ctrl-C one
    ``interrupted`` line (exit 130), never a traceback."""
    try:
        return main()
    except (UsageError, planner.StudyFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: stopped the running cells; finished cells keep their records, rerun to resume",
              file=sys.stderr)
        return 130


# -- the command ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    return guard(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parse(parser(), argv)
    study = load_study_file(args.experiment)
    if KINDS[study.get("kind", DEFAULT_KIND)].runner == "whatif":
        # A what-if lab study: its own request streams, no cached cells to plan, check or list.
        if args.dry_run:
            raise UsageError(f"{args.experiment}: a what-if study has no cells to list (--dry-run); run it")
        return whatif_run.main([args.experiment, *(["--out", args.out] if args.out else []), "--jobs", str(args.jobs)])
    check_special(args.overrides)
    p = planner.plan(study, args.overrides)
    if KINDS[p.kind].checks:
        try:
            KINDS[p.kind].load().check(p)    # a kind may refuse a plan before any cell runs (micro: its parts' labels)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    jobs = 1 if args.dry_run or args.launcher != "inline" else args.jobs
    # While the pool composes the cells, this process imports what the report will need.
    cfgs = check_cells([(planner.label_of(r), r.overrides) for r in p.runs], jobs,
                       while_waiting=None if args.dry_run else lambda: run.prefetch_report(KINDS[p.kind]))
    if args.dry_run:
        return print_dry_run([planner.label_of(r) for r in p.runs], cfgs, args.force)
    return run.run_study(args, p, cfgs)
