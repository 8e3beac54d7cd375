"""Image/text-mix sweep report: uniform-paging waste, analytic and simulated, and
Jenga's speedup against the image share ``I / (T + I)`` of Llama-3.2-11B-Vision requests.

The analytic waste of a cell is computed over its actual requests (seed 0's workload):
``1 − Σ ideal / Σ uniform`` with :func:`harness.tools.waste.analytic_waste` at each prompt, so the
MMMU-pro tile mix and the chat mix (images on some requests only) are exact too. The dense curves
are the same formula for fixed text lengths and image tokens 0 … 6404.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.analysis import paper_table
from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

METRICS = ["throughput_req_s", "speedup", "waste_fraction", "waste_unneeded", "waste_fragmentation",
           "mean_decode_batch", "preemptions", "kv_capacity_bytes"]
PAPER_POINT = (43, 6193, 0.796)   # Jenga arXiv v1 §3.2: 43 text + 6193 image tokens → 79.6 % waste


def summarize(p: Plan, records: list[dict]) -> pd.DataFrame:
    df = stats.add_speedup(stats.rows(p.runs, records), ["model", "image", "text"])
    out = stats.aggregate(df, ["model", "image", "text", "system", "baseline"], METRICS)
    img, txt = out["image"].astype(float), out["text"].astype(float)
    out["image_share"] = img / (img + txt)
    # The analytic uniform-paging waste of each grid point's workload, as its cell recorded it
    # (harness.run: record["workload"]); the point's first run that has it.
    first: dict[tuple, float] = {}
    for r, rec in zip(p.runs, records):
        waste = (rec.get("workload") or {}).get("analytic_waste_uniform")
        if waste is not None:
            first.setdefault((r.model, r.params["image"], r.params["text"]), waste)
    out["analytic_waste_vllm"] = [first.get((r.model, r.image, r.text), np.nan) for r in out.itertuples()]
    return out


def _paper_speedup(gpu: str) -> float | None:
    t = paper_table("fig14", gpu)
    t = t[t["paper_model"] == "mllama"].set_index("system")
    return float(t.loc["jenga", "paper_speedup"]) if "jenga" in t.index else None


def plot(summary: pd.DataFrame, p: Plan, out: Path, curves: dict[int, tuple[np.ndarray, np.ndarray]]) -> Path:
    """``curves``: text tokens -> (image tokens, analytic waste) (:func:`harness.study.inputs.analytic_curves`)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 6.0))
    texts = sorted({int(float(t)) for t in summary["text"]})
    grid = summary[summary["model"] == p.runs[0].model]
    grid_texts = sorted({int(float(t)) for t in grid["text"]})
    for i, t in enumerate(grid_texts or texts):
        # For mllama the analytic waste depends on the image share only (every curve coincides);
        # draw each text length anyway so a model where it does not would show it.
        images, waste = curves[t]
        share = images / (images + t)
        ax1.plot(share, 100 * waste, color="gray", linewidth=1.2, alpha=0.8,
                 label="analytic, text " + ", ".join(map(str, grid_texts)) + " tokens (curves coincide)"
                 if i == 0 else None)
    v = summary[summary["system"] == "vllm"]
    j = summary[summary["system"] == "jenga"]
    ax1.scatter(v["image_share"], 100 * v["waste_fraction"], marker="o", color="black", s=20, zorder=3,
                label="vLLM, simulated (time-avg.)")
    ax1.scatter(j["image_share"], 100 * j["waste_fraction"], marker="o", facecolors="none", edgecolors="C3", s=24,
                zorder=3, label="Jenga, simulated (time-avg.)")
    t, i, w = PAPER_POINT
    ax1.scatter([i / (i + t)], [100 * w], marker="*", s=160, color="gold", edgecolors="black", zorder=4,
                label="paper §3.2: 79.6 % (43 text + 6193 image)")
    ax1.set_xlabel("image share of the request's tokens, I / (T + I)")
    ax1.set_ylabel("KV memory waste of uniform paging (%)")
    ax1.set_title("waste: analytic (lines) and simulated (points)", fontsize=10)
    ax1.legend(fontsize=6.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # off the data
    ax1.grid(alpha=0.3, linewidth=0.4)
    main = p.runs[0].model
    groups = [(f"text {int(float(t))} tokens (ours)", g.sort_values("image_share"), "-o")
              for t, g in j[j["model"] == main].groupby("text", sort=True)]
    groups += [(f"{label} (ours)", g, "s^Dv"[k % 4]) for k, (label, g) in
               enumerate(j[j["model"] != main].groupby("model", sort=False))]
    for k, (label, g, fmt) in enumerate(groups):
        err = np.nan_to_num(np.vstack([g["speedup"] - g["speedup_ci_lo"], g["speedup_ci_hi"] - g["speedup"]]))
        ax2.errorbar(g["image_share"], g["speedup"], yerr=err, fmt=fmt, ms=5, capsize=2, color=f"C{k}",
                     linewidth=0.8, label=label)
    ps = _paper_speedup(p.gpu)
    mm = j[j["model"].str.contains("MMMU", regex=False)]
    if ps is not None and len(mm):
        ax2.scatter(mm["image_share"], [ps] * len(mm), marker="*", s=160, color="gold", edgecolors="black",
                    zorder=4, label=f"paper Fig. 14 (MMMU-pro, {p.gpu.upper()}): {ps:.2f}×")
    ax2.axhline(1.0, color="gray", linewidth=0.6)
    ax2.set_xlabel("image share of the request's tokens, I / (T + I)")
    ax2.set_ylabel("Jenga throughput / vLLM throughput (×)")
    ax2.set_title("Jenga speedup over vLLM (lines: fixed text, image tokens 0→6404)", fontsize=10)
    ax2.legend(fontsize=6.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # off the data
    ax2.grid(alpha=0.3, linewidth=0.4)
    fig.suptitle(f"Image/text-mix sweep, Llama-3.2-11B-Vision on {p.gpu.upper()} (simulated): "
                 "image tokens 0-6404, text tokens " + ", ".join(map(str, grid_texts)) + " (+ MMMU-pro, chat mix)",
                 fontsize=9)
    rp.footer(fig, p)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    return rp.save(fig, out, p)


def report(p: Plan, records: list[dict], out: Path, analytic_curves: dict) -> pd.DataFrame:
    """``analytic_curves``: the main model's analytic waste per text length, computed by the study
    runner (a kind input, :func:`harness.study.inputs.analytic_curves`)."""
    summary = summarize(p, records)
    rp.write_csv(summary, out, "summary", p)
    j = summary[summary["system"] == "jenga"].sort_values("image_share")
    rp.print_table(j, ["model", "image", "text", "image_share", "analytic_waste_vllm", "waste_fraction",
                           "speedup", "speedup_ci_lo", "speedup_ci_hi", "seeds", "failed"])
    v = summary[summary["system"] == "vllm"].set_index(["model", "image", "text"])["waste_fraction"]
    print("\nsimulated vLLM waste per point:", ", ".join(f"{k[1]}/{k[2]}: {100 * x:.1f}%" for k, x in v.items()))
    m = rp.means_table(summary, ["system"])
    rp.write_csv(m, out, "means", p)
    for r in m.itertuples():
        print(f"Jenga speedup over the mix grid: geometric mean {r.geo_mean:.3f}, arithmetic mean {r.arith_mean:.3f} "
              f"({r.n} points)")
    if len(summary):
        print(f"figure: {plot(summary, p, out, analytic_curves)}")
    return summary
