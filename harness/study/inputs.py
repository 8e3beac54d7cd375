"""Kind inputs: what a report needs beyond its records that is not a cell's own result, computed by
the study runner from the zoo's configs before the report runs (reports themselves read records
and these inputs only, never a config; tests/test_layering.py). A kind names its inputs in the
registry (:attr:`harness.study.kinds.Kind.inputs`); each arrives as a keyword of its ``report``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from harness.config import compose_cell
from harness.models import load_profile
from harness.study.plan import Plan
from harness.tools.pages import zoo_frame
from harness.tools.waste import analytic_waste


def zoo_geometry(p: Plan):
    """The LCM page geometry of every zoo model (or the study's ``zoo:`` list), one row per layer type."""
    return zoo_frame(int(p.study.get("tokens_per_page", 16)), p.study.get("zoo"))


# Image-token counts of the mix study's analytic curves.
CURVE_IMAGES = np.arange(0, 6405, 64)


def analytic_curves(p: Plan) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For the study's first model: text tokens -> (image tokens, analytic uniform-paging waste) at
    each of :data:`CURVE_IMAGES` (one curve per text length of the plan)."""
    model = [o for o in p.runs[0].overrides if o.startswith("model=")]
    prof = load_profile(compose_cell(model).model)
    texts = sorted({int(float(r.params["text"])) for r in p.runs if r.params.get("text") is not None})
    return {t: (CURVE_IMAGES, np.array([analytic_waste(prof, t, int(i)).waste_fraction for i in CURVE_IMAGES]))
            for t in texts}


INPUTS: dict[str, Callable[[Plan], Any]] = {"zoo_geometry": zoo_geometry, "analytic_curves": analytic_curves}


def inputs_for(names: tuple[str, ...], p: Plan) -> dict[str, Any]:
    return {name: INPUTS[name](p) for name in names}
