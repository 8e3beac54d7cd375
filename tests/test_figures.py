"""Issue 12, "Summaries and figures fit for a paper": CI error bars on every bar, the paper's
names, UNVERIFIED values drawn differently, an outlier clipped with its value written, missing
bars footnoted, the legend off the data, readable fonts, PDF beside PNG; the window sweep with the
window and the request length on separate axes."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from harness import plots


def _summary() -> pd.DataFrame:
    rows = [
        # model, system, baseline, speedup, lo, hi, paper, verified, error
        ("gemma2_27b", "vllm", "vllm", 1.0, 1.0, 1.0, 1.0, "yes", ""),
        ("gemma2_27b", "jenga", "vllm", 1.29, 0.9, 1.6, 1.26, "yes", ""),
        ("ministral_8b", "vllm", "vllm", 1.0, 1.0, 1.0, 1.0, "UNVERIFIED", ""),
        ("ministral_8b", "jenga", "vllm", 0.75, 0.5, 1.0, 2.08, "UNVERIFIED", ""),
        ("character_70b_fp8", "vllm", "vllm", np.nan, np.nan, np.nan, 1.0, "UNVERIFIED", "ValueError: no KV"),
        ("character_70b_fp8", "jenga", "vllm", np.nan, np.nan, np.nan, 4.92, "UNVERIFIED", "ValueError: no KV"),
        ("jamba_1_5_mini_fp8", "static_partition", "static_partition", 1.0, 1.0, 1.0, 1.0, "UNVERIFIED", ""),
        ("jamba_1_5_mini_fp8", "jenga", "static_partition", 1.24, 1.2, 1.3, 1.78, "UNVERIFIED", ""),
    ]
    df = pd.DataFrame(rows, columns=["model", "system", "baseline", "speedup", "speedup_ci_lo", "speedup_ci_hi",
                                     "paper_speedup", "paper_verified", "error"])
    df["status"] = np.where(df["speedup"].notna(), "ok", "failed")
    return df


def _texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def test_speedup_bars_paper_conventions(tmp_path):
    s = _summary()
    fig = plots.draw_speedup_bars(s, "t", notes=plots.plan_notes({"jamba_1_5_mini_fp8": "static_partition"}))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["Gemma-2 27B", "Ministral 8B", "character.ai 70B* FP8", "Jamba-1.5 Mini FP8"]
    # Every bar of ours that ran carries an error bar (6 ok cells).
    assert sum(isinstance(c, matplotlib.container.ErrorbarContainer) for c in ax.containers) == 6
    hatches = {p.get_hatch() for p in ax.patches}
    assert "////" in hatches and "...." in hatches            # verified vs UNVERIFIED drawn differently
    top = ax.get_ylim()[1]
    assert top < 4.92 and "4.92" in _texts(fig)               # the outlier is clipped, its value written
    text = _texts(fig)
    assert "Jamba-1.5 Mini FP8: no vLLM bar" in text           # footnote: Jamba's baseline
    assert "character.ai 70B* FP8, vLLM (PagedAttention), Jenga (ours): failed" in text
    leg = ax.get_legend()
    fig.canvas.draw()
    lb, axb = leg.get_window_extent(), ax.get_window_extent()
    assert lb.y0 >= axb.y1 - 1                                # the legend sits above the data
    assert min(t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text()) >= 6
    assert fig.get_size_inches()[0] <= 7.0                    # drawn at paper width: fonts stay readable
    plt.close(fig)
    png = plots.speedup_bars(s, tmp_path / "f.png", "t")
    assert png.exists() and png.with_suffix(".pdf").exists()


def test_smoke_figures_draw_no_paper_bars():
    fig = plots.draw_speedup_bars(_summary(), "t", show_paper=False)
    assert not {p.get_hatch() for p in fig.axes[0].patches} & {"////", "...."}
    plt.close(fig)


def test_window_sweep_figure_separates_window_and_length(tmp_path):
    """4096/512 and 32768/4096 share a length/window ratio but are different points."""
    from harness.study.kinds import window
    from harness.study.plan import Plan

    rows = []
    for w in (512, 4096, 32768):
        for length in (512, 4096, 32768):
            for system, sp in (("vllm", 1.0), ("jenga", 1.0 + length / w / 100)):
                rows.append({"model": "gemma3_12b", "window": w, "length": length, "system": system, "baseline": "vllm",
                             "speedup": sp, "speedup_ci_lo": sp - 0.01, "speedup_ci_hi": sp + 0.01,
                             "waste_fraction": 0.1})
    s = pd.DataFrame(rows)
    p = Plan("window_sweep", "window", "smoke", "h100", "sim", ["window", "length"], {"gpu": "h100"})
    fig = window.draw(s, p)
    speed = fig.axes[0]
    assert speed.get_xlabel() == "" and fig.axes[1].get_xlabel() == "request length (tokens)"
    lines = [ln for ln in speed.get_lines() if len(ln.get_xdata()) == 3 and ln.get_linestyle() != "None"]
    assert len(lines) == 3                                    # one line per window ...
    for ln in lines:                                          # ... over the request lengths
        assert list(ln.get_xdata()) == [512, 4096, 32768]
    assert sorted(round(float(ln.get_ydata()[1]), 3) for ln in lines) == [1.001, 1.01, 1.08]
    plt.close(fig)
    path = window.plot(s, p, tmp_path)
    assert path.exists() and path.with_suffix(".pdf").exists()


# -- every figure as PNG + PDF, byte-reproducible ----------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
STUDY_FIGURES = ("micro", "specdec", "vlm_embed", "mamba_prefix")


def _tiny_figure():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["a", "b"], [1.0, 1.3])
    ax.set_title("simulated")
    return fig


def test_saving_the_same_figure_twice_gives_identical_bytes(tmp_path, monkeypatch):
    """A rerun with identical numbers rewrites no file: no /CreationDate in the PDF, no timestamp
    in the PNG. SOURCE_DATE_EPOCH stands in for the clock (matplotlib dates the PDF from it)."""
    out = []
    for k, epoch in enumerate(("1000000000", "1900000000")):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        out.append(plots.save(_tiny_figure(), tmp_path / str(k) / "f.png"))
    a, b = out
    assert a.read_bytes() == b.read_bytes()
    pdf = a.with_suffix(".pdf").read_bytes()
    assert pdf == b.with_suffix(".pdf").read_bytes() and b"/CreationDate" not in pdf
    assert b"tIME" not in a.read_bytes()                      # PNG: no modification-time chunk


def test_study_report_figure_is_written_as_png_and_pdf(tmp_path):
    """specdec, vlm_embed and mamba_prefix save through report.finish."""
    from harness.study import report as rp

    fig = _tiny_figure()
    path = rp.finish(fig, fig.axes[0], "t", tmp_path / "study.png")
    assert path.stat().st_size > 0 and path.with_suffix(".pdf").stat().st_size > 0


def test_figures_are_saved_only_through_plots_save():
    """One save helper (PNG + PDF, no date): a study that calls savefig itself would write PNG only."""
    calls = [f.relative_to(ROOT).as_posix() for f in (ROOT / "harness").rglob("*.py") if ".savefig(" in f.read_text()]
    assert calls == ["harness/plots.py"]


def test_every_committed_figure_has_its_pdf():
    pngs = sorted((ROOT / "results").glob("*/*.png"))
    assert {p.parent.name for p in pngs} >= set(STUDY_FIGURES)
    assert [p.relative_to(ROOT).as_posix() for p in pngs if not p.with_suffix(".pdf").exists()] == []


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDY_FIGURES)
def test_study_figure_redrawn_from_its_committed_summary(tmp_path, name):
    """The figure redrawn from results/<name>/summary.csv (as notebooks/analysis.ipynb does) is the
    committed PNG byte for byte, with its PDF beside it (~2-6 s each)."""
    import importlib

    import yaml

    mod = importlib.import_module(f"harness.study.kinds.{name}")
    df = pd.read_csv(ROOT / "results" / name / "summary.csv")
    path = tmp_path / f"{name}.png"
    if name == "micro":
        mod.plot(df, pd.read_csv(ROOT / "results" / name / "traces.csv"), path, "full")
    elif name == "mamba_prefix":
        note = yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text()).get("plot_note", "")
        mod.plot(df, path, "full", note)
    else:
        mod.plot(df, path, "full")
    assert path.read_bytes() == (ROOT / "results" / name / f"{name}.png").read_bytes()
    # The PDF byte for byte too: plots.save names font subsets by order (stable_subset_tags), so
    # the bundled or a system copy of DejaVu Sans, whichever the font cache picks, gives one file.
    assert path.with_suffix(".pdf").read_bytes() == (ROOT / "results" / name / f"{name}.pdf").read_bytes()


@pytest.mark.slow
def test_whatif_figure_redrawn_from_its_committed_summary(tmp_path):
    """vllm_45238's figure (a one-glyph Type 3 subset for its "ff" ligature, whose matplotlib tag
    differed between machines) redrawn from its committed summary: PNG and PDF byte for byte."""
    import csv

    import yaml

    from harness.study.whatif import vllm_45238

    study = yaml.safe_load((ROOT / "experiments" / "whatif" / "vllm_45238.yaml").read_text())
    committed = ROOT / "results" / "whatif" / "vllm_45238"
    rows = list(csv.DictReader((committed / "summary.csv").open()))
    for r in rows:
        r["requests_hit"], r["ttft_mean_ms"] = float(r["requests_hit"]), float(r["ttft_mean_ms"])
    vllm_45238._figure(study, rows, tmp_path)
    for suffix in (".png", ".pdf"):
        assert (tmp_path / f"vllm_45238{suffix}").read_bytes() == (committed / f"vllm_45238{suffix}").read_bytes()


def test_stable_subset_tags_names_subsets_by_order():
    """Exact: the tags after /BaseFont, /FontName and /Name become AAAAAA, AAAAAB in order of first
    appearance (the same tag twice stays one), so two files that differ only in matplotlib's
    hash-derived tags become equal; six capitals followed by '+' anywhere else (inside a stream)
    are left alone -- the negative control -- and the length never changes (xref offsets)."""
    a = (b"<< /BaseFont /EEZAWI+DejaVuSans /Name /EEZAWI+DejaVuSans >> "
         b"<< /FontName /QWERTY+DejaVuSans-Bold >> stream /ZZZZZZ+x endstream")
    b = a.replace(b"EEZAWI", b"DSWGTF").replace(b"QWERTY", b"ASDFGH")
    want = (b"<< /BaseFont /AAAAAA+DejaVuSans /Name /AAAAAA+DejaVuSans >> "
            b"<< /FontName /AAAAAB+DejaVuSans-Bold >> stream /ZZZZZZ+x endstream")
    assert plots.stable_subset_tags(a) == plots.stable_subset_tags(b) == want
    assert len(want) == len(a) and a != b
    assert plots._letters(27) == b"AAAABB"
