"""Per-bar fidelity tables (markdown) from committed summaries: ours vs the paper, before -> after.

    python scripts/fidelity_table.py results/fig14/summary.csv [--before OLD.csv] [--system jenga] [--tol 0.10]
    python scripts/fidelity_table.py --ladder before=OLD.csv +gemm=A.csv ... [--tol 0.10]
    python scripts/fidelity_table.py results/fig14/summary.csv --would-take results/runs/sim/h100

Prints, per model, the Jenga / baseline speedup (seed mean, 95 % CI paired by seed), the paper's,
ours / paper, and our absolute req/s over the paper's for Jenga and its baseline; with ``--before``
(a summary written by an earlier revision, e.g. ``git show REV:results/fig14/summary.csv``) the
earlier speedup beside it. Then the headline line: geometric / arithmetic means over the models
that ran, bars within ±10 %, Spearman rank agreement. Reads summaries only: it never runs a cell,
so FIDELITY.md's tables are always the committed 3-seed means.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from harness.analysis import arith_mean, geo_mean, rank_agreement


def _f(v, fmt: str = "{:.2f}") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _speedup_col(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    if "prefix_hit_rate" not in df and "hit_rate" in df:
        df["prefix_hit_rate"] = df["hit_rate"]
    return df


def table(summary: pd.DataFrame, before: pd.DataFrame | None, system: str = "jenga", tol: float = 0.10) -> str:
    s = _speedup_col(summary)
    rows = [("| model | baseline | ours (simulated) [95 % CI] | before | paper | ours / paper "
            f"| within ±{tol * 100:.0f} % | req/s ours / paper: Jenga, baseline | status |"),
            "|---|---|---|---|---|---|---|---|---|"]
    for model in dict.fromkeys(s["model"]):
        g = s[s["model"] == model]
        j = g[g["system"] == system]
        if j.empty:
            continue
        r = j.iloc[0]
        base = g[g["system"] == r["baseline"]]
        b = base.iloc[0] if len(base) else None
        sp, psp = r.get("speedup"), r.get("paper_speedup")
        ratio = sp / psp if pd.notna(sp) and pd.notna(psp) else float("nan")
        within = "–" if math.isnan(ratio) else ("yes" if abs(ratio - 1) <= tol + 1e-12 else "no")
        ci = (f" [{_f(r.get('speedup_ci_lo'))}–{_f(r.get('speedup_ci_hi'))}]"
              if pd.notna(r.get("speedup_ci_lo")) else "")
        prev = "–"
        if before is not None:
            bj = before[(before["model"] == model) & (before["system"] == system)]
            if len(bj):
                prev = _f(bj.iloc[0].get("speedup")) if bj.iloc[0].get("status") == "ok" else str(bj.iloc[0]["status"])
        abs_j = _f(r.get("ours_over_paper_req_s"))
        abs_b = _f(b.get("ours_over_paper_req_s")) if b is not None else "–"
        status = r.get("status", "ok")
        if b is not None and b.get("status", "ok") != "ok":
            status = f"{status}; baseline {b.get('status')}"
        rows.append(f"| {model} | {r['baseline']} | {_f(sp)}{ci} | {prev} | {_f(psp)} | {_f(ratio)} | {within} "
                    f"| {abs_j}, {abs_b} | {status} |")
    return "\n".join(rows)


def headline(summary: pd.DataFrame, system: str = "jenga", tol: float = 0.10) -> str:
    s = summary[(summary["system"] == system) & summary["speedup"].notna()]
    paired = s.dropna(subset=["paper_speedup"])
    within = int(((paired["speedup"] / paired["paper_speedup"] - 1).abs() <= tol + 1e-12).sum())
    # Absolute request throughput: every bar (system x model) with a paper value, within ±25 %.
    ab = summary.dropna(subset=["ours_over_paper_req_s"]) if "ours_over_paper_req_s" in summary else None
    absolute = ("no published absolute req/s" if ab is None or ab.empty else
                f"absolute req/s within ±25 % on {int(((ab['ours_over_paper_req_s'] - 1).abs() <= 0.25).sum())} "
                f"of {len(ab)} bars (all systems)")
    return (f"{len(s)} models ran: ours geometric / arithmetic mean {geo_mean(s['speedup']):.3f} / "
            f"{arith_mean(s['speedup']):.3f}; the paper's on the same {len(paired)} paired models "
            f"{geo_mean(paired['paper_speedup']):.3f} / {arith_mean(paired['paper_speedup']):.3f}; "
            f"{within} of {len(paired)} bars within ±{tol * 100:.0f} %; Spearman {rank_agreement(summary, system):.2f}; "
            f"{absolute}.")


def ladder(steps: list[tuple[str, pd.DataFrame]], system: str = "jenga", tol: float = 0.10) -> str:
    """Per bar, the Jenga / baseline speedup after each cumulative step (before -> after per
    mechanism), then the bars within tolerance and Spearman per step."""
    models = list(dict.fromkeys(m for _, df in steps for m in df.loc[df["system"] == system, "model"]))
    paper = {}
    for _, df in steps:
        for _, r in df[df["system"] == system].iterrows():
            paper.setdefault(r["model"], r.get("paper_speedup"))
    head = "| model | paper | " + " | ".join(label for label, _ in steps) + " |"
    rows = [head, "|" + "---|" * (len(steps) + 2)]
    for m in models:
        cells = []
        for _, df in steps:
            j = df[(df["model"] == m) & (df["system"] == system)]
            cells.append(_f(j.iloc[0]["speedup"]) if len(j) and j.iloc[0].get("status", "ok") == "ok"
                         else (str(j.iloc[0]["status"]) if len(j) else "–"))
        rows.append(f"| {m} | {_f(paper.get(m))} | " + " | ".join(cells) + " |")
    summ = []
    for label, df in steps:
        s = df[(df["system"] == system) & df["speedup"].notna()].dropna(subset=["paper_speedup"])
        within = int(((s["speedup"] / s["paper_speedup"] - 1).abs() <= tol + 1e-12).sum())
        summ.append(f"{within}/{len(s)}, ρ {rank_agreement(df, system):.2f}")
    rows.append(f"| within ±{tol * 100:.0f} %, Spearman | | " + " | ".join(summ) + " |")
    return "\n".join(rows)


def _cells(runs_dir: Path) -> pd.DataFrame:
    """makespan and step count of every record under ``runs_dir`` (model/dataset/system/seed-*)."""
    out = []
    for f in runs_dir.glob("*/*/*/*/record.json"):
        r = json.loads(f.read_text())
        if r.get("status", "ok") != "ok" or not r.get("num_steps"):
            continue
        ov = r.get("overrides") or []
        # Records of the same cache made with a mechanism switched off (the ladder runs) are skipped.
        if any("mechanisms" in o for o in ov):
            continue
        out.append({"model": r["model"], "system": r["system"], "dataset": r.get("dataset"),
                    "makespan_s": r["makespan_s"], "num_steps": r["num_steps"], "num_requests": r["num_requests"]})
    return pd.DataFrame(out)


def would_take(summary: pd.DataFrame, runs_dir: Path, system: str = "jenga", tol: float = 0.10) -> str:
    """For each bar outside ``tol``: the per-step host time Δ (s) that, added to every step of both
    cells with the schedule unchanged, would bring Jenga's speedup to the band's near edge. With
    the seed-mean speedup s, makespans T and step counts N (means over the committed records):
    s(Δ) = s · (1 + Δ N_b / T_b) / (1 + Δ N_j / T_j), so Δ = (target − s) / (s N_b / T_b − target N_j / T_j);
    as Δ → ∞ the speedup tends to s · (N_b / T_b) / (N_j / T_j), the limit a per-step cost can reach.
    Beside it, the Δ the paper's absolute baseline req/s alone would imply: (n / paper_b − T_b) / N_b.
    First order: a slower step would also change batching."""
    cells = _cells(runs_dir)
    rows = [("| model | ours → paper | T_j, N_j | T_b, N_b | Δ per step for the band | ≈ per layer | "
             "limit as Δ → ∞ | Δ from the paper's absolute baseline req/s |"), "|---|---|---|---|---|---|---|---|"]
    for _, r in summary[summary["system"] == system].iterrows():
        sp, psp = r.get("speedup"), r.get("paper_speedup")
        if not (pd.notna(sp) and pd.notna(psp)) or abs(sp / psp - 1) <= tol + 1e-12:
            continue
        g = cells[(cells["model"] == r["model"]) & (cells["num_requests"] == r.get("num_requests", cells["num_requests"]))]
        if "dataset" in r and "dataset" in g:
            g = g[g["dataset"] == r["dataset"]]
        j, b = g[g["system"] == system], g[g["system"] == r["baseline"]]
        if j.empty or b.empty:
            continue
        tj, nj = j["makespan_s"].mean(), j["num_steps"].mean()
        tb, nb = b["makespan_s"].mean(), b["num_steps"].mean()
        target = psp * (1 - tol) if sp < psp else psp * (1 + tol)
        rb, rj = nb / tb, nj / tj
        den = sp * rb - target * rj
        d = (target - sp) / den if den else float("nan")
        limit = sp * rb / rj
        layers = LAYERS.get(r["model"], float("nan"))
        n_req = float(b["num_requests"].mean())
        paper_b = r.get("paper_throughput") / psp if pd.notna(r.get("paper_throughput")) else float("nan")
        d_abs = (n_req / paper_b - tb) / nb if paper_b and not math.isnan(paper_b) else float("nan")
        if d >= 0:
            dtxt, ltxt = f"{d * 1e3:.1f} ms", f"{d / layers * 1e3:.2f} ms"
        else:
            dtxt, ltxt = "not reachable (see the limit)", "–"
        rows.append(f"| {r['model']} | {sp:.2f} → {psp:.2f} | {tj:.0f} s, {nj:.0f} | {tb:.0f} s, {nb:.0f} | {dtxt} "
                    f"| {ltxt} | {limit:.2f} | {d_abs * 1e3:.1f} ms |")
    return "\n".join(rows)


# Decoder layers per model (Δ per layer = Δ per step / layers): the eager host cost's unit.
LAYERS = {"llama3_2_11b_vision": 40, "llama3_2_11b_vision_fp8": 40, "gemma3_12b": 48, "gemma3_12b_fp8": 48,
          "ministral_8b": 36, "ministral_8b_fp8": 36, "llama4_scout": 48, "jamba_1_5_mini": 32,
          "character_70b_fp8": 80, "character_8b": 32, "pyramidkv_70b_fp8": 80, "pyramidkv_8b": 32,
          "llama3_1_70b": 80, "llama3_1_8b": 32, "gemma2_27b": 46, "gemma2_9b": 42}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", nargs="?")
    ap.add_argument("--before", help="an earlier revision's summary.csv")
    ap.add_argument("--system", default="jenga")
    ap.add_argument("--tol", type=float, default=0.10, help="band for 'within' (Fig. 14 H100 ±10 %%, L4 ±15 %%)")
    ap.add_argument("--ladder", nargs="+", metavar="LABEL=CSV", help="cumulative steps, in order")
    ap.add_argument("--would-take", metavar="RUNS_DIR", help="records of the summary's cells (results/runs/sim/<gpu>)")
    a = ap.parse_args(argv)
    if a.ladder:
        steps = [(x.split("=", 1)[0], pd.read_csv(x.split("=", 1)[1])) for x in a.ladder]
        print(ladder(steps, a.system, a.tol))
        return 0
    now = pd.read_csv(a.summary)
    if a.would_take:
        print(would_take(now, Path(a.would_take), a.system, a.tol))
        return 0
    before = pd.read_csv(a.before) if a.before else None
    print(table(now, before, a.system, a.tol))
    print()
    print(headline(now, a.system, a.tol))
    return 0


if __name__ == "__main__":
    sys.exit(main())
