"""Records: latency/throughput summaries (exact), paths, atomic writes, provenance."""

from __future__ import annotations

import json

import pytest

from harness.records import (
    RunResult,
    load_records,
    make_record,
    record_dir,
    records_table,
    summarize_requests,
    write_record,
    write_trace,
)


def test_summarize_requests_exact():
    m = summarize_requests(arrival=[0.0, 0.0, 1.0], first_token=[1.0, 2.0, 3.0], finish=[5.0, 6.0, None],
                           prompt_lens=[10, 20, 30], output_lens=[5, 3, 4])
    assert m["num_requests"] == 2
    assert m["makespan_s"] == 6.0
    assert m["throughput_req_s"] == pytest.approx(2 / 6)
    assert m["output_tok_s"] == pytest.approx(8 / 6)
    assert m["total_tok_s"] == pytest.approx(38 / 6)
    assert m["ttft_mean"] == pytest.approx(1.5)
    assert m["tpot_mean"] == pytest.approx(((5 - 1) / 4 + (6 - 2) / 2) / 2)
    assert m["e2e_mean"] == pytest.approx(5.5)


def test_record_dir_layout_and_hash():
    cell = {"model": "m", "dataset": "d", "gpu": "h100", "system": "jenga", "backend": "sim", "seed": 3}
    assert str(record_dir("out", cell)) == "out/sim/h100/m/d/jenga/seed3"
    a = record_dir("out", cell, ["x=1", "y=2"])
    assert a == record_dir("out", cell, ["y=2", "x=1"])
    assert a != record_dir("out", cell, ["x=2"])
    assert a.name.startswith("seed3-")


def test_make_write_load_record(tmp_path):
    cell = {"model": "m", "dataset": "d", "gpu": "h100", "system": "jenga", "backend": "sim", "seed": 0}
    res = RunResult({"throughput_req_s": 1.5, "waste_breakdown": {"unneeded": 0.1, "fragmentation": 0.0}},
                    [{"step": 1, "time_s": 0.0}], {"simulated": True, "allocator": "Fake"})
    rec = make_record(cell, ["a=1"], res, {"model": {"name": "m"}}, 0.1)
    assert rec["status"] == "ok" and rec["simulated"] is True and rec["allocator"] == "Fake"
    prov = rec["provenance"]
    assert {"git_rev", "dirty", "versions", "host", "time", "config"} <= set(prov)
    assert prov["config"]["model"]["name"] == "m"
    path = tmp_path / "x" / "record.json"
    write_record(path, rec)
    write_trace(tmp_path / "x" / "trace.csv", res.trace)
    assert json.loads(path.read_text())["throughput_req_s"] == 1.5
    assert (tmp_path / "x" / "trace.csv").read_text().splitlines()[0] == "step,time_s"
    assert not list((tmp_path / "x").glob("*.tmp"))
    (recs,) = load_records(tmp_path)
    df = records_table([recs])
    assert df.loc[0, "waste_unneeded"] == 0.1
    fail = make_record(cell, [], None, {}, 0.0, error="ValueError: boom")
    assert fail["status"] == "failed" and fail["throughput_req_s"] is None and fail["simulated"] is True


def test_code_fingerprint_is_part_of_the_cell_key(monkeypatch):
    """A record made by other code must not be reused: the cell directory depends on the code."""
    from harness import records, run
    from harness.config import compose_cell

    cfg = compose_cell(["model=llama3_1_8b", "dataset=synthetic", "mode=smoke"])
    here = run.cell_dir(cfg)
    assert records.code_fingerprint() == records.code_fingerprint()  # stable within a process
    monkeypatch.setattr(records, "_code_fp", "other-code")
    monkeypatch.setattr(run, "code_fingerprint", records.code_fingerprint)
    assert run.cell_dir(cfg) != here


def test_dirty_flag_ignores_the_results_folder(monkeypatch):
    """Regenerating several studies in a row writes results/ between them; only a changed tracked
    file outside results/ marks a record dirty (a negative control: an entry outside results/ does)."""
    from harness import records

    def fake_git(*args):
        if args[:1] == ("status",):
            assert ":(exclude)results" in args, args
            return fake_git.status
        return "0" * 40

    monkeypatch.setattr(records, "_git", fake_git)
    monkeypatch.setattr(records, "_CODE_STATE", {})      # read once per process: read afresh here
    fake_git.status = ""
    assert records.provenance()["dirty"] is False
    records._CODE_STATE.clear()
    fake_git.status = " M jenga/spec.py"
    assert records.provenance()["dirty"] is True
