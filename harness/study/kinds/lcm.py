"""LCM blow-up table and churn report.

The table covers every model config of the zoo (``harness.tools.pages.zoo_frame``): per layer type its
small page, the model's LCM large page and the type's large/small ratio — the number of small
pages a request of that type may strand in one large page. The churn part summarises, per model,
request rate and system, the time-averaged large-page occupancy and the share of allocations that
took each path of the LCM allocator (``usage().path_counts``).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

ALLOC_PATHS = ("request_hit", "new_large", "evict_large", "steal", "any_free_small", "evict_small")
FALLBACK = ("steal", "any_free_small", "evict_small")


def churn_rows(p: Plan, records: list[dict]) -> pd.DataFrame:
    df = stats.rows(p.runs, records)
    counts = df[[f"path_{k}" for k in ALLOC_PATHS]].apply(pd.to_numeric, errors="coerce").fillna(0)
    total = counts.sum(axis=1).replace(0, np.nan)
    for k in ALLOC_PATHS:
        df[f"frac_{k}"] = counts[f"path_{k}"] / total
    df["frac_fallback"] = sum(counts[f"path_{k}"] for k in FALLBACK) / total
    df["retry_tight_per_1k"] = 1000 * pd.to_numeric(df["path_retry_tight"], errors="coerce").fillna(0) / total
    df["allocations"] = total
    df["rate"] = df["rate"].astype(float)
    return df


def plot(table: pd.DataFrame, summary: pd.DataFrame, p: Plan, out: Path) -> Path:
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 6.2), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    per_model = table.groupby("model", sort=False)["model_max_ratio"].max().sort_values()
    ax1.barh(per_model.index, per_model.to_numpy(), color=["#d62728" if v > 8 else "#1f77b4" for v in per_model])
    for y, v in enumerate(per_model.to_numpy()):
        ax1.text(v * 1.05, y, f"{v}×", va="center", fontsize=6)
    ax1.set_xscale("log")
    ax1.set_xlabel("largest large-page / small-page ratio of the model (log)")
    ax1.set_title(f"LCM blow-up over the zoo ({int(table.tokens_per_page.iloc[0])} tokens/small page)", fontsize=9)
    ax1.tick_params(axis="y", labelsize=6)
    finite = summary[np.isfinite(summary["rate"])]
    for i, (model, g) in enumerate(summary.groupby("model", sort=False)):
        for sysname, ls, mk in (("jenga", "-", "o"), ("jenga_no_request_aware", "--", "s")):
            s = g[g["system"] == sysname].sort_values("rate")
            x = s["rate"].replace(np.inf, s["rate"][np.isfinite(s["rate"])].max() * 2 if len(finite) else 1.0)
            lbl = f"{model} ({'Jenga' if sysname == 'jenga' else 'w/o request-aware'})"
            ax2.errorbar(x, 100 * s["large_page_occupancy"], yerr=np.nan_to_num(100 * np.vstack(
                [s["large_page_occupancy"] - s["large_page_occupancy_ci_lo"],
                 s["large_page_occupancy_ci_hi"] - s["large_page_occupancy"]])), color=f"C{i}", linestyle=ls,
                marker=mk, ms=4, capsize=2, label=lbl)
            ax3.plot(x, 100 * s["frac_fallback"], color=f"C{i}", linestyle=ls, marker=mk, ms=4, label=lbl)
    for ax in (ax2, ax3):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("request rate (req/s, Poisson; rightmost point per line = all at t=0)")
        ax.grid(alpha=0.3, linewidth=0.4)
    ax2.set_ylabel("large pages in use (% of the pool's large pages, time-avg.)")
    ax2.set_title("large-page occupancy under churn", fontsize=9)
    ax2.legend(fontsize=6, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # off the data
    ax3.set_ylabel("small pages from a shared, partly used large page (%)")
    ax3.set_title("fallback-path frequency (steal + any free small + evict small)", fontsize=9)
    ax3.text(0.02, 0.5, "Jenga (solid): each request fills its own large pages first;\n"
             "w/o request-aware (dashed) this is the normal path", transform=ax3.transAxes, fontsize=7)
    fig.suptitle(f"LCM page geometry and the two-level allocator under churn on {p.gpu.upper()} (simulated); "
                 "no published values", fontsize=9)
    rp.footer(fig, p)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    return rp.save(fig, out, p)


def report(p: Plan, records: list[dict], out: Path, zoo_geometry: pd.DataFrame) -> pd.DataFrame:
    """``zoo_geometry``: the LCM page geometry of every zoo model (:func:`harness.tools.pages.zoo_frame`),
    written by the study runner (a kind input, :mod:`harness.study.inputs`)."""
    table = zoo_geometry
    rp.write_csv(table, out, "lcm_table", p)
    worst = table.sort_values("model_max_ratio", ascending=False).drop_duplicates("model").head(5)
    print("largest LCM blow-ups: " + ", ".join(f"{r.model} {r.model_max_ratio}×" for r in worst.itertuples()))
    df = churn_rows(p, records)
    metrics = ["throughput_req_s", "large_page_occupancy", "frac_fallback", "retry_tight_per_1k", "allocations",
               "waste_fraction", "waste_fragmentation", "preemptions"] + [f"frac_{k}" for k in ALLOC_PATHS]
    df = stats.add_speedup(df, ["model", "rate"])
    summary = stats.aggregate(df, ["model", "rate", "system", "baseline"], metrics + ["speedup"])
    rp.write_csv(summary, out, "summary", p)
    rp.print_table(summary, ["model", "rate", "system", "throughput_req_s", "large_page_occupancy",
                                 "frac_request_hit", "frac_new_large", "frac_evict_large", "frac_fallback",
                                 "retry_tight_per_1k", "seeds", "failed"])
    m = rp.means_table(summary, ["model"])
    rp.write_csv(m, out, "means", p)
    for r in m.itertuples():
        if not math.isnan(r.geo_mean):
            print(f"{r.model}: Jenga / Jenga w/o request-aware throughput, geometric mean {r.geo_mean:.3f}, "
                  f"arithmetic {r.arith_mean:.3f} over {r.n} rates")
    if len(summary):
        print(f"figure: {plot(table, summary, p, out)}")
    return summary
