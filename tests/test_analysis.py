"""Speedups, means, CIs and the paper comparison."""

from __future__ import annotations

import math

import pytest
from sim_fakes import fake_record

from harness import analysis


def test_means_exact():
    assert analysis.geo_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert analysis.arith_mean([1.0, 4.0]) == pytest.approx(2.5)
    assert math.isnan(analysis.geo_mean([]))
    m, lo, hi = analysis.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and lo < 2.0 < hi
    assert hi - m == pytest.approx(4.302652729911275 * (1 / math.sqrt(3)))   # t(0.975, 2) * sem
    g, glo, ghi = analysis.mean_ci([1.0, 4.0, 16.0], log=True)
    assert g == pytest.approx(4.0) and glo < 4.0 < ghi


def test_ci_and_rank_agreement_are_scipy_stats_bit_for_bit():
    """mean_ci and spearman do scipy.stats' arithmetic without importing it (~0.85 s of a report):
    the same floats as ``stats.t.interval(c, n - 1, loc=mean, scale=stats.sem(v))`` and
    ``stats.spearmanr(x, y).statistic``, ties and log scale included."""
    import numpy as np
    from scipy import stats as sps

    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(2, 10))
        v = rng.lognormal(0.0, 1.0, n) if trial % 2 else np.round(rng.random(n) * 3, 1) + 0.5
        conf = (0.95, 0.9, 0.99)[trial % 3]
        for log in (False, True):
            w = np.log(v) if log else v
            if float(w.std(ddof=1)) == 0.0:
                continue
            f = np.exp if log else float
            lo, hi = sps.t.interval(conf, n - 1, loc=float(w.mean()), scale=sps.sem(w))
            assert analysis.mean_ci(list(v), conf, log=log) == (float(f(w.mean())), float(f(lo)), float(f(hi)))
        x, y = np.round(rng.random(n + 2) * 4), rng.random(n + 2)
        if len(set(x)) > 1:
            assert analysis.spearman(x, y) == float(sps.spearmanr(x, y).statistic)


def test_paper_table_values():
    t = analysis.paper_table("fig14", "h100")
    row = t[(t.paper_model == "mllama") & (t.system == "jenga")].iloc[0]
    assert row.paper_speedup == pytest.approx(2.67 / 1.56)
    assert set(t.paper_verified) == {"yes"}
    l4 = analysis.paper_table("fig14", "l4")
    assert l4[(l4.paper_model == "mllama") & (l4.system == "jenga")].iloc[0].paper_speedup == \
        pytest.approx(0.69 / 0.32)
    # The paper's OOM bars carry no number (and so no speedup).
    oom = l4[(l4.paper_model == "Ministral") & (l4.system == "vllm")].iloc[0]
    assert math.isnan(oom.paper_throughput) and "OOM" in oom.paper_source
    t13 = analysis.paper_table("fig13", "h100")
    assert set(t13.paper_verified) == {"UNVERIFIED"}
    assert analysis.paper_model("llama3_2_11b_vision") == "mllama"
    assert analysis.paper_model("unknown_model") is None


_rec = fake_record


def test_summarize_speedups_baselines_and_paper():
    recs = [_rec("llama3_2_11b_vision", "vllm", 1.0), _rec("llama3_2_11b_vision", "jenga", 2.0),
            _rec("jamba_mini", "static_partition", 4.0), _rec("jamba_mini", "jenga", 5.5),
            {"model": "gemma3_12b", "system": "jenga", "status": "failed", "error": "boom", "gpu": "h100"}] + \
        [dict(_rec("ministral_8b", "vllm", 0.5, seed=k), num_ignored=2, num_requests=30) for k in range(3)]
    s = analysis.summarize(recs, "fig14", {"jamba_mini": "static_partition"})
    get = lambda m, sy: s[(s.model == m) & (s.system == sy)].iloc[0]
    assert get("llama3_2_11b_vision", "jenga").speedup == 2.0
    assert get("jamba_mini", "jenga").speedup == 1.375
    # Jamba's paper speedup is rebased on the paper's static-partition bar (which is its vLLM bar).
    assert get("jamba_mini", "jenga").paper_speedup == pytest.approx(10.38 / 7.47)
    assert get("gemma3_12b", "jenga").status == "failed"
    # An OOM (a request never fits the pool) is an outcome, one row for all its seeds.
    oom = s[s.model == "ministral_8b"]
    assert list(oom.status) == ["oom"] and "2 of 32" in oom.error.iloc[0] and oom.speedup.isna().all()
    m = analysis.means(s)
    assert m["ours_geo"] == pytest.approx(math.sqrt(2.0 * 1.375))
    assert m["n_paired"] == 2
    assert m["within_10pct"] == 1          # mllama 2.0 vs 1.71 is off; Jamba 1.375 vs 1.39 is within


