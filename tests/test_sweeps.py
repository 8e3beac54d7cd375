"""Sweeps (issue 6 items 1, 2, 3, 7, 8, 10): study-file expansion, seed statistics, the analytic
mix waste, smoke-mode window and mix sweeps end to end, resume after an interruption, and the
Hydra launchers (slurm config composes, joblib runs cells)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from harness.study import cli, stats
from harness.study import run as study_run
from harness.study.kinds import ablation, lcm
from harness.study.plan import Plan, load_study, plan

ROOT = Path(__file__).resolve().parent.parent
EXP = ROOT / "experiments"


# -- plans --------------------------------------------------------------------------------------
def test_full_plans_have_three_seeds_and_the_stated_grids():
    w = plan(EXP / "window_sweep.yaml")
    assert len(w.runs) == 4 * 4 * 4 * 2 * 3
    assert {r.seed for r in w.runs} == {0, 1, 2}
    assert {r.params["window"] for r in w.runs} == {512, 4096, 32768, 131072}
    run = next(r for r in w.runs if r.params == {"window": 512, "length": 100000} and r.model == "gemma2_9b")
    assert "model.sliding_window=512" in run.overrides and "dataset.input_len_max=120000" in run.overrides
    assert run.overrides[0] == "gpu=h100" and "engine.max_model_len=131072" in run.overrides
    m = plan(EXP / "mix_sweep.yaml")
    assert len(m.runs) == (5 * 4 + 2) * 2 * 3
    mmmu = [r for r in m.runs if "MMMU" in r.model]
    assert len(mmmu) == 6 and mmmu[0].params == {"image": 6193, "text": 43} and "dataset=mmmu_pro" in mmmu[0].overrides
    a = plan(EXP / "ablation.yaml")
    assert {r.system for r in a.runs} == set(ablation.LADDER)
    jamba = [r for r in a.runs if r.model == "jamba_1_5_mini"]
    assert {r.baseline for r in jamba} == {"static_partition"} and "vllm" not in {r.system for r in jamba}
    c = plan(EXP / "lcm_churn.yaml")
    rates = {r.params["rate"] for r in c.runs if r.model == "jamba_1_5_mini"}
    assert rates == {8, 16, 32, 64, 128, math.inf}
    assert any(o == "engine.request_rate=inf" for r in c.runs for o in r.overrides)


def test_cli_seeds_gpu_and_smoke_section(tmp_path):
    p = plan(EXP / "window_sweep.yaml", ["mode=smoke", "seeds=3,4", "gpu=h200"])
    assert p.mode == "smoke" and {r.seed for r in p.runs} == {3, 4}
    assert all(r.overrides[0] == "gpu=h200" and r.overrides[-1] == "mode=smoke" for r in p.runs)
    assert len(p.runs) == 2 * 2 * 2 * 2 * 2


def test_bad_study_files_name_the_key(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nkind: nope\ncells: [{model: llama3_1_8b}]\n")
    from harness.study.kinds import KINDS

    with pytest.raises(ValueError, match=r"kind='nope'.*valid kinds: " + re.escape(str(sorted(KINDS)))):
        load_study(f)
    f.write_text("name: x\nkind: window\naxes: {w: {key: model.sliding_window, values: [1]}}\n"
                 "cells: [{model: gemma3_12b, only: {length: [1]}}]\n")
    with pytest.raises(ValueError, match="unknown axis 'length'"):
        plan(f)
    f.write_text("name: x\nkind: window\naxes: {w: {values: [1]}}\ncells: [{model: gemma3_12b}]\n")
    with pytest.raises(ValueError, match="needs? the axis's 'key'"):
        plan(f)


# -- statistics ---------------------------------------------------------------------------------
def test_speedups_pair_seeds_and_ci_is_student_t():
    df = pd.DataFrame([
        {"model": "m", "system": s, "baseline": "vllm", "seed": k, "status": "ok", "throughput_req_s": tp}
        for s, tps in (("vllm", [1.0, 2.0, 4.0]), ("jenga", [2.0, 3.0, 10.0])) for k, tp in enumerate(tps)])
    df = stats.add_speedup(df, ["model"])
    assert df[df.system == "jenga"]["speedup"].tolist() == [2.0, 1.5, 2.5]
    agg = stats.aggregate(df, ["model", "system"], ["speedup"]).set_index("system")
    lo, hi = sps.t.interval(0.95, 2, loc=2.0, scale=sps.sem([2.0, 1.5, 2.5]))
    assert agg.loc["jenga", "speedup"] == pytest.approx(2.0)
    assert (agg.loc["jenga", "speedup_ci_lo"], agg.loc["jenga", "speedup_ci_hi"]) == pytest.approx((lo, hi))
    assert agg.loc["jenga", "speedup_geo"] == pytest.approx((2.0 * 1.5 * 2.5) ** (1 / 3))
    m = stats.means(pd.Series([1.0, 4.0]))
    assert m["geo_mean"] == pytest.approx(2.0) and m["arith_mean"] == pytest.approx(2.5)


def test_ablation_attribution_on_the_log_scale():
    s = pd.DataFrame({"model": ["m"] * 4, "baseline": ["vllm"] * 4,
                      "system": ["vllm", "hybrid_groups", "jenga_no_request_aware", "jenga"],
                      "speedup": [1.0, math.sqrt(2.0), 1.6, 2.0]})
    a = ablation.attribution(s).iloc[0]
    assert a["freeing_share"] == pytest.approx(0.5)
    assert a["request_aware_share"] == pytest.approx(math.log(2.0 / 1.6) / math.log(2.0))



@pytest.mark.parametrize("mode", ["smoke", "full"])
def test_ablation_smoke_table_prints_no_paper_column(tmp_path, monkeypatch, capsys, mode):
    """Smoke cells are tiny, not comparable with the paper: the printed table has no paper_speedup
    column. The full run is the negative control (the paper's bar printed beside ours)."""
    s = pd.DataFrame({"model": ["m"] * 2, "baseline": ["vllm"] * 2, "system": ["vllm", "jenga"],
                      "throughput_req_s": [1.0, 1.3], "speedup": [1.0, 1.3], "speedup_ci_lo": [1.0, 1.2],
                      "speedup_ci_hi": [1.0, 1.4], "waste_fraction": [0.2, 0.1], "preemptions": [0, 0],
                      "seeds": [1, 1], "failed": [0, 0]})
    monkeypatch.setattr(ablation.stats, "rows", lambda runs, records: s)
    monkeypatch.setattr(ablation.stats, "add_speedup", lambda df, keys: df)
    monkeypatch.setattr(ablation.stats, "aggregate", lambda df, by, metrics: df.copy())
    monkeypatch.setattr(ablation, "_paper", lambda summary, gpu: pd.Series([1.0, 1.26], index=summary.index))
    monkeypatch.setattr(ablation, "plot", lambda *a: tmp_path / "ablation.png")
    ablation.report(Plan("ablation", "ablation", mode, "h100", "sim", [], {"gpu": "h100"}), [], tmp_path)
    table = capsys.readouterr().out.split("\n\n")[0]
    assert table.splitlines()[0].split()[:2] == ["model", "system"]
    assert ("paper_speedup" in table and "1.260" in table) == (mode == "full")
    assert "paper" not in table or mode == "full"

# -- analytic waste and the LCM table -----------------------------------------------------------
def test_mix_analytic_waste_is_79_6_percent_at_43_text_6193_image():
    ov = ["model=llama3_2_11b_vision", "dataset=image_mix", "dataset.num_requests=3", "dataset.input_len_min=43",
          "dataset.input_len_max=43", "dataset.image_tokens=6193"]
    # mllama: 32 self-attention layers (131072 B/token together), 8 cross-attention layers (32768).
    uniform = (43 + 6193) * (131072 + 32768)
    ideal = 43 * 131072 + 6193 * 32768
    assert _workload_waste(ov) == pytest.approx((uniform - ideal) / uniform, abs=1e-12)
    assert round(100 * _workload_waste(ov), 1) == 79.6
    # No images: uniform paging still charges the 8 cross-attention layers for text, 8/40 wasted.
    assert _workload_waste([*ov[:-1], "dataset.image_tokens=0"]) == pytest.approx(0.2)


def _workload_waste(overrides: list[str]) -> float:
    """What harness.run records as workload.analytic_waste_uniform for a cell (mix reads it)."""
    from harness.config import compose_cell
    from harness.models import load_profile
    from harness.run import workload_stats
    from harness.workloads import build_workload

    cfg = compose_cell(overrides)
    return workload_stats(load_profile(cfg.model), build_workload(cfg))["analytic_waste_uniform"]


def test_image_mix_workload_probability_and_errors():
    from harness.config import compose_cell
    from harness.workloads import WorkloadError, build_workload

    cfg = compose_cell(["model=llama3_2_11b_vision", "dataset=image_mix", "dataset.num_requests=400",
                        "dataset.image_prob=0.3", "dataset.image_tokens=3202"])
    reqs = build_workload(cfg)
    share = np.mean([r.num_image_tokens == 3202 for r in reqs])
    assert 0.22 < share < 0.38 and all(r.num_image_tokens in (0, 3202) for r in reqs)
    with pytest.raises(WorkloadError, match="needs a vision model"):
        build_workload(compose_cell(["model=llama3_1_8b", "dataset=image_mix", "dataset.num_requests=2"]))


def test_lcm_zoo_table_ratios():
    from harness.tools.pages import zoo_frame

    t = zoo_frame(16, ["llama3_2_11b_vision", "jamba_1_5_mini"]).set_index(["model", "type"])
    assert t.loc[("llama3_2_11b_vision", "cross"), "ratio"] == 4
    assert t.loc[("llama3_2_11b_vision", "full"), "ratio"] == 1
    assert t.loc[("jamba_1_5_mini", "full"), "model_max_ratio"] == 133
    row = t.loc[("llama3_2_11b_vision", "cross")]
    assert row["large_page_bytes"] == row["small_page_bytes"] * row["ratio"]


# -- smoke sweeps end to end ----------------------------------------------------------------------
@pytest.mark.slow
def test_window_sweep_smoke_waste(tmp_path):
    """A window at least the request length makes Jenga's waste equal vLLM's; a window far shorter
    than the requests leaves vLLM holding out-of-window tokens that Jenga frees."""
    p = plan(EXP / "window_sweep.yaml", ["mode=smoke", f"out_dir={tmp_path / 'runs'}", "mode.length_scale=1.0"])
    p.runs = [r for r in p.runs if r.model == "gemma3_12b"]
    records = study_run.run_inline([r.overrides for r in p.runs], 1, progress=False)
    s = __import__("harness.study.kinds.window", fromlist=["report"]).report(p, records,
                                                                         tmp_path / "out")
    assert (tmp_path / "out" / "summary_smoke.csv").exists() and (tmp_path / "out" / "window_sweep_smoke.png").exists()
    w = s.set_index(["window", "length", "system"])["waste_fraction"]
    for length in (512, 8192):
        assert w[(131072, length, "jenga")] == pytest.approx(w[(131072, length, "vllm")], abs=1e-12)
    # Jenga holds the artifact's 192 tokens past the window (sliding_retention_tokens): with a
    # 512-token window that is unneeded memory too, far below vLLM's out-of-window tokens.
    assert w[(512, 8192, "vllm")] > 0.5 and w[(512, 8192, "jenga")] < 0.1


@pytest.mark.slow
def test_mix_sweep_smoke_measured_waste(tmp_path):
    rc = cli.main([str(EXP / "mix_sweep.yaml"), "mode=smoke", f"out_dir={tmp_path / 'runs'}", "--jobs", "1",
                      "--out", str(tmp_path / "out"), "--no-progress"])
    assert rc == 0
    s = pd.read_csv(tmp_path / "out" / "summary_smoke.csv")
    v = s[(s.system == "vllm") & (s.image == 6193)].iloc[0]
    assert v["analytic_waste_vllm"] == pytest.approx(0.7959, abs=1e-4)
    j = s[(s.system == "jenga") & (s.image == 6193)].iloc[0]
    assert j["waste_fraction"] < 0.1 and v["waste_fraction"] > 0.6
    assert (tmp_path / "out" / "mix_sweep_smoke.png").exists() and (tmp_path / "out" / "means_smoke.csv").exists()


def test_interrupted_sweep_resumes_without_redoing_finished_cells(tmp_path):
    p = plan(EXP / "lcm_churn.yaml", ["mode=smoke", f"out_dir={tmp_path / 'runs'}"])
    assert len(p.runs) == 4
    full = list(p.runs)
    p.runs = full[:2]                       # the sweep "dies" after two cells
    first = study_run.run_inline([r.overrides for r in p.runs], 1, progress=False)
    assert all(r["status"] == "ok" and not r.get("reused") for r in first)
    done = sorted((tmp_path / "runs").rglob("record.json"))
    stamps = {f: f.stat().st_mtime_ns for f in done}
    p.runs = full                           # rerun the whole sweep
    second = study_run.run_inline([r.overrides for r in p.runs], 1, progress=False)
    assert [bool(r.get("reused")) for r in second] == [True, True, False, False]
    assert {f: f.stat().st_mtime_ns for f in done} == stamps
    assert second[0]["throughput_req_s"] == first[0]["throughput_req_s"]
    assert len(list((tmp_path / "runs").rglob("record.json"))) == 4


# -- Hydra launchers ------------------------------------------------------------------------------
def test_slurm_launcher_config_composes():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # compose_cell keeps Hydra initialised; it re-initialises after this
    with initialize_config_dir(config_dir=str(ROOT / "harness" / "conf"), version_base="1.3"):
        cfg = compose(config_name="sweep", overrides=["hydra/launcher=slurm", "study=x.yaml", "cell=3",
                                                      "hydra.launcher.partition=cpu"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.timeout_min, launcher.cpus_per_task, launcher.max_num_timeout) == \
        ("cpu", 30, 1, 2)
    assert cfg.cell == 3 and cfg.study == "x.yaml"
    cmd = study_run.launcher_command(EXP / "ablation.yaml", 5, ["mode=smoke"], "slurm", 2, False, tmp := Path("/x"))
    assert "hydra/launcher=slurm" in cmd and "cell=range(0,5)" in cmd and f"hydra.sweep.dir={tmp}" in cmd
    with pytest.raises(ValueError, match="allowed: \\['joblib', 'slurm', 'submitit_local'\\]"):
        study_run.launcher_command(EXP / "ablation.yaml", 5, [], "local", 2, False, tmp)


def test_slurm_multirun_dry_run_prints_the_launcher():
    """The real command line with hydra/launcher=slurm, composed and printed (--cfg), not submitted."""
    cmd = study_run.launcher_command(EXP / "lcm_churn.yaml", 4, ["mode=smoke"], "slurm", 2, False, Path("/tmp/x"))
    # --cfg cannot be combined with -m: compose the first job's config instead of the sweep.
    i = cmd.index("harness.study.launch")
    assert cmd[i + 1] == "-m"
    cmd = ["cell=0" if c.startswith("cell=") else c for c in cmd[:i + 1] + cmd[i + 2:]]
    out = subprocess.run([*cmd, "--cfg", "hydra", "--package", "hydra.launcher"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "SlurmLauncher" in out.stdout and "timeout_min: 30" in out.stdout


@pytest.mark.slow
def test_hydra_joblib_launcher_runs_cells(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text("name: tiny\nkind: lcm\nsystems: [jenga]\nbaseline: jenga\nseeds: [0, 1]\nzoo: [llama3_1_8b]\n"
                 "axes: {rate: {key: engine.request_rate, values: [.inf]}}\n"
                 "cells: [{model: llama3_1_8b, dataset: mmlu_pro, dataset.num_requests: 4}]\n")
    cli = ["mode=smoke", f"out_dir={tmp_path / 'runs'}"]
    # One worker runs both jobs: the second must still find the cell schema (the joblib launcher
    # restores Hydra's singletons before each job).
    cmd = study_run.launcher_command(f, 2, cli, "joblib", 1, False, tmp_path / "hydra")
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "runs").rglob("record.json"))) == 2
    assert (tmp_path / "hydra" / "1" / ".hydra" / "overrides.yaml").exists()
    recs = study_run.collect([r.overrides for r in plan(f, cli).runs])
    assert [(r["status"], r.get("reused"), r["seed"]) for r in recs] == [("ok", True, 0), ("ok", True, 1)]
    missing = study_run.collect([r.overrides for r in plan(f, [*cli, "seeds=7"]).runs])
    assert missing[0]["status"] == "failed" and "no launcher job finished this cell" in missing[0]["error"]


# Record fields a launcher may legitimately change: when and how long, and where the files are.
VOLATILE = {"wall_s", "provenance", "reused", "trace_file", "meta"}


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_smoke_study_like_inline(tmp_path):
    """The Slurm path runs, not only composes: the same smoke study through submitit's local
    executor (hydra/launcher=submitit_local: submitit pickles each job and runs it in its own
    process, as on a Slurm node) gives the inline run's records, metric for metric."""
    f = tmp_path / "tiny.yaml"
    f.write_text("name: tiny\nkind: lcm\nsystems: [jenga, jenga_no_request_aware]\nbaseline: jenga\n"
                 "seeds: [0]\nzoo: [llama3_1_8b]\naxes: {rate: {key: engine.request_rate, values: [.inf]}}\n"
                 "cells: [{model: gemma3_12b, dataset: mmlu_pro, dataset.num_requests: 4}]\n")
    outs = {}
    for launcher in ("inline", "submitit_local"):
        runs = tmp_path / launcher
        rc = cli.main([str(f), "mode=smoke", f"out_dir={runs}", "--out", str(tmp_path / f"out_{launcher}"),
                       "--launcher", launcher, "--jobs", "1", "--no-progress",
                       "--hydra", f"hydra.sweep.dir={tmp_path / 'hydra'}"] if launcher != "inline" else
                      [str(f), "mode=smoke", f"out_dir={runs}", "--out", str(tmp_path / f"out_{launcher}"),
                       "--jobs", "1", "--no-progress"])
        assert rc == 0, launcher
        outs[launcher] = {(r["system"], r["seed"]): r for r in
                          (json.loads(p.read_text()) for p in runs.rglob("record.json"))}
    assert len(outs["inline"]) == 2 and outs["inline"].keys() == outs["submitit_local"].keys()
    assert list((tmp_path / "hydra").rglob("*submitit*")) or list((tmp_path / "hydra").rglob("*.pkl"))
    def same(rec: dict) -> dict:   # the run folder is the one override that differs by design
        return {**{k: v for k, v in rec.items() if k not in VOLATILE},
                "overrides": [o for o in rec["overrides"] if not o.startswith("out_dir=")]}

    for key, rec in outs["inline"].items():
        assert same(rec) == same(outs["submitit_local"][key]), key
    assert outs["inline"][("jenga", 0)]["throughput_req_s"] > 0


def test_study_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "harness.study", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and "--launcher" in out.stdout


@pytest.mark.parametrize("module", ["harness.experiment", "harness.sweeps", "harness.studies"])
def test_the_old_study_modules_are_gone(module):
    """One study package: the deprecated aliases and the old homes of study code are removed."""
    import importlib.util

    assert importlib.util.find_spec(module) is None


def test_figure_plan_takes_seeds_from_the_command_line():
    one = plan(EXP / "fig14.yaml", ["mode=smoke", "seeds=0"])
    three = plan(EXP / "fig14.yaml", ["mode=smoke", "seeds=0,1,2"])
    assert len(three.runs) == 3 * len(one.runs) and {r.seed for r in three.runs} == {0, 1, 2}
    assert not any(o.startswith("seeds=") for r in three.runs for o in r.overrides)


@pytest.mark.slow
@pytest.mark.parametrize("study", ["ablation", "lcm_churn"])
def test_ablation_and_lcm_reports_smoke(tmp_path, study):
    out = tmp_path / "out"
    rc = cli.main([str(EXP / f"{study}.yaml"), "mode=smoke", f"out_dir={tmp_path / 'runs'}", "--jobs", "1",
                      "--out", str(out), "--no-progress"])
    assert rc == 0 and (out / f"{study}_smoke.png").exists()
    s = pd.read_csv(out / "summary_smoke.csv")
    base = s[s.system == s.baseline]
    assert len(base) and (base["speedup"] == 1.0).all()
    if study == "ablation":
        assert set(s[s.model == "llama3_2_11b_vision"].system) == set(ablation.LADDER)
        assert s[s.model == "jamba_1_5_mini"].baseline.unique().tolist() == ["static_partition"]
        assert (out / "attribution_smoke.csv").exists()
    else:
        t = pd.read_csv(out / "lcm_table_smoke.csv")
        assert set(t.model) == {"llama3_2_11b_vision", "jamba_1_5_mini"}
        j = s[s.system == "jenga"]
        assert (j["frac_fallback"] == 0).all() and (j["frac_request_hit"] > 0.5).all()
        fracs = s[[f"frac_{k}" for k in lcm.ALLOC_PATHS]].sum(axis=1)
        assert np.allclose(fracs, 1.0)
