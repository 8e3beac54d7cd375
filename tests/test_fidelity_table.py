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


def test_ladder_and_would_take_exact(tmp_path):
    import json
    now = _summary(2.1)
    out = ft.ladder([("before", _summary(1.0)), ("after", now)])
    assert "| a | 2.00 | 1.00 | 2.10 |" in out
    assert out.splitlines()[-1].startswith("| within ±10 %, Spearman | | 2/3")
    # Bar "a" at 1.2 vs the paper's 1.5: Jenga 10 s in 50 steps, vLLM 12 s in 100 steps. Adding Δ per
    # step to both: (12 + 100 Δ) / (10 + 50 Δ) = 1.35 (the band's near edge) -> Δ = 1.5 / 32.5 s.
    s = pd.DataFrame([{"model": "a", "system": "jenga", "baseline": "vllm", "status": "ok", "speedup": 1.2,
                       "paper_speedup": 1.5, "paper_throughput": 3.0, "ours_over_paper_req_s": 1.0}])
    for system, t, n in (("jenga", 10.0, 50), ("vllm", 12.0, 100)):
        d = tmp_path / "a" / "ds" / system / "seed0-x"
        d.mkdir(parents=True)
        (d / "record.json").write_text(json.dumps({"model": "a", "system": system, "status": "ok",
                                                   "makespan_s": t, "num_steps": n, "num_requests": 20}))
    line = next(x for x in ft.would_take(s, tmp_path).splitlines() if x.startswith("| a |"))
    assert f"| {1.5 / 32.5 * 1e3:.1f} ms |" in line
    # Limit as Δ -> ∞: 1.2 x (100 / 12) / (50 / 10) = 2.0. The paper's baseline: 3.0 / 1.5 = 2 req/s
    # -> 20 requests in 10 s; ours take 12 s in 100 steps: Δ = -20 ms.
    assert "| 2.00 | -20.0 ms |" in line
