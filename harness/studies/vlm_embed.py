"""The vision-embedding cache under chunked prefill (paper §7.4, SOSP Fig. 19 setups).

    python -m harness.study experiments/vlm_embed.yaml [mode=smoke] [--jobs N] [--out DIR]

Per VLM and system (``reencode``: no embedding storage, the encoder re-runs per chunk; ``keep``:
embeddings held in the pool until the request ends; ``jenga``: freed as prefill consumes them):
throughput with all requests at once, and TTFT/TPOT/e2e at the model's request rate. Simulated
(``harness.backends.sim.vision_cache``). Writes ``results/vlm_embed/summary.csv`` and ``vlm_embed.png``.
"""

from __future__ import annotations

import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.studies import common

LABELS = {"reencode": "re-run vision encoder (vLLM v0 baseline)", "keep": "keep embeddings in pool",
          "jenga": "Jenga (free once consumed)"}
COLORS = {"reencode": "#7f7f7f", "keep": "#ff7f0e", "jenga": "#1f77b4"}


def run_cell(model: str, system: str, rate: float, cell: dict, mode: str, extra: list[str],
             seed: int) -> dict[str, Any]:
    from harness.backends.sim import vision_cache
    from harness.backends.sim.cost import CostModel
    from harness.backends.sim.engine import scheduler_config
    from harness.backends.sim.scheduler import Scheduler
    from harness.models import load_profile
    from harness.workloads import build_workload

    keys = {"model": model, "system": system, "request_rate": rate, "seed": seed}
    try:
        ov = ([f"model={model}", f"mode={mode}", f"seed={seed}", f"engine.request_rate={rate}"]
              + common.overrides_of(cell) + extra)
        cfg = common.compose(ov)
        profile = load_profile(cfg.model)
        requests = build_workload(cfg)
        cost = CostModel(profile, cfg.gpu, cfg.engine)
        capacity = cost.kv_capacity_bytes()
        mm = vision_cache.make_vision_manager(system, profile.specs, capacity, int(cfg.engine.tokens_per_page))
        sched = Scheduler(mm, scheduler_config(cfg.engine, profile), [r.fresh_copy() for r in requests])
        reencode = system == "reencode"
        encoded = [0]

        def step_cost(step):
            encoded[0] += sum(vision_cache.encoder_tokens(s, reencode) for s in step)
            return cost.step_time([(s.num_new_tokens, s.context_before, vision_cache.encoder_tokens(s, reencode))
                                   for s in step])

        trace, agg = common.run_loop(sched, mm, step_cost)
        image_tokens = sum(r.num_image_tokens for r in requests)
        row = {**keys, "status": "ok", "dataset": cfg.dataset.name,
               "max_num_batched_tokens": cfg.engine.max_num_batched_tokens,
               "encoder_tokens": encoded[0], "image_tokens": image_tokens,
               "encoder_runs_per_image_token": encoded[0] / image_tokens if image_tokens else 0.0,
               "peak_allocated_gib": max((t["allocated_bytes"] for t in trace), default=0) / 2**30,
               **common.loop_metrics(sched, trace, agg, capacity)}
        return common.with_provenance(row, {"overrides": ov, "system": system})
    except Exception as exc:  # noqa: BLE001
        return common.failed_row(keys, exc)


METRICS = ["throughput_req_s", "ttft_mean", "tpot_mean", "e2e_mean", "encoder_runs_per_image_token",
           "mean_running", "preemptions", "peak_allocated_gib"]
KEYS = ["model", "system", "request_rate"]


def plot(df: pd.DataFrame, path, mode: str) -> None:
    """Throughput (rate inf) normalised to re-encode, TTFT and TPOT at the model's rate; bars are
    seed means, whiskers 95 % CIs."""
    agg = common.aggregate(df, KEYS, METRICS)
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
        base = thr[thr["system"] == "reencode"]["throughput_req_s"]
        for j, s in enumerate(LABELS):
            x = i + (j - 1) * w
            lab = LABELS[s] if i == 0 else None
            r = thr[thr["system"] == s]
            if len(r) and len(base):
                scale = 1.0 / float(base.iloc[0])
                v = float(r["throughput_req_s"].iloc[0]) * scale
                axes[0].bar(x, v, w, yerr=common.yerr(r, "throughput_req_s", scale), capsize=2, color=COLORS[s],
                            edgecolor="black", linewidth=0.4, label=lab)
                axes[0].text(x, v + 0.03, f"{v:.2f}", ha="center", fontsize=7)
            r = lat[lat["system"] == s]
            if len(r):
                axes[1].bar(x, float(r["ttft_mean"].iloc[0]), w, yerr=common.yerr(r, "ttft_mean"), capsize=2,
                            color=COLORS[s], edgecolor="black", linewidth=0.4)
                axes[2].bar(x, float(r["tpot_mean"].iloc[0]) * 1e3, w, yerr=common.yerr(r, "tpot_mean", 1e3),
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
    common.finish_figure(fig, axes[0], "Vision embeddings under chunked prefill (budget 1024 tokens), MMMU-pro "
                         f"on H100 — {common.sim_label(mode)}; mean of {n} seed(s), 95 % CI; no published "
                         "per-system values", path)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, ("models", "systems", "cell"), argv)
    st = args.study
    tasks = []
    for m in common.grid(st["models"], args.smoke, keep=1):
        for rate in (float("inf"), float(m["latency_rate"])):
            for s in st["systems"]:
                for seed in st.get("seeds", [0]):
                    tasks.append((m["model"], s, rate, st["cell"], args.mode, args.overrides, int(seed)))
    if args.dry_run:
        return common.print_tasks(tasks)
    elapsed = common.timer()
    rows = common.parallel(run_cell, tasks, args.jobs, args.progress, args.study['name'])
    return common.report(rows, args, elapsed(), KEYS, METRICS,
                         lambda df: plot(df, common.figure_path(args), args.mode))


if __name__ == "__main__":
    sys.exit(common.guard(main))
