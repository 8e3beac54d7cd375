"""Result records (contract §4, §6): the RunResult every backend returns, the flat JSON record,
provenance, atomic writes, record paths, per-request latency summaries and aggregation.

Every backend computes its throughput and latency through :func:`summarize_requests`, so the
numbers mean the same thing whichever backend ran.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import operator
import os
import platform
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
CELL_KEYS = ("model", "dataset", "gpu", "system", "backend", "seed")
# Metric fields of a record (contract §4); a failure record carries them as None.
METRIC_FIELDS = (
    "throughput_req_s", "output_tok_s", "total_tok_s", "makespan_s",
    "ttft_mean", "ttft_p50", "ttft_p99", "tpot_mean", "tpot_p50", "tpot_p99", "e2e_mean",
    "mean_decode_batch", "mean_running", "waste_fraction", "waste_breakdown", "prefix_hit_rate",
    "prefix_hit_tokens", "prompt_tokens", "preemptions", "recomputed_tokens", "kv_capacity_bytes",
    "kv_capacity_pages", "large_page_occupancy", "path_counts", "num_requests", "num_steps",
    "num_ignored",
)
_VERSIONED = ("jenga-harness", "numpy", "hydra-core", "omegaconf", "pandas", "scipy", "torch", "vllm")


@dataclass
class RunResult:
    """What a backend returns: the record's metrics, one dict per scheduler step, and
    backend-specific facts (``meta``; e.g. ``simulated``, the allocator that ran)."""

    metrics: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def summarize_requests(arrival: list[float], first_token: list[float | None], finish: list[float | None],
                       prompt_lens: list[int], output_lens: list[int]) -> dict[str, Any]:
    """Throughput and latency from per-request timestamps (seconds; unfinished = None).

    Throughput counts finished requests over the makespan (first arrival to last finish), as
    vLLM's ``benchmark_serving.py`` divides by the benchmark's duration. TPOT is
    ``(finish − first token) / (output_len − 1)`` over requests with more than one output token.
    """
    done = [i for i, f in enumerate(finish) if f is not None]
    start = min(arrival) if arrival else 0.0
    end = max((finish[i] for i in done), default=start)
    makespan = end - start
    a = np.array([arrival[i] for i in done], dtype=float)
    ft = np.array([first_token[i] for i in done], dtype=float)
    fin = np.array([finish[i] for i in done], dtype=float)
    out = np.array([output_lens[i] for i in done], dtype=float)
    prompt = sum(prompt_lens[i] for i in done)
    multi = out > 1
    tpot = (fin[multi] - ft[multi]) / (out[multi] - 1)
    ttft = ft - a
    rate = (lambda x: x / makespan if makespan > 0 else None)
    return {
        "throughput_req_s": rate(len(done)), "output_tok_s": rate(float(out.sum())),
        "total_tok_s": rate(float(out.sum()) + prompt), "makespan_s": makespan,
        "ttft_mean": _mean(ttft), "ttft_p50": _pct(ttft, 50), "ttft_p99": _pct(ttft, 99),
        "tpot_mean": _mean(tpot), "tpot_p50": _pct(tpot, 50), "tpot_p99": _pct(tpot, 99),
        "e2e_mean": _mean(fin - a), "num_requests": len(done),
    }


# -- provenance ---------------------------------------------------------------------------------
def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


_CODE_GLOBS = ("jenga/**/*.py", "harness/**/*.py", "harness/conf/**/*.yaml", "datasets/**/*.yaml",
               "datasets/**/*.json")
_code_fp: str | None = None


def code_fingerprint() -> str:
    """Hash of every source file that can change a result (the allocators, the harness, its configs
    and the offline-twin statistics). Part of a cell's record key, so a record made by other code is
    never reused as if it were current; the git revision alone cannot serve, since committing
    results changes it without changing the code. Computed once per process."""
    global _code_fp
    if _code_fp is None:
        h = hashlib.sha1()
        files = sorted({f for g in _CODE_GLOBS for f in REPO_ROOT.glob(g) if f.is_file()})
        for f in files:
            h.update(str(f.relative_to(REPO_ROOT)).encode())
            h.update(f.read_bytes())
        _code_fp = h.hexdigest()[:12]
    return _code_fp


def _code_state() -> dict[str, Any]:
    """Git revision, dirty flag and package versions, read once per process like
    :func:`code_fingerprint` (they describe the code the process imported; two git processes and
    eight package look-ups were ~13 ms of CPU per record, ~0.5 s of a Fig. 13 study). Tests that
    fake ``_git`` clear it (``_CODE_STATE.clear()``)."""
    if not _CODE_STATE:
        versions = {}
        for pkg in _VERSIONED:
            try:
                versions[pkg] = metadata.version(pkg)
            except metadata.PackageNotFoundError:
                continue
        versions["python"] = platform.python_version()
        # Dirty = a tracked file that can change a number differs from HEAD; results/ is the output,
        # so regenerating several studies in a row does not mark the later ones dirty.
        status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
        _CODE_STATE.update({"git_rev": _git("rev-parse", "HEAD"),
                            "dirty": bool(status) if status is not None else None, "versions": versions})
    return _CODE_STATE


_CODE_STATE: dict[str, Any] = {}


def provenance(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Where a record came from: git revision (+ dirty flag), package versions, host, UTC time,
    and the resolved cell config."""
    state = _code_state()
    return {
        "git_rev": state["git_rev"], "dirty": state["dirty"], "code_fingerprint": code_fingerprint(),
        "versions": dict(state["versions"]), "host": socket.gethostname(), "platform": platform.platform(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"), "config": config or {},
    }


# -- paths and atomic writes ----------------------------------------------------------------------
def overrides_hash(overrides: list[str] | tuple[str, ...]) -> str:
    """Short stable hash of a cell's extra overrides (order-independent)."""
    if not overrides:
        return ""
    return hashlib.sha1("\n".join(sorted(overrides)).encode()).hexdigest()[:10]


def record_dir(out_dir: str | Path, cell: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """``{out_dir}/{backend}/{gpu}/{model}/{dataset}/{system}/seed{seed}[-{hash}]`` (contract §4)."""
    h = overrides_hash(overrides)
    leaf = f"seed{cell['seed']}" + (f"-{h}" if h else "")
    return Path(out_dir) / str(cell["backend"]) / str(cell["gpu"]) / str(cell["model"]) / \
        str(cell["dataset"]) / str(cell["system"]) / leaf


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path: Path, record: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def write_trace(path: Path, trace: list[dict[str, Any]]) -> None:
    """The per-step trace as CSV (columns = union of keys, first-seen order)."""
    cols = list(dict.fromkeys(k for row in trace for k in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        # csv.writer on lists: what DictWriter writes (a missing key is ""), without its per-row
        # dict-to-list pass (a Fig. 13 study writes ~150k rows). When every row has every column
        # (a row's keys are a subset of the union, so as many keys means the same set), one C-level
        # itemgetter per row picks them in column order.
        w = csv.writer(f)
        w.writerow(cols)
        if len(cols) > 1 and all(len(row) == len(cols) for row in trace):
            w.writerows(map(operator.itemgetter(*cols), trace))
        else:
            w.writerows([row.get(c, "") for c in cols] for row in trace)
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    """A record, or None if absent, unreadable, or valid JSON that is not an object."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def finished_record(cell_dir: Path) -> dict[str, Any] | None:
    """The cell's record if it can be trusted as finished, else None (the cell is recomputed): a
    JSON object with ``status: ok``, every cell key and metric field present, a numeric
    throughput, and its ``trace.csv`` beside it. A truncated, hand-edited or half-written record
    is never reused."""
    rec = read_record(Path(cell_dir) / "record.json")
    if rec is None or rec.get("status") != "ok":
        return None
    if any(k not in rec for k in (*CELL_KEYS, *METRIC_FIELDS)):
        return None
    tp = rec.get("throughput_req_s")
    if isinstance(tp, bool) or not isinstance(tp, (int, float)) or not math.isfinite(tp):
        return None
    if not (Path(cell_dir) / "trace.csv").is_file():
        return None
    return rec


def make_record(cell: dict[str, Any], overrides: list[str] | tuple[str, ...], result: RunResult | None,
                config: dict[str, Any], wall_s: float, error: str | None = None) -> dict[str, Any]:
    """The flat record of contract §4 (status ok with metrics, or failed with the error)."""
    rec: dict[str, Any] = {k: cell[k] for k in CELL_KEYS}
    rec["overrides"] = list(overrides)
    rec["status"] = "failed" if error else "ok"
    rec["error"] = error
    for k in METRIC_FIELDS:
        rec[k] = None
    if result is not None:
        rec.update(result.metrics)
        rec["simulated"] = bool(result.meta.get("simulated", False))
        rec["allocator"] = result.meta.get("allocator")
        rec["meta"] = result.meta
    else:
        rec["simulated"] = cell.get("backend") == "sim"
        rec["allocator"] = None
    rec["wall_s"] = wall_s
    rec["provenance"] = provenance(config)
    return rec


def load_records(root: str | Path) -> list[dict[str, Any]]:
    """Every ``record.json`` under ``root`` (aggregation input)."""
    return [r for p in sorted(Path(root).rglob("record.json")) if (r := finished_record(p.parent)) is not None]


def records_table(records: list[dict[str, Any]]):
    """Flatten records into one pandas DataFrame (nested dicts dropped, provenance summarized)."""
    import pandas as pd

    rows = []
    for r in records:
        row = {k: v for k, v in r.items() if not isinstance(v, (dict, list))}
        prov = r.get("provenance") or {}
        row["git_rev"] = prov.get("git_rev")
        row["dirty"] = prov.get("dirty")
        row["code_fingerprint"] = prov.get("code_fingerprint")
        row["time"] = prov.get("time")
        wb = r.get("waste_breakdown") or {}
        for k, v in wb.items():
            row[f"waste_{k}"] = v
        rows.append(row)
    return pd.DataFrame(rows)
