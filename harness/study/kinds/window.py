"""Window-length sweep report: speedup and waste against request length / window.

Rows: model × window × length × system, seed means with 95 % CIs. The figure plots speedup and
waste against the request length with one line per window (the window and the length are separate
axes); ``length_over_window`` stays in the summary: at or below 1 a request never leaves its
window, its sliding layers need every token like full attention, and Jenga's gain vanishes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.plots import FONT, paper_name, save
from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

METRICS = ["throughput_req_s", "speedup", "waste_fraction", "waste_unneeded", "waste_fragmentation",
           "mean_decode_batch", "preemptions", "num_ignored"]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def summarize(p: Plan, records: list[dict]) -> pd.DataFrame:
    df = stats.add_speedup(stats.rows(p.runs, records), ["model", "window", "length"])
    out = stats.aggregate(df, ["model", "window", "length", "system", "baseline"], METRICS)
    out["length_over_window"] = out["length"].astype(float) / out["window"].astype(float)
    return out


def plot(summary: pd.DataFrame, p: Plan, out: Path) -> Path:
    """:func:`draw` saved as ``<out>/window_sweep[_suffix].png`` and ``.pdf``."""
    return save(draw(summary, p), out / f"{p.name}{rp.suffix(p)}.png")


def draw(summary: pd.DataFrame, p: Plan) -> plt.Figure:
    """Two rows of panels, one column per model: Jenga's speedup over vLLM (95 % CI) and both
    systems' KV waste against the request length, one line per sliding window. The window and the
    length are separate axes (a 4096/512 and a 32768/4096 cell share a ratio, not a point); a
    marker sits where the request length equals the window."""
    models = list(dict.fromkeys(summary["model"]))
    windows = sorted(set(summary["window"]))
    with plt.rc_context(FONT):
        fig, axes = plt.subplots(2, len(models), figsize=(max(3.5, 2.0 * len(models) + 1.0), 4.4), sharex=True,
                                 squeeze=False)
        for col, model in enumerate(models):
            ax1, ax2 = axes[0][col], axes[1][col]
            for i, w in enumerate(windows):
                c, mk = f"C{i}", MARKERS[i % len(MARKERS)]
                g = summary[(summary["model"] == model) & (summary["window"] == w)]
                j = g[g["system"] == "jenga"].sort_values("length")
                if len(j):
                    err = np.nan_to_num(np.vstack([j["speedup"] - j["speedup_ci_lo"], j["speedup_ci_hi"] - j["speedup"]]),
                                        nan=0.0).clip(min=0)
                    ax1.errorbar(j["length"], j["speedup"], yerr=err, color=c, marker=mk, ms=3.5, capsize=2,
                                 linewidth=1.0, label=f"window {w}")
                    ax2.plot(j["length"], j["waste_fraction"] * 100, color=c, marker=mk, ms=3.5, mfc="none",
                             linewidth=1.0, linestyle="--")
                v = g[g["system"] == "vllm"].sort_values("length")
                if len(v):
                    ax2.plot(v["length"], v["waste_fraction"] * 100, color=c, marker=mk, ms=3.5, linewidth=1.0)
            ax1.set_title(paper_name(model))
            ax1.axhline(1.0, color="gray", linewidth=0.6)
            for ax in (ax1, ax2):
                ax.set_xscale("log", base=2)
                ax.grid(alpha=0.3, which="major", linewidth=0.4)
            ax2.set_xlabel("request length (tokens)")
        axes[0][0].set_ylabel("Jenga / vLLM throughput (×)")
        axes[1][0].set_ylabel("KV waste (% of allocated)")
        handles, labels = axes[0][0].get_legend_handles_labels()
        from matplotlib.lines import Line2D

        handles += [Line2D([], [], color="black", linewidth=1.0), Line2D([], [], color="black", linestyle="--",
                                                                        marker="o", mfc="none", ms=3.5)]
        labels += ["waste: vLLM", "waste: Jenga"]
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(labels), 6),
                   frameon=False)
        fig.suptitle(f"Window-length sweep on {p.gpu.upper()} (simulated), mode={p.mode}; mean of seeds, 95 % CI; "
                     "no published values", y=1.08)
        rp.footer(fig, p)
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        return fig


def report(p: Plan, records: list[dict], out: Path) -> pd.DataFrame:
    summary = summarize(p, records)
    rp.write_csv(summary, out, "summary", p)
    j = summary[summary["system"] == "jenga"]
    rp.print_table(j, ["model", "window", "length", "length_over_window", "speedup", "speedup_ci_lo",
                           "speedup_ci_hi", "waste_fraction", "seeds", "failed"])
    m = rp.means_table(summary, ["model"])
    rp.write_csv(m, out, "means", p)
    print("\nJenga speedup over the grid per model (geometric / arithmetic mean):")
    for r in m.itertuples():
        print(f"  {r.model}: {r.geo_mean:.3f} / {r.arith_mean:.3f} over {r.n} points")
    inside = j[j["length_over_window"] <= 1]["speedup"]
    outside = j[j["length_over_window"] >= 8]["speedup"]
    if len(inside) and len(outside):
        print(f"requests within their window (length/window <= 1): geo-mean speedup {stats.means(inside)['geo_mean']:.3f}; "
              f"length/window >= 8: {stats.means(outside)['geo_mean']:.3f}")
    if len(summary):
        print(f"figure: {plot(summary, p, out)}")
    return summary
