"""vllm_hma against vLLM 0.32's own code (``make test-vllm``): the recurrent-state bytes from vLLM's
shape calculators, and for every hybrid zoo model the planner's groups, block sizes, block count and
the KV cache size / max concurrency vLLM reports (``get_kv_cache_capacity``) -- all exact; on session
traces the simulator against vLLM's scheduler + KV cache manager (``backend=vllm_sched``): prefix-hit
tokens, and in Mamba align mode the step count and mean TTFT (the prefill split)."""

from __future__ import annotations

import pytest

from harness.backends.vllm.plan import have_vllm
from harness.config import compose_cell
from harness.models import load_profile

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]

HYBRIDS = ["gemma3_4b", "gemma3_12b", "gemma3_27b", "gemma4_31b", "gpt_oss_20b", "gpt_oss_120b",
           "qwen3_next_80b_a3b", "qwen3_5_4b", "qwen3_5_35b_a3b", "nemotron_nano_9b_v2", "nemotron_h_8b",
           "nemotron_h_47b", "nemotron_h_56b", "jamba_1_5_mini", "gemma4_26b_a4b", "granite_4_0_h_small",
           "granite_4_0_h_tiny", "falcon_h1_7b", "minimax_m1", "granite_4_0_h_micro", "jamba_1_7_mini", "jamba_1_7_large"]
GiB = 1 << 30


def _profile(name):
    return load_profile(compose_cell([f"model={name}"]).model)


@pytest.mark.parametrize("name", ["qwen3_next_80b_a3b", "qwen3_5_4b", "qwen3_5_35b_a3b", "nemotron_nano_9b_v2",
                                  "nemotron_h_8b", "nemotron_h_47b", "nemotron_h_56b", "granite_4_0_h_small",
                                  "granite_4_0_h_tiny", "granite_4_0_h_micro", "falcon_h1_7b", "minimax_m1"])
def test_state_bytes_match_vllms_shape_calculator(name):
    import math

    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as C
    m = compose_cell([f"model={name}"]).model
    ls = m.extra.linear_state
    if ls.kind == "gdn":
        shapes = C.gated_delta_net_state_shape(1, ls.num_k_heads, ls.num_v_heads, ls.head_k_dim, ls.head_v_dim,
                                               ls.conv_kernel)
    elif ls.kind == "linear_attention":  # MiniMax lightning attention: one (heads, d, d) state, no conv
        shapes = (None,) + C.linear_attention_state_shape(num_heads=ls.num_heads, tp_size=1, head_dim=ls.head_dim)
    else:
        shapes = C.mamba2_state_shape(1, ls.num_heads * ls.head_dim, ls.n_groups, ls.num_heads, ls.head_dim,
                                      ls.d_state, ls.d_conv)
    size = {"bfloat16": 2, "float32": 4}
    conv, state = (0 if s is None else math.prod(s) for s in shapes)
    want = conv * 2 + state * size[ls.state_dtype]
    spec = next(s for s in _profile(name).specs if s.kind == "mamba")
    assert spec.state_bytes_per_layer == want
    assert spec.conv_bytes_per_layer == conv * torch.tensor([], dtype=torch.bfloat16).element_size()


def _vllm_config(prof, directory, hybrid: bool, max_model_len: int):
    """vLLM 0.32's config for ``prof`` (16-token blocks, 8,192 tokens per step, prefix caching on;
    the hybrid KV cache manager on or off)."""
    from harness.backends.vllm.plan import EngineKnobs, make_vllm_config, write_proxy_model_dir
    knobs = EngineKnobs(hybrid=hybrid, block_size=16, max_model_len=max_model_len, max_num_batched_tokens=8192,
                        enable_prefix_caching=True)
    return make_vllm_config(prof, knobs, write_proxy_model_dir(prof, max_model_len, directory))


