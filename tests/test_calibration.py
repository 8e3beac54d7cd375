"""Issue 21: the calibrated step-time model — its inputs (never a paper bar), the fit, and each
source-level mechanism, with exact values on hand-built cases and negative controls."""

from __future__ import annotations

import builtins
import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost import calibration as cal
from harness.backends.cost import model as costmod
from harness.backends.cost.model import CostModel, gemm_time

REPO = Path(__file__).resolve().parents[1]
CAL = {"source": "test", "gemm": {"mfu": 0.5, "mbu": 0.5, "blend": 2.0, "floor_s": 0.0},
       "allreduce": {"latency_s": 1e-5, "bytes_per_s": 1e11}, "eager_layer_s": {"v0": 1e-3}}


# ------------------------------------------------------------------------------ inputs
def test_calibration_reads_no_paper_bar(monkeypatch):
    """Every file the fit opens is recorded: none is under results/paper/ (Fig. 13/14 bars)."""
    opened: list[str] = []
    real_open = builtins.open
    real_path_open = Path.open

    def spy_open(file, *a, **k):
        opened.append(str(file))
        return real_open(file, *a, **k)

    def spy_path_open(self, *a, **k):
        opened.append(str(self))
        return real_path_open(self, *a, **k)
    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(Path, "open", spy_path_open)
    points = cal.load_points()
    gemm = cal.fit_gemm([r for r in points if r["quantity"] == "linear_layer_time"])
    ar = cal.fit_allreduce([r for r in points if r["quantity"] == "allreduce_time"])
    steps = [r for r in points if r["quantity"] == "decode_step_time"]
    eager = cal.fit_eager(steps, {"source": "t", "gemm": gemm, "allreduce": ar})
    assert opened, "the spy saw no file: the test would pass vacuously"
    assert any(p.endswith("calibration/points.csv") for p in opened)
    assert not [p for p in opened if "results/paper" in p or "figure14.csv" in p]
    assert 0 < eager < 0.01


def test_a_paper_bar_is_refused_as_a_point(tmp_path):
    src = (REPO / "calibration" / "points.csv").read_text().splitlines()
    rows = list(csv.DictReader(io.StringIO("\n".join(src))))
    rows[0]["source_file"] = "results/paper/fig14.csv"
    bad = tmp_path / "points.csv"
    with bad.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(cal.CalibrationInputError):
        cal.load_points(bad)
    with pytest.raises(cal.CalibrationInputError):
        cal.load_points(REPO / "results" / "paper" / "fig14.csv")


def test_points_name_their_source_and_cover_the_issue_sources():
    points = cal.load_points()
    for r in points:
        assert r["source_repo"] and r["source_file"] and r["source_line"], r["point_id"]
        assert r["value_s"] > 0
    repos = {r["source_repo"] for r in points}
    assert {"microsoft/vidur", "heheda12345/Jenga-SOSP25-AE", "vllm-project/vllm"} <= repos
    # The artifact's stats line: 6 running requests at 121.2 generated tokens/s.
    (step,) = [r for r in points if r["quantity"] == "decode_step_time"]
    assert step["value_s"] == pytest.approx(6 / 121.2)


# ------------------------------------------------------------------------------ fit
def test_gemm_fit_recovers_known_constants():
    """Synthetic points from known constants: the fit returns them (no noise, exact model)."""
    truth = {"mfu": 0.62, "mbu": 0.83, "blend": 2.5, "floor_s": 4e-6}
    rows = [r for r in cal.load_points() if r["quantity"] == "linear_layer_time"]
    pred = cal.predict_gemm(truth, rows)
    synth = [{**r, "value_s": float(v)} for r, v in zip(rows, pred)]
    got = cal.fit_gemm(synth)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-3), k


def test_allreduce_fit_recovers_known_constants_and_ring_formula():
    rows = [r for r in cal.load_points() if r["quantity"] == "allreduce_time"]
    truth = {"latency_s": 2e-5, "bytes_per_s": 3e11}
    synth = [{**r, "value_s": float(v)} for r, v in zip(rows, cal.predict_allreduce(truth, rows))]
    got = cal.fit_allreduce(synth)
    assert got["latency_s"] == pytest.approx(2e-5, rel=1e-4)
    assert got["bytes_per_s"] == pytest.approx(3e11, rel=1e-4)
    # 4 GPUs, 1 MB: latency + 2 * 3/4 * 1e6 / 3e11.
    one = {"tp": 4, "message_bytes": 1e6}
    assert cal.predict_allreduce(truth, [one])[0] == pytest.approx(2e-5 + 1.5e6 / 3e11)


