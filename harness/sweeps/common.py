"""What every study report shares: file names, the means table, the figure footer."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.sweeps import stats
from harness.sweeps.plan import SweepPlan


def suffix(p: SweepPlan) -> str:
    """``_smoke``/``_<gpu>`` for runs other than the study's default, so references stay intact."""
    parts = [x for x, d in ((p.mode, "full"), (p.gpu, p.study.get("gpu", "h100"))) if x != d]
    return "".join(f"_{x}" for x in parts)


def write_csv(df: pd.DataFrame, out: Path, stem: str, p: SweepPlan) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}{suffix(p)}.csv"
    df.to_csv(path, index=False, float_format="%.6g")
    return path


def means_table(summary: pd.DataFrame, by: list[str], system_col: str = "system") -> pd.DataFrame:
    """Geometric and arithmetic means of the seed-mean speedups per ``by`` group (non-baseline rows)."""
    rows = []
    s = summary[summary[system_col] != summary.get("baseline", "vllm")] if "baseline" in summary else summary
    for key, g in s.groupby(by, sort=False):
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), **stats.means(g["speedup"])})
    return pd.DataFrame(rows)


def footer(fig: plt.Figure, p: SweepPlan) -> None:
    """Provenance line under every figure: simulated, GPU, mode, seeds."""
    seeds = sorted({r.seed for r in p.runs})
    fig.text(0.01, 0.005, f"simulated (sim backend, {p.gpu.upper()}), mode={p.mode}, seeds={seeds}; "
             f"mean ± 95% CI over seeds; study file experiments/{p.name}.yaml", fontsize=7, color="#555555")


def save(fig: plt.Figure, out: Path, p: SweepPlan) -> Path:
    """``<out>/<study>[_suffix].png`` and ``.pdf`` (:func:`harness.plots.save`)."""
    from harness.plots import save as save_png_pdf

    return save_png_pdf(fig, out / f"{p.name}{suffix(p)}.png")


def print_table(df: pd.DataFrame, cols: list[str]) -> None:
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.max_rows", 400):
        print(df[[c for c in cols if c in df]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
