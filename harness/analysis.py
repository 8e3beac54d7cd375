"""Speedups, geometric/arithmetic means with confidence intervals, and our numbers beside the
paper's published ones (``results/paper/``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

PAPER_DIR = Path(__file__).resolve().parent.parent / "results" / "paper"
# Which published table an experiment is compared with.
PAPER_FILES = {"fig14": "fig14_sosp.csv", "fig13": "fig13_arxiv.csv"}
# Our model config names → the paper's model labels (prefix match, first wins).
PAPER_MODEL_PREFIXES = (
    ("llama3_2_11b_vision", "mllama"), ("mllama", "mllama"), ("gemma3", "Gemma-3"), ("gemma2", "Gemma-2"),
    ("ministral", "Ministral"), ("llama4", "Llama 4"), ("jamba", "Jamba"), ("character", "character"),
    ("pyramid", "PyramidKV"), ("llama3_1", "Llama3.1"),
)


def paper_model(model: str) -> str | None:
    """The paper's label for one of our model config names (None if the paper has no such bar)."""
    m = model.lower()
    return next((label for prefix, label in PAPER_MODEL_PREFIXES if m.startswith(prefix)), None)


def geo_mean(values: Iterable[float]) -> float:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return float(np.exp(np.log(v).mean())) if v.size and (v > 0).all() else float("nan")


def arith_mean(values: Iterable[float]) -> float:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return float(v.mean()) if v.size else float("nan")


def mean_ci(values: Iterable[float], confidence: float = 0.95, log: bool = False) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval; ``log=True`` gives the geometric mean and its CI.
    With fewer than two values the interval is (nan, nan)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if log:
        v = np.log(v)
    if v.size == 0:
        return (float("nan"),) * 3
    m = float(v.mean())
    sd = float(v.std(ddof=1)) if v.size >= 2 else 0.0
    if sd == 0.0:
        lo = hi = m if v.size >= 2 else float("nan")
    else:
        lo, hi = _t_interval(confidence, v.size - 1, m, sd, v.size)
    f = np.exp if log else (lambda x: x)
    return float(f(m)), float(f(lo)), float(f(hi))


def _t_interval(confidence: float, df: int, loc: float, std: float, n: int) -> tuple[float, float]:
    """``scipy.stats.t.interval(confidence, df, loc, scale=stats.sem(v))`` with scipy's own
    arithmetic (``rv_continuous.interval``: ``q = (1 ∓ confidence) / 2``; ``ppf``: ``stdtrit(df, q) *
    scale + loc``; ``sem``: ``std(ddof=1) / n ** 0.5``), through ``scipy.special`` alone: importing
    ``scipy.stats`` was ~0.85 s of every study's report (tests/test_analysis.py checks the identity)."""
    from scipy.special import stdtrit

    scale = np.float64(std) / n ** 0.5
    q1, q2 = (1.0 - confidence) / 2, (1.0 + confidence) / 2
    return stdtrit(df, q1) * scale + loc, stdtrit(df, q2) * scale + loc


def paper_table(figure: str, gpu: str) -> pd.DataFrame:
    """Published values for one figure and GPU: paper_model, system, paper_throughput (may be
    NaN), paper_speedup (vs the paper's vLLM bar), source, verified. Empty if none published."""
    fname = PAPER_FILES.get(figure)
    cols = ["paper_model", "system", "paper_throughput", "paper_speedup", "paper_source", "paper_verified"]
    if fname is None or not (PAPER_DIR / fname).exists():
        return pd.DataFrame(columns=cols)
    df = pd.read_csv(PAPER_DIR / fname)
    df = df[df["gpu"] == gpu].copy()
    if df.empty:
        return pd.DataFrame(columns=cols)
    if "throughput_req_s" in df:
        base = df[df["system"] == "vllm"].set_index("paper_model")["throughput_req_s"]
        df["paper_throughput"] = df["throughput_req_s"]
        df["paper_speedup"] = df["throughput_req_s"].to_numpy(float) / \
            df["paper_model"].map(base).to_numpy(float)
    else:
        df["paper_throughput"] = np.nan
        df["paper_speedup"] = df["speedup_vs_vllm"]
    df = df.rename(columns={"source": "paper_source", "verified": "paper_verified"})
    return df[cols].reset_index(drop=True)


