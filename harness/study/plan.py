"""Study files → cells: the one planner of every study kind.

A study file (``experiments/<name>.yaml``; docs/CONTRACTS.md §3) names ``name``, ``kind`` (its
report, :mod:`harness.study.kinds`; default ``figure``), ``description``, ``gpu``, ``systems``,
``seeds`` (default :data:`DEFAULT_SEEDS`), ``cells``, and optionally:

- ``base``: Hydra overrides every cell gets (a cell's own keys win);
- ``baseline``: the system speedups divide by (default ``vllm``; a cell's own wins);
- ``axes``: ``{axis: {key: <override key>, values: [...]}}`` — the grid, a Cartesian product over
  the axes for every entry of ``cells``. A value is a scalar (set as ``key=value``) or a mapping
  ``{label: ..., overrides: {...}}`` (several overrides under one label); overrides that name
  ``system`` make that point run that one system instead of the ``systems`` list (a study's
  variants: ``{label: marconi_lru, overrides: {system: marconi, system.options.flop_alpha: 0}}``);
- ``smoke``: keys that replace the top-level ones when ``mode=smoke`` (a smaller grid for tests).

Reserved keys of a ``cells`` entry (:data:`CELL_RESERVED`; everything else is a Hydra override):
``systems``, ``baseline``, ``label`` (the row's model label; default the cell's effective
``model``), ``only`` (``{axis: [labels]}``: restrict this entry's grid), ``point`` (``{axis:
label}``: one extra point off the grid), ``seeds`` (this entry's seeds; a ``seeds=`` on the command
line replaces both), ``axes`` (the study's axes this entry is expanded over, default all; ``[]``:
one cell), ``gpus`` (GPUs the cell runs on; others skip it), ``per_gpu`` (``{gpu: {key: value}}``
extra overrides on that GPU) and ``per_system`` (``{system: {key: value}}``: where one system's
command differs from the others').

Command-line keys read here, not by Hydra: ``mode=`` (``smoke`` applies the file's ``smoke:``
section), ``seeds=`` and ``gpu=``; every other ``key=value`` is appended to each cell's overrides.
Errors are :class:`StudyFileError` (a :class:`ValueError`) naming the file and the key.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.study.kinds import DEFAULT_KIND, KINDS

DEFAULT_SEEDS = (0, 1, 2)
CELL_RESERVED = ("systems", "baseline", "label", "only", "point", "seeds", "axes", "gpus", "per_gpu", "per_system")
SPECIAL_CLI = ("mode", "seeds", "gpu")


class StudyFileError(ValueError):
    """A malformed study file or command line: one message naming the file and the key."""


@dataclass
class Run:
    """One cell: the model label, the grid point (axis → label; empty without axes), system, seed,
    the system its speedup divides by, and its Hydra overrides."""

    model: str
    params: dict[str, Any]
    system: str
    seed: int
    baseline: str
    overrides: list[str]


@dataclass
class Plan:
    name: str
    kind: str
    mode: str
    gpu: str
    backend: str
    axes: list[str]
    study: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    baselines: dict[str, str] = field(default_factory=dict)   # model label -> its baseline system
    skipped: list[str] = field(default_factory=list)          # cells not run on this GPU, with why

    @property
    def default_gpu(self) -> str:
        return self.study.get("gpu", "h100")

    def suffix(self) -> str:
        """``_smoke``/``_<gpu>``/``_<backend>`` for runs other than the study's default, so the
        committed reference outputs are never overwritten."""
        parts = [x for x, d in ((self.mode, "full"), (self.gpu, self.default_gpu), (self.backend, "sim")) if x != d]
        return "".join(f"_{x}" for x in parts)


def fmt(v: Any) -> str:
    """A value as Hydra override text."""
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x) for x in v) + "]"
    return str(v)


def parse_seeds(value: Any, where: str) -> list[int]:
    """Seeds from a study file (a YAML list) or the command line (``0,1,2`` or ``[0,1,2]``): a
    non-empty list of distinct whole numbers >= 0."""
    if isinstance(value, str):
        parts = [x.strip() for x in value.strip().strip("[]").split(",") if x.strip()]
        try:
            value = [int(x) for x in parts]
        except ValueError:
            raise StudyFileError(f"{where}: seeds={value!r} is not a list of whole numbers (e.g. seeds=0,1,2)") from None
    if not isinstance(value, (list, tuple)):
        raise StudyFileError(f"{where}: seeds must be a list of seeds such as [0] or [0, 1, 2], got {value!r}")
    if not value:
        raise StudyFileError(f"{where}: seeds is empty; give at least one seed (e.g. [0])")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value):
        raise StudyFileError(f"{where}: every seed must be a whole number >= 0, got {list(value)}")
    if len(set(value)) != len(value):
        raise StudyFileError(f"{where}: seeds repeat: {list(value)}")
    return [int(s) for s in value]


def split_cli(overrides: list[str] | tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """``({mode, seeds, gpu} given on the command line, the other overrides)``."""
    special, rest = {}, []
    for o in overrides:
        k, _, v = o.partition("=")
        if k in SPECIAL_CLI:
            special[k] = v
        else:
            rest.append(o)
    return special, rest


def _axis_points(name: str, axis: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(label, overrides) for each value of one axis."""
    if not isinstance(axis, dict) or "values" not in axis:
        raise StudyFileError(f"axis {name!r}: missing key 'values'")
    points = []
    for v in axis["values"]:
        if isinstance(v, dict):
            if "label" not in v:
                raise StudyFileError(f"axis {name!r}: a mapping value needs a 'label' key, got {v}")
            points.append((v["label"], dict(v.get("overrides") or {})))
        else:
            if "key" not in axis:
                raise StudyFileError(f"axis {name!r}: scalar values need the axis's 'key' (the override to set)")
            points.append((v, {axis["key"]: v}))
    return points


