"""Study files → cells.

A study file has the keys of an experiment file (``name``, ``description``, ``gpu``, ``systems``,
``seeds``, ``cells``; docs/CONTRACTS.md §3) plus:

- ``kind``: the report module (``window``, ``mix``, ``ablation``, ``lcm``, ``micro``);
- ``base``: Hydra overrides every cell gets (a cell's own keys win);
- ``axes``: ``{axis: {key: <override key>, values: [...]}}`` — the grid, a Cartesian product over
  the axes for every entry of ``cells``. A value is a scalar (set as ``key=value``) or a mapping
  ``{label: ..., overrides: {...}}`` (several overrides under one label); overrides that name
  ``system`` make that point run that one system instead of the ``systems`` list (a study's
  variants: ``{label: marconi_lru, overrides: {system: marconi, system.options.flop_alpha: 0}}``);
- ``smoke``: keys that replace the top-level ones when ``mode=smoke`` (a smaller grid for tests).

Reserved keys of a ``cells`` entry: ``systems``, ``baseline``, ``label`` (the row's model label;
default the ``model`` override), ``only`` (``{axis: [labels]}``: restrict this entry's grid) and
``point`` (``{axis: label}``: this entry is one extra point off the grid, not expanded over the
axes; its own keys are its overrides), ``seeds`` (this entry's seeds instead of the study's; a
``seeds=`` on the command line replaces both) and ``axes`` (the names of the study's axes this
entry is expanded over, default all of them; ``[]``: one cell; the others are left unset, their
grid label None).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

DEFAULT_SEEDS = (0, 1, 2)
CELL_RESERVED = ("systems", "baseline", "label", "only", "point", "seeds", "axes")
KINDS = ("window", "mix", "ablation", "lcm", "micro", "specdec", "vlm_embed", "mamba_prefix")


@dataclass
class SweepRun:
    """One cell: the model label, the grid point (axis → label), system, seed and its overrides."""

    model: str
    params: dict[str, Any]
    system: str
    seed: int
    baseline: str
    overrides: list[str]


@dataclass
class SweepPlan:
    name: str
    kind: str
    mode: str
    gpu: str
    axes: list[str]
    study: dict[str, Any]
    runs: list[SweepRun] = field(default_factory=list)


def fmt(v: Any) -> str:
    """A value as Hydra override text."""
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x) for x in v) + "]"
    return str(v)


def _axis_points(name: str, axis: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(label, overrides) for each value of one axis."""
    if "values" not in axis:
        raise ValueError(f"axis {name!r}: missing key 'values'")
    points = []
    for v in axis["values"]:
        if isinstance(v, dict):
            if "label" not in v:
                raise ValueError(f"axis {name!r}: a mapping value needs a 'label' key, got {v}")
            points.append((v["label"], dict(v.get("overrides") or {})))
        else:
            if "key" not in axis:
                raise ValueError(f"axis {name!r}: scalar values need the axis's 'key' (the override to set)")
            points.append((v, {axis["key"]: v}))
    return points


def load_study(path: str | Path, mode: str = "full") -> dict[str, Any]:
    """The study file as a dict, with its ``smoke`` section applied when ``mode=smoke``."""
    study = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    for key in ("name", "kind", "cells"):
        if key not in study:
            raise ValueError(f"study {path}: missing key {key!r}")
    if study["kind"] not in KINDS:
        raise ValueError(f"study {path}: kind={study['kind']!r} is not valid; allowed: {list(KINDS)}")
    smoke = study.pop("smoke", None) or {}
    if mode == "smoke":
        study.update(smoke)
    return study


def plan(path: str | Path, cli: list[str] = ()) -> SweepPlan:
    """Expand a study file into runs. ``cli``: ``key=value`` overrides for every cell, plus
    ``seeds=0,1,2`` (replaces the file's seeds) and ``gpu=``/``mode=``."""
    from harness import cli as shared

    special, extra = shared.split_cli(cli)
    mode = special.get("mode", "full")
    study = load_study(path, mode)
    seeds = shared.parse_seeds(special["seeds"], "command line") if "seeds" in special else \
        shared.parse_seeds(study.get("seeds", list(DEFAULT_SEEDS)), f"study {path}")
    gpu = special.get("gpu", study.get("gpu", "h100"))
    if "mode" in special:
        extra = [f"mode={mode}", *extra]
    axes = study.get("axes") or {}
    points = {a: _axis_points(a, spec) for a, spec in axes.items()}
    p = SweepPlan(study["name"], study["kind"], mode, gpu, list(axes), study)
    base = dict(study.get("base") or {})
    for cell in study["cells"]:
        if "model" not in cell:
            raise ValueError(f"study {path}: a cell has no 'model' key: {cell}")
        only = cell.get("only") or {}
        for a in only:
            if a not in points:
                raise ValueError(f"study {path}: cell 'only' names unknown axis {a!r}; axes: {list(points)}")
        spans = cell.get("axes", list(points))
        if not isinstance(spans, list) or set(spans) - set(points):
            raise ValueError(f"study {path}: cell 'axes' must list some of the axes {list(points)}, got {spans!r}")
        grids = [[pt for pt in points[a] if a not in only or pt[0] in only[a]] if a in spans else [(None, {})]
                 for a in points]
        own = {k: v for k, v in cell.items() if k not in CELL_RESERVED}
        label = str(cell.get("label", cell["model"]))
        cell_seeds = seeds if "seeds" in special or "seeds" not in cell else \
            shared.parse_seeds(cell["seeds"], f"study {path}: cell {label!r}")
        if "point" in cell:
            unknown = set(cell["point"]) - set(points)
            if unknown:
                raise ValueError(f"study {path}: cell 'point' names unknown axes {sorted(unknown)}; axes: {list(points)}")
            combos = [tuple((cell["point"].get(a), {}) for a in points)]
        else:
            combos = list(itertools.product(*grids))
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
            cell_ov = [f"{k}={fmt(v)}" for k, v in ov.items()]
            for system in systems:
                for seed in cell_seeds:
                    p.runs.append(SweepRun(label, params, system, seed, cell.get("baseline", study.get(
                        "baseline", "vllm")), [f"gpu={gpu}", *cell_ov, f"system={system}", f"seed={seed}", *extra]))
    return p
