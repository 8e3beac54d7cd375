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
