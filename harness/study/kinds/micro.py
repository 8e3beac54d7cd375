"""The paper's micro-experiments (arXiv v1 §7.3 setups, paper_facts §1.3-§1.4), results ours:
the ``micro`` kind's report.

    python -m harness.study experiments/micro.yaml [mode=smoke] [seeds=0,1] [--jobs N] [--dry-run]
                            [--launcher inline|joblib|slurm] [--out DIR]        # = make micro

The study file is in the sweep planner's format (:mod:`harness.study.plan`): one ``cells`` entry
per part (its ``label``), each with its own systems, x axis and seeds. Every cell is an ordinary
cached record of :func:`harness.run.run_cell`, so :mod:`harness.study` checks, dry-runs, launches
and resumes it like any sweep; this module only turns the records into the report:

- ``frag_trace``: memory waste over time, vLLM vs Jenga, Ministral on arXiv-QA (per-step trace);
- ``decode_batch``: 20 requests at once (55k-110k in, 50-100 out), Ministral on H100: mean decode
  batch and steps to finish;
- ``prefix_cache``: arXiv-QA prefixes of N concatenated articles × 4 questions: prefix hit rate and
  throughput (x: axis ``articles``);
- ``latency``: Llama-3.2-Vision at Poisson request rates (seeded): TTFT, TPOT, end-to-end (x: axis
  ``rate``).

Writes ``summary.csv`` (one row per cell and seed, with provenance), ``summary_mean.csv`` (seed
means and 95 % CIs, :mod:`harness.study.stats`), ``traces.csv`` (the two per-step traces of the
first seed, decimated, read from each record's ``trace.csv``) and ``micro.png`` + ``micro.pdf`` under
``results/micro`` (smoke: ``results/smoke/micro``, ``_smoke`` suffix).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness import plots
from harness.plots import SYSTEM_COLORS, SYSTEM_LABELS, SYSTEM_ORDER
from harness.study import report as rp
from harness.study import stats
from harness.study.plan import Plan

PARTS = ("frag_trace", "decode_batch", "prefix_cache", "latency")
TRACE_PARTS = ("frag_trace", "decode_batch")
COLORS = {**SYSTEM_COLORS, "vllm": "#7f7f7f", "jenga": "#1f77b4"}
LABELS = {**SYSTEM_LABELS, "hybrid_groups": "hybrid groups (vLLM, April 2025)"}
ROW_FIELDS = ("throughput_req_s", "output_tok_s", "makespan_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99",
              "e2e_mean", "mean_decode_batch", "mean_running", "waste_fraction", "prefix_hit_rate", "preemptions",
              "num_steps", "num_requests", "kv_capacity_bytes", "simulated", "status", "error")
TRACE_POINTS = 400
METRICS = ["throughput_req_s", "output_tok_s", "makespan_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99",
           "e2e_mean", "mean_decode_batch", "mean_running", "waste_fraction", "prefix_hit_rate", "preemptions",
           "num_steps"]
KEYS = ["part", "system", "x"]


def check(p: Plan) -> None:
    """Before any cell runs: every cell entry's ``label`` names a part this report knows."""
    unknown = sorted({r.model for r in p.runs} - set(PARTS))
    if unknown:
        raise ValueError(f"study {p.name}: cell label(s) {unknown} name no micro part; each cell entry's "
                         f"'label' must be one of {list(PARTS)}")


def _x(params: dict[str, Any]) -> float | None:
    """A part's x: the one axis it is swept over (articles per group, request rate); None if none."""
    xs = [v for v in params.values() if v is not None]
    return float(xs[0]) if xs else None


