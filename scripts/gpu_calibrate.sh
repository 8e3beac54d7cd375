#!/usr/bin/env bash
# Issue 21 §4: a lent GPU adds calibration points, not code. On an H100/H200/L4 with torch only (no
# vLLM on the image), time the zoo's GEMM, decode-attention and eager-layer shapes
# (scripts/gpu_points.py, under 8 minutes) and write the rows beside the published ones; then, back
# on a CPU host, `scripts/calibrate.py` refits every constant with them and rewrites conf/gpu.
#
#   GPU=h100 bash scripts/gpu_calibrate.sh          # on the device: rows -> $OUT/gpu_points_h100.csv
#                                                    # (OUT defaults to calibration/; the device tool
#                                                    # brings $OUT back)
#   cp <returned>/gpu_points_h100.csv calibration/ && .venv/bin/python scripts/calibrate.py   # here
#   bash scripts/gpu_calibrate.sh --dry-run          # CPU: shrunken shapes into a temporary folder,
#                                                    # then a refit that writes nothing (the tests run it)
#
# scripts/calibrate.py reads calibration/points.csv plus every calibration/gpu_points_*.csv; a GPU
# with its own linear_layer_time rows gets its own GEMM curve instead of H100's datasheet ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=${GPU:-h100}
PY=${PY:-python3}
if [[ "${1:-}" == "--dry-run" ]]; then
  PY=${PY_CPU:-.venv/bin/python}
  tmp=$(mktemp -d)
  "$PY" scripts/gpu_points.py --dry-run --gpu l4 --out "$tmp/gpu_points_l4.csv"
  "$PY" scripts/calibrate.py --points calibration/points.csv "$tmp/gpu_points_l4.csv" --no-write
  rm -rf "$tmp"
  echo "gpu_calibrate.sh: dry run ok (nothing written)"
  exit 0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_calibrate.sh: no NVIDIA GPU visible; use --dry-run on a CPU host" >&2
  exit 2
fi
out=${OUT:-calibration}
mkdir -p "$out"
timeout 480 "$PY" scripts/gpu_points.py --gpu "$GPU" --out "$out/gpu_points_$GPU.csv"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$out/gpu_points_$GPU.device.txt" || true
echo "gpu_calibrate.sh: rows in $out/gpu_points_$GPU.csv; refit on a CPU host with scripts/calibrate.py"
