"""scripts/fidelity_table.py: FIDELITY.md's per-bar table and headline from a summary (exact values)."""

import importlib.util
from pathlib import Path

import pandas as pd

_spec = importlib.util.spec_from_file_location(
    "fidelity_table", Path(__file__).resolve().parents[1] / "scripts" / "fidelity_table.py")
ft = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ft)


def _summary(jenga_speedup: float) -> pd.DataFrame:
    rows = []
    for model, paper in (("a", 2.0), ("b", 1.0), ("c", 1.5)):
        for system, sp, psp in (("vllm", 1.0, 1.0), ("jenga", jenga_speedup if model == "a" else paper, paper)):
            rows.append({"model": model, "system": system, "baseline": "vllm", "status": "ok", "speedup": sp,
                             "paper_speedup": psp, "ours_over_paper_req_s": 1.25})
    return pd.DataFrame(rows)


def test_table_and_headline_exact():
    now, before = _summary(2.1), _summary(1.0)
    out = ft.table(now, before)
    line = next(x for x in out.splitlines() if x.startswith("| a |"))
    # 2.1 vs the paper's 2.0: ratio 1.05, within ±10 %; the earlier revision's 1.00 beside it.
    assert line == "| a | vllm | 2.10 | 1.00 | 2.00 | 1.05 | yes | 1.25, 1.25 | ok |"
    head = ft.headline(now)
    assert "3 of 3 bars within ±10 %" in head and "Spearman 1.00" in head
    # negative control: a bar 30 % off is counted as a miss
    assert "2 of 3 bars within ±10 %" in ft.headline(_summary(1.4))
