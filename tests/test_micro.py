"""The micro-experiment study: its file planned as cells (per-part systems, x axes and seeds),
checked before anything runs, dry-run with cache status, its report, and Poisson arrivals honoured
by the workload builder and the sim engine (the latency-vs-rate part relies on both)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jenga
from harness.backends.sim.engine import simulate
from harness.backends.sim.scheduler import SchedulerConfig
from harness.config import compose_cell
from harness.study import cli
from harness.study.kinds import micro
from harness.study.plan import label_of, plan
from harness.workloads import build_workload
from harness.workloads.request import Request
from jenga.spec import FullAttentionSpec

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "experiments" / "micro.yaml"
# Cells per part (systems × x points × seeds): frag_trace one trace (seed 0), the others 3 seeds;
# smoke keeps the first two points of each x axis.
FULL = {"frag_trace": 2 * 1, "decode_batch": 2 * 3, "prefix_cache": 3 * 6 * 3, "latency": 2 * 23 * 3}
SMOKE = {"frag_trace": 2 * 1, "decode_batch": 2 * 3, "prefix_cache": 3 * 2 * 3, "latency": 2 * 2 * 3}


def test_plan_expands_each_part_over_its_own_axis_systems_and_seeds():
    full = plan(STUDY)
    assert full.kind == "micro" and Counter(r.model for r in full.runs) == FULL
    pc = [r for r in full.runs if r.model == "prefix_cache" and r.system == "hybrid_groups" and r.seed == 0]
    assert [r.params for r in pc] == [{"articles": n, "rate": None} for n in (1, 2, 3, 4, 6, 8)]
    assert all(f"dataset.articles_per_group={r.params['articles']}" in r.overrides for r in pc)
    lat = [r for r in full.runs if r.model == "latency"]
    assert {r.system for r in lat} == {"vllm", "jenga"}
    assert all(f"engine.request_rate={r.params['rate']}" in r.overrides and r.params["articles"] is None for r in lat)
    assert not any("engine.request_rate" in o or "articles_per_group" in o
                   for r in full.runs if r.model in micro.TRACE_PARTS for o in r.overrides)
    assert {r.seed for r in full.runs if r.model == "frag_trace"} == {0}
    smoke = plan(STUDY, ["mode=smoke"])
    assert Counter(r.model for r in smoke.runs) == SMOKE and all("mode=smoke" in r.overrides for r in smoke.runs)
    assert {r.params["rate"] for r in smoke.runs if r.model == "latency"} == {0.2, 0.4}


def test_seeds_on_the_command_line_replace_every_parts_seeds():
    p = plan(STUDY, ["mode=smoke", "seeds=3,4"])
    for part in micro.PARTS:
        assert {r.seed for r in p.runs if r.model == part} == {3, 4}, part     # frag_trace's [0] too
    assert Counter(r.model for r in p.runs)["frag_trace"] == 2 * 2


@pytest.mark.parametrize("old, new, needle", [
    ("label: decode_batch", "label: decode_batchh", "['decode_batchh'] name no micro part"),
    ("axes: [rate]", "axes: [rates]", "cell 'axes' must list some of the axes"),
    ("seeds: [0],", "seeds: [-1],", "cell 'frag_trace': every seed must be a whole number >= 0"),
    # Composes the study's cells up to the bad one (~6 s): slow.
    pytest.param("dataset.output_len: 200", "dataset.output_lenn: 200", "unknown key 'dataset.output_lenn' (did you mean 'dataset.output_len'?)",
                 marks=pytest.mark.slow),
])
def test_a_bad_key_in_the_study_file_is_one_error_before_anything_runs(tmp_path, capsys, old, new, needle):
    text = STUDY.read_text()
    assert text.count(old) == 1, old
    f = tmp_path / "micro.yaml"
    f.write_text(text.replace(old, new))
    rc = cli.main([str(f), "mode=smoke", f"out_dir={tmp_path / 'runs'}", "--out", str(tmp_path / "out"),
                      "--jobs", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


def test_dry_run_shows_each_cells_cache_status_and_runs_nothing(tmp_path, capsys):
    # The study's two trace parts only (fewer configs to compose; the counts of every part: above).
    text = STUDY.read_text()
    f = tmp_path / "micro.yaml"
    f.write_text(text[:text.index("  # hybrid_groups")] + text[text.index("# mode=smoke (tests)"):])
    args = [str(f), "mode=smoke", "seeds=0", f"out_dir={tmp_path / 'runs'}", "--out", str(tmp_path / "out")]
    n = 2 + 2                                   # one seed: frag_trace, decode_batch
    assert cli.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{n} cells: 0 cached, {n} to run (dry run: nothing ran)" in out and "to run           frag_trace/vllm/seed0" in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()
    from harness.study.run import run_one

    runs = plan(cli.load_study_file(f), args[1:4]).runs
    labels, overrides = [label_of(r) for r in runs], [r.overrides for r in runs]
    assert run_one(overrides[0])["status"] == "ok"                          # one cell run outside the study
    assert cli.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{n} cells: 1 cached, {n - 1} to run" in out and f"cached           {labels[0]}" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_report_writes_summary_means_traces_and_figure(tmp_path):
    """micro.report on the smoke plan's first point of each part (one seed; the whole study runs
    through the driver in tests/test_notebook.py): the old driver's summary columns, seed means with
    CIs, the first seed's decimated traces read from the records' trace.csv, and the figure."""
    from harness.study.run import run_one

    p = plan(STUDY, ["mode=smoke", "seeds=0", f"out_dir={tmp_path / 'runs'}"])
    p.runs = [r for r in p.runs if r.params in ({"articles": None, "rate": None}, {"articles": 1, "rate": None},
                                                {"articles": None, "rate": 0.2})]
    out = tmp_path / "out"
    micro.report(p, [run_one(r.overrides) for r in p.runs], out)
    s = pd.read_csv(out / "summary_smoke.csv")
    assert list(s.columns) == ["part", "system", "x", "seed", "model", "dataset", *micro.ROW_FIELDS, "git_rev",
                               "dirty", "time", "overrides"]
    assert list(dict.fromkeys(s["part"])) == list(micro.PARTS) and (s["status"] == "ok").all()
    assert list(s.loc[s.part == "prefix_cache", "system"].unique()) == ["vllm", "hybrid_groups", "jenga"]
    assert s.loc[s.part == "latency", "x"].tolist() == [0.2] * 2 and s.loc[s.part == "frag_trace", "x"].isna().all()
    m = pd.read_csv(out / "summary_mean_smoke.csv")
    assert len(m) == len(s) and (m["seeds"] == 1).all() and m["throughput_req_s_ci_lo"].isna().all()
    t = pd.read_csv(out / "traces_smoke.csv")
    assert set(zip(t.part, t.system)) == {(part, system) for part in micro.TRACE_PARTS for system in ("vllm", "jenga")}
    # The decimated trace is the record's own trace.csv (no more than TRACE_POINTS rows per cell).
    row = s[(s.part == "frag_trace") & (s.system == "jenga")].iloc[0]
    from harness.run import cell_dir

    full = pd.read_csv(cell_dir(compose_cell(row["overrides"].split())) / "trace.csv")
    mine = t[(t.part == "frag_trace") & (t.system == "jenga")]
    step = max(1, len(full) // micro.TRACE_POINTS)
    assert mine["waste_fraction"].tolist() == full["waste_fraction"].iloc[::step].tolist()
    assert (out / "micro_smoke.png").stat().st_size > 0 and (out / "micro_smoke.pdf").stat().st_size > 0


def test_poisson_arrivals_seeded():
    ov = ["model=llama3_2_11b_vision", "dataset=mmmu_pro", "dataset.num_requests=400", "engine.request_rate=2.0"]
    a = [r.arrival_time for r in build_workload(compose_cell(ov + ["seed=0"]))]
    b = [r.arrival_time for r in build_workload(compose_cell(ov + ["seed=0"]))]
    c = [r.arrival_time for r in build_workload(compose_cell(ov + ["seed=1"]))]
    assert a == b and a != c
    gaps = np.diff(a)
    assert a[0] == 0.0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 0.5) < 0.075          # mean gap 1/rate
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.15  # exponential: coefficient of variation 1
    inf = build_workload(compose_cell(ov[:-1] + ["seed=0"]))
    assert all(r.arrival_time == 0.0 for r in inf)


def test_sim_engine_waits_for_arrivals():
    class FixedCost:
        def step_time(self, batch):
            return 0.01

    mm = jenga.make_manager("jenga", [FullAttentionSpec("full", 1, 64)], 1 << 22)
    reqs = [Request(f"r{i}", 10.0 * i, np.arange(32, dtype=np.int32), 3) for i in range(3)]
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=2048, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=False)
    sched, trace, _ = simulate(mm, FixedCost(), cfg, reqs)
    for s in sched.seqs:
        assert s.first_token_time == pytest.approx(s.req.arrival_time + 0.01)
        assert s.finish_time == pytest.approx(s.req.arrival_time + 0.03)
    assert len(trace) == 9


def test_seed_means_t_interval_and_failed_seeds():
    """micro.means: one row per part/system/x, Student-t 95 % CI over the ok seeds, failed seeds
    counted (not averaged in)."""
    v = [1.0, 2.0, 3.0, 5.0, 5.0]
    df = pd.DataFrame({"part": "latency", "system": ["a", "a", "a", "b", "b"], "x": 1.0, "seed": [0, 1, 2, 0, 1],
                       "status": ["ok", "ok", "ok", "ok", "failed"], "error": ["", "", "", "", "boom"],
                       **{m: v for m in micro.METRICS}})
    agg = micro.means(df).set_index("system")
    half = 4.302652729911275 / np.sqrt(3)   # t(0.975, 2) x sem([1, 2, 3])
    assert agg.loc["a", "throughput_req_s"] == 2.0 and agg.loc["a", "seeds"] == 3
    assert agg.loc["a", "num_steps_ci_lo"] == pytest.approx(2 - half)
    assert agg.loc["a", "num_steps_ci_hi"] == pytest.approx(2 + half)
    assert agg.loc["b", "seeds"] == 1 and agg.loc["b", "failed"] == 1 and agg.loc["b", "error"] == "boom"
    assert np.isnan(agg.loc["b", "throughput_req_s_ci_lo"])                 # the failed seed is left out
