"""Mamba prefix caching: Jenga's fixed checkpoint interval (512, 1024) against a Marconi-style
rival (admission at branch points and the last token, FLOP-aware eviction) on Jamba.

    python -m harness.study experiments/mamba_prefix.yaml [mode=smoke] [--jobs N] [--out DIR]

Per shared-prefix workload and system: prefix hit rate (first-admission hit tokens / prompt
tokens), throughput, TTFT, checkpoints admitted. Simulated (``jenga.baselines.marconi``). Writes
``results/mamba_prefix/summary.csv`` and ``mamba_prefix.png``.
"""

from __future__ import annotations

import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.studies import common

# system name -> (Marconi?, checkpoint interval for Jenga, FLOP alpha for Marconi)
SYSTEMS: dict[str, tuple[bool, int | None, float]] = {
    "jenga_512": (False, 512, 0.0), "jenga_1024": (False, 1024, 0.0),
    "marconi_lru": (True, None, 0.0), "marconi": (True, None, 1.0)}
LABELS = {"jenga_512": "Jenga, every 512 tokens", "jenga_1024": "Jenga, every 1024 tokens",
          "marconi_lru": "Marconi admission, LRU", "marconi": "Marconi admission + FLOP-aware eviction"}
COLORS = {"jenga_512": "#1f77b4", "jenga_1024": "#aec7e8", "marconi_lru": "#ffbb78", "marconi": "#ff7f0e"}


def run_cell(workload: dict, system: str, cell: dict, mode: str, extra: list[str], seed: int,
             flop_alpha: float) -> dict[str, Any]:
    import jenga
    from harness.backends.sim.cost import CostModel
    from harness.backends.sim.engine import scheduler_config
    from harness.backends.sim.scheduler import Scheduler
    from harness.models import load_profile
    from harness.workloads import build_workload
    from jenga.baselines.marconi import prefix_flops

    keys = {"workload": workload["name"], "system": system, "seed": seed}
    try:
        if system not in SYSTEMS:
            raise ValueError(f"mamba_prefix system {system!r}; allowed: {list(SYSTEMS)}")
        marconi, interval, alpha = SYSTEMS[system]
        alpha = flop_alpha if system == "marconi" else alpha
        ov = ([f"mode={mode}", f"seed={seed}", "engine.enable_prefix_caching=true"] + common.overrides_of(cell)
              + common.overrides_of(workload.get("overrides", {}))
              + ([f"model.mamba.checkpoint_interval={interval}"] if interval else []) + extra)
        cfg = common.compose(ov)
        profile = load_profile(cfg.model)
        requests = build_workload(cfg)
        cost = CostModel(profile, cfg.gpu, cfg.engine)
        capacity = cost.kv_capacity_bytes()
        tpp = int(cfg.engine.tokens_per_page)
        if marconi:
            mm = jenga.make_manager("marconi", list(profile.specs), capacity, tokens_per_page=tpp,
                                    enable_prefix_cache=True, flop_alpha=alpha, prefix_flops=prefix_flops(
                                        profile.specs, cost.matmul_params, cost.attn_flops_per_pair))
        else:
            mm = jenga.make_manager("jenga", list(profile.specs), capacity, tokens_per_page=tpp,
                                    enable_prefix_cache=True)
        sched = Scheduler(mm, scheduler_config(cfg.engine, profile), [r.fresh_copy() for r in requests])
        trace, agg = common.run_loop(sched, mm, lambda step: cost.step_time(
            [(s.num_new_tokens, s.context_before, s.image_tokens_encoded) for s in step]))
        row = {**keys, "status": "ok", "model": cfg.model.name, "dataset": cfg.dataset.name,
               "checkpoint_interval": interval, "flop_alpha": alpha if marconi else None,
               "checkpoints_admitted": mm.checkpoints_saved,
               "mean_cached_gib": sum(t["cached_bytes"] for t in trace) / max(1, len(trace)) / 2**30,
               **common.loop_metrics(sched, trace, agg, capacity)}
        return common.with_provenance(row, {"overrides": ov, "system": system})
    except Exception as exc:  # noqa: BLE001
        return common.failed_row(keys, exc)


METRICS = ["prefix_hit_rate", "throughput_req_s", "ttft_mean", "checkpoints_admitted", "mean_cached_gib",
           "preemptions"]
KEYS = ["workload", "system"]


def plot(df: pd.DataFrame, path, mode: str, note: str) -> None:
    """Hit rate, throughput and checkpoints admitted per workload; bars are seed means, whiskers 95 % CIs."""
    agg = common.aggregate(df, KEYS, METRICS)
    wls = list(dict.fromkeys(df["workload"]))
    systems = [s for s in SYSTEMS if s in set(df["system"])]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    w = 0.8 / max(1, len(systems))
    panels = [("prefix_hit_rate", "prefix hit rate (hit / prompt tokens)"),
              ("throughput_req_s", "request throughput (req/s)"),
              ("checkpoints_admitted", "Mamba checkpoints admitted (count)")]
    for ax, (col, ylabel) in zip(axes, panels):
        for j, s in enumerate(systems):
            r = agg[agg["system"] == s].set_index("workload").reindex(wls) if len(agg) else agg
            if len(r) == 0:
                continue
            xs = [i + (j - (len(systems) - 1) / 2) * w for i in range(len(wls))]
            ax.bar(xs, r[col].to_numpy(), w, yerr=common.yerr(r, col), capsize=2, color=COLORS[s],
                   edgecolor="black", linewidth=0.4, label=LABELS[s])
        ax.set_xticks(range(len(wls)))
        ax.set_xticklabels(wls, fontsize=7, rotation=20, ha="right")
        ax.set_ylabel(ylabel)
    n = int(agg["seeds"].max()) if len(agg) else 0
    common.finish_figure(fig, axes[0], f"Mamba prefix caching on Jamba-1.5-Mini (4×H100), shared-prefix arXiv-QA "
                         f"— {note}; {common.sim_label(mode)}; mean of {n} seed(s), 95 % CI; the paper publishes "
                         "no values here", path, ncol=len(systems))


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, ("workloads", "systems", "cell"), argv)
    st = args.study
    alpha = float(st.get("flop_alpha", 1.0))
    tasks = [(wl, s, st["cell"], args.mode, args.overrides, int(seed), alpha)
             for wl in common.grid(st["workloads"], args.smoke, keep=1) for s in st["systems"]
             for seed in st.get("seeds", [0])]
    if args.dry_run:
        return common.print_tasks(tasks)
    elapsed = common.timer()
    rows = common.parallel(run_cell, tasks, args.jobs, args.progress, args.study['name'])
    return common.report(rows, args, elapsed(), KEYS, METRICS,
                         lambda df: plot(df, common.figure_path(args), args.mode, st.get("plot_note", "")))


if __name__ == "__main__":
    sys.exit(common.guard(main))
