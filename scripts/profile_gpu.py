"""Measure one GPU's efficiency at the model zoo's shapes (torch only; vLLM is not needed).

Writes ``harness/conf/gpu/profiles/<gpu>.yaml``, which ``harness.backends.cost.model.gpu_efficiency`` loads
instead of the datasheet ``mfu``/``mbu`` defaults of ``harness/conf/gpu/<gpu>.yaml``:

- **GEMMs** of every zoo model's linear layers (QKV, O, gate-up, down; MoE experts at their own
  width), whole and as one GPU's shard at TP 4 and 8, at token counts from 1 to 8192, bf16 (and
  FP8 via ``torch._scaled_mm`` where the GPU has it). ``mfu_bf16`` / ``mfu_fp8`` = median achieved
  / datasheet peak over the compute-bound ones (>= 1024 tokens); ``mbu`` = median achieved
  weight-streaming bandwidth / datasheet bandwidth over the decode-sized ones (<= 16 tokens), the
  regime the step-time model's memory term describes; the same three per TP degree in ``by_tp``.
- **Attention** (``scaled_dot_product_attention``): causal prefill FLOP efficiency and decode
  KV-read bandwidth at a few context lengths (reported, not used by the cost model).
- **HBM** copy bandwidth (read + write of a large buffer), **launch overhead** (back-to-back
  tiny kernels) and one Llama-style **decoder layer** decoding eagerly vs from a CUDA graph (the
  per-layer eager cost, a lower bound for vLLM's), reported beside the table; the cost model does
  not load them (its ``eager_layer_s`` stays per engine version).

Usage on the device machine (about 1-3 minutes on an H100)::

    python scripts/profile_gpu.py --gpu h100

On CPU, ``--device cpu --tiny --out /tmp/x.yaml`` runs shrunken shapes in seconds (the tests do);
a CPU run never writes into ``harness/conf/gpu/profiles/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "harness" / "conf"
TOKENS = (1, 4, 16, 128, 1024, 4096, 8192)
TINY_TOKENS = (1, 4, 16, 64)
COMPUTE_BOUND_TOKENS = 1024
MEMORY_BOUND_TOKENS = 16
TP_DEGREES = (1, 4, 8)     # the tensor-parallel degrees the experiments use (Fig. 14: 1, 4, 8)


def zoo_shapes(tiny: bool, tps: tuple[int, ...] = TP_DEGREES) -> list[dict]:
    """Unique (name, k, n, tp) linear shapes of the zoo's models, y[T, n] = x[T, k] @ W[k, n], as
    one GPU of a ``tp``-way tensor-parallel group runs them (vLLM's Megatron split: QKV and
    gate-up column-parallel, n / tp; O and down row-parallel, k / tp; fused MoE experts split
    their intermediate width the same way)."""
    seen: dict[tuple[int, int, int], str] = {}
    for path in sorted((CONF / "model").glob("*.yaml")):
        m = yaml.safe_load(path.read_text())
        h, hd = m["hidden_size"], m["head_dim"]
        q, kv = m["num_heads"] * hd, m["num_kv_heads"] * hd
        inter = m["intermediate_size"]
        col = {"qkv": (h, q + 2 * kv), "gate_up": (h, 2 * inter)}
        row = {"o": (q, h), "down": (inter, h)}
        expert = (m.get("moe") or {}).get("expert_intermediate_size")
        if expert:
            col["expert_gate_up"] = (h, 2 * expert)
            row["expert_down"] = (expert, h)
        for tp in tps:
            shapes = {**{k_: (k, max(1, n // tp)) for k_, (k, n) in col.items()},
                      **{k_: (max(1, k // tp), n) for k_, (k, n) in row.items()}}
            for kind, (k, n) in shapes.items():
                if tiny:
                    k, n = max(8, k // 128), max(8, n // 128)
                seen.setdefault((k, n, tp), f"{m['name']}.{kind}")
    return [{"name": name, "k": k, "n": n, "tp": tp} for (k, n, tp), name in sorted(seen.items())]


class Timer:
    """Median seconds of ``fn`` on the device (CUDA events on GPU, wall clock on CPU)."""

    def __init__(self, device: str, iters: int) -> None:
        self.device, self.iters = device, iters

    def __call__(self, fn) -> float:
        for _ in range(2):
            fn()
        times = []
        if self.device.startswith("cuda"):
            for _ in range(self.iters):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
        else:
            for _ in range(self.iters):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def fp8_supported(device: str) -> bool:
    if not device.startswith("cuda") or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(torch.device(device)) >= (8, 9)


def gemm_rows(shapes, tokens, device, timer, gpu) -> list[dict]:
    rows = []
    bf16 = torch.bfloat16 if device.startswith("cuda") else torch.float32
    use_fp8 = fp8_supported(device)
    for s in shapes:
        k, n = s["k"], s["n"]
        w = torch.randn(k, n, device=device, dtype=bf16)
        for t in tokens:
            x = torch.randn(t, k, device=device, dtype=bf16)
            sec = timer(lambda x=x, w=w: torch.matmul(x, w))
            rows.append(_gemm_row(s, t, "bf16", sec, 2 * k * n, gpu["peak_bf16_flops"], gpu))
            if use_fp8:
                # _scaled_mm wants row-major A and column-major B, dims multiple of 16.
                t8 = max(16, -(-t // 16) * 16)
                a8 = torch.randn(t8, k, device=device).to(torch.float8_e4m3fn)
                b8 = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
                one = torch.tensor(1.0, device=device)
                sec = timer(lambda a8=a8, b8=b8, one=one: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                                          out_dtype=torch.bfloat16))
                rows.append(_gemm_row(s, t8, "fp8", sec, k * n, gpu["peak_fp8_flops"], gpu))
    return rows


def _gemm_row(s, t, dtype, sec, weight_bytes, peak, gpu) -> dict:
    flops = 2.0 * t * s["k"] * s["n"]
    return {"name": s["name"], "tp": s["tp"], "tokens": t, "k": s["k"], "n": s["n"], "dtype": dtype, "seconds": sec,
            "flops_eff": flops / sec / peak, "bw_eff": weight_bytes / sec / gpu["hbm_bytes_per_s"]}


def attention_rows(device, timer, gpu, tiny: bool) -> list[dict]:
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    heads, hd = (4, 16) if tiny else (32, 128)
    rows = []
    for s in ((64, 128) if tiny else (1024, 4096, 16384)):
        q = torch.randn(1, heads, s, hd, device=device, dtype=dtype)
        sec = timer(lambda q=q: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
        flops = 4.0 * heads * hd * s * (s + 1) / 2
        rows.append({"kind": "prefill", "context": s, "seconds": sec, "flops_eff": flops / sec / gpu["peak_bf16_flops"]})
        batch = 4 if tiny else 32
        qd = torch.randn(batch, heads, 1, hd, device=device, dtype=dtype)
        kv = torch.randn(batch, heads, s, hd, device=device, dtype=dtype)
        sec = timer(lambda qd=qd, kv=kv: torch.nn.functional.scaled_dot_product_attention(qd, kv, kv))
        nbytes = 2.0 * kv.numel() * kv.element_size()
        rows.append({"kind": "decode", "context": s, "batch": batch, "seconds": sec,
                     "bw_eff": nbytes / sec / gpu["hbm_bytes_per_s"]})
    return rows


def copy_bandwidth(device, timer, tiny: bool) -> float:
    n = (8 << 20) if tiny else (1 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2.0 * n / timer(lambda: dst.copy_(src))


def launch_overhead(device: str, n: int) -> float:
    """Seconds per back-to-back tiny kernel (host launch rate, the eager-mode floor)."""
    x = torch.zeros(1, device=device)
    for _ in range(10):
        x.add_(1)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def decoder_layer_times(device: str, tiny: bool, iters: int) -> dict:
    """Seconds of one Llama-style decoder layer's decode step (batch 32, 1024-token context) run
    eagerly from Python and, on CUDA, replayed from a CUDA graph: the difference is the per-layer
    launch cost that ``ENGINE_OVERHEAD.eager_layer_s`` stands for (a lower bound for vLLM, whose
    layers add their own Python: metadata handling, custom-op wrappers)."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    h, heads, kvh, hd, inter, b, ctx = (64, 4, 1, 16, 128, 4, 64) if tiny else (4096, 32, 8, 128, 14336, 32, 1024)
    g = torch.Generator(device="cpu").manual_seed(0)
    w = {k: (torch.randn(*shape, generator=g) * 0.02).to(device=device, dtype=dtype) for k, shape in {
        "qkv": (h, (heads + 2 * kvh) * hd), "o": (heads * hd, h), "gu": (h, 2 * inter), "d": (inter, h),
        "n1": (h,), "n2": (h,)}.items()}
    k_cache = torch.randn(b, kvh, ctx, hd, device=device, dtype=dtype)
    x = torch.randn(b, h, device=device, dtype=dtype)
    cos = torch.randn(b, hd // 2, device=device, dtype=dtype)

    def rms(t, wt):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * wt

    def layer(inp):
        hs = rms(inp, w["n1"])
        qkv = hs @ w["qkv"]
        q, k, _ = qkv.split([heads * hd, kvh * hd, kvh * hd], dim=-1)
        k_cache[:, :, -1] = k.view(b, kvh, hd)        # the cache write (reshape_and_cache)
        q = q.view(b, heads, hd)
        q1, q2 = q.chunk(2, dim=-1)
        q = torch.cat([q1 * cos[:, None] - q2, q2 * cos[:, None] + q1], dim=-1)
        att = torch.nn.functional.scaled_dot_product_attention(
            q.view(b, heads, 1, hd), k_cache.repeat_interleave(heads // kvh, 1),
            k_cache.repeat_interleave(heads // kvh, 1))
        hs = inp + att.reshape(b, heads * hd) @ w["o"]
        gu = rms(hs, w["n2"]) @ w["gu"]
        gate, up = gu.chunk(2, dim=-1)
        return hs + (torch.nn.functional.silu(gate) * up) @ w["d"]

    def wall(fn, n):
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    n = max(3, iters) * (1 if tiny else 10)
    out = {"shape": {"hidden": h, "heads": heads, "kv_heads": kvh, "intermediate": inter, "batch": b, "context": ctx},
           "eager_s": wall(lambda: layer(x), n), "graph_s": None, "eager_minus_graph_s": None}
    if device.startswith("cuda"):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                layer(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer(x)
        out["graph_s"] = wall(graph.replay, n)
        out["eager_minus_graph_s"] = out["eager_s"] - out["graph_s"]
    return out


def _sig(x: float) -> float:
    """Four significant digits (CPU test runs give tiny efficiencies that must stay > 0)."""
    return float(f"{x:.4g}")


def _median(rows, key, pred):
    vals = [r[key] for r in rows if pred(r)]
    return _sig(statistics.median(vals)) if vals else None


def profile(gpu_name: str, device: str, tiny: bool, iters: int) -> dict:
    if not device.startswith("cuda"):
        torch.set_num_threads(1)   # CPU test runs: no thread-pool contention on a shared host
    gpu = yaml.safe_load((CONF / "gpu" / f"{gpu_name}.yaml").read_text())
    gpu = {k: float(v) if k.endswith(("_flops", "_per_s")) else v for k, v in gpu.items()}
    timer = Timer(device, iters)
    tokens = TINY_TOKENS if tiny else TOKENS
    gemms = gemm_rows(zoo_shapes(tiny), tokens, device, timer, gpu)
    big = COMPUTE_BOUND_TOKENS if not tiny else 64
    out = {
        "gpu": gpu_name,
        "device": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else f"{device} (test run)",
        "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": str(torch.__version__),
        "method": "scripts/profile_gpu.py: medians over the zoo's linear shapes (see its docstring)",
        **_efficiency(gemms, big, 1),
        # Per tensor-parallel degree: one GPU's share of the layer is narrower, so less efficient.
        "by_tp": {tp: _efficiency(gemms, big, tp) for tp in TP_DEGREES},
        "copy_bw_eff": _sig(copy_bandwidth(device, timer, tiny) / gpu["hbm_bytes_per_s"]),
        "kernel_launch_s": launch_overhead(device, 200 if tiny else 2000),
        "decoder_layer": decoder_layer_times(device, tiny, iters),
        "attention": attention_rows(device, timer, gpu, tiny),
        "gemms": gemms,
    }
    return out


def _efficiency(gemms: list[dict], big: int, tp: int) -> dict:
    """mfu_bf16 / mfu_fp8 (compute-bound GEMMs) and mbu (decode-sized GEMMs) at one TP degree;
    ``mfu_fp8`` is left out where no FP8 GEMM ran (the cost model then uses ``mfu_bf16``)."""
    out = {
        "mfu_bf16": _median(gemms, "flops_eff", lambda r: r["tp"] == tp and r["dtype"] == "bf16" and r["tokens"] >= big),
        "mfu_fp8": _median(gemms, "flops_eff", lambda r: r["tp"] == tp and r["dtype"] == "fp8" and r["tokens"] >= big),
        "mbu": _median(gemms, "bw_eff", lambda r: r["tp"] == tp and r["dtype"] == "bf16"
                       and r["tokens"] <= MEMORY_BOUND_TOKENS),
    }
    if out["mfu_fp8"] is None:
        del out["mfu_fp8"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", required=True, help="name of harness/conf/gpu/<gpu>.yaml (datasheet peaks)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="shrunken shapes (CPU tests)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=None, help="default: harness/conf/gpu/profiles/<gpu>.yaml")
    args = ap.parse_args(argv)
    if not (CONF / "gpu" / f"{args.gpu}.yaml").is_file():
        ap.error(f"--gpu {args.gpu!r}: no harness/conf/gpu/{args.gpu}.yaml")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device (use --device cpu --tiny --out ... to test)")
    out = Path(args.out) if args.out else CONF / "gpu" / "profiles" / f"{args.gpu}.yaml"
    if not args.device.startswith("cuda") and out.resolve().parent == (CONF / "gpu" / "profiles").resolve():
        ap.error("a non-CUDA run must not write into harness/conf/gpu/profiles/; pass --out")
    result = profile(args.gpu, args.device, args.tiny, args.iters)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# Measured by scripts/profile_gpu.py on {result['device']}; loaded by "
                   "harness.backends.cost.model.gpu_efficiency.\n" + yaml.safe_dump(result, sort_keys=False))
    print(f"wrote {out}: mfu_bf16 {result['mfu_bf16']} mfu_fp8 {result.get('mfu_fp8')} mbu {result['mbu']} "
          f"copy {result['copy_bw_eff']} launch {result['kernel_launch_s'] * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
