"""The kinds of study, keyed by the study file's ``kind:`` — each supplies only what differs.

A kind names the module that holds its axes (how the file expands into cells) and its report
(summary table and figure). Everything else — command line, whole-study checks, ``--dry-run``,
running (inline / joblib / Slurm), caching and resuming — is :mod:`harness.study`'s.

``pipeline`` kinds expand into ordinary cached cells (Hydra overrides of :func:`harness.run.run_cell`),
so they run under any launcher: the sweeps and the specdec, vlm_embed and mamba_prefix studies
(their variants are sim cells picked by config keys, :mod:`harness.backends.sim.variants`). micro
still plans and runs through its own module (``harness.studies.micro``), inline only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import cli


@dataclass(frozen=True)
class Kind:
    name: str
    module: str          # where the kind's axes and report live
    make: str            # the make target that runs its committed study file
    pipeline: bool       # cells are ordinary cached cells (any launcher)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("figure", "harness.experiment", "make reproduce-fig13 / reproduce-fig14", True),
    Kind("window", "harness.sweeps.window", "make sweep-window", True),
    Kind("mix", "harness.sweeps.mix", "make sweep-mix", True),
    Kind("ablation", "harness.sweeps.ablation", "make ablation", True),
    Kind("lcm", "harness.sweeps.lcm", "make lcm-churn", True),
    Kind("micro", "harness.studies.micro", "make micro", False),
    Kind("specdec", "harness.studies.specdec", "make specdec", True),
    Kind("vlm_embed", "harness.studies.vlm_embed", "make vlm-embed", True),
    Kind("mamba_prefix", "harness.studies.mamba_prefix", "make mamba-prefix", True),
)}
SWEEP_KINDS = ("window", "mix", "ablation", "lcm", "specdec", "vlm_embed", "mamba_prefix")
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
        except cli.UsageError:
            raise
        except ValueError as exc:   # a malformed axis or cell of the study file
            raise cli.UsageError(str(exc)) from None
        return p, [f"{r.model}/{r.params}/{r.system}/seed{r.seed}" for r in p.runs], [r.overrides for r in p.runs]
    raise cli.UsageError(f"{path}: kind {kind.name!r} is not planned as cached cells yet; run it with `{kind.make}`")
