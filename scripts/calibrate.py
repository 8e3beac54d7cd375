"""Fit the step-time model's constants to ``calibration/points.csv`` and write them to the GPU
configs (issue 21 §2).

    .venv/bin/python scripts/calibrate.py            # fit, print residuals and leave-one-out errors, write
    .venv/bin/python scripts/calibrate.py --check    # fit and print; exit 1 if a GPU yaml is stale

Each ``harness/conf/gpu/<gpu>.yaml`` gets a ``calibration:`` block between two marker comments (the
block is replaced on every run) with the constants and, as comments, every point's fitted value,
relative residual and leave-one-out error. The fit never reads a paper bar
(``harness.backends.cost.calibration.load_points`` refuses one). L4 and H200 take H100's
dimensionless constants (datasheet ratio; no published L4/H200 points in the table).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.backends.cost import calibration as cal

GPU_DIR = REPO / "harness" / "conf" / "gpu"
BEGIN = "# >>> calibration (scripts/calibrate.py; do not edit by hand)"
END = "# <<< calibration"
NOTES = {
    "h100": "fitted on H100 points",
    "l4": "L4: H100's fit where no L4 point exists (datasheet ratio; the all-reduce is unused, every L4 cell is TP 1); host cost from the H100 log line",
    "h200": "H200: H100's fit where no H200 point exists (datasheet ratio); host cost from the H100 log line",
}


def block(gpu: str, result: dict) -> str:
    c = result["constants"]
    g, a = c["gemm"], c["allreduce"]
    lines = [BEGIN,
             f"# {NOTES[gpu]}. Inherited from H100: {', '.join(result['inherited']) or 'nothing'}.",
             f"# Points: calibration/points.csv; {len(result['points'])} rows fitted for this GPU below.",
             "calibration:",
             "  source: calibration/points.csv",
             "  gemm:   # Vidur H100 linear-layer times (microsoft/vidur data/profiling/compute/h100/*/mlp.csv)",
             f"    mfu: {g['mfu']:.4f}",
             f"    mbu: {g['mbu']:.4f}",
             f"    blend: {g['blend']:.4f}",
             f"    floor_s: {g['floor_s']:.4e}   # per linear-layer kernel (launch + tail)",
             "  allreduce:   # Vidur H100 DGX NCCL all-reduce (data/profiling/network/h100_dgx/all_reduce.csv)",
             f"    latency_s: {a['latency_s']:.4e}",
             f"    bytes_per_s: {a['bytes_per_s']:.4e}",
             "  eager_layer_s:   # v0: the artifact's Ministral decode-step log line (figure14.md); v1: not calibrated",
             f"    v0: {c['eager_layer_s']['v0']:.4e}",
             "  # untuned / tuned Triton fused-MoE decode ITL, vLLM PR #2979 (H100 TP 2, Mixtral)",
             f"  untuned_fused_moe_slowdown: {c['untuned_fused_moe_slowdown']:.4f}",
             "  fused_moe:   # vLLM PR #24700: benchmark_moe.py, Mixtral bf16 TP 2, H100, tuned config",
             f"    mfu: {c['fused_moe']['mfu']:.4f}",
             f"    mbu: {c['fused_moe']['mbu']:.4f}",
             f"    blend: {c['fused_moe']['blend']:.4f}",
             f"    floor_s: {c['fused_moe']['floor_s']:.4e}   # per fused_moe call (routing, align, 2 GEMMs, act, sum)",
             "  # v1 fork's default fused-MoE config vs tuned: 1 / (tuned/untuned) of vLLM PR #16488's TPOT, TTFT",
             "  untuned_fused_moe_v1:",
             f"    memory: {c['untuned_fused_moe_v1']['memory']:.4f}",
             f"    compute: {c['untuned_fused_moe_v1']['compute']:.4f}",
             "  mechanisms: {gemm_curve: true, allreduce: true, eager_host: true, graph_seq_rule: true,",
             "               vision_flops: true, vision_mask_memory: true, untuned_fused_moe: true,",
             "               mamba_scan_latency: true, reserved_peak: true, fused_moe_curve: true}",
             "# point      quantity            measured_s   fitted_s     residual  loo"]
    for p in result["points"]:
        loo = "n/a (only point of its constant)" if math.isnan(p["loo"]) else f"{p['loo']:+.3f}"
        lines.append(f"# {p['point_id']:<10} {p['quantity']:<19} {p['measured_s']:.4e}  {p['fitted_s']:.4e}  "
                     f"{p['residual']:+.3f}    {loo}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write(gpu: str, text: str, check: bool) -> bool:
    path = GPU_DIR / f"{gpu}.yaml"
    src = path.read_text()
    if BEGIN in src:
        head, rest = src.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        new = head + text + tail
    else:
        new = src.rstrip("\n") + "\n" + text
    if check:
        return new == src
    path.write_text(new)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", default=None,
                    help="points files (default: calibration/points.csv + calibration/gpu_points_*.csv)")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a GPU yaml differs")
    ap.add_argument("--no-write", action="store_true", help="fit and print only (gpu_calibrate.sh --dry-run)")
    args = ap.parse_args(argv)
    files = args.points or [str(cal.POINTS), *sorted(str(p) for p in cal.POINTS.parent.glob("gpu_points_*.csv"))]
    points = [r for f in files for r in cal.load_points(f)]
    print(f"points: {len(points)} from {', '.join(Path(f).name for f in files)}")
    results = {gpu: cal.calibrate(points, gpu) for gpu in ("h100", "l4", "h200")}
    for gpu, result in results.items():
        c = result["constants"]
        print(f"== {gpu} (inherited from H100: {', '.join(result['inherited']) or 'nothing'})")
        print(f"gemm: mfu {c['gemm']['mfu']:.4f}  mbu {c['gemm']['mbu']:.4f}  blend {c['gemm']['blend']:.4f}  "
              f"floor {c['gemm']['floor_s'] * 1e6:.1f} us per kernel")
        print(f"allreduce: latency {c['allreduce']['latency_s'] * 1e6:.1f} us  ring bandwidth "
              f"{c['allreduce']['bytes_per_s'] / 1e9:.0f} GB/s")
        print(f"eager_layer_s v0: {c['eager_layer_s']['v0'] * 1e3:.3f} ms")
        print(f"untuned fused-MoE slowdown: v0 {c['untuned_fused_moe_slowdown']:.3f}; v1 memory "
              f"{c['untuned_fused_moe_v1']['memory']:.3f}, compute {c['untuned_fused_moe_v1']['compute']:.3f}")
        f = c["fused_moe"]
        print(f"fused-MoE curve: mfu {f['mfu']:.4f}  mbu {f['mbu']:.4f}  blend {f['blend']:.4f}  "
              f"floor {f['floor_s'] * 1e6:.1f} us per call")
        by_q: dict[str, list[float]] = {}
        for p in result["points"]:
            if not math.isnan(p["loo"]):
                by_q.setdefault(p["quantity"], []).append(abs(p["loo"]))
        for q, errs in by_q.items():
            over = sum(e > 0.15 for e in errs)
            print(f"leave-one-out |error| {q}: median {sorted(errs)[len(errs) // 2]:.3f}, max {max(errs):.3f}, "
                  f"{over} of {len(errs)} points over 15 %")
        for p in result["points"]:
            if math.isnan(p["loo"]):
                print(f"leave-one-out {p['point_id']} ({p['quantity']}): n/a, the only point of its constant "
                      f"(fitted exactly: residual {p['residual']:+.3f})")
    if args.no_write:
        return 0
    ok = all(write(gpu, block(gpu, results[gpu]), args.check) for gpu in ("h100", "l4", "h200"))
    if args.check and not ok:
        print("GPU yamls are stale: run scripts/calibrate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
