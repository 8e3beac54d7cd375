"""The ``figure`` kind: the paper's end-to-end throughput figures (arXiv Fig. 13, SOSP Fig. 14) —
cells × systems × seeds, reported as a summary (seed means, 95 % CIs, speedups over each model's
baseline beside the paper's published bars), the geometric and arithmetic means of the speedups, and
a bar figure (PNG + PDF).

    python -m harness.study experiments/fig13.yaml [mode=smoke] [gpu=l4] [backend=sim] [seeds=0,1]

Outputs go to ``results/<name>`` (smoke runs: ``results/smoke/<name>``, git-ignored); runs that are
not the experiment's default (another mode, GPU or backend) get a suffix on the file names
(``summary_smoke_l4.csv``) so they never overwrite the reference outputs. Reserved cell keys
(``systems``, ``baseline``, ``gpus``, ``per_gpu``, ``per_system``): :mod:`harness.study.plan`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from harness import analysis, plots
from harness.study.plan import Plan


def format_table(summary: pd.DataFrame, smoke: bool = False) -> str:
    """The printed summary; a smoke run's carries none of the paper's columns (its tiny cells are
    not comparable with the paper's bars, so nothing of the paper is printed beside them)."""
    cols = ["model", "tp", "system", "seeds", "failed", "throughput_req_s", "speedup", "speedup_ci_lo", "speedup_ci_hi",
            "paper_speedup", "waste_fraction", "prefix_hit_rate", "mean_decode_batch", "preemptions", "kv_capacity_gib",
            "status"]
    df = summary[[c for c in cols if c in summary and not (smoke and c.startswith("paper_"))]].copy()
    with pd.option_context("display.width", 220, "display.max_columns", 20, "display.max_rows", 200):
        return df.to_string(index=False, float_format=lambda v: f"{v:.3f}")


def _x(v: float) -> str:
    return f"{v:.2f}×" if math.isfinite(v) else "n/a"


def report(p: Plan, records: list[dict[str, Any]], out_dir: Path) -> pd.DataFrame:
    """Write summary.csv and the figure (PNG + PDF); print the table and the means. Smoke runs are
    too small to compare with the paper: they print and draw no comparison."""
    figure = p.name
    summary = analysis.summarize(records, figure, p.baselines)
    if not summary.empty:
        # Plan order (models as listed, systems in the figure's order), not completion order.
        model_rank = {m: i for i, m in enumerate(dict.fromkeys(r.model for r in p.runs))}
        sys_rank = {s: i for i, s in enumerate(plots.SYSTEM_ORDER)}
        summary = summary.assign(_m=summary["model"].map(model_rank), _s=summary["system"].map(sys_rank))
        summary = summary.sort_values(["_m", "_s"], kind="stable").drop(columns=["_m", "_s"]).reset_index(drop=True)
    smoke = p.mode == "smoke"
    sfx = p.suffix()
    out_dir.mkdir(parents=True, exist_ok=True)
    if not summary.empty:
        summary.to_csv(out_dir / f"summary{sfx}.csv", index=False)
    print(format_table(summary, smoke) if not summary.empty else "(no cells)")
    if not summary.empty and summary["speedup"].notna().any():
        m = analysis.means(summary)
        print(f"\nJenga speedup over {m['n_models']} models that ran ({p.gpu}, {p.backend}"
              f"{', simulated' if p.backend == 'sim' else ''}, mode={p.mode}): geometric mean {m['ours_geo']:.3f}, "
              f"arithmetic mean {m['ours_arith']:.3f}")
        sim = " (simulated)" if p.backend == "sim" else ""
        title = f"{p.name}: request throughput on {p.gpu.upper()}{sim}, mode={p.mode}; " \
                f"Jenga geo-mean {_x(m['ours_geo'])}"
        if smoke:
            print("smoke mode: tiny cells, not comparable with the paper's bars (no comparison printed or drawn)")
            title += " (smoke: not comparable with the paper)"
        elif m["n_paired"] == 0:
            print(f"the paper publishes no per-model bars for this figure on {p.gpu}: nothing to compare with")
        else:
            print(f"Paper's (published bars, {m['n_paired']} models): geometric mean {m['paper_geo']:.3f}, "
                  f"arithmetic mean {m['paper_arith']:.3f}; ours within ±10% of the paper: "
                  f"{m['within_10pct']}/{m['n_paired']}; Spearman rank agreement "
                  f"{analysis.rank_agreement(summary):.2f}")
            title += f" (paper {_x(m['paper_geo'])})"
        plots.speedup_bars(summary, out_dir / f"{p.name}{sfx}.png", title, show_paper=not smoke,
                           notes=plots.plan_notes(p.baselines, p.skipped))
    if p.skipped:
        print("skipped: " + "; ".join(p.skipped))
    return summary