def _vllm_plan(vc, prof, budget: int):
    """vLLM's planner on ``budget`` KV bytes (Mamba hybrids in align mode); raises vLLM's ValueError
    where the engine would not start."""
    from harness.backends.vllm.plan import plan_kv_cache, vllm_layer_specs
    mode = "align" if any(s.kind == "mamba" for s in prof.specs) else "none"
    return plan_kv_cache(vc, vllm_layer_specs(prof, 16, mode), budget)


@pytest.mark.parametrize("name", HYBRIDS)
def test_vllm_hma_geometry_and_reported_capacity_match_vllm(name, tmp_path):
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    import jenga
    from jenga.baselines.vllm_hma import reported_capacity
    prof = _profile(name)
    mml, budget = 32768, 40 * GiB
    vc = _vllm_config(prof, tmp_path / "m", True, mml)
    planned = _vllm_plan(vc, prof, budget)
    kvc = planned.kv_cache_config
    vllm_tokens, vllm_conc = get_kv_cache_capacity(vc, kvc)

    mm = jenga.make_manager("vllm_hma", prof.specs, budget, enable_prefix_cache=True)
    ours = reported_capacity(mm, mml, max_num_batched_tokens=8192, max_concurrent_batches=vc.max_concurrent_batches)
    vgroups = sorted(g.kv_cache_spec.block_size for g in kvc.kv_cache_groups)
    assert vgroups == sorted(t.tokens_per_page for t in mm.types), name
    assert kvc.num_blocks == ours["num_blocks"], name
    assert vllm_conc == pytest.approx(ours["max_concurrency"], rel=1e-12), name
    assert vllm_tokens == ours["kv_capacity_tokens"], name


def _run_both(name, num_sessions, retention, kv_bytes, n=48, max_model_len=4096):
    """The record metrics of the simulator's vllm_hma and of vLLM 0.32's own scheduler + KV cache
    manager (backend=vllm_sched) on the same sessions trace."""
    from harness.workloads import sessions as ww
    reqs = ww.sessions(n, spec=ww.SessionsSpec(num_sessions=num_sessions, system_tokens=600, user_tokens=300,
                                               output_len=64))
    return _both([f"model={name}", f"engine.max_model_len={max_model_len}", f"engine.kv_cache_bytes={kv_bytes}"],
                 reqs, retention)


def _both(argv, reqs, retention=0):
    """The record metrics of both backends on ``reqs`` (``argv``: ``harness.whatif`` arguments)."""
    from omegaconf import OmegaConf

    from harness import whatif as w
    from harness.backends.sim.engine import run_cell as sim_run
    from harness.backends.vllm.sched import run_cell as sched_run
    a = w.parse_args(["gpu=h100", *argv, "--no-sweep"])
    prof = w.profile(a)
    # the rule's options as harness.whatif gives them (the cell's max_model_len)
    opts = w.rule_options("vllm_hma", {"prefix_cache_retention_interval": retention},
                          w._max_model_len(w.compose(a), prof), prof)
    sim = sim_run(w.compose(a, "vllm_hma", opts, dataset="synthetic"), prof, reqs).metrics
    cfg = w.compose(a, "vllm_hma", {}, dataset="synthetic")
    OmegaConf.set_struct(cfg, False)
    cfg.backend.name = "vllm_sched"
    cfg.backend.options = {"prefix_cache_retention_interval": "dense" if retention is None else retention}
    vs = sched_run(cfg, prof, reqs).metrics
    assert sim["prompt_tokens"] == vs["prompt_tokens"]
    return sim, vs


def _hits_both(name, num_sessions, retention, kv_bytes, n=48, max_model_len=4096):
    """Prefix-hit tokens of both (:func:`_run_both`)."""
    sim, vs = _run_both(name, num_sessions, retention, kv_bytes, n, max_model_len)
    return sim["prefix_hit_tokens"], vs["prefix_hit_tokens"]


