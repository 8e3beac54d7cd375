"""Time the zoo's step-time shapes on a lent GPU and write calibration points (issue 21 §4).

Run by ``scripts/gpu_calibrate.sh``; needs torch only (no vLLM, no PyYAML, no harness import):
the shapes come from ``calibration/gpu_shapes.json``, which ``--emit-shapes`` writes on CPU from
the model configs. Rows have ``calibration/points.csv``'s columns, ``source_repo`` "measured
here" and the device name, date and torch version in ``source_line``, so ``scripts/calibrate.py``
fits them like any published point:

- ``linear_layer_time``: one decoder layer's QKV, O, gate+up and down GEMMs (one GPU's shard at
  TP 1/4/8), summed, at 1-8192 tokens: the GEMM curve of this GPU (the same quantity as Vidur's).
- ``attention_decode_time``: ``scaled_dot_product_attention`` of a decode batch over a bf16 KV
  of 1k-64k tokens (reported; a lower bound for the paged kernels vLLM runs).
- ``eager_layer_gap``: one Llama-8B-shaped decoder layer's decode step run eagerly minus its CUDA
  graph replay: torch's own launch cost per layer, a lower bound of vLLM v0's host cost per layer.
- ``untuned_fused_moe`` is not timed: the Triton fused-MoE kernel is vLLM's, not on this image.

``--dry-run`` (CPU): shrunken shapes, two iterations, rows to stdout or ``--out``; the tests run it.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = REPO / "calibration" / "gpu_shapes.json"
COLUMNS = ["point_id", "source_repo", "source_rev", "source_file", "source_line", "engine", "gpu", "model",
           "quantity", "tokens", "tp", "hidden", "head_dim", "q_heads", "kv_heads", "intermediate",
           "message_bytes", "batch", "context", "value_s", "informs", "note"]
# Dense decoder shapes of the Fig. 13/14 zoo (MoE experts are priced as their dense width).
MODELS = ["ministral_8b", "llama3_1_8b", "gemma3_12b", "llama3_1_70b", "jamba_1_5_mini", "llama4_scout"]
TOKENS = [1, 8, 32, 128, 512, 2048, 8192]
TPS = [1, 4, 8]
CONTEXTS = [1024, 4096, 16384, 65536]


def emit_shapes() -> None:
    sys.path.insert(0, str(REPO))
    import yaml
    out = {}
    for name in MODELS:
        m = yaml.safe_load((REPO / "harness" / "conf" / "model" / f"{name}.yaml").read_text())
        out[name] = {k: m[k] for k in ("hidden_size", "head_dim", "num_heads", "num_kv_heads", "intermediate_size")}
    SHAPES.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(out)} models -> {SHAPES}")


def measure(gpu: str, device: str, dry: bool, iters: int) -> list[dict]:
    import torch
    shapes = json.loads(SHAPES.read_text())
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    from profile_gpu import Timer  # the per-GPU efficiency table's timer (CUDA events / wall clock)

    timer = Timer(device, iters)
    dev_name = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"{device} (dry run)"
    stamp = f"{dev_name}; {dt.datetime.now(dt.UTC):%Y-%m-%d}; torch {torch.__version__}"
    shrink = 64 if dry else 1
    tokens = [1, 8, 32] if dry else TOKENS
    base = {"source_repo": "measured here", "source_rev": "", "source_file": "scripts/gpu_calibrate.sh",
            "source_line": stamp, "engine": "op", "gpu": gpu}
    rows = []
    for name in (MODELS[:2] if dry else MODELS):
        m = shapes[name]
        h, hd, q, kv, ff = (m[k] // (shrink if k != "head_dim" else 1) or 1 for k in
                            ("hidden_size", "head_dim", "num_heads", "num_kv_heads", "intermediate_size"))
        h, ff = max(h, 8), max(ff, 8)
        for tp in ([1] if dry else TPS):
            mats = [(h, max(1, (q + 2 * kv) * hd // tp)), (max(1, q * hd // tp), h),
                    (h, max(1, 2 * ff // tp)), (max(1, ff // tp), h)]
            ws = [torch.randn(k, n, device=device, dtype=dtype) for k, n in mats]
            for t in tokens:
                xs = [torch.randn(t, k, device=device, dtype=dtype) for k, _ in mats]
                sec = sum(timer(lambda x=x, w=w: torch.matmul(x, w)) for x, w in zip(xs, ws))
                rows.append({**base, "model": name, "quantity": "linear_layer_time", "tokens": t, "tp": tp,
                             "hidden": h, "head_dim": hd, "q_heads": q, "kv_heads": kv, "intermediate": ff,
                             "value_s": sec, "informs": "gemm_mfu,gemm_mbu,gemm_blend",
                             "note": "torch.matmul bf16, sum of QKV, O, gate+up, down (one GPU of TP)"})
    heads, hd, batch = (4, 16, 2) if dry else (32, 128, 32)
    for ctx in ([64, 128] if dry else CONTEXTS):
        qd = torch.randn(batch, heads, 1, hd, device=device, dtype=dtype)
        kvt = torch.randn(batch, heads, ctx, hd, device=device, dtype=dtype)
        sec = timer(lambda qd=qd, kvt=kvt: torch.nn.functional.scaled_dot_product_attention(qd, kvt, kvt))
        rows.append({**base, "model": "", "quantity": "attention_decode_time", "batch": batch, "context": ctx,
                     "q_heads": heads, "kv_heads": heads, "head_dim": hd, "value_s": sec, "informs": "attention_mbu",
                     "note": "SDPA decode over a contiguous bf16 KV (not vLLM's paged kernel)"})
    gap = eager_layer_gap(torch, device, dry)
    if gap is not None:
        rows.append({**base, "model": "llama3_1_8b", "quantity": "eager_layer_gap", "batch": 32, "context": 1024,
                     "value_s": gap, "informs": "eager_layer_s (lower bound)",
                     "note": "eager minus CUDA-graph decode step of one torch decoder layer"})
    return rows


def eager_layer_gap(torch, device: str, dry: bool):
    """Eager minus graph-replay time of one Llama-8B-shaped decoder layer's decode step (None on CPU)."""
    if not device.startswith("cuda"):
        return None
    h, heads, kvh, hd, inter, b, ctx = 4096, 32, 8, 128, 14336, 32, 1024
    dtype = torch.bfloat16
    w = {k: torch.randn(*s, device=device, dtype=dtype) * 0.02 for k, s in {
        "qkv": (h, (heads + 2 * kvh) * hd), "o": (heads * hd, h), "gu": (h, 2 * inter), "d": (inter, h)}.items()}
    cache = torch.randn(b, heads, ctx, hd, device=device, dtype=dtype)
    x = torch.randn(b, h, device=device, dtype=dtype)

    def layer():
        hs = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        qkv = hs @ w["qkv"]
        qv = qkv[:, : heads * hd].view(b, heads, 1, hd)
        att = torch.nn.functional.scaled_dot_product_attention(qv, cache, cache).reshape(b, heads * hd)
        hs = x + att @ w["o"]
        gate, up = (hs @ w["gu"]).chunk(2, dim=-1)
        return hs + (torch.nn.functional.silu(gate) * up) @ w["d"]

    def wall(fn, n=200):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n
    eager = wall(layer)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            layer()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        layer()
    return eager - wall(g.replay)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="conf/gpu name of this device: h100, h200, l4")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="-", help="CSV to append to ('-': stdout)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, shrunken shapes: checks the script, not the GPU")
    ap.add_argument("--emit-shapes", action="store_true", help="write calibration/gpu_shapes.json (CPU, needs PyYAML)")
    args = ap.parse_args(argv)
    if args.emit_shapes:
        emit_shapes()
        return 0
    if args.dry_run:
        args.device, args.iters = "cpu", 2
    rows = measure(args.gpu, args.device, args.dry_run, args.iters)
    fh = sys.stdout if args.out == "-" else open(args.out, "a", newline="")  # noqa: SIM115
    try:
        existing = [] if args.out == "-" else list(csv.DictReader(open(args.out, newline="")))  # noqa: SIM115
        start = len(existing)
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        if args.out == "-" or not existing:
            w.writeheader()
        for i, r in enumerate(rows):
            w.writerow({"point_id": f"g{start + i:03d}", **r})
    finally:
        if fh is not sys.stdout:
            fh.close()
    print(f"{len(rows)} rows ({'dry run, ' if args.dry_run else ''}{args.gpu})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
