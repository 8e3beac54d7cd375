"""User traces for the what-if lab (issue 22 §3): a JSONL file, one request per line, loaded through
HF ``datasets`` (``load_dataset("json", ...)``, offline: a local file) after a validator that names
the first bad line.

One line::

    {"session": "u1", "turn": 0, "arrival": 0.0, "prompt": [101, 102, ...], "output_len": 128}
    {"session": "u1", "turn": 1, "arrival": 4.2,
     "segments": [{"id": "sys", "len": 2048}, {"id": "u1-t0", "len": 700}, {"id": "u1-t1", "len": 90}],
     "output_len": 256}

- ``session`` (string or integer) and ``turn`` (integer >= 0): which conversation and which turn;
- ``arrival`` (seconds >= 0): when the request arrives;
- exactly one of ``prompt`` (token ids, a non-empty list of integers >= 0) or ``segments`` (a
  non-empty list of ``{"id", "len"}``: the prompt is the concatenation of those segments; a segment
  id always stands for the same tokens, so two requests that list the same segments in the same
  order share that prefix -- a way to describe a trace without its text);
- ``output_len`` (integer >= 1): tokens to generate.
Unknown keys are refused (a typo would otherwise be silently ignored).
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np

from harness.workloads.request import Request

REQUIRED = ("session", "turn", "arrival", "output_len")
ALLOWED = set(REQUIRED) | {"prompt", "segments"}


class TraceError(ValueError):
    """The trace is not valid; the message names the file, the line and the key."""


def _check(rec, where: str) -> None:
    if not isinstance(rec, dict):
        raise TraceError(f"{where}: a line must be a JSON object")
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise TraceError(f"{where}: missing key(s) {missing}")
    unknown = sorted(set(rec) - ALLOWED)
    if unknown:
        raise TraceError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(ALLOWED)}")
    if not isinstance(rec["session"], (str, int)) or isinstance(rec["session"], bool):
        raise TraceError(f"{where}: session must be a string or an integer, got {rec['session']!r}")
    for key, lo, typ in (("turn", 0, int), ("output_len", 1, int)):
        v = rec[key]
        if not isinstance(v, typ) or isinstance(v, bool) or v < lo:
            raise TraceError(f"{where}: {key} must be an integer >= {lo}, got {v!r}")
    a = rec["arrival"]
    if not isinstance(a, (int, float)) or isinstance(a, bool) or not math.isfinite(a) or a < 0:
        raise TraceError(f"{where}: arrival must be a finite number >= 0 (seconds), got {a!r}")
    has_p, has_s = "prompt" in rec, "segments" in rec
    if has_p == has_s:
        raise TraceError(f"{where}: give exactly one of prompt (token ids) or segments")
    if has_p:
        p = rec["prompt"]
        if not isinstance(p, list) or not p or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
            raise TraceError(f"{where}: prompt must be a non-empty list of integers >= 0")
    else:
        segs = rec["segments"]
        if not isinstance(segs, list) or not segs:
            raise TraceError(f"{where}: segments must be a non-empty list of {{id, len}}")
        for i, s in enumerate(segs):
            if not isinstance(s, dict) or set(s) != {"id", "len"}:
                raise TraceError(f"{where}: segments[{i}] must be an object with exactly the keys id and len")
            if not isinstance(s["id"], (str, int)) or isinstance(s["id"], bool):
                raise TraceError(f"{where}: segments[{i}].id must be a string or an integer")
            if not isinstance(s["len"], int) or isinstance(s["len"], bool) or s["len"] < 1:
                raise TraceError(f"{where}: segments[{i}].len must be an integer >= 1, got {s['len']!r}")


def validate_trace(path: str | Path) -> int:
    """Check every line of the JSONL file; return the number of requests. Raises :class:`TraceError`
    naming the first bad line (1-based) and key."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{path}: no such file")
    n = 0
    with p.open() as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p.name}:{i}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{where}: not JSON ({e.msg})") from None
            _check(rec, where)
            n += 1
    if n == 0:
        raise TraceError(f"{path}: no requests")
    return n


def _segment_tokens(seg_id, n: int, vocab_size: int, cache: dict) -> np.ndarray:
    """The tokens segment ``seg_id`` stands for: seeded by its id, so equal ids are equal tokens
    (a longer use of the same id extends the same stream)."""
    key = str(seg_id)
    have = cache.get(key)
    if have is None or len(have) < n:
        rng = np.random.default_rng(zlib.crc32(key.encode()))
        have = rng.integers(1, max(vocab_size, 2), size=max(n, 0 if have is None else len(have)), dtype=np.int64)
        cache[key] = have
    return have[:n]


def load_trace(path: str | Path, vocab_size: int = 150_000) -> list[Request]:
    """Validate, then load the trace through HF ``datasets`` and turn it into requests in arrival
    order (ties: session, turn)."""
    validate_trace(path)
    import datasets
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    cache: dict = {}
    out = []
    for i, rec in enumerate(ds):
        if rec.get("prompt") is not None:
            tokens = np.asarray(rec["prompt"], dtype=np.int32)
        else:
            tokens = np.concatenate([_segment_tokens(s["id"], int(s["len"]), vocab_size, cache)
                                     for s in rec["segments"]]).astype(np.int32)
        out.append(Request(f"{rec['session']}-t{rec['turn']}-{i}", float(rec["arrival"]), tokens,
                           int(rec["output_len"]), prefix_group=str(rec["session"])))
    out.sort(key=lambda r: (r.arrival_time, r.prefix_group or "", r.request_id))
    return out