def test_moe_slowdown_is_the_geometric_mean_of_the_ratios():
    pairs = cal.moe_pairs(cal.load_points())
    assert len(pairs) == 4
    want = math.exp(sum(math.log(u["value_s"] / t["value_s"]) for t, u in pairs) / 4)
    assert cal.fit_moe_slowdown(pairs) == pytest.approx(want)
    assert 1.8 < want < 2.1   # PR #2979: 23.3/11.6, 25.4/12.6, 43.0/23.6, 60.8/32.9


def test_gpu_yamls_carry_the_fitted_constants():
    """The committed yamls hold what the committed points give (no hand edits; scripts/calibrate.py --check
    is the full check, marked slow)."""
    import yaml
    for gpu in ("h100", "l4", "h200"):
        c = yaml.safe_load((REPO / "harness" / "conf" / "gpu" / f"{gpu}.yaml").read_text())["calibration"]
        assert set(c["mechanisms"]) == set(costmod.MECHANISMS)
        assert all(c["mechanisms"].values())
        assert 0 < c["gemm"]["mfu"] <= 1 and 0 < c["gemm"]["mbu"] <= 1


def test_h100_yaml_constants_are_the_fit_of_the_committed_points():
    """The fast half of ``calibrate.py --check``: refit the GEMM curve, the all-reduce and the MoE
    slowdown from points.csv and compare with the yaml (written to 4-5 significant digits)."""
    import yaml
    y = yaml.safe_load((REPO / "harness/conf/gpu/h100.yaml").read_text())["calibration"]
    points = cal.load_points()
    gemm = cal.fit_gemm([r for r in points if r["quantity"] == "linear_layer_time"])
    ar = cal.fit_allreduce([r for r in points if r["quantity"] == "allreduce_time"])
    for k in ("mfu", "mbu", "blend", "floor_s"):
        assert y["gemm"][k] == pytest.approx(gemm[k], rel=1e-3), k
    assert y["allreduce"]["latency_s"] == pytest.approx(ar["latency_s"], rel=1e-3)
    assert y["allreduce"]["bytes_per_s"] == pytest.approx(ar["bytes_per_s"], rel=1e-3)
    assert y["untuned_fused_moe_slowdown"] == pytest.approx(cal.fit_moe_slowdown(cal.moe_pairs(points)), rel=1e-3)
    moe = cal.fit_fused_moe([r for r in points if r["quantity"] == "fused_moe_time"])
    for k in ("mfu", "mbu", "blend", "floor_s"):
        assert y["fused_moe"][k] == pytest.approx(moe[k], rel=1e-3), k
    v1 = cal.fit_untuned_v1(points)
    assert y["untuned_fused_moe_v1"]["memory"] == pytest.approx(v1["memory"], rel=1e-3)
    assert y["untuned_fused_moe_v1"]["compute"] == pytest.approx(v1["compute"], rel=1e-3)


def test_fused_moe_shape_exact_and_fit_within_15_percent_leave_one_out():
    """One fused_moe call of Mixtral TP 2 (vLLM PR #24700's shape): FLOPs of M*top_k rows through
    w1 (4096 x 2*7168) and w2 (7168 x 4096); one token touches top_k = 2 experts' weights, many
    tokens all 8. The fitted curve predicts every held-out point within 15 %."""
    row = {"tokens": 1, "tp": 2, "hidden": 4096, "intermediate": 14336, "experts": 8, "top_k": 2, "gpu": "h100"}
    flops, wbytes = cal.fused_moe_shape(row)
    assert flops == pytest.approx(2 * 1 * 2 * 3 * 4096 * 7168)
    assert wbytes == pytest.approx(2 * 3 * 4096 * 7168 * 2)
    assert cal.fused_moe_shape({**row, "tokens": 4096})[1] == pytest.approx(8 * 3 * 4096 * 7168 * 2, rel=1e-6)
    rows = [r for r in cal.load_points() if r["quantity"] == "fused_moe_time"]
    assert len(rows) == 15
    for i, r in enumerate(rows):
        loo = cal.predict_fused_moe(cal.fit_fused_moe(rows[:i] + rows[i + 1:]), [r])[0]
        assert abs(loo / r["value_s"] - 1) < 0.15, r["point_id"]


def test_untuned_v1_ratios_are_pr16488():
    v1 = cal.fit_untuned_v1(cal.load_points())
    assert v1["memory"] == pytest.approx(1 / (1 - 0.077))
    assert v1["compute"] == pytest.approx(1 / (1 - 0.176))


