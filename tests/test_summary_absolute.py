"""The summary's absolute column: our req/s over the paper's (issue 9 §0)."""

from __future__ import annotations

import math

import pytest
from sim_fakes import fake_record

from harness import analysis

_rec = fake_record


def test_ours_over_paper_absolute_req_s():
    recs = [_rec("llama3_2_11b_vision", "vllm", 3.12), _rec("llama3_2_11b_vision", "jenga", 2.67),
            _rec("unpublished_model", "jenga", 1.0)]
    s = analysis.summarize(recs, "fig14")
    get = lambda m, sy: s[(s.model == m) & (s.system == sy)].iloc[0]
    # The paper's mllama bars: vLLM 1.56, Jenga 2.67 req/s (results/paper/fig14_sosp.csv).
    assert get("llama3_2_11b_vision", "vllm").ours_over_paper_req_s == pytest.approx(2.0)
    assert get("llama3_2_11b_vision", "jenga").ours_over_paper_req_s == pytest.approx(1.0)
    assert math.isnan(get("unpublished_model", "jenga").ours_over_paper_req_s)
