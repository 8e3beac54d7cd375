"""Speculative decoding with draft + target in one pool (paper §7.4, SOSP Fig. 20 setups).

    python -m harness.study experiments/specdec.yaml [mode=smoke] [--jobs N] [--out DIR]

Per (target, draft) pair and system (``per_model_split`` = vLLM's per-model cache split,
``max_page``, ``jenga``): request throughput, TTFT/TPOT, mean decode batch and the measured
acceptance, all simulated (``harness.backends.sim.specdec``). Writes ``results/specdec/summary.csv`` and
``specdec.png`` (throughput normalised to the per-model split).
"""

from __future__ import annotations

import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.studies import common

LABELS = {"per_model_split": "per-model split (vLLM)", "max_page": "max page", "jenga": "Jenga"}
COLORS = {"per_model_split": "#7f7f7f", "max_page": "#ff7f0e", "jenga": "#1f77b4"}


def run_pair(pair: dict[str, Any], system: str, k: int, p: float, mode: str, extra: list[str],
             seed: int) -> dict[str, Any]:
    """One (pair, system) cell of the study: a row of metrics with provenance."""
    from harness.backends.sim import specdec
    from harness.backends.sim.cost import CostModel
    from harness.backends.sim.engine import scheduler_config
    from harness.models import load_profile
    from harness.workloads import build_workload

    keys = {"target": pair["target"], "draft": pair["draft"], "system": system, "seed": seed}
    try:
        ov = ([f"model={pair['target']}", f"mode={mode}", f"seed={seed}", f"engine.num_speculative_tokens={k}",
               f"engine.spec_acceptance_rate={p}"] + common.overrides_of(pair.get("cell", {})))
        cfg = common.compose(ov + extra)
        k, p = int(cfg.engine.num_speculative_tokens), float(cfg.engine.spec_acceptance_rate)
        draft_cfg = common.compose([f"model={pair['draft']}"])
        target, draft = load_profile(cfg.model), load_profile(draft_cfg.model)
        requests = build_workload(cfg)
        tcost, dcost = CostModel(target, cfg.gpu, cfg.engine), CostModel(draft, cfg.gpu, cfg.engine)
        capacity = specdec.pool_capacity(tcost, dcost, draft, cfg.engine)
        mm = specdec.make_pair_manager(system, specdec.pair_specs(target.specs, draft.specs), capacity,
                                       int(cfg.engine.tokens_per_page))
        sched = specdec.SpecScheduler(mm, scheduler_config(cfg.engine, target), [r.fresh_copy() for r in requests],
                                      k, p, seed)
        trace, agg = common.run_loop(sched, mm, specdec.spec_step_cost(tcost, dcost))
        row = {**keys, "status": "ok", "dataset": cfg.dataset.name, "num_speculative_tokens": k,
               "spec_acceptance_rate": p, "accepted_per_proposal": sched.accepted / max(1, sched.proposed),
               "tokens_per_decode_step": sched.decode_tokens / max(1, sched.decode_entries),
               **common.loop_metrics(sched, trace, agg, capacity)}
        return common.with_provenance(row, {"overrides": ov + extra, "draft": pair["draft"], "system": system,
                                            "k": k, "p": p})
    except Exception as exc:  # noqa: BLE001 - a failing cell becomes a failure row
        return common.failed_row(keys, exc)


METRICS = ["throughput_req_s", "tpot_mean", "ttft_mean", "mean_decode_batch", "tokens_per_decode_step",
           "accepted_per_proposal", "preemptions"]
KEYS = ["target", "draft", "system"]


def plot(df: pd.DataFrame, path, mode: str) -> None:
    """Throughput normalised to the per-model split, and TPOT; bars are seed means, whiskers 95 % CIs."""
    agg = common.aggregate(df, KEYS, METRICS)
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
            axes[0].bar(x, norm, w, yerr=common.yerr(r, "throughput_req_s", scale), capsize=2, color=COLORS[s],
                        edgecolor="black", linewidth=0.4, label=lab)
            axes[0].text(x, norm + 0.03, f"{norm:.2f}", ha="center", fontsize=7)
            axes[1].bar(x, float(r["tpot_mean"].iloc[0]) * 1e3, w, yerr=common.yerr(r, "tpot_mean", 1e3), capsize=2,
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
    common.finish_figure(fig, axes[0], f"Speculative decoding, draft + target in one KV pool (k=3, acceptance "
                         f"0.7), H100 — {common.sim_label(mode)}; mean of {n} seed(s), 95 % CI; no published "
                         "per-system values", path)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, ("pairs", "systems"), argv)
    st = args.study
    k, p = int(st.get("num_speculative_tokens", 3)), float(st.get("spec_acceptance_rate", 0.7))
    pairs = common.grid(st["pairs"], args.smoke, keep=1)
    tasks = [(pair, s, k, p, args.mode, args.overrides, int(seed))
             for pair in pairs for s in st["systems"] for seed in st.get("seeds", [0])]
    if args.dry_run:
        return common.print_tasks(tasks)
    elapsed = common.timer()
    rows = common.parallel(run_pair, tasks, args.jobs, args.progress, args.study['name'])
    return common.report(rows, args, elapsed(), KEYS, METRICS,
                         lambda df: plot(df, common.figure_path(args), args.mode))


if __name__ == "__main__":
    sys.exit(common.guard(main))
