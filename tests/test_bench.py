"""bench/vllm_blockpool.py: our half runs anywhere; without vLLM the comparison says it skipped."""

from __future__ import annotations

import importlib.util

import pytest

from bench import vllm_blockpool as b


def test_our_half_runs_the_stream():
    assert b.pool_ours(6, 4) > 0
    assert b.manager_ours(6, 4) > 0


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM installed: the bench runs")
def test_skips_cleanly_without_vllm(capsys):
    assert b.main(["--steps", "2", "--batch", "2", "--repeat", "1"]) == 0
    assert "skipped: vLLM is not installed" in capsys.readouterr().out


def test_steps_table_flags_a_plugin_that_needs_more_steps():
    """bench/vllm_steps.py's verdict column: yes when the plugin drains in <= the hybrid manager's
    steps, **no** otherwise (negative control), '-' when an engine refused the budget."""
    from bench import vllm_steps as s

    def row(ours, theirs):
        m = {"preemptions": 0, "prefix_hit_tokens": 0, "throughput_req_s": 1.0}
        return {"cell": "c", "variant": "default", "frac": 0.5, "kv_bytes": 10**9,
                "jenga": {**m, "num_steps": ours}, "vllm_current": {**m, "num_steps": theirs}}
    assert s.markdown_row(row(10, 10)).endswith("| yes |")
    assert s.markdown_row(row(11, 10)).endswith("| **no** |")
    refused = row(10, 10)
    refused["jenga"] = {"error": "jenga_vllm: one request of max_model_len=4096 tokens needs more"}
    assert s.markdown_row(refused).endswith("| - |") and "refused: jenga_vllm" in s.markdown_row(refused)


def test_sim_bench_line_keeps_its_format_and_host_reference_runs():
    """bench/sim.py: the issue's one-line format (parsed by whoever compares runs) and a positive
    host reference."""
    from bench import sim

    recs = [{"status": "ok", "simulated_s": 30.0, "num_steps": 100, "wall_s": 0.5, "model": "m1", "system": "a"},
            {"status": "ok", "simulated_s": 10.0, "num_steps": 100, "wall_s": 1.0, "model": "m2", "system": "b"}]
    assert sim.summary_line("fig14", "h100", 3, 2.0, 2, recs) == \
        "sim: fig14 H100 3 seeds 2.0 s on 2 cores, 20 simulated s per wall s, slowest cell 100 steps/s (m2/b)"
    assert 0 < sim.host_reference_s(repeat=1) < 60


def test_summary_comparison_ignores_provenance_and_timing_only(tmp_path, capsys):
    """bench/compare_runs.py on two summaries: rows that differ in when, where and how fast they
    were made (and where their records went: out_dir=) are the same; a metric that moved is a
    difference, named (negative control)."""
    from bench import compare_runs as c

    head = "model,system,seed,throughput_req_s,git_rev,dirty,time,wall_s,overrides\n"
    old = tmp_path / "old.csv"
    old.write_text(head + "m,jenga,0,1.25,abc,False,2026-12-02T04:30:43+00:00,0.51,model=m seed=0 \n")
    same = tmp_path / "same.csv"
    same.write_text(head + "m,jenga,0,1.25,def,True,2026-12-03T12:00:41+00:00,0.72,model=m seed=0 out_dir=/tmp/x\n")
    moved = tmp_path / "moved.csv"
    moved.write_text(head + "m,jenga,0,1.26,abc,False,2026-12-02T04:30:43+00:00,0.51,model=m seed=0 \n")
    assert c.main(str(old), str(same)) == 0
    assert "identical" in capsys.readouterr().out
    assert c.main(str(old), str(moved)) == 1
    assert "columns that differ: ['throughput_req_s']" in capsys.readouterr().out


def test_records_comparison_ignores_where_they_went(tmp_path, capsys):
    """bench/compare_runs.py on two record folders: the same cell recorded under another folder
    (its out_dir= override and trace_file path), at another time, is the same; a trace whose bytes
    moved, or a metric, is a difference (negative controls)."""
    import json

    from bench import compare_runs as c

    def write(root, metric=1.25, trace="step,t\n0,0.1\n", stamp="a"):
        d = root / "sim" / "m" / f"seed0-{stamp}"
        d.mkdir(parents=True)
        (d / "trace.csv").write_text(trace)
        (d / "record.json").write_text(json.dumps({
            "backend": "sim", "gpu": "h100", "model": "m", "dataset": "d", "system": "jenga", "seed": 0,
            "overrides": ["model=m", f"out_dir={root}"], "throughput_req_s": metric,
            "trace_file": str(d / "trace.csv"), "wall_s": 0.5, "provenance": {"time": stamp}}))
        return root

    old = write(tmp_path / "old")
    assert c.main(str(old), str(write(tmp_path / "same", stamp="b"))) == 0
    assert "0 differ" in capsys.readouterr().out
    assert c.main(str(old), str(write(tmp_path / "trace", trace="step,t\n0,0.2\n"))) == 1
    assert "differs (trace)" in capsys.readouterr().out
    assert c.main(str(old), str(write(tmp_path / "metric", metric=1.26))) == 1
    assert "differs (record)" in capsys.readouterr().out
