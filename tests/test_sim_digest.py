"""Digests of whole simulated cells: a speed-up of the allocator or the loop changes no number.

Each case is one Fig. 14 cell (the study file's own settings, fewer requests so it runs in seconds)
on the long-context models where the allocator does the most work: Llama-4 Scout's 150k-token
prompts, Gemma-3 and Ministral's sliding windows with prefix caching, Jamba's Mamba checkpoints,
and character.ai's cell on which reusing ``LcmPagePool.can_fit`` as the "cannot fail" bound broke
(issue 20). The digest covers the record's metrics, every trace row and the meta -- everything a
record holds but the wall time. The expected values were computed at 00bb201 (main with the
calibrated step-time model, before issue 20's allocator changes were merged; the branch itself was
checked the same way against 3b9267d's digests), and every later commit must reproduce them. A change that is *meant* to move numbers
(the step-time model, a scheduling rule) updates them with ``python -m tests.test_sim_digest``
and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.backends.sim import engine
from harness.config import compose_cell
from harness.models import load_profile
from harness.study.plan import plan
from harness.workloads import build_workload

REPO = Path(__file__).resolve().parents[1]

# (model, system, seed, requests) -> digest at 00bb201
FAST = {
    ("character_70b_fp8", "jenga", 1, 20): "6475d37bfd5ba1c0",
    # + fused-MoE FFN curve (issue 21, PR #24700); + a running request holds its two latest Mamba
    # checkpoints, older ones released stale (jenga/prefix.py hold_last_checkpoints)
    ("jamba_1_5_mini", "jenga", 0, 100): "b11c80855970b998",
    ("ministral_8b", "jenga", 0, 12): "d75a606d202d3974",
    ("ministral_8b", "vllm", 2, 10): "48ad43e93e04c84b",
    ("llama3_2_11b_vision", "jenga", 0, 60): "d6d8309720dcaec7",  # image pages (issue 20, computed at 2d8213f)
}
SLOW = {
    ("llama4_scout", "jenga", 0, 24): "e4e6db74204859a9",     # fused-MoE curve + v1 untuned config (issue 21)
    ("llama4_scout", "max_page", 0, 24): "0edc5ede609b0555",
    ("llama4_scout", "jenga", 0, 10): "38b85b89cd2bc1b8",
    ("gemma3_12b", "jenga", 1, 16): "6c510e2a40fca381",
    ("gemma3_12b", "jenga", 1, 8): "413474753e98717e",
    ("gemma3_12b", "max_page", 0, 16): "55bfea120d99edd4",
    ("gemma3_12b", "max_page", 0, 8): "b6e451c53edcb754",
}


# What-if simulations of SGLang's rules (1-token pages: the unrolled registration and eviction of
# jenga/baselines/sglang.py) under pressure: (rule, what-if arguments) -> digest of the whole run,
# computed at 2ec8e5a (before those paths were unrolled) and reproduced after.
WHATIF = {
    ("sglang_pools", "model=gemma4_31b workload=sessions"): "9cfa9fb2257d916e",
    ("sglang_unified", "model=gemma4_31b workload=sessions"): "5b1f9fb1082bb969",
    ("sglang_pools", "model=gpt_oss_20b workload=arxiv_qa num_requests=16"): "0be217d078d8bce4",
    ("sglang_unified", "model=jamba_1_5_mini workload=sessions tp=2"): "9caab2ea1a493235",
}


def whatif_digest(rule: str, args: str) -> str:
    """The run :func:`harness.whatif.simulate` makes for ``rule``: metrics, trace and meta."""
    from harness import whatif as w

    a = w.parse_args([*args.split(), "--no-sweep"])
    prof = w.profile(a)
    a.tp = w.resolve_tp(a, prof)
    requests = w.build_requests(a, prof)
    base = w.compose(a)
    cfg = w.compose(a, rule, w.rule_options(rule, {}, w._max_model_len(base, prof), prof, base), dataset="synthetic")
    cfg.engine.tokens_per_page = w.page_tokens(rule, int(cfg.engine.tokens_per_page or 16))
    r = engine.run_cell(cfg, prof, requests)
    blob = json.dumps({"metrics": r.metrics, "trace": r.trace, "meta": r.meta}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fig14_overrides(model: str, system: str, seed: int) -> list[str]:
    """The Fig. 14 study's overrides of one cell (H100), as the study driver plans them."""
    runs = plan(REPO / "experiments" / "fig14.yaml").runs
    sel = [r.overrides for r in runs if r.model == model and r.system == system and r.seed == seed]
    assert len(sel) == 1, f"{model}/{system}/seed {seed}: {len(sel)} cells in fig14.yaml"
    return sel[0]


def cell_digest(model: str, system: str, seed: int, requests: int) -> str:
    cfg = compose_cell([*fig14_overrides(model, system, seed), f"dataset.num_requests={requests}"])
    r = engine.run_cell(cfg, load_profile(cfg.model), build_workload(cfg))
    blob = json.dumps({"metrics": r.metrics, "trace": r.trace, "meta": r.meta}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@pytest.mark.parametrize("case", sorted(FAST))
def test_cell_digest_unchanged(case):
    assert cell_digest(*case) == FAST[case]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SLOW))
def test_long_context_cell_digest_unchanged(case):
    assert cell_digest(*case) == SLOW[case]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(WHATIF))
def test_whatif_sglang_digest_unchanged(case):
    assert whatif_digest(*case) == WHATIF[case]


def test_digest_sees_a_changed_number(monkeypatch):
    """Negative control: the digest is not blind -- one step-time nudge moves it."""
    case = ("ministral_8b", "vllm", 2, 10)
    real = engine.run_loop

    def nudged(sched, mm, step_cost, *a, **k):
        return real(sched, mm, lambda step: step_cost(step) * (1 + 1e-12), *a, **k)

    monkeypatch.setattr(engine, "run_loop", nudged)
    assert cell_digest(*case) != FAST[case]


if __name__ == "__main__":
    for table in (FAST, SLOW):
        for case in sorted(table):
            print(case, cell_digest(*case))
    for case in sorted(WHATIF):
        print(case, whatif_digest(*case))