@pytest.mark.slow
def test_calibrate_check_passes_on_the_committed_tree():
    r = subprocess.run([sys.executable, "scripts/calibrate.py", "--check"], cwd=REPO, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert "leave-one-out" in r.stdout


# ------------------------------------------------------------------------------ model
def test_gemm_time_power_mean_exact():
    g = {"mfu": 0.5, "mbu": 0.5, "blend": 2.0, "floor_s": 1e-6}
    # compute 1e12 / (1e12 * 0.5) = 2 s, memory 1.5e12 / (1e12 * 0.5) = 3 s -> sqrt(4 + 9) + 3 kernels.
    assert gemm_time(1e12, 1.5e12, 1e12, 1e12, g, kernels=3) == pytest.approx(math.sqrt(13) + 3e-6)
    # A large blend tends to the roofline max.
    assert gemm_time(1e12, 1.5e12, 1e12, 1e12, {**g, "blend": 200.0}) == pytest.approx(3.0, rel=1e-2)


def test_no_calibration_block_keeps_the_datasheet_path():
    prof = tiny_profile()
    cm = CostModel(prof, tiny_gpu(), tiny_engine())
    assert cm.gemm is None and not any(cm.mechanisms.values())
    assert cm.max_seq_len_to_capture is None


def _decode(cm, ctx, b=1):
    return cm.step_time([(1, ctx, 0)] * b)


def test_v0_graph_capture_stops_above_max_seq_len_to_capture():
    """Exact: at 8192 the decode replays the graph (no launch cost), at 8193 it runs eager, so the
    step is max(GPU, layers x eager_layer_s) plus the same CPU terms."""
    prof = tiny_profile(layers=4)
    slow_host = {**CAL, "eager_layer_s": {"v0": 5e-3}}
    cm = CostModel(prof, tiny_gpu(calibration=slow_host), tiny_engine(max_model_len=16384))
    at, above = _decode(cm, 8191), _decode(cm, 8192)   # lengths 8192 and 8193
    gpu_at = at - cm.overhead.step_s - cm.overhead.per_request_s - cm.input_prep_time([(1, 8191, 0)])
    assert gpu_at < 4 * 5e-3                            # the graph hid the launch cost
    assert above - at == pytest.approx(4 * 5e-3 - gpu_at, rel=1e-3, abs=1e-6)
    # Negative controls: the rule off (graphed at any length), and v1 (no such rule).
    off = CostModel(prof, tiny_gpu(calibration={**slow_host, "mechanisms": {"graph_seq_rule": False}}),
                    tiny_engine(max_model_len=16384))
    assert _decode(off, 8192) < above
    v1 = CostModel(prof, tiny_gpu(calibration=CAL), tiny_engine(max_model_len=16384, engine_version="v1"))
    assert v1.max_seq_len_to_capture is None


def test_eager_host_cost_comes_from_the_calibration():
    prof = tiny_profile(layers=4)
    cm = CostModel(prof, tiny_gpu(calibration=CAL), tiny_engine(enforce_eager=True))
    assert cm.overhead.eager_layer_s == 1e-3
    off = CostModel(prof, tiny_gpu(calibration={**CAL, "mechanisms": {"eager_host": False}}),
                    tiny_engine(enforce_eager=True))
    assert off.overhead.eager_layer_s == costmod.ENGINE_OVERHEAD["v0"].eager_layer_s


def test_allreduce_constants_come_from_the_calibration():
    prof = tiny_profile()
    cm = CostModel(prof, tiny_gpu(calibration=CAL, count=4), tiny_engine())
    assert (cm.allreduce_latency_s, cm.link_bytes_per_s) == (1e-5, 1e11)


def _real(model, gpu="h100", mech=None, **engine):
    from harness.backends.settings import EngineSettings, GpuSettings
    from harness.config import compose_cell
    from harness.models import load_profile
    ov = [f"model={model}", f"gpu={gpu}"] + [f"engine.{k}={v}" for k, v in engine.items()]
    cfg = compose_cell(ov)
    g = GpuSettings.of(cfg.gpu)
    if mech is not None:
        c = dict(g.calibration)
        c["mechanisms"] = {**c["mechanisms"], **mech}
        g = GpuSettings(**{**g.__dict__, "calibration": c})
    return CostModel(load_profile(cfg.model), g, EngineSettings.of(cfg.engine))


def test_mllama_profiling_masks_exact_and_only_on_v0():
    on = _real("llama3_2_11b_vision", max_num_seqs=52, engine_version="v0", max_model_len=8192)
    assert on.vision_mask_bytes() == 52 * 6432 * 6432 * 2          # (52, 1, 4 x 1608, 4 x 1608) bf16
    off = _real("llama3_2_11b_vision", mech={"vision_mask_memory": False}, max_num_seqs=52,
                engine_version="v0", max_model_len=8192)
    assert off.vision_mask_bytes() == 0
    assert off.kv_capacity_bytes() - on.kv_capacity_bytes() == pytest.approx(52 * 6432 * 6432 * 2, rel=0.01)
    assert _real("llama3_2_11b_vision", max_num_seqs=52, engine_version="v1").vision_mask_bytes() == 0


def test_mllama_vision_flops_exact():
    cm = _real("llama3_2_11b_vision", engine_version="v0")
    enc = 4.0 * 6432 ** 2 * 1280 * 40                                # 4 tiles -> 6432 padded tokens
    cross = 2.0 * 6404 * 4096 * (32 + 2 * 8) * 128 * 8               # full qkv_proj, 8 cross layers
    assert cm._vision_extra_flops(6404) == pytest.approx(enc + cross)
    assert cm._vision_extra_flops(0) == 0
    off = _real("llama3_2_11b_vision", mech={"vision_flops": False}, engine_version="v0")
    prefill = [(50, 0, 6404, 6404)] * 8   # one image alone is launch-bound (eager host cost)
    assert off.step_time(prefill) < cm.step_time(prefill)


def test_jamba_untuned_fused_moe_only_where_no_tuned_config():
    import yaml
    slow = yaml.safe_load((REPO / "harness/conf/gpu/h100.yaml").read_text())["calibration"]["untuned_fused_moe_slowdown"]
    on = _real("jamba_1_5_mini", engine_version="v0", enforce_eager=True, max_model_len=8192)
    assert on._moe_slowdown == slow > 1
    off = _real("jamba_1_5_mini", mech={"untuned_fused_moe": False}, engine_version="v0", max_model_len=8192)
    assert off._moe_slowdown == 1.0
    decode = [(1, 1000, 0)] * 64
    assert on.step_time(decode) > off.step_time(decode)
    # Negative control: a model whose FFNs are plain linear layers is untouched.
    assert _real("ministral_8b", engine_version="v0")._moe_slowdown == 1.0


def test_fused_moe_curve_reaches_only_fusedmoe_ffns():
    """Llama-4 (v1, H100): routed experts on the fused-MoE curve with PR #16488's v1 slowdowns (no
    E=16,N=1024 H100 config in the v1 fork); off by its switch; Jamba (v0) keeps PR #2979's; a dense
    model has no fused part (negative control)."""
    import yaml
    y = yaml.safe_load((REPO / "harness/conf/gpu/h100.yaml").read_text())["calibration"]
    l4 = _real("llama4_scout", engine_version="v1", max_model_len=131072)
    assert l4.moe_gemm is not None and l4._fused_calls == 48
    assert l4._moe_slowdown == y["untuned_fused_moe_v1"]["memory"] > 1
    assert l4._moe_compute_slowdown == y["untuned_fused_moe_v1"]["compute"] > 1
    # Routed params one token multiplies: top-1 expert of 48 layers (3 x 5120 x 8192 each).
    assert l4._fused_params == pytest.approx(48 * 3 * 5120 * 8192, rel=0.01)
    off = _real("llama4_scout", mech={"fused_moe_curve": False, "untuned_fused_moe": False},
                engine_version="v1", max_model_len=131072)
    assert off.moe_gemm is None and off._moe_slowdown == 1.0
    for batch in ([(1, 5000, 0)] * 32, [(8192, 0, 0)]):
        assert l4.step_time(batch) > off.step_time(batch)
    jamba = _real("jamba_1_5_mini", engine_version="v0", enforce_eager=True, max_model_len=8192)
    assert jamba.moe_gemm is not None and jamba._moe_compute_slowdown == 1.0
    assert jamba._moe_slowdown == y["untuned_fused_moe_slowdown"]
    assert _real("ministral_8b", engine_version="v0").moe_gemm is None


# ------------------------------------------------------------------------------ §4: the GPU script
def test_gpu_points_dry_run_writes_fittable_rows(tmp_path):
    out = tmp_path / "gpu_points_l4.csv"
    r = subprocess.run([sys.executable, "scripts/gpu_points.py", "--dry-run", "--gpu", "l4", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    rows = cal.load_points(out)
    qs = {row["quantity"] for row in rows}
    assert {"linear_layer_time", "attention_decode_time"} <= qs
    assert all(row["gpu"] == "l4" and row["source_file"] == "scripts/gpu_calibrate.sh" for row in rows)
    # The fit takes them as L4's own GEMM points (no H100 inheritance for the GEMM curve).
    lin = [row for row in rows if row["quantity"] == "linear_layer_time"]
    assert cal.predict_gemm(cal.fit_gemm(lin), lin).shape == (len(lin),)


@pytest.mark.slow
def test_gpu_calibrate_sh_dry_run():
    r = subprocess.run(["bash", "scripts/gpu_calibrate.sh", "--dry-run"], cwd=REPO, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "dry run ok" in r.stdout and "== l4 (inherited from H100: allreduce_time, fused_moe_time)" in r.stdout


def test_fit_peaks_match_the_gpu_yamls():
    import yaml
    for gpu, (flops, hbm) in cal.PEAKS.items():
        y = yaml.safe_load((REPO / "harness" / "conf" / "gpu" / f"{gpu}.yaml").read_text())
        assert (float(y["peak_bf16_flops"]), float(y["hbm_bytes_per_s"])) == (flops, hbm)
