"""vllm#42317 as a what-if study: align mode gives 0 % prefix hits at concurrency 1 and some at
higher concurrency (the token budget cuts chunks, clipped to block boundaries inside the shared
prefix); the fixes hit at concurrency 1."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from harness.backends.sim import align_split
from harness.study.whatif.common import args, simulate
from harness.study.whatif.run import main
from harness.study.whatif.vllm_45238 import requests

REPORTED = {"mamba_junction": False, "prefix_cache_retention_interval": None}


def _hits(concurrency: int, options=REPORTED, **engine) -> list[int]:
    a, prof = args("qwen3_5_35b_a3b", max_model_len=32768, max_num_seqs=concurrency, **engine)
    _, hits = simulate("vllm_hma", a, prof, requests(4000, 2000, 12, 8), options)
    return sorted(hits.values())


def test_align_mode_misses_at_concurrency_one_and_hits_by_accident_above(monkeypatch):
    assert _hits(1) == [0] * 12                         # the report: 0 % at --max-concurrency 1
    two = _hits(2)
    assert max(two) == 2112 and two.count(0) <= 2       # a budget-cut chunk clipped to 2 x 1,056 tokens
    # negative control: without vLLM's block-aligned split the cut lands mid-block and writes no state
    monkeypatch.setattr(align_split, "chunk_hook", lambda mm, token_budget: None)
    assert _hits(2) == [0] * 12


def test_fixes_hit_at_concurrency_one():
    assert max(_hits(1, max_num_batched_tokens=2048)) == 3168            # every chunk ends on a block
    assert max(_hits(1, options={"mamba_cache_mode": "all", "prefix_cache_retention_interval": None})) > 3168
    assert max(_hits(1, options={})) == 3168                            # vLLM 0.32: the junction


def test_study_end_to_end(tmp_path):
    study = yaml.safe_load(Path("experiments/whatif/vllm_42317.yaml").read_text())
    study.update(num_requests=8, concurrency=[1, 2], variants=study["variants"][:2])
    study["repeat"]["prompt_tokens"] = 9000
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main([str(path), "--out", str(tmp_path)]) == 0
    out = tmp_path / "vllm_42317"
    assert (out / "vllm_42317.png").is_file() and (out / "vllm_42317.pdf").is_file()
    rows = list(csv.DictReader((out / "summary.csv").open()))
    first = {int(r["concurrency"]): float(r["prefix_hit_rate"]) for r in rows
             if r["variant"] == study["variants"][0]["label"] and r["trace"] == "shared_prefix"}
    assert first[1] == 0 and first[2] > 0
    repeat = [r for r in rows if r["trace"] == "repeat_9000"]
    assert {int(r["max_hit_tokens"]) for r in repeat} == {8 * 1056}     # the last block boundary before the final token
    assert "SIMULATED" in (out / "REPORT.md").read_text()
