"""Paper-style figures: grouped bars per model, our (simulated or measured) bars beside the
paper's published ones."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

SYSTEM_LABELS = {"vllm": "vLLM (PagedAttention)", "max_page": "max page", "static_partition": "static partition",
                 "jenga": "Jenga", "jenga_no_request_aware": "Jenga w/o request-aware",
                 "hybrid_groups": "hybrid groups", "oracle": "oracle", "vllm_current": "vLLM 0.32 (today)"}
SYSTEM_COLORS = {"vllm": "#7f7f7f", "max_page": "#ff7f0e", "static_partition": "#2ca02c", "jenga": "#1f77b4",
                 "jenga_no_request_aware": "#9467bd", "hybrid_groups": "#8c564b", "oracle": "#e377c2",
                 "vllm_current": "#bcbd22"}
SYSTEM_ORDER = list(SYSTEM_LABELS)


def speedup_bars(summary: pd.DataFrame, path: str | Path, title: str) -> Path:
    """Grouped bars: per model, each system's throughput normalized to that model's baseline;
    solid = ours, hatched = the paper's (where published). A failed cell is marked ×."""
    models = list(dict.fromkeys(summary["model"]))
    has_paper = "paper_speedup" in summary and summary["paper_speedup"].notna().any()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(models) + 2), 4.8))
    bar_w, gap = 0.35, 0.6
    pos = 0.0
    centers, seen, ymax = [], set(), 1.0
    for m in models:
        rows = summary[summary["model"] == m]
        systems = [s for s in SYSTEM_ORDER if s in set(rows["system"])]
        start = pos
        for s in systems:
            r = rows[rows["system"] == s].iloc[0]
            ok = r.get("status", "ok") == "ok" and pd.notna(r.get("speedup"))
            variants = [(False, r.get("speedup"))] + ([(True, r.get("paper_speedup"))] if has_paper else [])
            for paper, v in variants:
                label = f"{SYSTEM_LABELS.get(s, s)} ({'paper' if paper else 'ours'})"
                color = SYSTEM_COLORS.get(s, "#333333")
                if not paper and not ok:
                    oom = r.get("status") == "oom"
                    ax.text(pos, 0.02, "OOM" if oom else "×", ha="center", va="bottom",
                            fontsize=6 if oom else 11, color="red", rotation=90 if oom else 0)
                elif paper and pd.isna(v) and "OOM" in str(r.get("paper_source", "")):
                    ax.text(pos, 0.02, "OOM", ha="center", va="bottom", fontsize=6, color="grey", rotation=90)
                elif pd.notna(v):
                    ax.bar(pos, float(v), bar_w, color=color, alpha=0.45 if paper else 1.0,
                           hatch="//" if paper else None, edgecolor="black", linewidth=0.4,
                           label=None if label in seen else label)
                    seen.add(label)
                    ymax = max(ymax, float(v))
                    if not paper and s == "jenga":
                        ax.text(pos, float(v) + 0.02, f"{float(v):.2f}", ha="center", va="bottom", fontsize=7)
                pos += bar_w
            pos += 0.05
        centers.append((start + pos - bar_w - 0.05) / 2)
        pos += gap
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xticks(centers)
    ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("request throughput / baseline (×)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper left", frameon=False)
    ax.set_ylim(0, max(1.2, ymax * 1.3))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
