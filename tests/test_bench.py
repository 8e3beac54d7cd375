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
