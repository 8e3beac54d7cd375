"""The figure kind end to end (smoke mode, in-process, fake allocator and workload): plan
expansion, failing cells do not stop the sweep, reuse, summary.csv, the means and the figure."""

from __future__ import annotations

import pandas as pd
import pytest
from sim_fakes import FakePagedManager, make_requests

import harness.workloads
import jenga
from harness.study import cli, plan
from harness.study.kinds import figure
from harness.study.plan import Plan

EXP = """
name: fig14
gpu: h100
systems: [vllm, jenga]
seeds: [0]
cells:
  - {model: llama3_2_11b_vision, dataset: mmmu_pro, engine.max_num_seqs: 52, engine.enforce_eager: true}
  - {model: llama3_1_8b, dataset: mmlu_pro, systems: [static_partition, jenga], baseline: static_partition}
  - {model: gemma3_12b, dataset: arxiv_qa, gpus: [h100], per_gpu: {h100: {engine.engine_version: v1}}}
  - {model: ministral_8b, dataset: arxiv_qa, gpus: [l4]}
"""


@pytest.fixture
def fakes(monkeypatch):
    def build(cfg):
        return make_requests([(48, 3)] * 5, seed=int(cfg.seed))

    def make(system, specs, cap, **kw):
        if system == "jenga" and any(s.kind == "sliding" for s in specs):
            raise RuntimeError("deliberate failure for one cell")
        kw.pop("request_aware", None)
        return FakePagedManager(specs, cap, **kw)

    monkeypatch.setattr(harness.workloads, "build_workload", build, raising=False)
    monkeypatch.setattr(jenga, "make_manager", make, raising=False)


def test_plan_expansion(tmp_path):
    f = tmp_path / "fig14.yaml"
    f.write_text(EXP)
    p = plan.plan(f, ["mode=smoke"])
    assert len(p.runs) == 6 and p.skipped == ["ministral_8b (not run on h100)"]
    assert p.baselines["llama3_1_8b"] == "static_partition"
    gemma = next(r for r in p.runs if r.model == "gemma3_12b").overrides
    assert "engine.engine_version=v1" in gemma and "mode=smoke" in gemma and gemma[0] == "gpu=h100"
    assert "engine.enforce_eager=true" in p.runs[0].overrides
    l4 = plan.plan(f, ["gpu=l4"])
    assert [r.model for r in l4.runs][-1] == "ministral_8b" and l4.runs[0].overrides[0] == "gpu=l4"


def test_per_system_overrides_only_that_system(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(EXP.replace("baseline: static_partition}",
                             "baseline: static_partition, per_system: {jenga: {engine.enable_prefix_caching: true}}}"))
    runs = [r for r in plan.plan(f, []).runs if r.model == "llama3_1_8b"]
    on = {r.system: "engine.enable_prefix_caching=true" in r.overrides for r in runs}
    assert on == {"static_partition": False, "jenga": True}
    f.write_text(EXP.replace("baseline: static_partition}", "baseline: static_partition, per_system: {vllm: {seed: 1}}}"))
    with pytest.raises(plan.StudyFileError, match="per_system names systems the cell does not run: \\['vllm'\\]"):
        plan.plan(f, [])


@pytest.mark.slow
def test_smoke_end_to_end(tmp_path, fakes, capsys):
    f = tmp_path / "fig14.yaml"
    f.write_text(EXP)
    out = tmp_path / "res"
    args = [str(f), "mode=smoke", f"out_dir={tmp_path / 'runs'}", "--jobs", "1", "--out", str(out), "--no-progress"]
    rc = cli.main(args)
    assert rc == 0                                   # one cell failed, the sweep went on

    text = capsys.readouterr().out
    assert "geometric mean" in text and "arithmetic mean" in text
    # Smoke cells are tiny: no comparison with the paper is printed (issue 12).
    assert "Paper's" not in text and "within ±10%" not in text and "not comparable" in text
    assert "paper_speedup" not in text                # nor the paper's column in the table
    assert "WARNING: 1 cell(s) failed" in text
    s = pd.read_csv(out / "summary_smoke.csv")
    assert {"model", "gpu", "tp", "system", "backend", "throughput_req_s", "speedup", "speedup_ci_lo",
            "speedup_ci_hi", "waste_fraction", "prefix_hit_rate", "num_requests", "git_rev",
            "mean_decode_batch", "paper_speedup"} <= set(s.columns)
    assert "hit_rate" not in s.columns
    assert (s[s.system == s.baseline].speedup == 1.0).all()
    assert s[(s.model == "gemma3_12b") & (s.system == "jenga")].status.iloc[0] == "failed"
    assert (out / "fig14_smoke.png").stat().st_size > 10_000 and (out / "fig14_smoke.pdf").exists()
    cli.main(args)
    assert "0 run, 5 reused" in capsys.readouterr().out


@pytest.mark.slow
def test_real_fig13_smoke_end_to_end(tmp_path, capsys):
    """The shipped experiment file in smoke mode with the real allocator, models and workloads."""
    out = tmp_path / "fig13"
    rc = cli.main(["experiments/fig13.yaml", "mode=smoke", "seeds=0", f"out_dir={tmp_path / 'runs'}", "--jobs", "1",
                          "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    s = pd.read_csv(out / "summary_smoke.csv")
    assert set(s.system) <= {"vllm", "jenga", "static_partition"} and len(s) == 14
    ok = s[s.status == "ok"]
    assert len(ok) >= 12, text
    assert (ok[ok.system == "vllm"].speedup == 1.0).all()
    assert "geometric mean" in text and (out / "fig13_smoke.png").exists()
    assert rc == 0


@pytest.mark.parametrize("mode", ["smoke", "full"])
def test_smoke_table_prints_no_paper_columns(tmp_path, monkeypatch, capsys, mode):
    """Smoke says "no comparison printed or drawn": its table carries no paper_* column. The full
    run is the negative control (the same summary prints the paper's bar)."""
    summary = pd.DataFrame({"model": ["gemma2_27b"] * 2, "tp": [1, 1], "system": ["vllm", "jenga"],
                            "baseline": ["vllm"] * 2, "seeds": [1, 1], "failed": [0, 0],
                            "throughput_req_s": [1.0, 1.3], "speedup": [1.0, 1.3], "speedup_ci_lo": [1.0, 1.2],
                            "speedup_ci_hi": [1.0, 1.4], "paper_speedup": [1.0, 1.26], "paper_verified": ["yes"] * 2,
                            "status": ["ok"] * 2})
    drawn = {}
    monkeypatch.setattr(figure.analysis, "summarize", lambda records, figure, baselines: summary.copy())
    monkeypatch.setattr(figure.plots, "speedup_bars", lambda s, path, title, show_paper, notes: drawn.update(
        show_paper=show_paper))
    p = Plan("fig14", "figure", mode, "h100", "sim", [], {"gpu": "h100"})
    figure.report(p, [], tmp_path)
    text = capsys.readouterr().out
    table = text.split("\n\n")[0]
    assert table.splitlines()[0].split()[:3] == ["model", "tp", "system"]
    if mode == "smoke":
        assert "paper" not in table and "1.260" not in table and "Paper's" not in text
        assert drawn == {"show_paper": False}
    else:
        assert "paper_speedup" in table and "1.260" in table and "Paper's" in text
        assert drawn == {"show_paper": True}