# -- issue 12: one row per cell, paired speedup CIs, column names ---------------------------------------
def _seeded(model, system, tp, seed, status="ok"):
    r = {**_rec(model, system, tp, seed), "dataset": "arxiv_qa",
         "provenance": {"git_rev": "abc123", "code_fingerprint": "f00", "dirty": False,
                        "config": {"gpu": {"count": 2}, "dataset": {"num_requests": 32}}}}
    if status != "ok":
        r.update(status="failed", error="ValueError: no KV cache memory left", throughput_req_s=None)
    return r


def test_summary_one_row_per_cell_with_paired_speedup_ci():
    from scipy import stats as sps

    base, ours = [1.0, 2.0, 4.0], [1.5, 2.4, 4.4]
    recs = [_seeded("gemma2_27b", "vllm", b, s) for s, b in enumerate(base)]
    recs += [_seeded("gemma2_27b", "jenga", o, s) for s, o in enumerate(ours)]
    recs += [_seeded("character_70b_fp8", sy, None, s, "failed") for sy in ("vllm", "jenga") for s in range(3)]
    s = analysis.summarize(recs, "fig13")
    assert len(s) == 4                                   # failed seeds aggregated: one row per cell
    fail = s[s.model == "character_70b_fp8"]
    assert list(fail.failed) == [3, 3] and list(fail.seeds) == [0, 0] and set(fail.status) == {"failed"}
    assert fail.error.iloc[0].startswith("ValueError")
    j = s[(s.model == "gemma2_27b") & (s.system == "jenga")].iloc[0]
    ratios = [o / b for o, b in zip(ours, base)]
    lo, hi = sps.t.interval(0.95, 2, loc=sum(ratios) / 3, scale=sps.sem(ratios))
    assert j.speedup == pytest.approx(sum(ratios) / 3)   # mean of per-seed ratios, not ratio of means
    assert (j.speedup_ci_lo, j.speedup_ci_hi) == (pytest.approx(lo), pytest.approx(hi))
    assert j.throughput_req_s_ci_lo < j.throughput_req_s < j.throughput_req_s_ci_hi
    # Columns say what they are.
    assert {"tp", "num_requests", "git_rev", "prefix_hit_rate"} <= set(s.columns) and "hit_rate" not in s.columns
    assert j.tp == 2 and j.num_requests == 32 and j.git_rev == "abc123"
    # paper_speedup on a baseline row: 1.0 wherever the paper has the model (fig13 publishes only
    # Jenga/vLLM ratios), never NaN on one figure and 1.0 on the other.
    v = s[(s.model == "gemma2_27b") & (s.system == "vllm")].iloc[0]
    assert v.paper_speedup == 1.0 and j.paper_speedup == pytest.approx(1.26)


def test_summary_survives_records_without_cell_keys():
    """A failure row with no model (a crash before the cell was known) must not crash analysis."""
    s = analysis.summarize([{"status": "failed", "error": "boom"}, _seeded("gemma2_27b", "vllm", 1.0, 0)], "fig13")
    assert len(s) == 2 and set(s.status) == {"failed", "ok"}