# The columns of a summary row, in order (what a row says). Adding a column: compute it in
# ``summarize`` (or ``_paper_columns``) and name it here.
CELL_COLS = ["model", "dataset", "gpu", "tp", "system", "backend", "baseline"]
SUMMARY_COLS = CELL_COLS + [
    "status", "seeds", "failed", "error", "num_requests",
    "throughput_req_s", "throughput_req_s_ci_lo", "throughput_req_s_ci_hi",
    "speedup", "speedup_ci_lo", "speedup_ci_hi",
    "paper_model", "paper_speedup", "paper_throughput", "ours_over_paper_req_s", "paper_source",
    "paper_verified",
    "waste_fraction", "waste_unneeded", "waste_fragmentation", "prefix_hit_rate", "mean_decode_batch",
    "preemptions", "kv_capacity_gib", "ttft_mean", "tpot_mean", "makespan_s",
    "simulated", "git_rev", "dirty", "code_fingerprint",
]
# Seed-averaged metrics (mean over the ok seeds of a cell).
SEED_MEANS = ("waste_fraction", "waste_unneeded", "waste_fragmentation", "prefix_hit_rate", "mean_decode_batch",
              "preemptions", "kv_capacity_gib", "ttft_mean", "tpot_mean", "makespan_s")


def oom_error(record: dict) -> str:
    n = int(record.get("num_ignored") or 0)
    return f"OOM: {n} of {n + int(record.get('num_requests') or 0)} requests never fit the KV pool"


def _seed_status(record: dict) -> str:
    """ok | oom | failed. A finished cell whose pool could never admit some request (vLLM v0
    ignores it: "exceeds the capacity of block_manager") did not serve the workload: in a figure
    that is the paper's OOM bar, an outcome, not a failure (the record itself stays "ok"; sweeps
    read num_ignored)."""
    if record.get("status") != "ok":
        return "failed"
    return "oom" if record.get("num_ignored") else "ok"


def seed_rows(records: list[dict]) -> pd.DataFrame:
    """One row per record (ok or failed): the cell keys, ``tp`` (GPUs of tensor parallelism),
    ``num_requests`` (the requests the cell asked for), status/error, the metrics, provenance."""
    rows = []
    for r in records:
        prov = r.get("provenance") if isinstance(r.get("provenance"), dict) else {}
        conf = prov.get("config") if isinstance(prov.get("config"), dict) else {}
        wb = r.get("waste_breakdown") if isinstance(r.get("waste_breakdown"), dict) else {}
        cap = r.get("kv_capacity_bytes")
        rows.append({
            "model": r.get("model"), "dataset": r.get("dataset"), "gpu": r.get("gpu"),
            "tp": (conf.get("gpu") or {}).get("count"), "system": r.get("system"), "backend": r.get("backend"),
            "seed": r.get("seed"), "status": _seed_status(r),
            "error": oom_error(r) if _seed_status(r) == "oom" else r.get("error") or "",
            "num_requests": (conf.get("dataset") or {}).get("num_requests", r.get("num_requests")),
            "throughput_req_s": r.get("throughput_req_s"), "waste_fraction": r.get("waste_fraction"),
            "waste_unneeded": wb.get("unneeded"), "waste_fragmentation": wb.get("fragmentation"),
            "prefix_hit_rate": r.get("prefix_hit_rate"), "mean_decode_batch": r.get("mean_decode_batch"),
            "preemptions": r.get("preemptions"), "kv_capacity_gib": cap / 2**30 if cap is not None else None,
            "ttft_mean": r.get("ttft_mean"), "tpot_mean": r.get("tpot_mean"), "makespan_s": r.get("makespan_s"),
            "simulated": r.get("simulated"), "git_rev": prov.get("git_rev"), "dirty": prov.get("dirty"),
            "code_fingerprint": prov.get("code_fingerprint"),
        })
    return pd.DataFrame(rows)


