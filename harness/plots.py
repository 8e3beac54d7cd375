"""Paper-style figures: grouped bars per model, our (simulated or measured) bars beside the
paper's published ones."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SYSTEM_LABELS = {"vllm": "vLLM (PagedAttention)", "max_page": "max page", "static_partition": "static partition",
                 "jenga": "Jenga", "jenga_no_request_aware": "Jenga w/o request-aware",
                 "hybrid_groups": "hybrid groups", "oracle": "oracle"}
SYSTEM_COLORS = {"vllm": "#7f7f7f", "max_page": "#ff7f0e", "static_partition": "#2ca02c", "jenga": "#1f77b4",
                 "jenga_no_request_aware": "#9467bd", "hybrid_groups": "#8c564b", "oracle": "#e377c2"}
SYSTEM_ORDER = list(SYSTEM_LABELS)


def speedup_bars(summary: pd.DataFrame, path: str | Path, title: str) -> Path:
    """Grouped bars: per model, each system's throughput normalized to that model's baseline;
    solid = ours, hatched = the paper's (where published). Failed/missing bars are marked ×."""
    df = summary[summary["status"] == "ok"] if "status" in summary else summary
    models = list(dict.fromkeys(summary["model"]))
    systems = [s for s in SYSTEM_ORDER if s in set(summary["system"])]
    has_paper = "paper_speedup" in df and df["paper_speedup"].notna().any()
    per_model = len(systems) * (2 if has_paper else 1)
    width = 0.8 / max(1, per_model)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.5 * len(models) + 2), 4.6))
    x = np.arange(len(models))
    k = 0
    for s in systems:
        for paper in ([False, True] if has_paper else [False]):
            col = "paper_speedup" if paper else "speedup"
            vals = []
            for m in models:
                row = df[(df["model"] == m) & (df["system"] == s)]
                vals.append(float(row[col].iloc[0]) if len(row) and pd.notna(row[col].iloc[0]) else np.nan)
            pos = x - 0.4 + width * (k + 0.5)
            label = f"{SYSTEM_LABELS.get(s, s)} ({'paper' if paper else 'ours'})"
            ax.bar(pos, np.nan_to_num(vals), width, label=label, color=SYSTEM_COLORS.get(s, "#333333"),
                   alpha=0.45 if paper else 1.0, hatch="//" if paper else None, edgecolor="black", linewidth=0.4)
            if not paper:
                for p, v in zip(pos, vals):
                    if np.isnan(v):
                        ax.text(p, 0.02, "×", ha="center", va="bottom", fontsize=9, color="red")
                    elif s == "jenga":
                        ax.text(p, v + 0.02, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
            k += 1
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("request throughput / baseline (×)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper left", frameon=False)
    ymax = np.nanmax(np.concatenate([df["speedup"].to_numpy(dtype=float),
                                     df["paper_speedup"].to_numpy(dtype=float) if has_paper else []]).astype(float)
                     if len(df) else [1.0])
    ax.set_ylim(0, max(1.2, float(ymax) * 1.25))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