def load_study(path: str | Path | dict[str, Any], mode: str = "full") -> dict[str, Any]:
    """The study file as a dict (a dict is taken as already loaded), with its ``smoke`` section
    applied when ``mode=smoke``; ``kind`` defaults to :data:`~harness.study.kinds.DEFAULT_KIND`."""
    study = dict(path) if isinstance(path, dict) else OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    where = f"study {path if not isinstance(path, dict) else study.get('name')}"
    for key in ("name", "cells"):
        if key not in study:
            raise StudyFileError(f"{where}: missing key {key!r}")
    study.setdefault("kind", DEFAULT_KIND)
    if study["kind"] not in KINDS:
        raise StudyFileError(f"{where}: kind={study['kind']!r} is not a study kind; valid kinds: {sorted(KINDS)}")
    if not isinstance(study["cells"], list) or not study["cells"]:
        raise StudyFileError(f"{where}: 'cells' must be a non-empty list of cells")
    smoke = study.pop("smoke", None) or {}
    if mode == "smoke":
        study.update(smoke)
    return study


def plan(path: str | Path | dict[str, Any], cli: list[str] | tuple[str, ...] = ()) -> Plan:
    """Expand a study file (a path, or the file already loaded) into runs; nothing runs."""
    special, extra = split_cli(list(cli))
    mode = special.get("mode", "full")
    study = load_study(path, mode)
    where = f"study {path if not isinstance(path, dict) else study['name']}"
    seeds = parse_seeds(special["seeds"], "command line") if "seeds" in special else \
        parse_seeds(study.get("seeds", list(DEFAULT_SEEDS)), where)
    gpu = special.get("gpu", study.get("gpu", "h100"))
    if "mode" in special:
        extra = [f"mode={mode}", *extra]
    backend = next((o.split("=", 1)[1] for o in reversed(extra) if o.startswith("backend=")), "sim")
    axes = study.get("axes") or {}
    points = {a: _axis_points(a, spec) for a, spec in axes.items()}
    p = Plan(study["name"], study["kind"], mode, gpu, backend, list(axes), study)
    base = dict(study.get("base") or {})
    for cell in study["cells"]:
        if not isinstance(cell, dict) or "model" not in cell:
            raise StudyFileError(f"{where}: a cell has no 'model' key: {cell}")
        if cell.get("gpus") and gpu not in cell["gpus"]:
            p.skipped.append(f"{cell['model']} (not run on {gpu})")
            continue
        only = cell.get("only") or {}
        for a in only:
            if a not in points:
                raise StudyFileError(f"{where}: cell 'only' names unknown axis {a!r}; axes: {list(points)}")
        spans = cell.get("axes", list(points))
        if not isinstance(spans, list) or set(spans) - set(points):
            raise StudyFileError(f"{where}: cell 'axes' must list some of the axes {list(points)}, got {spans!r}")
        grids = [[pt for pt in points[a] if a not in only or pt[0] in only[a]] if a in spans else [(None, {})]
                 for a in points]
        own = {k: v for k, v in cell.items() if k not in CELL_RESERVED}
        own.update((cell.get("per_gpu") or {}).get(gpu, {}))
        label = str(cell.get("label", own["model"]))
        cell_seeds = seeds if "seeds" in special or "seeds" not in cell else \
            parse_seeds(cell["seeds"], f"{where}: cell {label!r}")
        per_system = cell.get("per_system") or {}
        if "point" in cell:
            unknown = set(cell["point"]) - set(points)
            if unknown:
                raise StudyFileError(f"{where}: cell 'point' names unknown axes {sorted(unknown)}; axes: {list(points)}")
            combos = [tuple((cell["point"].get(a), {}) for a in points)]
        else:
            combos = list(itertools.product(*grids))
        baseline = cell.get("baseline", study.get("baseline", "vllm"))
        p.baselines[label] = baseline
        for combo in combos:
            ov = {**base}
            for _, o in combo:
                ov.update(o)
            ov.update(own)
            params = {a: pt[0] for a, pt in zip(points, combo)}
            systems = cell.get("systems") or study.get("systems", ["vllm", "jenga"])
            if "system" in ov:
                # An axis value (or cell) naming its own ``system``: a study variant (system plus
                # keys, e.g. marconi + flop_alpha) that replaces the systems list for this point.
                systems = [ov.pop("system")]
            unknown = sorted(set(per_system) - set(systems))
            if unknown:
                raise StudyFileError(f"{where}: cell {label}: per_system names systems the cell does not run: "
                                     f"{unknown}; its systems: {list(systems)}")
            cell_ov = [f"{k}={fmt(v)}" for k, v in ov.items()]
            for system in systems:
                sys_ov = [f"{k}={fmt(v)}" for k, v in (per_system.get(system) or {}).items()]
                for seed in cell_seeds:
                    p.runs.append(Run(label, params, system, int(seed), baseline,
                                      [f"gpu={gpu}", *cell_ov, *sys_ov, f"system={system}", f"seed={seed}", *extra]))
    return p


def label_of(run: Run) -> str:
    """``model/{grid point}/system/seed``; an axis the cell is not swept over (grid label None) is
    left out, and so is an empty grid point."""
    point = {a: v for a, v in run.params.items() if v is not None}
    return "/".join([run.model, *([str(point)] if point else []), run.system, f"seed{run.seed}"])
