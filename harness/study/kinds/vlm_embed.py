"""The vision-embedding cache under chunked prefill (paper §7.4, SOSP Fig. 19 setups): the report.

    python -m harness.study experiments/vlm_embed.yaml [mode=smoke] [--jobs N] [--launcher joblib] [--dry-run]

Each cell is an ordinary cached sim cell; the study's ``variant`` axis picks the system:
``reencode`` (``system=vllm engine.encoder_cache=false``: no embedding storage, the encoder
re-runs per chunk), ``keep`` (``system=keep_embeddings``: embeddings held in the pool until the
request ends), ``jenga`` (freed as prefill consumes them). Per VLM and variant: throughput with all
requests at once, and TTFT/TPOT/e2e at the model's request rate; encoder passes per image token.
Simulated (harness/backends/sim/variants.py, harness/backends/sim/vision_cache.py). Writes
``results/vlm_embed/summary.csv``, ``summary_mean.csv`` and ``vlm_embed.png`` + ``.pdf``.
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

LABELS = {"reencode": "re-run vision encoder (vLLM v0 baseline)", "keep": "keep embeddings in pool",
          "jenga": "Jenga (free once consumed)"}
COLORS = {"reencode": "#7f7f7f", "keep": "#ff7f0e", "jenga": "#1f77b4"}
METRICS = ["throughput_req_s", "ttft_mean", "tpot_mean", "e2e_mean", "encoder_runs_per_image_token",
           "mean_running", "preemptions", "peak_allocated_gib"]
KEYS = ["model", "variant", "system", "request_rate"]
EXTRA = ("encoder_tokens", "image_tokens", "encoder_runs_per_image_token", "peak_allocated_gib", *rp.RECORD_FIELDS)


def summarize(p: Plan, records: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-seed rows (``variant``: the study's system label; ``system``: the registry system it runs)
    and seed means."""
    df = stats.rows(p.runs, records, EXTRA).drop(columns="baseline")
    df.insert(len(KEYS) + 2, "max_num_batched_tokens", [rp.config_value(r, "engine.max_num_batched_tokens")
                                                        for r in records])
    return df, stats.aggregate(df, KEYS, METRICS)


def plot(df: pd.DataFrame, path: Path, mode: str) -> Path:
    """Throughput (rate inf) normalised to re-encode, TTFT and TPOT at the model's rate; bars are
    seed means, whiskers 95 % CIs."""
    agg = stats.aggregate(df, KEYS, METRICS)
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    w = 0.26
    inf = float("inf")
    for i, m in enumerate(models):
        rows = agg[agg["model"] == m] if len(agg) else agg
        if len(rows) == 0:
            continue
        thr = rows[rows["request_rate"] == inf]
        lat = rows[rows["request_rate"] != inf]
        base = thr[thr["variant"] == "reencode"]["throughput_req_s"]
        for j, s in enumerate(LABELS):
            x = i + (j - 1) * w
            lab = LABELS[s] if i == 0 else None
            r = thr[thr["variant"] == s]
            if len(r) and len(base):
                scale = 1.0 / float(base.iloc[0])
                v = float(r["throughput_req_s"].iloc[0]) * scale
                axes[0].bar(x, v, w, yerr=rp.yerr(r, "throughput_req_s", scale), capsize=2, color=COLORS[s],
                            edgecolor="black", linewidth=0.4, label=lab)
                axes[0].text(x, v + 0.03, f"{v:.2f}", ha="center", fontsize=7)
            r = lat[lat["variant"] == s]
            if len(r):
                axes[1].bar(x, float(r["ttft_mean"].iloc[0]), w, yerr=rp.yerr(r, "ttft_mean"), capsize=2,
                            color=COLORS[s], edgecolor="black", linewidth=0.4)
                axes[2].bar(x, float(r["tpot_mean"].iloc[0]) * 1e3, w, yerr=rp.yerr(r, "tpot_mean", 1e3),
                            capsize=2, color=COLORS[s], edgecolor="black", linewidth=0.4)
    rates = {m: r for m, r in zip(agg.get("model", []), agg.get("request_rate", [])) if r != inf}
    names = [f"{m}\n({rates.get(m, '?')} req/s)" for m in models]
    for ax in axes:
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(names, fontsize=7)
    axes[0].set_xticklabels(models, fontsize=7)
    axes[0].axhline(1.0, color="black", linestyle=":", linewidth=0.6)
    axes[0].set_ylabel("request throughput / re-encode baseline (×)")
    axes[0].set_title("throughput, all requests at once", fontsize=9)
    axes[1].set_ylabel("mean TTFT (s)")
    axes[1].set_title("time to first token at the model's rate", fontsize=9)
    axes[2].set_ylabel("mean TPOT (ms per output token)")
    axes[2].set_title("time per output token at the model's rate", fontsize=9)
    n = int(agg["seeds"].max()) if len(agg) else 0
    return rp.finish(fig, axes[0], "Vision embeddings under chunked prefill (budget 1024 tokens), MMMU-pro "
                     f"on H100 — {rp.sim_label(mode)}; mean of {n} seed(s), 95 % CI; no published "
                     "per-system values", path)


def report(p: Plan, records: list[dict], out: Path) -> pd.DataFrame:
    return rp.summarize_write_plot(p, records, out, summarize, plot)
