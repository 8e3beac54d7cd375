"""Ablation ladder report: vllm → max_page → hybrid_groups → static_partition →
jenga_no_request_aware → jenga → oracle, per model, normalised to the model's baseline.

Attribution (per model, on the log scale of the seed-mean speedups): ``freeing_share`` =
ln(hybrid_groups) / ln(jenga) is the part of Jenga's gain that per-type freeing with equal pages
(today's vLLM hybrid manager, no LCM allocator) already gets; the rest comes from the LCM
allocator with its request-aware placement (``request_aware_share`` = ln(jenga /
jenga_no_request_aware) / ln(jenga)). NaN where Jenga's own gain is under 2 %.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.analysis import paper_model, paper_table
from harness.plots import SYSTEM_COLORS, SYSTEM_LABELS, paper_name
from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

LADDER = ["vllm", "max_page", "hybrid_groups", "static_partition", "jenga_no_request_aware", "jenga", "oracle"]
METRICS = ["throughput_req_s", "speedup", "waste_fraction", "waste_unneeded", "waste_fragmentation",
           "mean_decode_batch", "preemptions", "prefix_hit_rate", "num_ignored"]


def _paper(summary: pd.DataFrame, gpu: str) -> pd.Series:
    t = paper_table("fig14", gpu)
    if t.empty:
        return pd.Series([np.nan] * len(summary), index=summary.index)
    out = []
    for r in summary.itertuples():
        pm = paper_model(r.model)
        rows = t[(t.paper_model == pm)].set_index("system")
        if r.system not in rows.index:
            out.append(np.nan)
        elif r.baseline != "vllm" and r.baseline in rows.index:
            out.append(rows.loc[r.system, "paper_throughput"] / rows.loc[r.baseline, "paper_throughput"])
        else:
            out.append(rows.loc[r.system, "paper_speedup"])
    return pd.Series(out, index=summary.index)


def attribution(summary: pd.DataFrame) -> pd.DataFrame:
    """Per model: the speedups of the ladder's key rungs and the log-scale shares of Jenga's gain."""
    rows = []
    for model, g in summary.groupby("model", sort=False):
        s = g.set_index("system")["speedup"].to_dict()
        sj, sh, snra = s.get("jenga", np.nan), s.get("hybrid_groups", np.nan), s.get("jenga_no_request_aware", np.nan)
        ok = np.isfinite(sj) and sj > 1.02
        rows.append({"model": model, "baseline": g["baseline"].iloc[0], "jenga": sj, "hybrid_groups": sh,
                     "jenga_no_request_aware": snra, "oracle": s.get("oracle", np.nan),
                     "freeing_share": math.log(sh) / math.log(sj) if ok and np.isfinite(sh) and sh > 0 else np.nan,
                     "request_aware_share": math.log(sj / snra) / math.log(sj) if ok and np.isfinite(snra) and snra > 0
                     else np.nan,
                     "oracle_headroom": s.get("oracle", np.nan) / sj if np.isfinite(sj) else np.nan})
    return pd.DataFrame(rows)


def plot(summary: pd.DataFrame, p: Plan, out: Path, means: pd.DataFrame) -> Path:
    models = list(dict.fromkeys(summary["model"]))
    fig, ax = plt.subplots(figsize=(max(9.0, 1.9 * len(models) + 2), 5.0))
    w, pos, centers, seen, ymax = 0.11, 0.0, [], set(), 1.0
    for m in models:
        g = summary[summary["model"] == m].set_index("system")
        start = pos
        for s in LADDER:
            if s not in g.index:
                continue
            r = g.loc[s]
            if r["seeds"] == 0 or not np.isfinite(r["speedup"]):
                ax.text(pos, 0.02, "×", ha="center", color="red", fontsize=10)
            else:
                lo, hi = r["speedup"] - r["speedup_ci_lo"], r["speedup_ci_hi"] - r["speedup"]
                yerr = None if not (np.isfinite(lo) and np.isfinite(hi)) else [[lo], [hi]]
                ax.bar(pos, r["speedup"], w, color=SYSTEM_COLORS.get(s), edgecolor="black", linewidth=0.3,
                       yerr=yerr, capsize=1.5, error_kw={"linewidth": 0.6},
                       label=None if s in seen else f"{SYSTEM_LABELS.get(s, s)} (ours)")
                seen.add(s)
                ymax = max(ymax, r["speedup"])
            if np.isfinite(r.get("paper_speedup", np.nan)):
                ax.scatter(pos, r["paper_speedup"], marker="_", s=120, color="black", zorder=4,
                           label=None if "paper" in seen else "paper Fig. 14 (published bar)")
                seen.add("paper")
                ymax = max(ymax, r["paper_speedup"])
            pos += w
        centers.append((start + pos - w) / 2)
        pos += 0.35
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xticks(centers)
    ax.set_xticklabels([f"{paper_name(m)}\n(÷ {SYSTEM_LABELS.get(b, b)})" for m in models
                        for b in [summary[summary.model == m].baseline.iloc[0]]], fontsize=7)
    ax.set_ylabel("request throughput / baseline (×)")
    ax.set_ylim(0, ymax * 1.1)
    # Above the axes, off the bars.
    ax.legend(fontsize=7, ncol=4, frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    j = means[means["system"] == "jenga"]
    h = means[means["system"] == "hybrid_groups"]
    txt = ""
    if len(j) and len(h):
        txt = (f"; geo-mean Jenga {j.geo_mean.iloc[0]:.2f}× (arith {j.arith_mean.iloc[0]:.2f}×), "
               f"hybrid groups {h.geo_mean.iloc[0]:.2f}× (arith {h.arith_mean.iloc[0]:.2f}×)")
    ax.set_title(f"Ablation ladder on {p.gpu.upper()} (simulated): what per-type freeing vs the LCM allocator buys"
                 f"{txt}", fontsize=9, pad=40)
    rp.footer(fig, p)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return rp.save(fig, out, p)


def report(p: Plan, records: list[dict], out: Path) -> pd.DataFrame:
    df = stats.add_speedup(stats.rows(p.runs, records), ["model"])
    summary = stats.aggregate(df, ["model", "system", "baseline"], METRICS)
    if summary.empty:
        return summary
    summary["rung"] = summary["system"].map({s: i for i, s in enumerate(LADDER)})
    summary = summary.sort_values(["model", "rung"], kind="stable")
    # Smoke cells are tiny: no comparison with the paper's bars.
    summary["paper_speedup"] = _paper(summary, p.gpu).to_numpy() if p.mode != "smoke" else np.nan
    rp.write_csv(summary, out, "summary", p)
    rp.print_table(summary, ["model", "system", "throughput_req_s", "speedup", "speedup_ci_lo", "speedup_ci_hi",
                                 *(["paper_speedup"] if p.mode != "smoke" else []), "waste_fraction", "preemptions",
                                 "seeds", "failed"])
    means = rp.means_table(summary[summary["system"] != summary["baseline"]], ["system"])
    rp.write_csv(means, out, "means", p)
    print("\nspeedup over the baseline, across models (geometric / arithmetic mean):")
    for r in means.itertuples():
        print(f"  {r.system:<24} {r.geo_mean:.3f} / {r.arith_mean:.3f}  ({r.n} models)")
    att = attribution(summary)
    rp.write_csv(att, out, "attribution", p)
    print("\nshare of Jenga's (log) gain already reached by per-type freeing without LCM (hybrid_groups):")
    rp.print_table(att, ["model", "jenga", "hybrid_groups", "jenga_no_request_aware", "oracle", "freeing_share",
                             "request_aware_share", "oracle_headroom"])
    print(f"figure: {plot(summary, p, out, means)}")
    return summary