@pytest.mark.parametrize("name,sessions,retention,kv,mml", [
    ("gemma3_4b", 4, 0, 4_000_000_000, 16384),   # sliding window, vLLM's default retention: 119,232 each
    ("qwen3_5_4b", 6, None, 1_500_000_000, 4096),  # align mode, dense retention, evictions: 72,864 each
    ("gemma3_4b", 6, 0, 1_300_000_000, 4096),    # sliding, retention 0 under pressure: 36,816 each
    ("gemma3_4b", 6, None, 1_300_000_000, 4096),  # sliding, dense retention under pressure: 58,800 each
])
def test_vllm_hma_hit_tokens_match_vllms_scheduler(name, sessions, retention, kv, mml):
    sim, vllm = _hits_both(name, sessions, retention, kv, max_model_len=mml)
    assert sim == pytest.approx(vllm, rel=0.01) and vllm > 0


@pytest.mark.parametrize("name,steps,ttft", [
    ("qwen3_5_4b", 2199, 0.0332),          # gated DeltaNet: every first turn stops at 528 (900 = 528 + 372)
    ("granite_4_0_h_tiny", 3072, 0.0251),  # Mamba-2: the checkpoint is exported inside the last chunk
    ("nemotron_h_8b", 1391, 0.0344),       # Mamba-2, and chunks stop at shared-prefix junctions
])
def test_vllm_hma_align_split_matches_vllms_scheduler(name, steps, ttft):
    """Align mode's prefill split (harness/backends/sim/align_split.py vs vLLM 0.32's
    Scheduler._mamba_block_aligned_split): on 4 sessions x 12 turns (4 GB, max_model_len 16,384) the
    simulator schedules the same steps as vLLM's own scheduler, so step count and mean TTFT (our step
    time model on both) agree. Tolerance: step count exact, mean TTFT within 1e-6 relative, hit tokens
    exact; today they are identical. Before the split the simulator ran whole chunks (Qwen3.5-4B:
    2,287 steps, TTFT 0.0198 s against vLLM's 2,199 and 0.0332 s)."""
    sim, vs = _run_both(name, 4, 0, 4_000_000_000, max_model_len=16384)
    assert (sim["num_steps"], vs["num_steps"]) == (steps, steps)
    assert sim["ttft_mean"] == pytest.approx(vs["ttft_mean"], rel=1e-6)
    assert vs["ttft_mean"] == pytest.approx(ttft, abs=5e-5)
    assert sim["prefix_hit_tokens"] == vs["prefix_hit_tokens"] > 0


@pytest.mark.parametrize("shared,unique,steps,hit_tokens", [(1600, 600, 38, 98208), (1500, 700, 42, 65472)])
def test_vllm_hma_siblings_arriving_together_match_vllms_scheduler(shared, unique, steps, hit_tokens):
    """vllm#45238's trace (64 requests sharing a prefix, all waiting at t=0; Qwen3.5-4B on an H100's KV
    budget): chunks stop at the junction and the last block boundary (the split), and a sibling whose
    Mamba hit is a state written earlier in the same step waits one step (vllm_hma.lookup_prefix, as
    MambaManager.get_num_blocks_to_allocate). Tolerance: steps and hit tokens exact, mean TTFT within
    1e-6 relative (62/64 requests hit at both splits; before, the simulator gave 60/64)."""
    from harness.study.whatif.vllm_45238 import requests
    sim, vs = _both(["model=qwen3_5_4b", "engine.max_model_len=8192"], requests(shared, unique, 64, 32))
    assert (sim["num_steps"], vs["num_steps"]) == (steps, steps)
    assert sim["prefix_hit_tokens"] == vs["prefix_hit_tokens"] == hit_tokens
    assert sim["ttft_mean"] == pytest.approx(vs["ttft_mean"], rel=1e-6)


def test_vllm_hma_dense_retention_under_pressure():
    """4 sessions x 12 turns at max_model_len 4,096: turns 10 and 11 (4,540 and 4,904 prompt tokens)
    outgrow it, and vLLM 0.32's KVCacheManager.allocate_slots allocates (so caches) no block past
    max_model_len, so their hits stop at 4,096 (vllm_hma's max_model_len clamp). Tolerance 1 %;
    today both give 119,552 tokens. Before the clamp the simulator cached those turns' blocks past
    4,096 and hit 4,224 / 4,592 tokens there: 122,048 (+2.1 %)."""
    sim, vllm = _hits_both("gemma3_4b", 4, None, 1_300_000_000)
    assert sim == pytest.approx(vllm, rel=0.01)
    assert vllm == 119_552


