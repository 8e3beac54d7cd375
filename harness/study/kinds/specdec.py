"""Speculative decoding with draft + target in one pool (paper §7.4, SOSP Fig. 20 setups): the report.

    python -m harness.study experiments/specdec.yaml [mode=smoke] [--jobs N] [--launcher joblib] [--dry-run]

Each cell is an ordinary cached sim cell: ``model`` = the target, ``engine.draft_model`` = the
draft, ``system`` = ``per_model_split`` (vLLM's per-model cache split), ``max_page`` or ``jenga``
(harness/backends/sim/variants.py, harness/backends/sim/specdec.py). Per (target, draft) pair and
system: request throughput, TTFT/TPOT, mean decode batch and the measured acceptance, all
simulated. Writes ``results/specdec/summary.csv`` (per cell and seed), ``summary_mean.csv`` (seed
means, 95 % CIs) and ``specdec.png`` + ``.pdf`` (throughput normalised to the per-model split).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

LABELS = {"per_model_split": "per-model split (vLLM)", "max_page": "max page", "jenga": "Jenga"}
COLORS = {"per_model_split": "#7f7f7f", "max_page": "#ff7f0e", "jenga": "#1f77b4"}
METRICS = ["throughput_req_s", "tpot_mean", "ttft_mean", "mean_decode_batch", "tokens_per_decode_step",
           "accepted_per_proposal", "preemptions"]
KEYS = ["target", "draft", "system"]
EXTRA = ("accepted_per_proposal", "tokens_per_decode_step", *rp.RECORD_FIELDS)


def summarize(p: Plan, records: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-seed rows (``target`` = the cell's model, ``draft`` its engine.draft_model) and seed means."""
    df = stats.rows(p.runs, records, EXTRA).drop(columns="baseline").rename(columns={"model": "target"})
    df.insert(1, "draft", [rp.override(r, "engine.draft_model") for r in p.runs])
    df.insert(len(KEYS) + 1, "num_speculative_tokens", [rp.config_value(r, "engine.num_speculative_tokens")
                                                        for r in records])
    df.insert(len(KEYS) + 2, "spec_acceptance_rate", [rp.config_value(r, "engine.spec_acceptance_rate")
                                                      for r in records])
    return df, stats.aggregate(df, KEYS, METRICS)


def plot(df: pd.DataFrame, path: Path, mode: str) -> Path:
    """Throughput normalised to the per-model split, and TPOT; bars are seed means, whiskers 95 % CIs."""
    agg = stats.aggregate(df, KEYS, METRICS)
    pairs = list(dict.fromkeys(zip(df["target"], df["draft"])))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    w = 0.26
    for i, (t, d) in enumerate(pairs):
        rows = agg[(agg["target"] == t) & (agg["draft"] == d)] if len(agg) else agg
        base = rows[rows["system"] == "per_model_split"]["throughput_req_s"] if len(rows) else []
        for j, s in enumerate(LABELS):
            x = i + (j - 1) * w
            r = rows[rows["system"] == s] if len(rows) else rows
            if len(r) == 0 or len(base) == 0:
                axes[0].text(x, 0.02, "×", color="red", ha="center")
                continue
            scale = 1.0 / float(base.iloc[0])
            norm = float(r["throughput_req_s"].iloc[0]) * scale
            lab = LABELS[s] if i == 0 else None
            axes[0].bar(x, norm, w, yerr=rp.yerr(r, "throughput_req_s", scale), capsize=2, color=COLORS[s],
                        edgecolor="black", linewidth=0.4, label=lab)
            axes[0].text(x, norm + 0.03, f"{norm:.2f}", ha="center", fontsize=7)
            axes[1].bar(x, float(r["tpot_mean"].iloc[0]) * 1e3, w, yerr=rp.yerr(r, "tpot_mean", 1e3), capsize=2,
                        color=COLORS[s], edgecolor="black", linewidth=0.4)
    names = [f"{t}\n+ {d}" for t, d in pairs]
    for ax in axes:
        ax.set_xticks(range(len(pairs)))
        ax.set_xticklabels(names, fontsize=7)
    axes[0].axhline(1.0, color="black", linestyle=":", linewidth=0.6)
    axes[0].set_ylabel("request throughput / per-model split (×)")
    axes[0].set_title("throughput (req/s, normalised to the per-model split)", fontsize=9)
    axes[1].set_ylabel("mean TPOT (ms per output token)")
    axes[1].set_title("time per output token", fontsize=9)
    n = int(agg["seeds"].max()) if len(agg) else 0
    return rp.finish(fig, axes[0], f"Speculative decoding, draft + target in one KV pool (k=3, acceptance "
                     f"0.7), H100 — {rp.sim_label(mode)}; mean of {n} seed(s), 95 % CI; no published "
                     "per-system values", path)


def report(p: Plan, records: list[dict], out: Path) -> pd.DataFrame:
    return rp.summarize_write_plot(p, records, out, summarize, plot)
