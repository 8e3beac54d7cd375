"""Paper-style figures: grouped bars per model, our (simulated or measured) bars beside the
paper's published ones.

Conventions every figure here follows: the paper's model names on the axis; a 95 % CI error bar
on each of our bars (paired by seed); published values the paper verifies hatched, UNVERIFIED ones
hollow with a dashed edge; a published bar far above ours clipped at the top with its value written;
every missing bar (a failed cell, a model with another baseline, a bar the paper does not have)
explained in a footnote; the legend above the axes, off the data; fonts sized for a two-column
paper (7 in wide); each figure written as PNG and PDF.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

SYSTEM_LABELS = {"vllm": "vLLM (PagedAttention)", "max_page": "max page", "static_partition": "static partition",
                 "jenga": "Jenga", "jenga_no_request_aware": "Jenga w/o request-aware",
                 "hybrid_groups": "hybrid groups", "oracle": "oracle", "vllm_current": "vLLM 0.32 (today)",
                 "jenga_current": "Jenga (vLLM 0.32 rules)"}
SYSTEM_COLORS = {"vllm": "#7f7f7f", "max_page": "#ff7f0e", "static_partition": "#2ca02c", "jenga": "#1f77b4",
                 "jenga_no_request_aware": "#9467bd", "hybrid_groups": "#8c564b", "oracle": "#e377c2",
                 "vllm_current": "#bcbd22", "jenga_current": "#17becf"}
SYSTEM_ORDER = list(SYSTEM_LABELS)
# Our model config names → the names the paper prints (arXiv v1 Table 1, SOSP Fig. 14); prefix
# match, first wins; " FP8" is added for FP8 configs. Unknown models keep their config name.
PAPER_NAMES = (
    ("llama3_2_11b_vision", "Llama 3.2 Vision 11B"), ("gemma3_12b", "Gemma-3 12B"), ("gemma2_27b", "Gemma-2 27B"),
    ("gemma2_9b", "Gemma-2 9B"), ("ministral_8b", "Ministral 8B"), ("llama4_scout", "Llama 4 Scout"),
    ("jamba_1_5_mini", "Jamba-1.5 Mini"), ("character_70b", "character.ai 70B*"), ("character_8b", "character.ai 8B*"),
    ("pyramidkv_70b", "PyramidKV 70B"), ("pyramidkv_8b", "PyramidKV 8B"), ("llama3_1_70b", "Llama 3.1 70B"),
    ("llama3_1_8b", "Llama 3.1 8B"),
)
FONT = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7.5, "ytick.labelsize": 7.5,
        "legend.fontsize": 7, "pdf.fonttype": 42}
WIDTH_IN = 7.0          # a two-column paper's text width
CLIP_FACTOR = 1.6       # a published bar above CLIP_FACTOR × our tallest bar is clipped, its value written


def paper_name(model: str) -> str:
    m = str(model)
    base = next((name for prefix, name in PAPER_NAMES if m.startswith(prefix)), m)
    return base + (" FP8" if "fp8" in m and base != m else "")


def plan_notes(baselines: dict[str, str], skipped: Iterable[str] = ()) -> list[str]:
    """Footnotes an experiment's plan owes its figure: models normalised to another baseline than
    vLLM (so they have no vLLM bar) and models not run on this GPU."""
    notes = [f"{paper_name(m)}: no vLLM bar; bars ÷ {SYSTEM_LABELS.get(b, b)}, the artifact's baseline for this "
             f"model (vLLM v0 keeps Mamba state in a static partition)" if b == "static_partition" else
             f"{paper_name(m)}: bars ÷ {SYSTEM_LABELS.get(b, b)}"
             for m, b in baselines.items() if b != "vllm"]
    return notes + [f"not run: {s}" for s in skipped]


def _verified(v: object) -> bool:
    return str(v).strip().lower() in ("yes", "true", "verified")


def _finite(v: object) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


# PDF metadata without the /CreationDate matplotlib stamps by default, so a figure redrawn from the
# same numbers is the same bytes (a rerun leaves the committed PDF unchanged). Matplotlib's PNG
# metadata is only the 'Software' key (its version), no timestamp, so PNGs keep the default.
PDF_METADATA = {"CreationDate": None}


def save(fig: plt.Figure, path: str | Path, dpi: float = 200, bbox_inches: str | None = "tight") -> Path:
    """PNG (for the README) at ``path`` and PDF (for a paper) beside it, both byte-reproducible;
    the figure is closed. Every figure the harness writes goes through here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches=bbox_inches)
    pdf = path.with_suffix(".pdf")
    fig.savefig(pdf, bbox_inches=bbox_inches, metadata=PDF_METADATA)
    pdf.write_bytes(stable_subset_tags(pdf.read_bytes()))
    plt.close(fig)
    return path


