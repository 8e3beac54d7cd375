"""Window-length sweep report (issue 6 item 1): speedup and waste against request length / window.

Rows: model × window × length × system, seed means with 95 % CIs. The figure puts every grid point
on one axis, ``length / window``: at or below 1 a request never leaves its window, its sliding
layers need every token like full attention, and Jenga's gain vanishes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.sweeps import common, stats
from harness.sweeps.plan import SweepPlan

METRICS = ["throughput_req_s", "speedup", "waste_fraction", "waste_unneeded", "waste_fragmentation",
           "mean_decode_batch", "preemptions", "num_ignored"]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def summarize(p: SweepPlan, records: list[dict]) -> pd.DataFrame:
    df = stats.add_speedup(stats.rows(p.runs, records), ["model", "window", "length"])
    out = stats.aggregate(df, ["model", "window", "length", "system", "baseline"], METRICS)
    out["length_over_window"] = out["length"].astype(float) / out["window"].astype(float)
    return out


def plot(summary: pd.DataFrame, p: SweepPlan, out: Path) -> Path:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    j = summary[summary["system"] == "jenga"]
    v = summary[summary["system"] == "vllm"]
    for i, (model, g) in enumerate(j.groupby("model", sort=False)):
        g = g.sort_values("length_over_window")
        err = np.vstack([g["speedup"] - g["speedup_ci_lo"], g["speedup_ci_hi"] - g["speedup"]])
        err = np.nan_to_num(err, nan=0.0)
        c = f"C{i}"
        ax1.errorbar(g["length_over_window"], g["speedup"], yerr=err, fmt=MARKERS[i % 6], color=c, ms=5,
                     capsize=2, linestyle="none", label=model)
        vv = v[v["model"] == model].sort_values("length_over_window")
        ax2.scatter(vv["length_over_window"], vv["waste_fraction"] * 100, marker=MARKERS[i % 6], color=c, s=22,
                    label=f"{model}: vLLM")
        ax2.scatter(g["length_over_window"], g["waste_fraction"] * 100, marker=MARKERS[i % 6], facecolors="none",
                    edgecolors=c, s=22, label=f"{model}: Jenga")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.axvline(1.0, color="black", linestyle=":", linewidth=0.8)
        ax.set_xlabel("request length / sliding window (log2)")
        ax.grid(alpha=0.3, which="both", linewidth=0.4)
    ax1.axhline(1.0, color="gray", linewidth=0.6)
    ax1.text(0.02, 0.62, "left of the dotted line: requests fit their window,\nsliding = full attention, no gain",
             transform=ax1.transAxes, fontsize=7, ha="left", va="top")
    ax1.set_ylabel("Jenga throughput / vLLM throughput (×)")
    ax1.set_title("Jenga speedup over vLLM (PagedAttention)", fontsize=10)
    ax1.legend(fontsize=7, frameon=False, loc="upper left")
    ax2.set_ylabel("KV memory waste (% of allocated, time-averaged)")
    ax2.set_title("waste: vLLM (filled) vs Jenga (hollow)", fontsize=10)
    ax2.legend(fontsize=6, frameon=False, ncol=2, loc="center left")
    fig.suptitle(f"Window-length sweep on {p.gpu.upper()} (simulated): windows "
                 f"{sorted(set(summary['window']))}, request lengths {sorted(set(summary['length']))} tokens; "
                 "no published values (the paper runs only native windows)", fontsize=9)
    common.footer(fig, p)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    return common.save(fig, out, p)


def report(p: SweepPlan, records: list[dict], out: Path) -> pd.DataFrame:
    summary = summarize(p, records)
    common.write_csv(summary, out, "summary", p)
    j = summary[summary["system"] == "jenga"]
    common.print_table(j, ["model", "window", "length", "length_over_window", "speedup", "speedup_ci_lo",
                           "speedup_ci_hi", "waste_fraction", "seeds", "failed"])
    m = common.means_table(summary, ["model"])
    common.write_csv(m, out, "means", p)
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
