"""What every study report shares: file names, tables, the means table, figure footers, and the
whole ``report()`` of the bar-figure kinds (specdec, vlm_embed, mamba_prefix,
:func:`summarize_write_plot`). Reports read records only (never recompose a cell)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness import plots
from harness.study import stats
from harness.study.plan import Plan

# Record metrics a study's per-seed row keeps beyond stats.ROW_FIELDS (contract §4's latency
# percentiles, token counts), so summary.csv holds every metric of the record.
RECORD_FIELDS = ("total_tok_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_mean", "prefix_hit_tokens",
                 "prompt_tokens", "recomputed_tokens", "simulated_s")


def suffix(p: Plan) -> str:
    """``_smoke``/``_<gpu>``/``_<backend>`` for runs other than the study's default (:meth:`Plan.suffix`)."""
    return p.suffix()


def write_csv(df: pd.DataFrame, out: Path, stem: str, p: Plan) -> Path:
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


def footer(fig: plt.Figure, p: Plan) -> None:
    """Provenance line under every figure: simulated, GPU, mode, seeds."""
    seeds = sorted({r.seed for r in p.runs})
    fig.text(0.01, 0.005, f"simulated (sim backend, {p.gpu.upper()}), mode={p.mode}, seeds={seeds}; "
             f"mean ± 95% CI over seeds; study file experiments/{p.name}.yaml", fontsize=7, color="#555555")


def save(fig: plt.Figure, out: Path, p: Plan) -> Path:
    """``<out>/<study>[_suffix].png`` and ``.pdf`` (:func:`harness.plots.save`)."""
    return plots.save(fig, figure_path(p, out))


def print_table(df: pd.DataFrame, cols: list[str]) -> None:
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.max_rows", 400):
        print(df[[c for c in cols if c in df]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))


def override(run, key: str):
    """The value of ``key=...`` among a planned run's overrides (a string), None if absent."""
    return next((o.split("=", 1)[1] for o in run.overrides if o.split("=", 1)[0] == key), None)


def write(df: pd.DataFrame, agg: pd.DataFrame, p: Plan, out: Path) -> None:
    """``summary.csv`` (one row per cell and seed, full precision, with provenance) and
    ``summary_mean.csv`` (seed means, 95 % CIs), ``_smoke``-suffixed in smoke mode; prints the means."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"summary{suffix(p)}.csv", index=False)
    agg.to_csv(out / f"summary_mean{suffix(p)}.csv", index=False)
    print_table(agg, [c for c in agg if not c.endswith(("_ci_lo", "_ci_hi")) and c not in stats.PROVENANCE])


def figure_path(p: Plan, out: Path) -> Path:
    return out / f"{p.name}{suffix(p)}.png"


def summarize_write_plot(p: Plan, records: list[dict], out: Path, summarize, plot, *plot_args) -> pd.DataFrame:
    """The whole ``report()`` of specdec, vlm_embed and mamba_prefix: ``summarize(p, records)`` ->
    (per-seed rows, seed means), :func:`write` both, ``plot(rows, figure path, mode, *plot_args)``;
    prints the figure's path and returns the means."""
    df, agg = summarize(p, records)
    write(df, agg, p, out)
    print(f"figure: {plot(df, figure_path(p, out), p.mode, *plot_args)}")
    return agg


def yerr(agg: pd.DataFrame, metric: str, scale: float = 1.0):
    """Matplotlib error-bar extents of an aggregated metric (None where the CI is undefined)."""
    lo = (agg[metric] - agg[f"{metric}_ci_lo"]) * scale
    hi = (agg[f"{metric}_ci_hi"] - agg[metric]) * scale
    if lo.isna().all():
        return None
    return [lo.fillna(0).to_numpy(), hi.fillna(0).to_numpy()]


def finish(fig, legend_ax, title: str, path: Path, ncol: int = 3) -> Path:
    """Shared legend under the panels, a suptitle (which says "simulated"), save as PNG + PDF
    (:func:`harness.plots.save`), close."""
    handles, labels = legend_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, ncol), fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return plots.save(fig, path, dpi=130, bbox_inches=None)


def sim_label(mode: str) -> str:
    return f"simulated (sim backend), mode={mode}"


def config_value(rec: dict, key: str):
    """A value of the record's resolved cell config (``engine.draft_model``), None if absent."""
    node = (rec.get("provenance") or {}).get("config") or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