# A font subset's name in a PDF's font dictionaries: "/BaseFont /EEZAWI+DejaVuSans" (also after
# /FontName and /Name); the six letters are the subset tag (PDF 1.7 section 9.6.4).
_SUBSET_TAG = re.compile(rb"(/(?:BaseFont|FontName|Name) /)([A-Z]{6})(?=\+)")


def stable_subset_tags(pdf: bytes) -> bytes:
    """The PDF with each distinct font-subset tag replaced by one named by its order of first
    appearance (AAAAAA, AAAAAB, ...). matplotlib derives a tag from the hash of the subset's glyph
    ids (``PdfFile._get_subset_prefix``), and the ids differ between the bundled and a system copy
    of DejaVu Sans, whichever the font cache picks, so the same drawing got different bytes on
    two machines. Distinct tags stay distinct, same-length text keeps every xref offset valid."""
    order: dict[bytes, bytes] = {}

    def tag(m: re.Match) -> bytes:
        new = order.setdefault(m.group(2), _letters(len(order)))
        return m.group(1) + new

    return _SUBSET_TAG.sub(tag, pdf)


def _letters(i: int) -> bytes:
    """``i`` in base 26 as six capital letters (0 -> AAAAAA)."""
    out = bytearray(b"A" * 6)
    for k in range(5, -1, -1):
        i, d = divmod(i, 26)
        out[k] += d
    return bytes(out)


def _wrap(lines: Iterable[str], width: int = 160) -> str:
    import textwrap

    return "\n".join(w for line in lines for w in textwrap.wrap(line, width, subsequent_indent="    "))


def speedup_bars(summary: pd.DataFrame, path: str | Path, title: str, show_paper: bool = True,
                 notes: Iterable[str] = ()) -> Path:
    """:func:`draw_speedup_bars`, saved as PNG + PDF."""
    return save(draw_speedup_bars(summary, title, show_paper, notes), path)


