"""Speculative decoding in the sim: acceptance draws, look-ahead slots, multi-token steps, the
per-model split and both models in one pool."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jenga
from harness.backends.sim.engine import run_loop
from harness.backends.sim.scheduler import SchedulerConfig
from harness.backends.sim.specdec import SpecScheduler, accepted_tokens, spec_step_cost
from harness.workloads.request import Request
from jenga.baselines.per_model_split import PerModelSplit, pair_specs
from jenga.spec import FullAttentionSpec, SlidingWindowSpec

TARGET = (FullAttentionSpec("full", 4, 256), SlidingWindowSpec("sliding", 4, 256, window=64))
DRAFT = (FullAttentionSpec("full", 1, 128),)
CFG = SchedulerConfig(max_num_seqs=8, token_budget=4096, mixed=False, chunked_prefill=False,
                      enable_prefix_caching=False)


def _req(i: int, prompt: int, out: int) -> Request:
    return Request(f"r{i}", 0.0, np.arange(prompt, dtype=np.int32) + 1000 * i, out)


def test_acceptance_draws_exact_under_seed():
    # default_rng(0) draws 0.637 0.270 0.041 | 0.017 0.813 0.913 | 0.607 0.729 0.544.
    rng = np.random.default_rng(0)
    assert [accepted_tokens(rng, 3, 0.7) for _ in range(3)] == [3, 1, 1]
    rng = np.random.default_rng(0)
    assert accepted_tokens(rng, 3, 0.0) == 0 and accepted_tokens(rng, 3, 1.0) == 3
    assert accepted_tokens(rng, 0, 0.7) == 0


def test_acceptance_mean_matches_geometric_prefix():
    rng = np.random.default_rng(1)
    draws = [accepted_tokens(rng, 3, 0.7) for _ in range(20000)]
    # E[accepted] = p + p^2 + p^3 = 1.533; tokens per step = 1 + that = 2.533.
    assert abs(np.mean(draws) - (0.7 + 0.49 + 0.343)) < 0.02


def test_pair_specs_prefix_both_models():
    names = [s.name for s in pair_specs(TARGET, DRAFT)]
    assert names == ["target/full", "target/sliding", "draft/full"]
    mm = jenga.make_manager("jenga", pair_specs(TARGET, DRAFT), 1 << 24)
    assert set(mm.geometry.small_page_bytes) == set(names)


def test_per_model_split_gives_both_models_the_same_block_count():
    specs = pair_specs(TARGET, DRAFT)
    mm = PerModelSplit(specs, 10_000_000, 16)
    # Target page: 16 tokens x (4 + 4 layers) x 256 B = 32768; draft page: 16 x 128 = 2048.
    assert [st.page_bytes for st in mm.types] == [32768, 2048]
    blocks = 10_000_000 // (32768 + 2048)
    assert [p.num_pages for p in mm.pool.pools] == [blocks, blocks]
    r = _req(0, 100, 5)
    assert mm.allocate(r, 100)
    assert mm.usage().per_type_allocated_bytes == {"target/uniform": 7 * 32768, "draft/uniform": 7 * 2048}


@pytest.mark.parametrize("p,steps", [(1.0, 3), (0.0, 9)])
def test_spec_steps_emit_k_plus_one_or_one(p, steps):
    # Output 9: the prefill emits 1; p=1 -> decode steps emit 4 + 4; p=0 -> 8 steps of 1.
    mm = jenga.make_manager("jenga", pair_specs(TARGET, DRAFT), 1 << 24)
    sched = SpecScheduler(mm, CFG, [_req(0, 40, 9)], k=3, acceptance=p, seed=0)
    trace, _ = run_loop(sched, mm, lambda step: 1.0)
    s = sched.seqs[0]
    assert s.num_generated == 9 and s.done
    assert len(trace) == steps
    assert sched.decode_tokens == 8


def test_lookahead_slots_allocated():
    mm = jenga.make_manager("jenga", pair_specs(TARGET, DRAFT), 1 << 24)
    r = _req(0, 40, 20)
    sched = SpecScheduler(mm, CFG, [r], k=3, acceptance=0.7, seed=0)
    step = sched.schedule(0.0)           # prefill of 40
    sched.complete(step, 1.0)            # first token: target = 41
    step = sched.schedule(1.0)           # decode: keeps k = 3 slots ahead of the newest token
    assert step[0].is_decode and step[0].num_new_tokens == 4
    assert mm.num_computed_tokens(r) == 41 + 3


@settings(max_examples=25, deadline=None)
@given(p=st.floats(0.0, 1.0), out=st.integers(1, 40), seed=st.integers(0, 1000))
def test_every_request_gets_exactly_its_output(p, out, seed):
    mm = jenga.make_manager("per_model_split", pair_specs(TARGET, DRAFT), 1 << 22)
    reqs = [_req(i, 30 + 7 * i, out) for i in range(4)]
    sched = SpecScheduler(mm, CFG, reqs, k=3, acceptance=p, seed=seed)
    run_loop(sched, mm, lambda step: 1.0)
    assert all(s.num_generated == out and len(s.req.output_token_ids) == out for s in sched.seqs)
    assert mm.usage().allocated_bytes == 0


def test_step_cost_is_k_draft_steps_plus_one_verify():
    class Linear:  # cost = tokens, so the sum is checkable by hand
        def step_time(self, batch):
            return float(sum(n for n, *_ in batch))
    mm = jenga.make_manager("jenga", pair_specs(TARGET, DRAFT), 1 << 24)
    sched = SpecScheduler(mm, CFG, [_req(0, 40, 20), _req(1, 30, 20)], k=3, acceptance=0.7, seed=0)
    sched.complete(sched.schedule(0.0), 1.0)
    step = sched.schedule(1.0)
    # draft: 3 steps x 2 requests x 1 token = 6; target: 2 x 4 tokens = 8.
    assert spec_step_cost(Linear(), Linear())(step) == 14.0
    prefill = SpecScheduler(mm, CFG, [_req(5, 50, 3)], k=3, acceptance=0.7, seed=0).schedule(0.0)
    assert spec_step_cost(Linear(), Linear())(prefill) == 100.0  # both models prefill 50 tokens
