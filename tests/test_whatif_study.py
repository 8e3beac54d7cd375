"""harness.study.whatif: the what-if studies' driver (bad input before any work; one study end to end)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from harness.study.whatif.run import main


def test_bad_study_files_are_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nkind: not_a_study\n")
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "not_a_study" in err and err.count("\n") == 1
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert main([]) == 2


@pytest.mark.slow
def test_hf_mem_70_end_to_end(tmp_path):
    assert main(["experiments/whatif/hf_mem_70.yaml", "--out", str(tmp_path)]) == 0
    out = tmp_path / "hf_mem_70"
    assert (out / "hf_mem_70.png").is_file() and (out / "hf_mem_70.pdf").is_file()
    rows = list(csv.DictReader((out / "summary.csv").open()))
    last = rows[-1]
    # the report's ~49 %: a full-length estimate charges 24 layers, the model needs 12 + 12 x 128 tokens
    assert float(last["full_length_error_vs_needed"]) == pytest.approx(0.5, abs=0.001)
    assert "hf-mem#70" in (out / "REPORT.md").read_text()


@pytest.mark.slow
def test_the_one_study_entry_point_runs_a_whatif_study(tmp_path):
    """`python -m harness.study experiments/whatif/<name>.yaml`: the what-if kinds are in the one
    registry of kinds and dispatch to their own runner; a figure kind (the control) does not."""
    from harness.study import cli
    from harness.study.kinds import KINDS

    assert KINDS["hf_mem_70"].runner == "whatif" and KINDS["figure"].runner == "cells"
    assert cli.main(["experiments/whatif/hf_mem_70.yaml", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "hf_mem_70" / "summary.csv").is_file()
    assert cli.main(["experiments/whatif/hf_mem_70.yaml", "--dry-run"]) == 2


@pytest.mark.parametrize("flag", [["--jobs", "0"], ["--jobs", "x"], ["--jobs=-2"], ["--jobs"]])
def test_bad_jobs_is_one_error_line(flag, tmp_path, capsys):
    """Checked before any study runs: one line naming the flag."""
    assert main(["experiments/whatif/hf_mem_70.yaml", "--out", str(tmp_path), *flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --jobs") and err.count("\n") == 1
    assert not (tmp_path / "hf_mem_70").exists()


def test_summary_rows_do_not_depend_on_jobs(tmp_path):
    """The summary's model x workload cells in two processes give the rows one process gives, in
    the same order (a small grid: two models, one workload, three rules, one refused at start-up)."""
    import yaml

    study = yaml.safe_load(Path("experiments/whatif/summary.yaml").read_text())
    study.update(models=[{"model": "gemma3_4b"}, {"model": "nemotron_nano_9b_v2"}], num_requests=6,
                 workloads=[study["workloads"][0]], rules=["vllm_hma", "vllm_hma_off", "jenga"])
    from harness.study.whatif import summary

    one = summary.run(study, tmp_path / "one", jobs=1)
    two = summary.run(study, tmp_path / "two", jobs=2)
    assert one == two
    assert [(r["model"], r["rule"]) for r in one] == [(m, r) for m in ("gemma3_4b", "nemotron_nano_9b_v2")
                                                      for r in study["rules"]]
    assert any("error" in r for r in one) and any("throughput_req_s" in r for r in one)
