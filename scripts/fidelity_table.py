"""Per-bar fidelity tables (markdown) from committed summaries: ours vs the paper, before -> after.

    python scripts/fidelity_table.py results/fig14/summary.csv [--before OLD.csv] [--system jenga]

Prints, per model, the Jenga / baseline speedup (seed mean, 95 % CI paired by seed), the paper's,
ours / paper, and our absolute req/s over the paper's for Jenga and its baseline; with ``--before``
(a summary written by an earlier revision, e.g. ``git show REV:results/fig14/summary.csv``) the
earlier speedup beside it. Then the headline line: geometric / arithmetic means over the models
that ran, bars within ±10 %, Spearman rank agreement. Reads summaries only: it never runs a cell,
so FIDELITY.md's tables are always the committed 3-seed means.
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from harness.analysis import arith_mean, geo_mean, rank_agreement


def _f(v, fmt: str = "{:.2f}") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _speedup_col(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    if "prefix_hit_rate" not in df and "hit_rate" in df:
        df["prefix_hit_rate"] = df["hit_rate"]
    return df


def table(summary: pd.DataFrame, before: pd.DataFrame | None, system: str = "jenga") -> str:
    s = _speedup_col(summary)
    rows = [("| model | baseline | ours (simulated) [95 % CI] | before | paper | ours / paper "
            "| within ±10 % | req/s ours / paper: Jenga, baseline | status |"),
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
        within = "–" if math.isnan(ratio) else ("yes" if abs(ratio - 1) <= 0.10 else "no")
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


def headline(summary: pd.DataFrame, system: str = "jenga") -> str:
    s = summary[(summary["system"] == system) & summary["speedup"].notna()]
    paired = s.dropna(subset=["paper_speedup"])
    within = int(((paired["speedup"] / paired["paper_speedup"] - 1).abs() <= 0.10).sum())
    return (f"{len(s)} models ran: ours geometric / arithmetic mean {geo_mean(s['speedup']):.3f} / "
            f"{arith_mean(s['speedup']):.3f}; the paper's on the same {len(paired)} paired models "
            f"{geo_mean(paired['paper_speedup']):.3f} / {arith_mean(paired['paper_speedup']):.3f}; "
            f"{within} of {len(paired)} bars within ±10 %; Spearman {rank_agreement(summary, system):.2f}.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary")
    ap.add_argument("--before", help="an earlier revision's summary.csv")
    ap.add_argument("--system", default="jenga")
    a = ap.parse_args(argv)
    now = pd.read_csv(a.summary)
    before = pd.read_csv(a.before) if a.before else None
    print(table(now, before, a.system))
    print()
    print(headline(now, a.system))
    return 0


if __name__ == "__main__":
    sys.exit(main())
