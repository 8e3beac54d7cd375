"""Are two sets of cell records the same but for wall time? (issue 20's "numbers must not change")

    python -m bench.compare_runs OLD/results/runs NEW/results/runs
    python -m bench.compare_runs OLD/summary.csv NEW/summary.csv     # a study's summaries (provenance
                                                                     # and timing columns aside)


The check behind issue 20's commits (records at the starting commit, then at the new one):

    git archive <old> | tar -x -C /tmp/old && (cd /tmp/old && python -m harness.study experiments/fig14.yaml --force)
    python -m bench.sim --keep /tmp/new14          # or: python -m harness.study ... out_dir=/tmp/new14/runs --force
    python -m bench.compare_runs /tmp/old/results/runs/sim/h100 /tmp/new14/runs
    python -m bench.compare_runs results/fig14/summary.csv /tmp/new14/fig14/summary.csv

Cells are matched by (backend, gpu, model, dataset, system, seed, overrides); per cell the record
(every field but ``wall_s`` and ``provenance`` -- git revision, code fingerprint, time) and the
``trace.csv`` beside it must be byte-for-byte the same. The record's folder name holds the code
fingerprint, so a changed allocator always writes new folders: matching by the cell's keys is what
makes the comparison possible. Exit 1 on any difference or unmatched cell.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

# trace_file: where the trace went (its bytes are compared below), not what it holds.
IGNORED = {"wall_s", "provenance", "reused", "trace_file"}
RUN_CONTROL = ("out_dir=", "force=")  # where a record goes and whether it is recomputed: not the cell


def cells(runs: Path) -> dict[tuple, tuple[str, str]]:
    out = {}
    for rec_path in sorted(runs.rglob("record.json")):
        rec = json.loads(rec_path.read_text())
        key = (rec.get("backend"), rec.get("gpu"), rec.get("model"), rec.get("dataset"), rec.get("system"),
               rec.get("seed"), tuple(o for o in rec.get("overrides") or () if not o.startswith(RUN_CONTROL)))
        body = json.dumps({k: (v if k != "overrides" else key[-1]) for k, v in rec.items() if k not in IGNORED},
                          sort_keys=True)
        trace = rec_path.with_name("trace.csv")
        tdig = hashlib.sha256(trace.read_bytes()).hexdigest() if trace.exists() else "-"
        if key in out:
            raise SystemExit(f"two records for one cell under {runs}: {key}")
        out[key] = (hashlib.sha256(body.encode()).hexdigest(), tdig)
    return out


# Summary columns that say when, where and how fast a row was made, not what it measured.
SUMMARY_IGNORED = ("git_rev", "dirty", "code_fingerprint", "time", "wall_s")


def same_summary(old: str, new: str) -> int:
    """Two summary.csv files equal in every column but the provenance and timing ones; the
    columns that differ are named."""
    import pandas as pd

    a, b = pd.read_csv(old), pd.read_csv(new)
    drop = [c for c in SUMMARY_IGNORED if c in a and c in b]
    a, b = a.drop(columns=drop), b.drop(columns=drop)
    for df in (a, b):
        if "overrides" in df:  # where a record went and whether it was recomputed: not the cell
            df["overrides"] = [" ".join(o for o in str(v).split() if not o.startswith(RUN_CONTROL))
                               for v in df["overrides"]]
    same = a.equals(b)
    print(f"summaries {'identical' if same else 'DIFFER'} ({len(a)} vs {len(b)} rows; ignored {drop})")
    if not same and list(a.columns) == list(b.columns) and len(a) == len(b):
        cols = [c for c in a.columns if not a[c].equals(b[c])]
        print(f"  columns that differ: {cols}")
    elif not same:
        print(f"  columns: {sorted(set(a.columns) ^ set(b.columns))} in one only; rows {len(a)} vs {len(b)}")
    return 0 if same else 1


def main(old: str, new: str) -> int:
    if old.endswith(".csv"):
        return same_summary(old, new)
    a, b = cells(Path(old)), cells(Path(new))
    only = sorted(set(a) ^ set(b), key=str)
    diff = sorted((k for k in set(a) & set(b) if a[k] != b[k]), key=str)
    for k in only:
        print(f"unmatched: {k[:6]} ({'old' if k in a else 'new'} only)")
    for k in diff:
        what = " and ".join(n for n, x, y in zip(("record", "trace"), a[k], b[k]) if x != y)
        print(f"differs ({what}): {k[:6]}")
    print(f"{len(set(a) & set(b))} cells compared, {len(diff)} differ, {len(only)} unmatched")
    return 1 if (diff or only) else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(*sys.argv[1:]))
