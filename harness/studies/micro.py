"""The paper's micro-experiments (arXiv v1 §7.3 setups, paper_facts §1.3-§1.4), results ours.

    python -m harness.study experiments/micro.yaml [mode=smoke] [--jobs N] [--out DIR]

Four parts, each a set of ordinary cells run through :func:`harness.run.run_overrides` (cached
records under ``out_dir``, default ``results/runs``):

- ``frag_trace``: memory waste over time, vLLM vs Jenga, Ministral on arXiv-QA (per-step trace);
- ``decode_batch``: 20 requests at once (55k-110k in, 50-100 out), Ministral on H100: mean decode
  batch and steps to finish;
- ``prefix_cache``: arXiv-QA prefixes of N concatenated articles × 4 questions: prefix hit rate and
  throughput;
- ``latency``: Llama-3.2-Vision at Poisson request rates (seeded): TTFT, TPOT, end-to-end.

Writes ``summary.csv`` (one row per cell, with provenance), ``traces.csv`` (the two per-step
traces, decimated) and ``micro.png`` under ``results/micro``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.plots import SYSTEM_COLORS, SYSTEM_LABELS, SYSTEM_ORDER
from harness.studies import common

PARTS = ("frag_trace", "decode_batch", "prefix_cache", "latency")
COLORS = {**SYSTEM_COLORS, "vllm": "#7f7f7f", "jenga": "#1f77b4"}
LABELS = {**SYSTEM_LABELS, "hybrid_groups": "hybrid groups (vLLM, April 2025)"}
ROW_FIELDS = ("throughput_req_s", "output_tok_s", "makespan_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99",
              "e2e_mean", "mean_decode_batch", "mean_running", "waste_fraction", "prefix_hit_rate", "preemptions",
              "num_steps", "num_requests", "kv_capacity_bytes", "simulated", "status", "error")
TRACE_POINTS = 400


def cells(study: dict[str, Any], smoke: bool) -> list[tuple[str, str, float | None, int, list[str]]]:
    """(part, system, x, seed, overrides) for every cell of the study. A part's ``seeds`` override
    the study's, except when ``seeds=`` was given on the command line."""
    out = []
    for part in PARTS:
        spec = study["parts"].get(part)
        if spec is None:
            continue
        base = common.overrides_of(spec["cell"])
        seeds = study.get("seeds", [0]) if study.get("seeds_from_cli") else spec.get("seeds", study.get("seeds", [0]))
        for system in spec.get("systems", ["vllm", "jenga"]):
            for seed in seeds:
                if part == "prefix_cache":
                    for n in common.grid(spec["articles"], smoke):
                        out.append((part, system, float(n), int(seed), base + [f"dataset.articles_per_group={int(n)}"]))
                elif part == "latency":
                    for rate in common.grid(spec["rates"], smoke):
                        out.append((part, system, float(rate), int(seed), base + [f"engine.request_rate={rate}"]))
                else:
                    out.append((part, system, None, int(seed), base))
    return out


def run_one(part: str, system: str, x: float | None, seed: int, overrides: list[str], mode: str, extra: list[str],
            force: bool, first_seed: int = 0) -> dict[str, Any]:
    """One cell through :func:`harness.run.run_overrides`; the first seed's trace path is kept."""
    from harness.run import run_overrides

    ov = overrides + [f"system={system}", f"mode={mode}", f"seed={seed}"] + extra + (["force=true"] if force else [])
    rec = run_overrides(ov)
    row = {"part": part, "system": system, "x": x, "seed": seed, "model": rec.get("model"),
           "dataset": rec.get("dataset"),
           **{k: rec.get(k) for k in ROW_FIELDS}}
    prov = rec.get("provenance") or {}
    row.update({"git_rev": prov.get("git_rev"), "dirty": prov.get("dirty"), "time": prov.get("time"),
                "overrides": " ".join(ov)})
    if part in ("frag_trace", "decode_batch") and rec.get("status") == "ok" and seed == first_seed:
        row["trace"] = str(_trace_path(ov))
    return row


def _trace_path(overrides: list[str]) -> Path:
    from harness.run import cell_dir

    return cell_dir(common.compose([o for o in overrides if not o.startswith("force=")])) / "trace.csv"


def decimated_traces(rows: list[dict]) -> pd.DataFrame:
    """The per-step traces of the trace parts, at most ``TRACE_POINTS`` rows per cell."""
    frames = []
    for r in rows:
        if not r.get("trace"):
            continue
        t = pd.read_csv(r["trace"])
        step = max(1, len(t) // TRACE_POINTS)
        t = t.iloc[::step][["time_s", "num_running", "num_decode", "waste_fraction", "allocated_bytes",
                            "needed_bytes"]].copy()
        t.insert(0, "system", r["system"])
        t.insert(0, "part", r["part"])
        frames.append(t)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


METRICS = ["throughput_req_s", "output_tok_s", "makespan_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99",
           "e2e_mean", "mean_decode_batch", "mean_running", "waste_fraction", "prefix_hit_rate", "preemptions",
           "num_steps"]
KEYS = ["part", "system", "x"]


def _line(ax, a: pd.DataFrame, col: str, scale: float = 1.0, **kw) -> None:
    ax.errorbar(a["x"], a[col] * scale, yerr=common.yerr(a, col, scale), capsize=2, **kw)


def plot(df: pd.DataFrame, traces: pd.DataFrame, path: Path, mode: str) -> None:
    """Six panels: the two traces (first seed) and the seed means (95 % CI whiskers) of the sweeps."""
    fig, ax = plt.subplots(2, 3, figsize=(16, 8.4))
    agg = common.aggregate(df.assign(x=df["x"].fillna(-1.0)), KEYS, METRICS)
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
    fig.suptitle(f"The paper's micro-experiments on H100 — {common.sim_label(mode)}; setups from the paper, results "
                 f"ours (no published values for these panels); sweeps: mean of {n} seed(s), 95 % CI; traces: "
                 "first seed", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, ("parts",), argv)
    unknown = sorted(set(args.study["parts"]) - set(PARTS))
    if unknown:
        raise ValueError(f"micro: unknown part(s) {unknown}; allowed: {list(PARTS)}")
    gpu = args.study.get("gpu", "h100")
    extra = [f"gpu={gpu}"] + args.overrides
    plan = cells(args.study, args.smoke)
    first = {}
    for p, s, x, seed, _ in plan:
        first.setdefault(p, seed)
    tasks = [(p, s, x, seed, ov, args.mode, extra, args.force, first[p]) for p, s, x, seed, ov in plan]
    if args.dry_run:
        return common.print_tasks(tasks)
    elapsed = common.timer()
    rows = common.parallel(run_one, tasks, args.jobs, args.progress, args.study['name'])
    df = common.write_summary(rows, args, elapsed())
    traces = decimated_traces(rows)
    traces.to_csv(args.out / f"traces{args.suffix}.csv", index=False)
    df.drop(columns=["trace"], errors="ignore").to_csv(args.out / f"summary{args.suffix}.csv", index=False)
    agg = common.write_means(df, args, KEYS, METRICS)
    cols = ["part", "system", "x", "seeds", "throughput_req_s", "ttft_mean", "tpot_mean", "e2e_mean",
            "mean_decode_batch", "num_steps", "waste_fraction", "prefix_hit_rate"]
    print(agg[[c for c in cols if c in agg]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    plot(df, traces, common.figure_path(args), args.mode)
    return 0 if (df["status"] == "ok").all() else 1


if __name__ == "__main__":
    sys.exit(common.guard(main))