def rows(p: Plan, records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per cell and seed, ordered part, system, seed, x. ``trace``: the per-step trace's path
    for the trace parts' first seed (not written to the summary)."""
    check(p)
    first_seed: dict[str, int] = {}
    out = []
    for run, rec in zip(p.runs, records):
        first_seed.setdefault(run.model, run.seed)
        prov = rec.get("provenance") or {}
        row = {"part": run.model, "system": run.system, "x": _x(run.params), "seed": run.seed,
               "model": rec.get("model"), "dataset": rec.get("dataset"),
               **{k: rec.get(k) for k in ROW_FIELDS},
               "status": rec.get("status", "failed"), "error": rec.get("error"),
               "git_rev": prov.get("git_rev"), "dirty": prov.get("dirty"), "time": prov.get("time"),
               "overrides": " ".join(run.overrides)}
        if run.model in TRACE_PARTS and row["status"] == "ok" and run.seed == first_seed[run.model]:
            row["trace"] = rec.get("trace_file")   # written by harness.run beside the record
        out.append(row)
    df = pd.DataFrame(out)
    if df.empty:
        return df
    # The plan runs x outermost; the summary reads part by part, system by system, seed by seed.
    pairs = list(zip(df["part"], df["system"]))
    rank = {ps: i for i, ps in enumerate(dict.fromkeys(pairs))}
    order = pd.DataFrame({"pair": [rank[ps] for ps in pairs], "seed": df["seed"]}, index=df.index)
    return df.loc[order.sort_values(["pair", "seed"], kind="stable").index].reset_index(drop=True)


def decimated_traces(rows: pd.DataFrame) -> pd.DataFrame:
    """The per-step traces of the trace parts, at most ``TRACE_POINTS`` rows per cell."""
    frames = []
    for r in rows.to_dict("records") if len(rows) and "trace" in rows else []:
        if not isinstance(r.get("trace"), str):
            continue
        t = pd.read_csv(r["trace"])
        step = max(1, len(t) // TRACE_POINTS)
        t = t.iloc[::step][["time_s", "num_running", "num_decode", "waste_fraction", "allocated_bytes",
                            "needed_bytes"]].copy()
        t.insert(0, "system", r["system"])
        t.insert(0, "part", r["part"])
        frames.append(t)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def means(df: pd.DataFrame) -> pd.DataFrame:
    """One row per part, system and x over its seeds: mean and 95 % CI of each metric, ``seeds`` (ok
    runs), ``failed`` and the first ``error`` (:func:`harness.study.stats.aggregate`)."""
    return stats.aggregate(df, KEYS, METRICS) if len(df) else pd.DataFrame()


def _yerr(a: pd.DataFrame, metric: str, scale: float = 1.0):
    """Matplotlib error-bar extents of an aggregated metric (None where the CI is undefined)."""
    lo, hi = (a[metric] - a[f"{metric}_ci_lo"]) * scale, (a[f"{metric}_ci_hi"] - a[metric]) * scale
    return None if lo.isna().all() else [lo.fillna(0).to_numpy(), hi.fillna(0).to_numpy()]


def _line(ax, a: pd.DataFrame, col: str, scale: float = 1.0, **kw) -> None:
    ax.errorbar(a["x"], a[col] * scale, yerr=_yerr(a, col, scale), capsize=2, **kw)


def plot(df: pd.DataFrame, traces: pd.DataFrame, path: Path, mode: str) -> Path:
    """Six panels: the two traces (first seed) and the seed means (95 % CI whiskers) of the sweeps;
    written as PNG at ``path`` and PDF beside it (:func:`harness.plots.save`)."""
    fig, ax = plt.subplots(2, 3, figsize=(16, 8.4))
    agg = means(df.assign(x=df["x"].fillna(-1.0)))
    for s in [x for x in SYSTEM_ORDER if x in set(df["system"])]:
        kw = {"color": COLORS.get(s, "#333333"), "label": LABELS.get(s, s)}
        t = traces[(traces["part"] == "frag_trace") & (traces["system"] == s)] if len(traces) else traces
        if len(t):
            ax[0, 0].plot(t["time_s"], 100 * t["waste_fraction"], **kw)
        t = traces[(traces["part"] == "decode_batch") & (traces["system"] == s)] if len(traces) else traces
        if len(t):
            ax[0, 1].step(t["time_s"], t["num_running"], where="post", **kw)
        if not len(agg):
            continue
        p = agg[(agg["part"] == "prefix_cache") & (agg["system"] == s)].sort_values("x")
        _line(ax[0, 2], p, "prefix_hit_rate", 100, marker="o", **kw)
        _line(ax[1, 0], p, "throughput_req_s", marker="o", **kw)
        lat = agg[(agg["part"] == "latency") & (agg["system"] == s)].sort_values("x")
        _line(ax[1, 1], lat, "ttft_mean", marker="o", **kw)
        _line(ax[1, 1], lat, "e2e_mean", marker="s", linestyle="--", color=kw["color"])
        _line(ax[1, 2], lat, "tpot_mean", 1e3, marker="o", **kw)
    db = agg[agg["part"] == "decode_batch"].set_index("system") if len(agg) else agg
    note = ", ".join(f"{LABELS[s]}: mean decode batch {db.loc[s, 'mean_decode_batch']:.1f}, "
                     f"{db.loc[s, 'num_steps']:.0f} steps" for s in ("vllm", "jenga") if s in db.index)
    titles = [("Ministral-8B, arXiv-QA: memory waste over time", "simulated time (s)", "waste (% of allocated)"),
              ("20 requests at once (55k-110k in): running batch", "simulated time (s)", "running requests"),
              ("arXiv-QA prefix caching: hit rate", "articles per shared prefix (× 4 questions)",
               "prefix hit rate (%)"),
              ("arXiv-QA prefix caching: throughput", "articles per shared prefix (× 4 questions)",
               "throughput (req/s)"),
              ("Llama-3.2-11B-Vision: TTFT (solid), end-to-end (dashed)", "request rate (req/s)", "latency (s)"),
              ("Llama-3.2-11B-Vision: time per output token", "request rate (req/s)", "TPOT (ms)")]
    for a, (title, xl, yl) in zip(ax.flat, titles):
        a.set_title(title, fontsize=9)
        a.set_xlabel(xl)
        a.set_ylabel(yl)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    ax[0, 1].set_title(f"20 requests at once (55k-110k in): running batch\n{note}", fontsize=8)
    for a in (ax[1, 1], ax[1, 2]):
        a.axvline(4.0, color="black", linestyle=":", linewidth=0.8)
        a.text(4.05, 0.98, "paper's range ends (4 req/s)", transform=a.get_xaxis_transform(), fontsize=7,
               va="top")
    n = int(agg["seeds"].max()) if len(agg) else 0
    fig.suptitle(f"The paper's micro-experiments on H100 — simulated (sim backend), mode={mode}; setups from the paper, results "
                 f"ours (no published values for these panels); sweeps: mean of {n} seed(s), 95 % CI; traces: "
                 "first seed", fontsize=10)
    fig.tight_layout()
    return plots.save(fig, path, dpi=120, bbox_inches=None)


def report(p: Plan, records: list[dict[str, Any]], out: Path) -> pd.DataFrame:
    """summary.csv, summary_mean.csv (seed means, 95 % CIs), traces.csv, micro.png and micro.pdf
    under ``out``."""
    df = rows(p, records)
    out.mkdir(parents=True, exist_ok=True)
    sfx = rp.suffix(p)
    traces = decimated_traces(df)
    traces.to_csv(out / f"traces{sfx}.csv", index=False)
    df = df.drop(columns=["trace"], errors="ignore")
    df.to_csv(out / f"summary{sfx}.csv", index=False)
    agg = means(df)
    agg.to_csv(out / f"summary_mean{sfx}.csv", index=False)
    cols = ["part", "system", "x", "seeds", "throughput_req_s", "ttft_mean", "tpot_mean", "e2e_mean",
            "mean_decode_batch", "num_steps", "waste_fraction", "prefix_hit_rate"]
    rp.print_table(agg, cols)
    fig = out / f"{p.name}{sfx}.png"
    plot(df, traces, fig, p.mode)
    print(f"figure: {fig}")
    return df

