"""The study command line (``python -m harness.study``, :mod:`harness.study.driver`): arguments,
study files, checks before any work, ``--dry-run``, a progress bar and a clean ctrl-C.

    python -m harness.study experiments/<name>.yaml [key=value ...] [--jobs N] [--force] [--out DIR]
                            [--dry-run] [--no-progress]

through :func:`parser`/:func:`parse` (flags and overrides in any order: ``--force mode=smoke``),
load the file through :func:`load_study_file` (a missing, malformed or wrong-driver file is one
line naming the file), check every cell's config with :func:`check_cells` before the first one
runs (a typo is one error and nothing is written), and run with :func:`run_tasks`. Errors raise
:class:`UsageError`; :func:`guard` turns it into one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# Outputs of smoke runs go here (git-ignored), never beside the committed references.
SMOKE_ROOT = REPO_ROOT / "results" / "smoke"
class UsageError(ValueError):
    """A bad command line or study file: one message, exit status 2, nothing written."""


def warn_deprecated_alias(module: str) -> None:
    """One stderr line for ``python -m <module>``, a deprecated alias of ``python -m harness.study``
    (``harness.experiment``, ``harness.sweeps``); the caller then runs the study driver as before."""
    print(f"{module}: deprecated alias; use `python -m harness.study experiments/<name>.yaml` "
          "(same arguments)", file=sys.stderr, flush=True)


# -- arguments ---------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not a positive number of processes (use 1 to run in this process)")
    return n


def parser(doc: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The shared flags; a driver may add its own before :func:`parse`."""
    ap = argparse.ArgumentParser(prog=prog, description=(doc or "").strip().split("\n")[0])
    ap.add_argument("experiment", help="the study file (experiments/<name>.yaml)")
    ap.add_argument("overrides", nargs="*", help="key=value: mode=smoke, seeds=0,1, gpu=l4, Hydra cell overrides")
    ap.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1, help="processes (default: every core)")
    ap.add_argument("--force", action="store_true", help="rerun cells even if a finished record exists")
    ap.add_argument("--out", default=None, help="summary/figure folder (default results/<name>; smoke: results/smoke/<name>)")
    ap.add_argument("--dry-run", action="store_true", help="list the cells (and which are cached) and run nothing")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Flags and overrides in any order; every positional after the file must be ``key=value``."""
    args = ap.parse_intermixed_args(list(argv) if argv is not None else None)
    check_override_syntax(args.overrides)
    return args


def check_override_syntax(overrides: Iterable[str]) -> None:
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if ("=" not in o and not o.startswith("~")) or not key:
            raise UsageError(f"unknown argument {o!r}: after the study file every argument is key=value "
                             "(mode=smoke, seeds=0,1, gpu=l4, dataset.num_requests=8) or a --flag")


def split_cli(overrides: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """``({mode, seeds, gpu} given on the command line, the other overrides)``; checks ``mode``."""
    from harness.config import options

    special, rest = {}, []
    for o in overrides:
        k, _, v = o.partition("=")
        if k in ("mode", "seeds", "gpu"):
            special[k] = v
        else:
            rest.append(o)
    if "mode" in special and special["mode"] not in options("mode"):
        raise UsageError(f"unknown mode {special['mode']!r}; valid mode names: {options('mode')}")
    if "gpu" in special and special["gpu"] not in options("gpu"):
        raise UsageError(f"unknown gpu {special['gpu']!r}; valid gpu names: {options('gpu')}")
    return special, rest


def parse_seeds(value: Any, where: str) -> list[int]:
    """Seeds from a study file (a YAML list) or the command line (``0,1,2`` or ``[0,1,2]``): a
    non-empty list of distinct whole numbers >= 0."""
    if isinstance(value, str):
        parts = [x.strip() for x in value.strip().strip("[]").split(",") if x.strip()]
        try:
            value = [int(x) for x in parts]
        except ValueError:
            raise UsageError(f"{where}: seeds={value!r} is not a list of whole numbers (e.g. seeds=0,1,2)") from None
    if not isinstance(value, (list, tuple)):
        raise UsageError(f"{where}: seeds must be a list of seeds such as [0] or [0, 1, 2], got {value!r}")
    if not value:
        raise UsageError(f"{where}: seeds is empty; give at least one seed (e.g. [0])")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value):
        raise UsageError(f"{where}: every seed must be a whole number >= 0, got {list(value)}")
    if len(set(value)) != len(value):
        raise UsageError(f"{where}: seeds repeat: {list(value)}")
    return [int(s) for s in value]


# -- study files -------------------------------------------------------------------------------------
def driver_of(study: dict[str, Any]) -> tuple[str, str]:
    """(module, command) of the kind of study a file is (its ``kind:``, :mod:`harness.study.kinds`)."""
    from harness.study.kinds import kind_of

    kind = kind_of(study)
    return kind.module, f"python -m harness.study (kind {kind.name}; {kind.make})"


def load_study_file(path: str | Path, driver: str | None) -> dict[str, Any]:
    """A study file as a dict: one :class:`UsageError` if it is missing, not YAML, not a mapping,
    has no ``name`` or an unknown ``kind``, or belongs to another kind than ``driver`` (the kind's
    module name; None: any)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

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
    module, command = driver_of(study)
    if driver is not None and module != driver:
        raise UsageError(f"{path} is a study file for {module}, not {driver}; run it with `{command}`")
    return study


