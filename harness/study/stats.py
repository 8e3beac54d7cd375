"""Seeds → mean ± 95 % CI, paired speedups, geometric and arithmetic means.

Speedups are paired by seed: seed ``s`` of a system divides by seed ``s`` of the baseline on the
same grid point (same workload draw), then the per-seed ratios are averaged. CIs are Student-t
(:func:`harness.analysis.mean_ci`); one seed gives a NaN interval.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis import aggregate_seeds, arith_mean, geo_mean, mean_ci, paired_speedups

# Record fields a sweep row keeps (flat; waste_breakdown and path_counts are flattened).
ROW_FIELDS = ("throughput_req_s", "output_tok_s", "makespan_s", "ttft_mean", "tpot_mean", "mean_decode_batch",
              "mean_running", "waste_fraction", "prefix_hit_rate", "preemptions", "kv_capacity_bytes",
              "kv_capacity_pages", "large_page_occupancy", "num_requests", "num_ignored", "num_steps", "wall_s")
PATHS = ("request_hit", "new_large", "evict_large", "steal", "any_free_small", "evict_small", "retry_tight")


def rows(runs: list, records: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per run: model label, grid point, system, seed, status and the record's metrics
    (:data:`ROW_FIELDS`, then the record fields named in ``extra``: a study's own metrics)."""
    out = []
    for run, rec in zip(runs, records):
        row = {"model": run.model, **run.params, "system": run.system, "baseline": run.baseline,
               "seed": run.seed, "status": rec.get("status", "failed"), "error": rec.get("error") or "",
               "dataset": rec.get("dataset"), "gpu": rec.get("gpu"), "backend": rec.get("backend"),
               "simulated": rec.get("simulated"), "git_rev": (rec.get("provenance") or {}).get("git_rev"),
               "dirty": (rec.get("provenance") or {}).get("dirty"), "time": (rec.get("provenance") or {}).get("time"),
               "reused": bool(rec.get("reused"))}
        for f in ROW_FIELDS:
            row[f] = rec.get(f)
        for f in extra:
            row.setdefault(f, rec.get(f))
        wb = rec.get("waste_breakdown") or {}
        row["waste_unneeded"], row["waste_fragmentation"] = wb.get("unneeded"), wb.get("fragmentation")
        pc = rec.get("path_counts") or {}
        for k in PATHS:
            row[f"path_{k}"] = pc.get(k)
        out.append(row)
    return pd.DataFrame(out)


def add_speedup(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Column ``speedup``: throughput / the same seed's baseline throughput at the same ``keys``
    (model + grid point). NaN where the baseline failed or is missing
    (:func:`harness.analysis.paired_speedups`, the one pairing every study uses)."""
    return df.assign(speedup=paired_speedups(df, keys))


PROVENANCE = ("dataset", "gpu", "backend", "simulated", "git_rev")


def aggregate(df: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per ``keys`` group (:func:`harness.analysis.aggregate_seeds`, the one seed
    aggregation): ``<metric>`` (seed mean), ``<metric>_ci_lo/_ci_hi`` (95 % CI), ``speedup_geo``
    (geometric mean over seeds) when ``speedup`` is a metric, ``seeds`` (ok runs), ``failed``
    (failed runs, with the first ``error``) and the provenance columns."""
    agg = aggregate_seeds(df, keys, metrics)
    if agg.empty:
        return agg
    cols = list(keys) + ["seeds", "failed", "error"]
    for m in metrics:
        cols += [m, f"{m}_ci_lo", f"{m}_ci_hi"]
        if m == "speedup":
            # Same groups, same order as aggregate_seeds (groupby sort=False, dropna=False).
            agg["speedup_geo"] = [geo_mean(pd.to_numeric(g.loc[g["status"] == "ok", "speedup"], errors="coerce"))
                                  for _, g in df.groupby(keys, sort=False, dropna=False)]
            cols.append("speedup_geo")
    return agg[cols + [c for c in PROVENANCE if c in agg and c not in cols]]


def means(values: pd.Series) -> dict[str, float]:
    """Geometric and arithmetic means (and the geometric mean's 95 % CI) of speedups."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    _, lo, hi = mean_ci(v, log=True)
    return {"geo_mean": geo_mean(v), "arith_mean": arith_mean(v), "geo_ci_lo": lo, "geo_ci_hi": hi, "n": len(v)}
