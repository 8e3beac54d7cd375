"""Build ``calibration/points.csv``: one row per published measurement the step-time model is
calibrated on (issue 21 §1). Re-run only to regenerate the table from the sources; the committed
CSV is the input of ``scripts/calibrate.py``.

Sources (each row names its repository, file and line):

- Vidur's H100 operator profiles (``microsoft/vidur`` at 7d47513,
  ``data/profiling/compute/h100/<model>/mlp.csv``): median time (ms) of each decoder layer's four
  linear layers — ``attn_pre_proj`` (QKV), ``attn_post_proj`` (O), ``mlp_up_proj`` (gate+up),
  ``mlp_down_proj`` — by token count and TP degree. One row per (model, TP, tokens) is their sum:
  the linear-layer time of one decoder layer, which is what the GEMM-efficiency curve prices.
- Vidur's H100 all-reduce profile (``data/profiling/network/h100_dgx/all_reduce.csv``): NCCL
  all-reduce time by message bytes (the file's ``size`` is bytes: ``collectives_wrapper.py``
  writes ``size * 2``) for 2, 4, 8 GPUs of one DGX node, CUDA graphs off.
- The artifact's own server log (``heheda12345/Jenga-SOSP25-AE`` ``figure14.md``, the Ministral
  static-partition note): "Avg generation throughput: 121.2 tokens/s, Running: 6 reqs", prompt
  throughput 0.0, i.e. a pure-decode window of six 40-80k-token requests (``--hf-max-len 80000``)
  at 6 / 121.2 = 49.5 ms per step, vLLM v0 fork, H100.
- vLLM PR #2979's description (Mixtral on H100 TP 2): decode inter-token latency with the tuned and
  the untuned (default-config) Triton fused-MoE kernel at four request rates.

Usage: ``python calibration/build_points.py --vidur <vidur git dir> --artifact <AE git dir>``
(git directories as ``fetch`` leaves them; read with ``git show``, no work tree needed).
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
from pathlib import Path

OUT = Path(__file__).with_name("points.csv")
VIDUR_REV = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_MODELS = ["meta-llama/Llama-2-7b-hf", "internlm/internlm-20b", "codellama/CodeLlama-34b-Instruct-hf",
                "meta-llama/Llama-2-70b-hf", "Qwen/Qwen-72B"]
TOKENS = [1, 8, 32, 128, 512, 2048, 4096]
TPS = [1, 4, 8]
OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]
# Message sizes (bytes) the zoo's TP steps send (tokens x hidden x 2): the profile's nearest size to each.
AR_TARGETS = [2048, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]

COLUMNS = ["point_id", "source_repo", "source_rev", "source_file", "source_line", "engine", "gpu", "model",
           "quantity", "tokens", "tp", "hidden", "head_dim", "q_heads", "kv_heads", "intermediate",
           "message_bytes", "batch", "context", "value_s", "informs", "note", "experts", "top_k"]


def _row(**fields) -> dict:
    """One points.csv row (keyword arguments read like the column names)."""
    return fields


def _show(git_dir: str, rev: str, path: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", git_dir, "show", f"{rev}:{path}"], check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def vidur_gemm_rows(git_dir: str) -> list[dict]:
    rows = []
    for model in VIDUR_MODELS:
        path = f"data/profiling/compute/h100/{model}/mlp.csv"
        lines = _show(git_dir, VIDUR_REV, path)
        header = next(csv.reader(io.StringIO(lines[0])))
        seen = set()
        for lineno, line in enumerate(lines[1:], start=2):
            rec = dict(zip(header, next(csv.reader(io.StringIO(line)))))
            key = (int(rec["num_tokens"]), int(rec["num_tensor_parallel_workers"]))
            # The profile repeats some token counts (4096, 2048); the first row of each is used.
            if key[0] not in TOKENS or key[1] not in TPS or key in seen:
                continue
            seen.add(key)
            ms = sum(float(rec[f"time_stats.{op}.median"]) for op in OPS)
            hidden, heads = int(rec["n_embd"]), int(rec["n_head"])
            rows.append(_row(
                source_repo="microsoft/vidur", source_rev=VIDUR_REV[:7], source_file=path, source_line=lineno,
                engine="op", gpu="h100", model=model, quantity="linear_layer_time", tokens=key[0], tp=key[1],
                hidden=hidden, head_dim=hidden // heads, q_heads=heads, kv_heads=int(rec["n_kv_head"]),
                intermediate=int(rec["n_expanded_embd"]), value_s=ms * 1e-3, informs="gemm_mfu,gemm_mbu,gemm_blend",
                note="sum of median attn_pre_proj+attn_post_proj+mlp_up_proj+mlp_down_proj (fp16, one layer, one GPU of TP)"))
    return rows


def vidur_allreduce_rows(git_dir: str) -> list[dict]:
    path = "data/profiling/network/h100_dgx/all_reduce.csv"
    lines = _show(git_dir, VIDUR_REV, path)
    header = next(csv.reader(io.StringIO(lines[0])))
    recs = []
    for lineno, line in enumerate(lines[1:], start=2):
        rec = dict(zip(header, next(csv.reader(io.StringIO(line)))))
        if rec["collective"] == "all_reduce":
            recs.append((lineno, rec))
    chosen = []
    for workers in sorted({r["num_workers"] for _, r in recs}):
        mine = [(n, r) for n, r in recs if r["num_workers"] == workers]
        for target in AR_TARGETS:
            best = min(mine, key=lambda nr: abs(int(nr[1]["size"]) - target))
            if best not in chosen:
                chosen.append(best)
    rows = []
    for lineno, rec in chosen:
        rows.append(_row(
            source_repo="microsoft/vidur", source_rev=VIDUR_REV[:7], source_file=path, source_line=lineno,
            engine="op", gpu="h100", model="", quantity="allreduce_time", tp=int(rec["num_workers"]),
            message_bytes=int(rec["size"]), value_s=float(rec["time_stats.all_reduce.median"]) * 1e-3,
            informs="allreduce_latency_s,allreduce_bytes_per_s",
            note="NCCL via torch.distributed, CUDA graphs off (collectives_wrapper.py DISABLE_GRAPH)"))
    return rows


def artifact_rows(git_dir: str) -> list[dict]:
    path = "figure14.md"
    lines = _show(git_dir, "HEAD", path)
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if "Avg generation throughput: 121.2 tokens/s" in line and "Running: 6 reqs" in line:
            rows.append(_row(
                source_repo="heheda12345/Jenga-SOSP25-AE", source_rev="main", source_file=path, source_line=lineno,
                engine="v0", gpu="h100", model="ministral_8b", quantity="decode_step_time", batch=6, context=60000,
                value_s=6 / 121.2, informs="eager_layer_s",
                note="vLLM stats line of the static-partition run: prompt 0.0 tok/s, generation 121.2 tok/s, "
                     "Running 6; 6/121.2 s per step; context 40-80k (--hf-max-len 80000), 60k taken"))
    if not rows:
        raise SystemExit(f"{path}: the Ministral stats line was not found")
    return rows


# vLLM PR #2979 ("Optimized fused MoE Kernel, take 2", vllm-project/vllm, 2024-02-22), its
# description: Mixtral-8x7B on H100 TP 2, mean inter-token latency at 1/2/4/6 req/s with the tuned
# kernel config and on main (the untuned default config). Whole decode steps, so the kernel's own
# slowdown is at least their ratio.
PR2979 = [(1, 11.6e-3, 23.3e-3), (2, 12.6e-3, 25.4e-3), (4, 23.6e-3, 43.0e-3), (6, 32.9e-3, 60.8e-3)]


def published_rows() -> list[dict]:
    rows = []
    for qps, tuned, untuned in PR2979:
        for kind, val in (("itl_tuned_fused_moe", tuned), ("itl_untuned_fused_moe", untuned)):
            rows.append(_row(
                source_repo="vllm-project/vllm", source_rev="PR #2979", source_file="pull request description",
                source_line=f"qps = {qps}", engine="v0", gpu="h100", model="mistralai/Mixtral-8x7B (TP 2)",
                quantity=kind, batch=qps, tp=2, value_s=val, informs="untuned_fused_moe_slowdown",
                note="mean ITL, tuned config vs main's default config of the Triton fused-MoE kernel"))
    return rows


# vLLM PR #24700 ("[Perf] Improve default fused moe configs by analyzing tuned configs",
# vllm-project/vllm, mgoin, 2025-09-11), its description, "Benchmarks on H100", "Mixtral BF16",
# block "# Tuned Config": ``python benchmarks/kernels/benchmark_moe.py
# --model=mistralai/Mixtral-8x7B-Instruct-v0.1 -tp=2`` on H100 with the shipped tuned config
# ``E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json``: one ``fused_moe`` call (routing, align,
# both grouped GEMMs, activation, sum) per batch size M. E = 8, top-2, hidden 4096, intermediate
# 14336 split over TP 2 (N = 7168 per GPU). The lines shown in the description (M = 1 ... 1536).
PR24700 = [(1, 144.03), (2, 229.28), (4, 351.10), (8, 434.98), (16, 471.49), (24, 478.27), (32, 487.35),
           (48, 487.85), (64, 483.14), (96, 494.42), (128, 491.39), (256, 536.77), (512, 662.33),
           (1024, 833.72), (1536, 1122.93)]
# vLLM PR #16488 ("[Kernel] Add tuned FusedMoE kernel config for Llama4 Scout, TP=8 on H100",
# 2025-04-11), its description: Llama-4-Scout-17B-16E-Instruct, VLLM_USE_V1=1, TP 8 on H100,
# benchmark_serving random 5000 in / 1000 out, tuned config vs none (the default config): "up to
# 17.6% improvement in TTFT, 7.7% improvement in TPOT". Recorded as tuned / untuned ratios
# (dimensionless, in ``value_s``): 1 - 0.077 and 1 - 0.176.
PR16488 = [("tpot_tuned_over_untuned_fused_moe", 1 - 0.077, "7.7% improvement in TPOT"),
           ("ttft_tuned_over_untuned_fused_moe", 1 - 0.176, "17.6% improvement in TTFT")]


def moe_rows() -> list[dict]:
    rows = []
    for m, us in PR24700:
        rows.append(_row(
            source_repo="vllm-project/vllm", source_rev="PR #24700", source_file="pull request description",
            source_line=f"Mixtral BF16, # Tuned Config, Batch size: {m}", engine="op", gpu="h100",
            model="mistralai/Mixtral-8x7B-Instruct-v0.1 (TP 2)", quantity="fused_moe_time", tokens=m, tp=2,
            hidden=4096, intermediate=14336, experts=8, top_k=2, value_s=us * 1e-6,
            informs="fused_moe_mfu,fused_moe_mbu,fused_moe_blend,fused_moe_floor_s",
            note="benchmark_moe.py kernel time of one fused_moe call, tuned config E=8,N=7168 H100"))
    for q, ratio, what in PR16488:
        rows.append(_row(
            source_repo="vllm-project/vllm", source_rev="PR #16488", source_file="pull request description",
            source_line=what, engine="v1", gpu="h100", model="meta-llama/Llama-4-Scout-17B-16E-Instruct (TP 8)",
            quantity=q, tp=8, value_s=ratio, experts=16, top_k=1,
            informs="untuned_fused_moe_v1",
            note="dimensionless ratio tuned/untuned (value_s holds the ratio); serving benchmark, "
                 "5000 in / 1000 out, VLLM_USE_V1=1; 'up to' over the concurrencies tried"))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", required=True)
    ap.add_argument("--artifact", required=True)
    args = ap.parse_args(argv)
    rows = (vidur_gemm_rows(args.vidur) + vidur_allreduce_rows(args.vidur) + artifact_rows(args.artifact)
            + published_rows() + moe_rows())
    with OUT.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow({"point_id": f"p{i:03d}", **r})
    print(f"{len(rows)} points -> {OUT}")


if __name__ == "__main__":
    main()