def test_vllm_hma_ends_requests_at_max_model_len_like_vllms_scheduler():
    """The same trace: turns 9-11 (4,176 / 4,540 / 4,904 prompt tokens) are at or past max_model_len
    4,096, and vLLM 0.32's check_stop (vllm/v1/core/sched/utils.py) ends each after the one token of
    its prefill step (FINISHED_LENGTH_CAPPED); the simulator's v1 scheduler now does the same
    (harness/backends/sim/scheduler.py, SchedulerConfig.max_model_len). Tolerance: step count exact,
    mean TTFT and output tokens/s within 1e-6 relative; today all are identical. Before the cap the
    simulator decoded those 12 requests to 64 tokens each (756 tokens more): 2,237 steps, TTFT 0.02103 s
    against vLLM's 1,695 and 0.02042 s."""
    sim, vs = _run_both("gemma3_4b", 4, None, 1_300_000_000)
    assert (sim["num_steps"], vs["num_steps"]) == (1695, 1695)
    assert sim["ttft_mean"] == pytest.approx(vs["ttft_mean"], rel=1e-6)
    assert vs["ttft_mean"] == pytest.approx(0.020416, abs=5e-6)
    # 36 requests x 64 tokens + 12 x 1 (vLLM's own count, backend=vllm_sched) over the same makespan
    assert sim["output_tok_s"] == pytest.approx(vs["output_tok_s"], rel=1e-6)
    assert vs["output_tok_s"] * vs["makespan_s"] == pytest.approx(36 * 64 + 12)
    assert sim["prefix_hit_tokens"] == vs["prefix_hit_tokens"] == 119_552


@pytest.mark.parametrize("name,hybrid", [("gemma4_31b", False), ("gemma4_31b", True), ("gemma3_12b", False),
                                         ("gpt_oss_20b", False), ("qwen3_5_4b", True)])
def test_start_check_matches_vllms(name, hybrid, tmp_path):
    """harness.whatif's check_vllm_start against vLLM 0.32's check_enough_kv_cache_memory (run by its
    planner): at three KV budgets vLLM refuses to start exactly when ours says it does, and both name
    the same longest max_model_len that would start; the 40 GiB budget is the negative control
    (both start)."""
    import re

    import jenga
    from harness.whatif import check_vllm_start
    from jenga.baselines.vllm_hma import reported_capacity
    prof = _profile(name)
    mml = 32768
    outcomes = []
    for budget in (int(1.5 * GiB), 6 * GiB, 40 * GiB):
        vc = _vllm_config(prof, tmp_path / f"m{budget}", hybrid, mml)
        try:
            _vllm_plan(vc, prof, budget)
            theirs = None
        except ValueError as e:
            theirs = str(e)
        mm = jenga.make_manager("vllm_hma" if hybrid else "vllm_hma_off", prof.specs, budget, enable_prefix_cache=True)
        cap = reported_capacity(mm, mml, max_num_batched_tokens=8192, max_concurrent_batches=vc.max_concurrent_batches)
        try:
            check_vllm_start(mm, budget, mml, 8192, cap["blocks_per_request"])
            ours = None
        except ValueError as e:
            ours = str(e)
        assert (theirs is None) == (ours is None), (budget, theirs, ours)
        if theirs is not None:
            est = re.compile(r"estimated maximum model length is (\d+)")
            assert est.search(theirs).group(1) == est.search(ours).group(1), (budget, theirs, ours)
        outcomes.append(theirs is None)
    assert outcomes[-1], "40 GiB must start"
    if not hybrid:  # every layer charged at full length: 1.5 GiB cannot hold 32k tokens (not vacuous)
        assert not outcomes[0]
