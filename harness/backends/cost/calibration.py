"""Fit the step-time model's free constants to published measurements (issue 21 §2).

Input: ``calibration/points.csv`` (``calibration/build_points.py``: one row per measurement, with
its repository, file and line). Never an input: the paper's throughput bars — :func:`load_points`
refuses any row whose source is under ``results/paper/`` or is the artifact's ``logs/figure1*``
csv, and reads nothing else.

Constants, per GPU and engine version, never per model:

- ``gemm``: ``mfu``, ``mbu``, ``blend``, ``floor_s`` (per linear-layer kernel) of :func:`harness.backends.cost.model.gemm_time`, fitted on
  Vidur's H100 linear-layer times (5 models x TP 1/4/8 x 1-4096 tokens) by least squares on log
  time. Engine-independent (cuBLAS GEMMs).
- ``allreduce``: ``latency_s`` and ring ``bytes_per_s`` of
  :func:`harness.backends.cost.model.allreduce_time`, fitted on Vidur's H100 DGX NCCL all-reduce
  times (2/4/8 GPUs).
- ``eager_layer_s.v0``: the v0 engine's host time per decoder layer when a step runs eager, solved
  from the artifact's Ministral decode-step log line given the fitted GPU constants (one point, one
  constant: exact, so its leave-one-out error is undefined and reported as such).

- ``untuned_fused_moe_slowdown``: untuned / tuned decode ITL of the Triton fused-MoE kernel
  (vLLM PR #2979, H100), applied to Jamba's FFN weight streaming where the fork has no tuned config.
- ``fused_moe``: ``mfu``, ``mbu``, ``blend``, ``floor_s`` (per ``fused_moe`` call) of the same power
  mean as ``gemm``, fitted on one published ``benchmark_moe.py`` series (vLLM PR #24700: Mixtral
  bf16 TP 2 on H100, tuned config, M = 1-1536 tokens): the Triton grouped GEMM of every FFN that
  runs through ``FusedMoE`` (Jamba's, Llama-4's routed experts) instead of the dense cuBLAS curve.
- ``untuned_fused_moe_v1``: ``memory`` and ``compute`` slowdowns of the v1 fork's default fused-MoE
  config, 1 / (tuned / untuned) of vLLM PR #16488's TPOT and TTFT (Llama-4-Scout, TP 8, H100, V1).

L4 and H200 have no published points here: their dimensionless efficiencies are H100's (datasheet
ratio: the time scales with the datasheet peaks), the eager host cost is H100's (host CPU work),
and the all-reduce fit stays H100's (no L4 cell uses TP > 1).
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from harness.backends.cost.model import CostModel, block_manager_of, expected_distinct_experts
from harness.backends.settings import EngineSettings, GpuSettings
from harness.config import compose_cell
from harness.models import load_profile

REPO = Path(__file__).resolve().parents[3]
POINTS = REPO / "calibration" / "points.csv"
FORBIDDEN = ("results/paper/", "logs/figure14.csv", "logs/figure13")
# Datasheet peaks (dense bf16 FLOP/s, HBM bytes/s) the efficiencies are relative to; the same
# numbers as harness/conf/gpu/<gpu>.yaml (tests/test_calibration.py checks they agree).
PEAKS = {"h100": (989.4e12, 3.35e12), "h200": (989.4e12, 4.8e12), "l4": (121e12, 300e9)}


class CalibrationInputError(ValueError):
    """A calibration point whose source is a validation value (a paper bar)."""


def load_points(path: Path | str = POINTS) -> list[dict]:
    path = Path(path)
    if any(f in str(path) for f in FORBIDDEN):
        raise CalibrationInputError(f"{path}: a paper bar is never a calibration input")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        if any(f in r["source_file"] for f in FORBIDDEN):
            raise CalibrationInputError(f"{r['point_id']}: {r['source_file']} is validation data (a paper bar)")
        r["value_s"] = float(r["value_s"])
    return rows


# ------------------------------------------------------------------------------------------ GEMM
def linear_shapes(r: dict) -> list[tuple[float, float]]:
    """(FLOPs, weight bytes) of one decoder layer's four linear layers on one GPU of the TP group,
    fp16 (Vidur's ``mlp.csv`` shapes: QKV, O, gate+up, down; column/row-parallel split by TP)."""
    t, tp = int(r["tokens"]), int(r["tp"])
    h, hd, q, kv, ff = (int(r[k]) for k in ("hidden", "head_dim", "q_heads", "kv_heads", "intermediate"))
    mats = [(h, (q + 2 * kv) * hd / tp), (q * hd / tp, h), (h, 2 * ff / tp), (ff / tp, h)]
    return [(2.0 * t * k * n, 2.0 * k * n) for k, n in mats]


def _gemm_predict(params, rows) -> np.ndarray:
    mfu, mbu, blend, floor = params
    out = []
    for r in rows:
        tot = 0.0
        peak, hbm = PEAKS[r["gpu"]]
        for flops, wbytes in linear_shapes(r):
            c = flops / (peak * mfu)
            m = wbytes / (hbm * mbu)
            tot += (c ** blend + m ** blend) ** (1.0 / blend) + floor
        out.append(tot)
    return np.array(out)


def _fit_blended(predict, rows: list[dict], x0: list[float], max_floor_us: float) -> dict:
    """Least-squares fit, in log time, of a blended roofline ``predict((mfu, mbu, blend, floor_s),
    rows)`` (the GEMM and the fused-MoE curves share the form, not the constants)."""
    y = np.log([r["value_s"] for r in rows])

    def resid(x):
        return np.log(predict((*x[:3], x[3] * 1e-6), rows)) - y
    sol = least_squares(resid, x0=x0, bounds=([0.05, 0.05, 0.3, 0.0], [1.0, 1.0, 20.0, max_floor_us]))
    mfu, mbu, blend, floor_us = (float(v) for v in sol.x)
    return {"mfu": mfu, "mbu": mbu, "blend": blend, "floor_s": floor_us * 1e-6}


def fit_gemm(rows: list[dict]) -> dict:
    return _fit_blended(_gemm_predict, rows, [0.7, 0.8, 2.0, 3.0], 100.0)


def predict_gemm(const: dict, rows: list[dict]) -> np.ndarray:
    return _gemm_predict((const["mfu"], const["mbu"], const["blend"], const["floor_s"]), rows)


# ------------------------------------------------------------------------------------ all-reduce
def _ar_predict(lat, bw, rows) -> np.ndarray:
    out = []
    for r in rows:
        n, b = int(r["tp"]), float(r["message_bytes"])
        out.append(lat + 2.0 * (n - 1) / n * b / bw)
    return np.array(out)


def fit_allreduce(rows: list[dict]) -> dict:
    y = np.log([r["value_s"] for r in rows])

    def resid(x):
        return np.log(_ar_predict(x[0] * 1e-6, x[1] * 1e9, rows)) - y
    sol = least_squares(resid, x0=[20.0, 200.0], bounds=([0.1, 1.0], [1000.0, 2000.0]))
    return {"latency_s": float(sol.x[0]) * 1e-6, "bytes_per_s": float(sol.x[1]) * 1e9}


def predict_allreduce(const: dict, rows: list[dict]) -> np.ndarray:
    return _ar_predict(const["latency_s"], const["bytes_per_s"], rows)


# ------------------------------------------------------------------------------ v0 eager host
@lru_cache(maxsize=8)
def _decode_cell(model: str, gpu: str):
    """Profile, GPU and engine settings of the logged run (composed once per model and GPU)."""

    cfg = compose_cell([f"model={model}", f"gpu={gpu}", "engine.engine_version=v0",
                        "engine.enforce_eager=false", "engine.enable_chunked_prefill=false",
                        "engine.max_model_len=131072"])
    return load_profile(cfg.model), GpuSettings.of(cfg.gpu), EngineSettings.of(cfg.engine)


def _decode_step(row: dict, calibration: dict, gpu: str = "h100") -> float:
    """Our model's time of the logged step (``batch`` decodes at ``context``) under ``calibration``."""

    profile, g, engine = _decode_cell(row["model"], gpu)
    g = GpuSettings(**{**g.__dict__, "calibration": calibration})
    # The logged run is the static-partition bar: the per-layer (Jenga) fork.
    cm = CostModel(profile, g, engine, block_manager_of("static_partition"))
    b = int(row["batch"])
    return cm.step_time([(1, int(row["context"]), 0)] * b) + cm.running_time(b, b)


def fit_eager(rows: list[dict], base: dict) -> float:
    """Solve ``eager_layer_s.v0`` so the model's step equals the logged one (bisection: the step
    time is non-decreasing in it)."""
    if not rows:
        raise ValueError("no decode_step_time point for the v0 eager host cost")
    row = rows[0]
    target = row["value_s"]

    def step(e):
        return _decode_step(row, {**base, "eager_layer_s": {"v0": e}})
    lo, hi = 0.0, 0.01
    if step(lo) >= target:
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if step(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ------------------------------------------------------------------------- untuned fused MoE
def moe_pairs(points: list[dict]) -> list[tuple[dict, dict]]:
    tuned = {r["batch"]: r for r in points if r["quantity"] == "itl_tuned_fused_moe"}
    return [(tuned[r["batch"]], r) for r in points if r["quantity"] == "itl_untuned_fused_moe" and r["batch"] in tuned]


def fit_moe_slowdown(pairs) -> float:
    """Geometric mean of untuned / tuned decode ITL (a lower bound of the kernel's own slowdown)."""
    return float(np.exp(np.mean([np.log(u["value_s"] / t["value_s"]) for t, u in pairs])))


# ------------------------------------------------------------------------------- fused MoE curve
def fused_moe_shape(r: dict) -> tuple[float, float]:
    """(FLOPs, weight bytes touched) of one ``fused_moe`` call on one GPU of the TP group, bf16:
    ``M · top_k`` token-expert rows through ``w1`` (hidden → 2 · intermediate / TP) and ``w2``
    (intermediate / TP → hidden); the weights of the experts some token routed to (uniform routing,
    :func:`harness.backends.cost.model.expected_distinct_experts`)."""
    m, tp = int(r["tokens"]), int(r["tp"])
    h, ff, e, k = int(r["hidden"]), int(r["intermediate"]), int(r["experts"]), int(r["top_k"])
    per_expert = 3.0 * h * ff / tp
    return 2.0 * m * k * per_expert, 2.0 * per_expert * expected_distinct_experts(e, k, m)


def _moe_predict(params, rows) -> np.ndarray:
    mfu, mbu, blend, floor = params
    out = []
    for r in rows:
        peak, hbm = PEAKS[r["gpu"]]
        flops, wbytes = fused_moe_shape(r)
        c, m = flops / (peak * mfu), wbytes / (hbm * mbu)
        out.append((c ** blend + m ** blend) ** (1.0 / blend) + floor)
    return np.array(out)


def fit_fused_moe(rows: list[dict]) -> dict:
    return _fit_blended(_moe_predict, rows, [0.5, 0.8, 2.0, 20.0], 200.0)


def predict_fused_moe(const: dict, rows: list[dict]) -> np.ndarray:
    return _moe_predict((const["mfu"], const["mbu"], const["blend"], const["floor_s"]), rows)


def fit_untuned_v1(points: list[dict]) -> dict:
    """The v1 fork's default fused-MoE config vs a tuned one (vLLM PR #16488, Llama-4-Scout TP 8 on
    H100): decode (TPOT) ratio → the weight-streaming slowdown, prefill (TTFT) ratio → the compute
    slowdown. Whole serving metrics, so each is a lower bound of the kernel's own slowdown."""
    by_q = {r["quantity"]: r["value_s"] for r in points}
    out = {}
    for key, q in (("memory", "tpot_tuned_over_untuned_fused_moe"), ("compute", "ttft_tuned_over_untuned_fused_moe")):
        out[key] = 1.0 / by_q[q] if q in by_q else 1.0
    return out


# ------------------------------------------------------------------------------------- driver
def calibrate(points: list[dict], gpu: str = "h100") -> dict:
    """Every constant of ``gpu`` and, per point, its fitted prediction, relative residual and
    leave-one-out relative error (``loo``: refit without the point, predict it). A constant with no
    point on ``gpu`` is taken from H100's fit (``inherited`` lists which): the datasheet ratio."""
    own = [r for r in points if r["gpu"] == gpu]
    h100 = [r for r in points if r["gpu"] == "h100"]
    inherited = []

    def rows_of(q):
        mine = [r for r in own if r["quantity"] == q]
        if mine:
            return mine
        inherited.append(q)
        return [r for r in h100 if r["quantity"] == q]
    gemm_rows = rows_of("linear_layer_time")
    ar_rows = rows_of("allreduce_time")
    step_rows = [r for r in points if r["quantity"] == "decode_step_time" and r["gpu"] == "h100"]
    gemm = fit_gemm(gemm_rows)
    ar = fit_allreduce(ar_rows)
    base = {"source": "calibration/points.csv", "gemm": gemm, "allreduce": ar}
    # The host cost per layer is CPU work: solved on the H100 log line with H100's GPU constants.
    h100_base = base if gpu == "h100" else {**base, "gemm": fit_gemm([r for r in h100 if r["quantity"] == "linear_layer_time"]),
                                            "allreduce": fit_allreduce([r for r in h100 if r["quantity"] == "allreduce_time"])}
    eager = fit_eager(step_rows, h100_base)
    pairs = moe_pairs(points)
    slowdown = fit_moe_slowdown(pairs)
    moe_rows = rows_of("fused_moe_time")
    fused = fit_fused_moe(moe_rows)
    const = {**base, "eager_layer_s": {"v0": eager}, "untuned_fused_moe_slowdown": slowdown,
             "fused_moe": fused, "untuned_fused_moe_v1": fit_untuned_v1([r for r in points if r["gpu"] == "h100"])}
    table = []
    if gpu != "h100" and set(inherited) >= {"linear_layer_time", "allreduce_time"}:
        return {"constants": const, "points": table, "inherited": inherited}
    for rows, fit, pred, full in ((gemm_rows, fit_gemm, predict_gemm, gemm),
                                  (ar_rows, fit_allreduce, predict_allreduce, ar),
                                  (moe_rows, fit_fused_moe, predict_fused_moe, fused)):
        fitted = pred(full, rows)
        for i, r in enumerate(rows):
            rest = rows[:i] + rows[i + 1:]
            loo = pred(fit(rest), [r])[0]
            table.append({"point_id": r["point_id"], "quantity": r["quantity"], "measured_s": r["value_s"],
                          "fitted_s": float(fitted[i]), "residual": float(fitted[i] / r["value_s"] - 1),
                          "loo": float(loo / r["value_s"] - 1)})
    for i, (t, u) in enumerate(pairs):
        fitted = t["value_s"] * slowdown
        loo = t["value_s"] * fit_moe_slowdown(pairs[:i] + pairs[i + 1:]) if len(pairs) > 1 else math.nan
        table.append({"point_id": u["point_id"], "quantity": u["quantity"], "measured_s": u["value_s"],
                      "fitted_s": fitted, "residual": fitted / u["value_s"] - 1, "loo": loo / u["value_s"] - 1})
    for r in step_rows:
        fitted = _decode_step(r, const if gpu == "h100" else {**h100_base, "eager_layer_s": {"v0": eager}})
        table.append({"point_id": r["point_id"], "quantity": r["quantity"], "measured_s": r["value_s"],
                      "fitted_s": fitted, "residual": fitted / r["value_s"] - 1, "loo": math.nan})
    return {"constants": const, "points": table, "inherited": inherited}
