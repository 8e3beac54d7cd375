"""Every Fig. 13 / Fig. 14 cell starts and admits its whole workload, on both GPUs (issue 9 §2, §5).

No simulation: vLLM's profiling pass (harness.backends.cost.model) and the v0 admission probe
(harness.backends.sim.startup.fit_report) on each cell's own requests. The only cells allowed not to fit
are the bars the paper itself marks OOM (results/paper/fig14_sosp.csv, "OOM" in the source).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness import analysis
from harness.backends.cost.model import CostModel
from harness.backends.sim.startup import fit_report
from harness.config import compose_cell
from harness.models import load_profile
from harness.study.plan import plan
from harness.workloads import build_workload

ROOT = Path(__file__).resolve().parent.parent


def _paper_oom(figure: str) -> set[tuple[str, str, str]]:
    f = analysis.PAPER_DIR / analysis.PAPER_FILES[figure]
    df = pd.read_csv(f)
    if "throughput_req_s" not in df:
        return set()
    df = df[df["source"].str.contains("OOM", na=False) & df["throughput_req_s"].isna()]
    return {(r.paper_model, r.gpu, r.system) for r in df.itertuples()}


def _cells(figure: str, gpu: str):
    """One (model, [(system, overrides)]) per cell and seed of the experiment on ``gpu``: each seed
    draws its own requests, so each must fit (a seed-0-only check missed Gemma-2-9B's L4 seeds 1-2)."""
    p = plan(ROOT / "experiments" / f"{figure}.yaml", [f"gpu={gpu}"])
    cells: dict[str, list] = {}
    for r in p.runs:
        cells.setdefault((r.model, r.seed), []).append((r.system, r.overrides))
    return list(cells.items())


# The H100 panels (every cell x system, ~3-4 s each) run in `make test-slow`; L4's in `make test`.
CASES = [pytest.param(f, g, marks=[pytest.mark.slow] if g == "h100" else [], id=f"{f}-{g}")
         for f in ("fig13", "fig14") for g in ("h100", "l4")]


def _longest(requests, k: int = 1):
    """The k longest requests (prompt + image tokens): a pool that admits the longest admits the
    rest (the bytes a request needs grow with its tokens in every system)."""
    return sorted(requests, key=lambda r: -(r.prompt_len + r.num_image_tokens))[:k]


@pytest.mark.parametrize("figure,gpu", CASES)
def test_every_cell_starts_and_admits_its_workload(figure, gpu):
    expected_oom = _paper_oom(figure)
    bad = []
    for (model, seed), runs in _cells(figure, gpu):
        cfg = compose_cell(runs[0][1])
        profile = load_profile(cfg.model)
        requests = _longest(build_workload(cfg))   # systems share the workload (same seed, dataset)
        for system, _ in runs:
            # Systems differ only in the system group (harness/conf/system/<name>.yaml).
            sys_conf = OmegaConf.load(ROOT / "harness" / "conf" / "system" / f"{system}.yaml")
            cfg.system.name, cfg.system.options = sys_conf.name, sys_conf.get("options") or {}
            rep = fit_report(cfg, profile, requests)
            if (analysis.paper_model(model), gpu, system) in expected_oom:
                continue
            if not rep.ok:
                bad.append(f"{model}/{system}/seed {seed}: starts={rep.starts}, never fit {rep.never_fit}/"
                           f"{rep.num_requests} longest {rep.reason}")
    assert not bad, f"{figure} on {gpu}: " + "; ".join(bad)


def test_character_70b_starts_only_above_the_default_utilization():
    # The artifact raised gpu_memory_utilization to 0.937 for character-70b-fp8: our config must
    # start there and, as a consistency check of the
    # chosen MLP width, not at the default 0.9.
    base = ["model=character_70b_fp8", "dataset=mmlu_pro", "engine.max_model_len=65536",
            "engine.enable_chunked_prefill=false", "engine.engine_version=v0"]
    hi = compose_cell(base + ["engine.gpu_memory_utilization=0.937"])
    profile = load_profile(hi.model)
    cap = CostModel(profile, hi.gpu, hi.engine).kv_capacity_bytes()
    # The v0 forks do not check max_model_len at start-up (raise_if_cache_size_invalid's check is
    # commented out); Jenga's pool still holds one 65536-token request (global caches for all
    # tokens, local caches for the window), and the MMLU-pro workload's requests are < 4k tokens.
    one_request = sum(s.bytes_per_token_per_layer * s.num_layers * (min(65536, s.window) if s.kind == "sliding"
                                                                     else 65536) for s in profile.specs)
    assert cap > one_request
    lo = compose_cell(base + ["engine.gpu_memory_utilization=0.9"])
    with pytest.raises(ValueError, match="no KV cache memory"):
        CostModel(profile, lo.gpu, lo.engine).kv_capacity_bytes()
    # The published shape constraints: MQA, 1 global layer in 6, window 1024, KV sharing.
    assert profile.num_kv_heads == 1
    kinds = profile.layer_kinds
    assert kinds.count("full") == len(kinds) // 6 and all(kinds[i] == "full" for i in range(5, len(kinds), 6))
    assert profile.extra["sliding_window"] == 1024 and profile.extra["kv_share"]


def test_the_paper_oom_bar_is_reproduced_where_the_mechanism_gives_it():
    # Negative control for the check above: on L4 the paper marks Ministral's max-page bar OOM;
    # at our L4 setting max page cannot admit the longest request (its pages are the largest).
    runs = dict(next(runs for (model, _), runs in _cells("fig14", "l4") if model == "ministral_8b_fp8"))
    cfg = compose_cell(runs["max_page"])
    profile = load_profile(cfg.model)
    assert not fit_report(cfg, profile, _longest(build_workload(cfg))).ok

