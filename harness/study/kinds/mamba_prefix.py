"""Mamba prefix caching: Jenga's fixed checkpoint interval (512, 1024) against a Marconi-style
rival (admission at branch points and the last token, FLOP-aware eviction) on Jamba: the report.

    python -m harness.study experiments/mamba_prefix.yaml [mode=smoke] [--jobs N] [--launcher joblib] [--dry-run]

Each cell is an ordinary cached sim cell; the study's ``variant`` axis picks the system:
``jenga_512`` / ``jenga_1024`` (``system=jenga model.mamba.checkpoint_interval=...``),
``marconi_lru`` / ``marconi`` (``system=marconi system.options.flop_alpha=0 / 1``; the FLOPs a hit
saves come from the sim's cost model, harness/backends/sim/variants.py). Per shared-prefix workload
and variant: prefix hit rate (first-admission hit tokens / prompt tokens), throughput, TTFT,
checkpoints admitted. Simulated (``jenga.baselines.marconi``). Writes
``results/mamba_prefix/summary.csv``, ``summary_mean.csv`` and ``mamba_prefix.png`` + ``.pdf``.
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

LABELS = {"jenga_512": "Jenga, every 512 tokens", "jenga_1024": "Jenga, every 1024 tokens",
          "marconi_lru": "Marconi admission, LRU", "marconi": "Marconi admission + FLOP-aware eviction"}
COLORS = {"jenga_512": "#1f77b4", "jenga_1024": "#aec7e8", "marconi_lru": "#ffbb78", "marconi": "#ff7f0e"}
METRICS = ["prefix_hit_rate", "throughput_req_s", "ttft_mean", "checkpoints_admitted", "mean_cached_gib",
           "preemptions"]
KEYS = ["workload", "variant", "system"]
EXTRA = ("checkpoints_admitted", "mean_cached_gib", *rp.RECORD_FIELDS)


def summarize(p: Plan, records: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-seed rows (``variant``: the study's system label; ``system``: the registry system it runs;
    ``checkpoint_interval`` for Jenga, ``flop_alpha`` for Marconi) and seed means."""
    df = stats.rows(p.runs, records, EXTRA).drop(columns="baseline")
    jenga = [r.system == "jenga" for r in p.runs]
    df.insert(len(KEYS) + 2, "checkpoint_interval", [rp.config_value(r, "model.mamba.checkpoint_interval") if j
                                                     else None for r, j in zip(records, jenga)])
    df.insert(len(KEYS) + 3, "flop_alpha", [rp.config_value(r, "system.options.flop_alpha") if run.system == "marconi"
                                            else None for r, run in zip(records, p.runs)])
    return df, stats.aggregate(df, KEYS, METRICS)


def plot(df: pd.DataFrame, path: Path, mode: str, note: str) -> Path:
    """Hit rate, throughput and checkpoints admitted per workload; bars are seed means, whiskers 95 % CIs."""
    agg = stats.aggregate(df, KEYS, METRICS)
    wls = list(dict.fromkeys(df["workload"]))
    variants = [s for s in LABELS if s in set(df["variant"])]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    w = 0.8 / max(1, len(variants))
    panels = [("prefix_hit_rate", "prefix hit rate (hit / prompt tokens)"),
              ("throughput_req_s", "request throughput (req/s)"),
              ("checkpoints_admitted", "Mamba checkpoints admitted (count)")]
    for ax, (col, ylabel) in zip(axes, panels):
        for j, s in enumerate(variants):
            r = agg[agg["variant"] == s].set_index("workload").reindex(wls) if len(agg) else agg
            if len(r) == 0:
                continue
            xs = [i + (j - (len(variants) - 1) / 2) * w for i in range(len(wls))]
            ax.bar(xs, r[col].to_numpy(), w, yerr=rp.yerr(r, col), capsize=2, color=COLORS[s],
                   edgecolor="black", linewidth=0.4, label=LABELS[s])
        ax.set_xticks(range(len(wls)))
        ax.set_xticklabels(wls, fontsize=7, rotation=20, ha="right")
        ax.set_ylabel(ylabel)
    n = int(agg["seeds"].max()) if len(agg) else 0
    return rp.finish(fig, axes[0], f"Mamba prefix caching on Jamba-1.5-Mini (4×H100), shared-prefix arXiv-QA "
                     f"— {note}; {rp.sim_label(mode)}; mean of {n} seed(s), 95 % CI; the paper publishes "
                     "no values here", path, ncol=len(variants))


def report(p: Plan, records: list[dict], out: Path) -> pd.DataFrame:
    return rp.summarize_write_plot(p, records, out, summarize, plot, p.study.get("plot_note", ""))