def draw_speedup_bars(summary: pd.DataFrame, title: str, show_paper: bool = True,
                      notes: Iterable[str] = ()) -> plt.Figure:
    """Grouped bars: per model, each system's throughput normalised to that model's baseline, ours
    (solid, 95 % CI) beside the paper's (hatched; hollow dashed when UNVERIFIED; none on a
    baseline row, which is 1 by definition)."""
    from matplotlib.patches import Patch

    models = list(dict.fromkeys(summary["model"]))
    has_paper = show_paper and "paper_speedup" in summary and summary["paper_speedup"].notna().any()
    ours_top = max([float(v) for v in summary.get("speedup_ci_hi", summary["speedup"]) if _finite(v)]
                   + [float(v) for v in summary["speedup"] if _finite(v)] + [1.0])
    clip = CLIP_FACTOR * ours_top
    paper_vals = [float(v) for v in summary.get("paper_speedup", []) if _finite(v)] if has_paper else []
    top = max([ours_top] + [v for v in paper_vals if v <= clip]) * 1.12
    footnotes: list[str] = list(notes)
    failures: dict[tuple[str, str], list[str]] = {}
    handles: dict[str, object] = {}
    paper_kinds: set[bool] = set()
    with plt.rc_context(FONT):
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.0))
        bar_w, gap = 0.32, 0.45
        pos, centers = 0.0, []
        for m in models:
            rows = summary[summary["model"] == m]
            model_has_paper = has_paper and any(_finite(x) for x in rows.get("paper_speedup", []))
            if has_paper and not model_has_paper:
                footnotes.append(f"{paper_name(m)}: no published bar in this figure")
            start = pos
            for s in [s for s in SYSTEM_ORDER if s in set(rows["system"])] + \
                     [s for s in dict.fromkeys(rows["system"]) if s not in SYSTEM_ORDER]:
                r = rows[rows["system"] == s].iloc[0]
                color = SYSTEM_COLORS.get(s, "#333333")
                label = SYSTEM_LABELS.get(s, s)
                v = r.get("speedup")
                if _finite(v):
                    lo, hi = r.get("speedup_ci_lo"), r.get("speedup_ci_hi")
                    ci = _finite(lo) and _finite(hi)
                    yerr = [[max(0.0, v - lo)], [max(0.0, hi - v)]] if ci else None
                    handles.setdefault(label, ax.bar(pos, v, bar_w, color=color, edgecolor="black", linewidth=0.4,
                                                     yerr=yerr, capsize=1.5, error_kw={"linewidth": 0.7}))
                    if s == "jenga":
                        y = max(v, float(hi) if ci else v)
                        ax.text(pos, min(y, top) + 0.015 * top, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
                elif r.get("status") == "oom":
                    # An outcome (some request never fits the KV pool: the paper's OOM bars), not a failure.
                    ax.text(pos, 0.01 * top, "OOM", ha="center", va="bottom", fontsize=5.5, color="red", rotation=90)
                    footnotes.append(f"OOM {paper_name(m)}, {label} (ours): {str(r.get('error') or '')[:120]}")
                else:
                    ax.text(pos, 0.01 * top, "×", ha="center", va="bottom", fontsize=9, color="red")
                    err = str(r.get("error") or "no record").split("\n")[0]
                    failures.setdefault((paper_name(m), err[:120] + ("…" if len(err) > 120 else "")), []).append(label)
                pos += bar_w
                if model_has_paper and s != r.get("baseline"):
                    pv = r.get("paper_speedup")
                    if _finite(pv):
                        pv = float(pv)
                        ok = _verified(r.get("paper_verified"))
                        paper_kinds.add(ok)
                        kw = {"color": color, "alpha": 0.45, "hatch": "////", "edgecolor": "black", "linewidth": 0.4} \
                            if ok else {"facecolor": "white", "edgecolor": color, "hatch": "....", "linestyle": "--",
                                        "linewidth": 0.9}
                        ax.bar(pos, min(pv, top), bar_w, **kw)
                        if pv > top:   # clipped: its value written at the top
                            ax.text(pos, top * 0.98, f"{pv:.2f}", ha="center", va="top", fontsize=6,
                                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6})
                    else:
                        srcs = " ".join(str(x) for x in rows.get("paper_source", []) if isinstance(x, str))
                        why = "OOM in the artifact" if f"{label} OOM" in srcs else "not published"
                        footnotes.append(f"{paper_name(m)}, {label}: no paper bar ({why})")
                    pos += bar_w
                pos += 0.04
            centers.append((start + pos - 0.04 - bar_w) / 2)
            pos += gap
        for (name, err), systems in failures.items():
            footnotes.append(f"× {name}, {', '.join(systems)} (ours): failed: {err}")
        if True in paper_kinds:
            handles["paper (published)"] = Patch(facecolor="#bbbbbb", hatch="////", edgecolor="black", linewidth=0.4)
        if False in paper_kinds:
            handles["paper (UNVERIFIED)"] = Patch(facecolor="white", hatch="....", edgecolor="black", linestyle="--")
        ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
        ax.set_xticks(centers)
        ax.set_xticklabels([paper_name(m) for m in models], rotation=20, ha="right")
        ax.set_ylabel("throughput / baseline (×)")
        ax.set_ylim(0, top)
        ax.set_xlim(-bar_w, pos - gap + bar_w / 2)
        ax.grid(axis="y", alpha=0.3, linewidth=0.4)
        ax.set_axisbelow(True)
        ncol = min(len(handles), 6)
        ax.legend(list(handles.values()), list(handles), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  ncol=ncol, frameon=False, handlelength=1.6, columnspacing=1.0)
        ax.set_title(title, pad=6 + 12 * math.ceil(len(handles) / ncol))
        fig.text(0.01, -0.01, _wrap(["bars: mean over seeds; error bars: 95 % CI, paired by seed (Student t)."]
                                    + footnotes), fontsize=6, va="top", ha="left", color="#333333")
        fig.tight_layout()
        return fig