def default_out(name: str, mode: str) -> Path:
    """Where a study writes its summary and figure: ``results/<name>`` (the committed references) for
    full runs, ``results/smoke/<name>`` (git-ignored) for smoke runs."""
    return (SMOKE_ROOT if mode == "smoke" else REPO_ROOT / "results") / name


# -- checks before any work ---------------------------------------------------------------------------
def check_cells(cells: Sequence[tuple[str, list[str]]]) -> list[Any]:
    """Compose every cell's config (``(label, overrides)``) before the first one runs. Returns the
    configs; raises one :class:`UsageError` listing each distinct problem once (a typo shared by
    42 cells is one line, not 42). Cells that differ only in ``seed=`` are composed once (Hydra's
    compose is the slow part) and get their seed set on a copy, then checked again."""
    from omegaconf import OmegaConf

    from harness.config import ConfigError, compose_cell, validate

    cfgs, problems, composed = [], {}, {}
    for label, overrides in cells:
        seeds = [o for o in overrides if o.startswith("seed=")]
        key = tuple(o for o in overrides if not o.startswith("seed="))
        try:
            if key not in composed:
                composed[key] = compose_cell(list(key) + seeds[-1:])
            cfg = composed[key].copy()
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


def print_dry_run(labels: Sequence[str], cfgs: Sequence[Any], force: bool = False) -> int:
    """One line per cell: cached (a finished record exists and would be reused) or to run."""
    from harness.records import finished_record
    from harness.run import cell_dir

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


# -- running ----------------------------------------------------------------------------------------
def run_tasks(fn: Callable[..., Any], tasks: Sequence[tuple], jobs: int, desc: str, progress: bool = True,
              on_result: Callable[[Any, Any], None] | None = None) -> list[Any]:
    """``[fn(*task) for task in tasks]`` in order, ``jobs`` processes at a time (1: in this
    process), with a tqdm bar on stderr. ctrl-C stops the pool (no task starts after it) and
    raises KeyboardInterrupt for :func:`guard`; finished cells keep their records, so a rerun
    resumes. ``on_result(bar, result)`` sees each result as it arrives."""
    from tqdm import tqdm

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
        gen = par(delayed(fn)(*t) for t in tasks)
        try:
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


def guard(main: Callable[[], int]) -> int:
    """Run a driver's body: a :class:`UsageError` is one ``error:`` line (exit 2), ctrl-C one
    ``interrupted`` line (exit 130), never a traceback."""
    try:
        return main()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: stopped the running cells; finished cells keep their records, rerun to resume",
              file=sys.stderr)
        return 130
