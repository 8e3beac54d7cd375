"""sglang#34441 as a what-if study: the unified arena strands a 21.2 MB gap below one 53.6 MB Mamba
slot while full KV is evictable; the fix (sglang#36713) and the other rules admit every arrival."""

from __future__ import annotations

import csv

from harness.study.whatif.run import main


def test_study_end_to_end(tmp_path):
    assert main(["experiments/whatif/sglang_34441.yaml", "--out", str(tmp_path)]) == 0
    out = tmp_path / "sglang_34441"
    assert (out / "sglang_34441.png").is_file() and (out / "sglang_34441.pdf").is_file()
    rows = {r["variant"]: r for r in csv.DictReader((out / "summary.csv").open())}
    bug = rows["SGLang unified (before #36713)"]
    assert (bug["admitted"], bug["first_failure"], float(bug["gap_mb"])) == ("4", "5", 21.2)
    assert float(bug["gap_mb"]) < float(bug["mamba_slot_mb"]) == 53.6 and float(bug["cached_mb"]) > 53.6
    fix = rows["fix: SGLang unified + #36713 (evict full for Mamba)"]
    assert fix["admitted"] == "5" and int(fix["evict_full_for_mamba"]) > 0
    # negative controls: separate pools and vLLM's one pool never strand this trace
    assert rows["SGLang static pools (default ratio 0.9)"]["admitted"] == "5"
    assert rows["vLLM 0.32 hybrid manager"]["admitted"] == "5"
    assert "LCM" in rows["Jenga (LCM pages)"]["refused"]
    text = (out / "REPORT.md").read_text()
    assert "21.2" in text and "53.6" in text and "sglang#36713" in text