def paired_speedups(df: pd.DataFrame, keys: list[str], baseline_col: str = "baseline") -> pd.Series:
    """Per-seed speedups: each ok row's throughput over the same seed's baseline throughput at the
    same ``keys`` (same workload draw). NaN where that baseline seed failed or is missing."""
    ok = df[df["status"] == "ok"]
    base = {tuple(r[k] for k in keys) + (r["seed"],): r["throughput_req_s"]
            for _, r in ok.iterrows() if r["system"] == r[baseline_col]}
    out = []
    for _, r in df.iterrows():
        b = base.get(tuple(r[k] for k in keys) + (r["seed"],))
        ok_row = r["status"] == "ok" and b is not None and b > 0 and r["throughput_req_s"] is not None
        out.append(float(r["throughput_req_s"]) / float(b) if ok_row else np.nan)
    return pd.Series(out, index=df.index, dtype=float)


def aggregate_seeds(df: pd.DataFrame, keys: list[str], ci_metrics: Iterable[str],
                    mean_metrics: Iterable[str] = ()) -> pd.DataFrame:
    """One row per ``keys`` group, failed seeds included: ``seeds`` (ok), ``failed``, ``status``
    (ok / partial / failed), the first ``error``; each ``ci_metric`` as its seed mean with a 95 %
    Student-t interval (``<m>_ci_lo``/``_ci_hi``, NaN with one seed); each ``mean_metric`` as its
    seed mean; the first value of every other column."""
    out = []
    ci_metrics, mean_metrics = list(ci_metrics), list(mean_metrics)
    for key, g in df.groupby(keys, sort=False, dropna=False):
        ok = g[g["status"] == "ok"]
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        n_ok, n_bad = len(ok), len(g) - len(ok)
        errors = [e for e in g.loc[g["status"] != "ok", "error"] if e] if "error" in g else []
        n_oom = int((g["status"] == "oom").sum())
        status = ("ok" if n_bad == 0 else "oom" if n_oom == n_bad and n_ok == 0
                  else "failed" if n_ok == 0 else "partial")
        row.update(seeds=n_ok, failed=n_bad - n_oom, error=errors[0] if errors else "", status=status)
        for m in ci_metrics:
            vals = pd.to_numeric(ok[m], errors="coerce") if m in ok else pd.Series(dtype=float)
            row[m], row[f"{m}_ci_lo"], row[f"{m}_ci_hi"] = mean_ci(vals)
        for m in mean_metrics:
            vals = pd.to_numeric(ok[m], errors="coerce").dropna() if m in ok else pd.Series(dtype=float)
            row[m] = float(vals.mean()) if len(vals) else np.nan
        src = ok if n_ok else g
        for c in g.columns:
            if c not in row and c not in ("seed",):
                row[c] = next(iter(src[c]), None)
        out.append(row)
    return pd.DataFrame(out)


def _paper_columns(out: pd.DataFrame, figure: str) -> pd.DataFrame:
    """The paper's bar beside ours: ``paper_speedup`` on the same baseline as ours (Jamba: the
    static partition), 1.0 on every baseline row of a model the paper has a bar for."""
    paper = pd.concat([paper_table(figure, g).assign(gpu=g) for g in out["gpu"].dropna().unique()],
                      ignore_index=True) if len(out) else pd.DataFrame()
    if paper.empty:
        for c in ("paper_throughput", "paper_speedup", "paper_source", "paper_verified"):
            out[c] = np.nan
        return out
    out = out.merge(paper, on=["paper_model", "gpu", "system"], how="left")
    has_bar = set(zip(paper.paper_model, paper.gpu))
    ps = []
    for r in out.itertuples():
        b = paper[(paper.paper_model == r.paper_model) & (paper.gpu == r.gpu) & (paper.system == r.baseline)]
        if r.system == r.baseline:
            ps.append(1.0 if (r.paper_model, r.gpu) in has_bar else np.nan)
        elif r.baseline != "vllm" and len(b) and not math.isnan(b.paper_throughput.iloc[0]):
            ps.append(r.paper_throughput / b.paper_throughput.iloc[0])
        else:
            ps.append(r.paper_speedup)
    out["paper_speedup"] = ps
    # Absolute req/s against the paper's: a right ratio from absolute times that are
    # 3x off is right for the wrong reason.
    out["ours_over_paper_req_s"] = out["throughput_req_s"] / out["paper_throughput"]
    return out


