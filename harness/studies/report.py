"""What the specdec, vlm_embed and mamba_prefix reports share: the report itself
(:func:`summarize_write_plot`), the record fields their per-seed rows keep, the file names, and the
bar figures' CI whiskers, legend and "simulated" title."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pandas as pd

from harness import plots
from harness.sweeps import common, stats
from harness.sweeps.plan import SweepPlan

# Record metrics a study's per-seed row keeps beyond stats.ROW_FIELDS (contract §4's latency
# percentiles, token counts), so summary.csv holds every metric of the record.
RECORD_FIELDS = ("total_tok_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_mean", "prefix_hit_tokens",
                 "prompt_tokens", "recomputed_tokens", "simulated_s")


def override(run, key: str):
    """The value of ``key=...`` among a planned run's overrides (a string), None if absent."""
    return next((o.split("=", 1)[1] for o in run.overrides if o.split("=", 1)[0] == key), None)


def write(df: pd.DataFrame, agg: pd.DataFrame, p: SweepPlan, out: Path) -> None:
    """``summary.csv`` (one row per cell and seed, full precision, with provenance) and
    ``summary_mean.csv`` (seed means, 95 % CIs), ``_smoke``-suffixed in smoke mode; prints the means."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"summary{common.suffix(p)}.csv", index=False)
    agg.to_csv(out / f"summary_mean{common.suffix(p)}.csv", index=False)
    common.print_table(agg, [c for c in agg if not c.endswith(("_ci_lo", "_ci_hi")) and c not in stats.PROVENANCE])


def figure_path(p: SweepPlan, out: Path) -> Path:
    return out / f"{p.name}{common.suffix(p)}.png"


def summarize_write_plot(p: SweepPlan, records: list[dict], out: Path, summarize, plot, *plot_args) -> pd.DataFrame:
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
