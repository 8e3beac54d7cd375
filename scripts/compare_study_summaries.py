"""Compare a specdec / vlm_embed / mamba_prefix summary written by the old study drivers (before
issue 10 item 2) with one written by the cell pipeline, per (cell, system, seed), on every metric
both hold; prints the largest relative difference per metric and per system.

    python scripts/compare_study_summaries.py OLD/summary.csv NEW/summary.csv specdec|vlm_embed|mamba_prefix

Column names that changed: the old ``system`` column of vlm_embed and mamba_prefix (the study's
label: reencode, keep, jenga_512, marconi_lru, ...) is the new ``variant``; the new ``system`` is
the registry system it runs; ``waste_breakdown`` (a dict) is ``waste_unneeded`` /
``waste_fragmentation``. Exit 1 if any metric differs.
"""

import ast
import sys

import numpy as np
import pandas as pd

KEYS = {"specdec": ["target", "draft", "system", "seed"], "vlm_embed": ["model", "system", "request_rate", "seed"],
        "mamba_prefix": ["workload", "system", "seed"]}
SKIP = {"status", "error", "git_rev", "dirty", "time", "config_hash", "simulated", "dataset", "model",
        "waste_breakdown", "flop_alpha", "checkpoint_interval"}


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    r = np.abs(a - b) / np.maximum(np.abs(a), 1e-300)
    r = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, r)
    return float(np.nanmax(r)) if len(r) else 0.0


def main(old_path: str, new_path: str, study: str) -> int:
    old, new, keys = pd.read_csv(old_path), pd.read_csv(new_path), KEYS[study]
    if study != "specdec":
        new = new.drop(columns=["system"]).rename(columns={"variant": "system"})
    if "waste_breakdown" in old:
        wb = old["waste_breakdown"].map(ast.literal_eval)
        old["waste_unneeded"], old["waste_fragmentation"] = wb.map(lambda d: d["unneeded"]), wb.map(
            lambda d: d["fragmentation"])
    cols = [c for c in old if c in new and c not in set(keys) | SKIP]
    m = old.merge(new, on=keys, suffixes=("_old", "_new"), how="outer", indicator=True)
    if not (m["_merge"] == "both").all():
        print(f"rows in one summary only:\n{m[m['_merge'] != 'both'][keys]}")
        return 1

    def num(g, c, side):
        return pd.to_numeric(g[f"{c}_{side}"], errors="coerce").to_numpy(float)

    worst = {c: rel_diff(num(m, c, "old"), num(m, c, "new")) for c in cols}
    per_sys = {s: max(rel_diff(num(g, c, "old"), num(g, c, "new")) for c in cols) for s, g in m.groupby("system")}
    print(f"{study}: {len(m)} rows x {len(cols)} metrics compared; max relative difference {max(worst.values()):.3g}")
    print("  per system: " + ", ".join(f"{k} {v:.3g}" for k, v in per_sys.items()))
    for c, v in sorted(worst.items(), key=lambda x: -x[1]):
        if v > 0:
            print(f"  {c}: {v:.3g}")
    return 1 if any(v > 0 for v in worst.values()) else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