def summarize(records: list[dict], figure: str, baselines: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per cell (model, dataset, gpu, tp, system, backend), failed seeds aggregated too:
    seed-mean throughput and speedup over the model's baseline system (``baselines[model]``,
    default ``vllm``), each with a 95 % t-interval, the speedup paired by seed (the mean of the
    per-seed ratios); waste, prefix hit rate, decode batch, preemptions, KV capacity, latency;
    the paper's value beside it; provenance (``git_rev``). Columns: :data:`SUMMARY_COLS`."""
    baselines = baselines or {}
    df = seed_rows(records)
    if df.empty:
        return df
    df["baseline"] = df["model"].map(lambda m: baselines.get(m, "vllm"))
    keys = ["model", "dataset", "gpu", "tp", "backend"]
    df["speedup"] = paired_speedups(df, keys)
    out = aggregate_seeds(df, CELL_COLS, ["throughput_req_s", "speedup"], SEED_MEANS)
    out["paper_model"] = out["model"].map(lambda m: paper_model(m) if isinstance(m, str) else None)
    out = _paper_columns(out, figure)
    return out[[c for c in SUMMARY_COLS if c in out] + [c for c in out if c not in SUMMARY_COLS]]


def means(summary: pd.DataFrame, system: str = "jenga") -> dict[str, float]:
    """Geometric and arithmetic means of ``system``'s speedups, ours and the paper's (over the
    models where each exists), and the count of models within ±10 % of the paper."""
    s = summary[(summary["system"] == system) & summary["speedup"].notna()]
    paired = s.dropna(subset=["speedup", "paper_speedup"])
    within = ((paired["speedup"] / paired["paper_speedup"] - 1).abs() <= 0.10).sum()
    return {"ours_geo": geo_mean(s["speedup"]), "ours_arith": arith_mean(s["speedup"]),
            "paper_geo": geo_mean(s["paper_speedup"]), "paper_arith": arith_mean(s["paper_speedup"]),
            "ours_geo_paired": geo_mean(paired["speedup"]), "n_models": int(s["speedup"].notna().sum()),
            "n_paired": len(paired), "within_10pct": int(within)}


def rank_agreement(summary: pd.DataFrame, system: str = "jenga") -> float:
    """Spearman rank correlation of our per-model speedups with the paper's (nan if < 3 pairs)."""
    s = summary[(summary["system"] == system)].dropna(subset=["speedup", "paper_speedup"])
    if len(s) < 3 or s["speedup"].nunique() < 2 or s["paper_speedup"].nunique() < 2:
        return float("nan")
    return spearman(s["speedup"], s["paper_speedup"])


def spearman(x, y) -> float:
    """``scipy.stats.spearmanr(x, y).statistic`` for two NaN-free, non-constant series, with scipy's
    arithmetic (average ranks of each column, then ``np.corrcoef`` of the two rank columns) and no
    ``scipy.stats`` import (~0.85 s; tests/test_analysis.py checks the identity)."""
    ranked = np.column_stack((pd.Series(np.asarray(x, dtype=float)).rank().to_numpy(float),
                              pd.Series(np.asarray(y, dtype=float)).rank().to_numpy(float)))
    return float(np.corrcoef(ranked, rowvar=False)[1, 0])
