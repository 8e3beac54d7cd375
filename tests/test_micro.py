"""The micro-experiment study: grid expansion, study-file errors, and Poisson arrivals honoured by
the workload builder and the sim engine (the latency-vs-rate part relies on both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jenga
from harness.backends.sim.engine import simulate
from harness.backends.sim.scheduler import SchedulerConfig
from harness.studies import common, micro
from harness.workloads import build_workload
from harness.workloads.request import Request
from jenga.spec import FullAttentionSpec

ROOT = Path(__file__).resolve().parents[1]


def test_cells_expand_each_part():
    study = common.load_study(ROOT / "experiments" / "micro.yaml", ("parts",))
    full = micro.cells(study, smoke=False)
    parts = {p for p, *_ in full}
    assert parts == set(micro.PARTS)
    lat_seeds = study["parts"]["latency"].get("seeds", study.get("seeds", [0]))
    lat = [(s, x, ov) for p, s, x, seed, ov in full if p == "latency"]
    assert len(lat) == 2 * len(lat_seeds) * len(study["parts"]["latency"]["rates"])
    assert all(f"engine.request_rate={x}" in ov for _, x, ov in lat)
    pc = [(x, ov) for p, s, x, seed, ov in full if p == "prefix_cache" and s == "jenga" and seed == 0]
    assert [x for x, _ in pc] == [float(n) for n in study["parts"]["prefix_cache"]["articles"]]
    assert all(f"dataset.articles_per_group={int(x)}" in ov for x, ov in pc)
    smoke = micro.cells(study, smoke=True)
    assert sum(1 for p, s, x, seed, _ in smoke if p == "latency" and s == "vllm" and seed == 0) == 2
    study["seeds"], study["seeds_from_cli"] = [3, 4], True      # seeds=3,4 on the command line
    assert {seed for *_, seed, _ in micro.cells(study, smoke=True)} == {3, 4}


def test_study_file_missing_key(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\n")
    with pytest.raises(ValueError, match="missing key 'parts'"):
        common.load_study(p, ("parts",))


def test_poisson_arrivals_seeded():
    ov = ["model=llama3_2_11b_vision", "dataset=mmmu_pro", "dataset.num_requests=400", "engine.request_rate=2.0"]
    a = [r.arrival_time for r in build_workload(common.compose(ov + ["seed=0"]))]
    b = [r.arrival_time for r in build_workload(common.compose(ov + ["seed=0"]))]
    c = [r.arrival_time for r in build_workload(common.compose(ov + ["seed=1"]))]
    assert a == b and a != c
    gaps = np.diff(a)
    assert a[0] == 0.0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 0.5) < 0.075          # mean gap 1/rate
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.15  # exponential: coefficient of variation 1
    inf = build_workload(common.compose(ov[:-1] + ["seed=0"]))
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


def test_aggregate_mean_and_t_interval():
    df = pd.DataFrame({"system": ["a", "a", "a", "b", "b"], "v": [1.0, 2.0, 3.0, 5.0, 5.0],
                       "status": ["ok", "ok", "ok", "ok", "failed"]})
    agg = common.aggregate(df, ["system"], ["v"]).set_index("system")
    half = 4.302652729911275 / np.sqrt(3)   # t(0.975, 2) x sem([1, 2, 3])
    assert agg.loc["a", "v"] == 2.0 and agg.loc["a", "seeds"] == 3
    assert agg.loc["a", "v_ci_lo"] == pytest.approx(2 - half) and agg.loc["a", "v_ci_hi"] == pytest.approx(2 + half)
    assert agg.loc["b", "seeds"] == 1 and np.isnan(agg.loc["b", "v_ci_lo"])  # failed seed left out
