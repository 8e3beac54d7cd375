"""The kinds of study, keyed by the study file's ``kind:`` — each supplies only what differs.

A kind names the module that holds its axes (how the file expands into cells) and its report
(summary table and figure). Everything else — command line, whole-study checks, ``--dry-run``,
running (inline / joblib / Slurm), caching and resuming — is :mod:`harness.study`'s.

``pipeline`` kinds expand into ordinary cached cells (Hydra overrides of :func:`harness.run.run_cell`),
so they run under any launcher: the figures, the sweeps, micro and the specdec, vlm_embed and
mamba_prefix studies (their variants are sim cells picked by config keys,
:mod:`harness.backends.sim.variants`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from harness import cli


@dataclass(frozen=True)
class Kind:
    name: str
    module: str          # where the kind's axes and report live
    make: str            # the make target that runs its committed study file


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("figure", "harness.experiment", "make reproduce-fig13 / reproduce-fig14"),
    Kind("window", "harness.sweeps.window", "make sweep-window"),
    Kind("mix", "harness.sweeps.mix", "make sweep-mix"),
    Kind("ablation", "harness.sweeps.ablation", "make ablation"),
    Kind("lcm", "harness.sweeps.lcm", "make lcm-churn"),
    Kind("micro", "harness.studies.micro", "make micro"),
    Kind("specdec", "harness.studies.specdec", "make specdec"),
    Kind("vlm_embed", "harness.studies.vlm_embed", "make vlm-embed"),
    Kind("mamba_prefix", "harness.studies.mamba_prefix", "make mamba-prefix"),
)}
SWEEP_KINDS = ("window", "mix", "ablation", "lcm", "micro", "specdec", "vlm_embed", "mamba_prefix")
DEFAULT_KIND = "figure"   # a file without ``kind:`` is a figure experiment (contract §3: cells × systems)


def kind_of(study: dict[str, Any], where: str = "study file") -> Kind:
    """The study's kind; an unknown ``kind:`` is one :class:`harness.cli.UsageError` naming the key."""
    name = study.get("kind", DEFAULT_KIND)
    if name not in KINDS:
        raise cli.UsageError(f"{where}: kind={name!r} is not a study kind; valid kinds: {sorted(KINDS)}")
    return KINDS[name]


def plan_cells(path: str, study: dict[str, Any], cli_overrides: list[str]) -> tuple[Any, list[str], list[list[str]]]:
    """``(plan, labels, overrides)`` of a pipeline kind: every cell's label and Hydra overrides."""
    kind = kind_of(study, path)
    if kind.name == "figure":
        from harness import experiment

        p = experiment.plan(study, cli_overrides)
        return p, [f"{r.model}/{r.system}/seed{r.seed}" for r in p.runs], [r.overrides for r in p.runs]
    if kind.name in SWEEP_KINDS:
        from harness.sweeps.plan import plan

        try:
            p = plan(path, cli_overrides)
            # A report module may check the plan before any cell runs (micro: its parts' labels).
            check = getattr(importlib.import_module(kind.module), "check", None)
            if check is not None:
                check(p)
        except cli.UsageError:
            raise
        except ValueError as exc:   # a malformed axis or cell of the study file
            raise cli.UsageError(str(exc)) from None
        return p, [_sweep_label(r) for r in p.runs], [r.overrides for r in p.runs]
    raise cli.UsageError(f"{path}: kind {kind.name!r} is not planned as cached cells yet; run it with `{kind.make}`")


def _sweep_label(run: Any) -> str:
    """``model/{grid point}/system/seed``; an axis the cell is not swept over (grid label None, a
    cell's ``axes``) is left out, and so is an empty grid point."""
    point = {a: v for a, v in run.params.items() if v is not None}
    return "/".join([run.model, *([str(point)] if point else []), run.system, f"seed{run.seed}"])
