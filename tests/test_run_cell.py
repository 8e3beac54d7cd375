"""harness.run: one cell → one record; idempotence, force, failure records. Uses a fake memory
manager and workload so it tests the runner, not the allocator."""

from __future__ import annotations

import json

import pytest
from sim_fakes import FakePagedManager, make_requests

import harness.workloads
import jenga
from harness import run
from harness.config import compose_cell


@pytest.fixture
def fakes(monkeypatch):
    calls = {"n": 0}

    def build(cfg):
        calls["n"] += 1
        return make_requests([(64, 4)] * 6, seed=int(cfg.seed))

    monkeypatch.setattr(harness.workloads, "build_workload", build, raising=False)
    monkeypatch.setattr(jenga, "make_manager", lambda system, specs, cap, **kw: FakePagedManager(specs, cap, **kw),
                        raising=False)
    return calls


def _cfg(tmp_path, *extra):
    return compose_cell(["model=llama3_1_8b", "dataset=mmlu_pro", "gpu=h100", "system=vllm", "backend=sim",
                         "mode=smoke", f"out_dir={tmp_path}", *extra])


def test_run_writes_record_and_trace_and_is_idempotent(tmp_path, fakes):
    rec = run.run_cell(_cfg(tmp_path))
    assert rec["status"] == "ok" and rec["simulated"] is True and rec["num_requests"] == 6
    d = run.cell_dir(_cfg(tmp_path))
    assert (d / "record.json").exists() and (d / "trace.csv").exists()
    assert d.parts[-6:-1] == ("sim", "h100", "llama3_1_8b", "mmlu_pro", "vllm")
    assert d.name.startswith("seed0-")
    mtime = (d / "record.json").stat().st_mtime_ns
    again = run.run_cell(_cfg(tmp_path))
    assert again["reused"] is True and again["throughput_req_s"] == rec["throughput_req_s"]
    assert (d / "record.json").stat().st_mtime_ns == mtime and fakes["n"] == 1
    forced = run.run_cell(_cfg(tmp_path, "force=true"))
    assert "reused" not in forced and fakes["n"] == 2
    assert forced["throughput_req_s"] == rec["throughput_req_s"]       # deterministic
    other_seed = run.cell_dir(_cfg(tmp_path, "seed=1"))
    assert other_seed != d


def test_failure_record_never_overwrites_a_finished_one(tmp_path, fakes, monkeypatch):
    ok = run.run_cell(_cfg(tmp_path))
    d = run.cell_dir(_cfg(tmp_path))

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    import harness.backends.sim.engine as eng
    monkeypatch.setattr(eng, "run_cell", boom)
    fail = run.run_cell(_cfg(tmp_path, "force=true"))
    assert fail["status"] == "failed" and "simulated crash" in fail["error"]
    assert json.loads((d / "record.json").read_text())["throughput_req_s"] == ok["throughput_req_s"]
    assert json.loads((d / "failure.json").read_text())["status"] == "failed"


def test_bad_override_gives_failure_row_and_cli_exit_code(tmp_path, fakes, capsys):
    rec = run.run_overrides(["model=no_such_model", f"out_dir={tmp_path}"])
    assert rec["status"] == "failed" and "no_such_model" in rec["error"]
    assert run.main(["model=no_such_model", f"out_dir={tmp_path}"]) == 1
    assert run.main(["model=llama3_1_8b", "mode=smoke", "system=jenga", f"out_dir={tmp_path}"]) == 0
    assert "(simulated)" in capsys.readouterr().out


def test_speculative_tokens_on_a_plain_sim_cell_is_refused(tmp_path):
    """A plain sim cell must not silently ignore speculative decoding."""
    from harness.run import run_overrides

    rec = run_overrides(["model=llama3_1_8b", "dataset=synthetic", "mode=smoke", f"out_dir={tmp_path}",
                         "engine.num_speculative_tokens=3"])
    assert rec["status"] == "failed"
    assert "engine.draft_model" in rec["error"]
