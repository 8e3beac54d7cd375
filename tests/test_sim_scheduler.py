"""Scheduler invariants (hypothesis) and hand-computable cases, against a fake paged manager."""

from __future__ import annotations

import dataclasses
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_fakes import FakePagedManager, make_requests, tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost.model import CostModel
from harness.backends.sim.engine import scheduler_config, simulate
from harness.backends.sim.scheduler import Scheduler, SchedulerConfig


class UnitCost:
    """Every step takes one second: makes throughput a count of steps."""

    def step_time(self, batch):
        return 1.0


def _mm(pages, tpp=4, cache=False):
    prof = tiny_profile(bytes_per_token_per_layer=1, layers=1)
    return FakePagedManager(prof.specs, pages * tpp, tokens_per_page=tpp, enable_prefix_cache=cache)


def test_v0_prefill_then_decode_exact_steps():
    # Two requests of prompt 4 / output 3: step 1 prefills both (emits token 1), steps 2-3 decode.
    reqs = make_requests([(4, 3), (4, 3)])
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=64, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=False)
    sched, trace, _ = simulate(_mm(100), UnitCost(), cfg, reqs)
    assert [t["num_decode"] for t in trace] == [0, 2, 2]
    assert [s.finish_time for s in sched.seqs] == [3.0, 3.0]
    assert [s.first_token_time for s in sched.seqs] == [1.0, 1.0]


def test_v0_prefill_priority_pauses_decodes():
    # max_num_seqs=1: the second request waits; budget admits one prompt per step.
    reqs = make_requests([(4, 2), (4, 2)])
    cfg = SchedulerConfig(max_num_seqs=1, token_budget=4, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=False)
    sched, _trace, _ = simulate(_mm(100), UnitCost(), cfg, reqs)
    assert [s.finish_time for s in sched.seqs] == [2.0, 4.0]


def test_mixed_chunked_prefill_exact():
    # Budget 3 tokens/step, one request prompt 5 output 2: chunks 3 + 2 (token 1 at t=2), decode t=3.
    reqs = make_requests([(5, 2)])
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=3, mixed=True, chunked_prefill=True,
                          enable_prefix_caching=False)
    sched, trace, _ = simulate(_mm(100), UnitCost(), cfg, reqs)
    assert [t["num_prefill_tokens"] for t in trace] == [3, 2, 0]
    assert sched.seqs[0].first_token_time == 2.0 and sched.seqs[0].finish_time == 3.0


def test_v1_ends_a_request_at_max_model_len_exact():
    """vLLM v1's check_stop (vllm/v1/core/sched/utils.py): a request ends once prompt + output reaches
    max_model_len (12 here). A: prompt 8, output 10 -> 4 tokens (t=1..4); B: prompt 14, already past
    it -> the one token of its prefill step. Negative controls: C (4 + 8 = 12, reaching it with its
    last token) and D (3 + 5) are untouched, and without the cap (v0) every request gets its output."""
    from harness.backends.sim.engine import loop_metrics
    reqs = make_requests([(8, 10), (14, 5), (4, 8), (3, 5)])
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=64, mixed=True, chunked_prefill=True,
                          enable_prefix_caching=False, max_model_len=12)
    sched, trace, agg = simulate(_mm(100), UnitCost(), cfg, reqs)
    assert [s.num_generated for s in sched.seqs] == [4, 1, 8, 5]
    assert [s.finish_time for s in sched.seqs] == [4.0, 1.0, 8.0, 5.0]
    assert [s.first_token_time for s in sched.seqs] == [1.0] * 4
    assert [len(s.req.output_token_ids) for s in sched.seqs] == [4, 1, 8, 5]
    assert [t["num_decode"] for t in trace] == [0, 3, 3, 3, 2, 1, 1, 1]
    m = loop_metrics(sched, trace, agg, 400)
    assert m["num_steps"] == 8 and m["makespan_s"] == 8.0
    assert m["output_tok_s"] == 18 / 8 and m["tpot_mean"] == 1.0 and m["num_requests"] == 4
    # negative control: no cap -> the requested outputs, 10 steps
    sched, trace, agg = simulate(_mm(100), UnitCost(), dataclasses.replace(cfg, max_model_len=None), reqs)
    assert [s.num_generated for s in sched.seqs] == [10, 5, 8, 5]
    assert [s.finish_time for s in sched.seqs] == [10.0, 5.0, 8.0, 5.0]
    assert loop_metrics(sched, trace, agg, 400)["output_tok_s"] == 28 / 10


def test_scheduler_config_caps_at_max_model_len_on_v1_only():
    prof = tiny_profile()
    assert scheduler_config(tiny_engine(engine_version="v1", max_model_len=4096), prof).max_model_len == 4096
    assert scheduler_config(tiny_engine(engine_version="v0", max_model_len=4096), prof).max_model_len is None


def test_exact_throughput_with_cost_model():
    # Memory-bound decode: weights 2 GB at 1 TB/s = 2 ms per step; attention/KV negligible.
    prof = tiny_profile(active_params=1_000_000_000, bytes_per_token_per_layer=2)
    engine = tiny_engine(max_num_batched_tokens=4096)
    cost = CostModel(prof, tiny_gpu(), engine)
    oh = cost.overhead
    reqs = make_requests([(16, 3)] * 4)
    cfg = scheduler_config(engine, prof)
    sched, trace, _ = simulate(FakePagedManager(prof.specs, 10**9), cost, cfg, reqs)
    # Prefill step: 64 tokens x 2 GFLOP = 128 GFLOP at 1 PFLOP/s = 0.128 ms < 2 ms memory time,
    # so all three steps (1 prefill + 2 decodes) are memory bound: 2 ms + KV reads.
    kv = [2 * 2 * 16 * 4, 2 * 2 * 17 * 4, 2 * 2 * 18 * 4]     # bytes: layers x bpt x keys x requests
    expected = sum((2e9 + b) / 1e12 + oh.step_s + 4 * oh.per_request_s for b in kv)
    # v0 input preparation (cost.InputPrep): 4 block-table entries and 64 prompt tokens in the
    # prefill step, then 4 x 2 entries in each decode step (17 and 18 tokens).
    prep = cost.prep
    expected += (4 + 8 + 8) * prep.uniform_entry_s + 64 * (prep.prefill_token_s + prep.slot_token_s)
    # The prefill step is not in a CUDA graph: its launch time must not exceed its GPU time here.
    assert prof.num_layers * oh.eager_layer_s < 2e-3
    makespan = max(s.finish_time for s in sched.seqs)
    assert abs(makespan - expected) < 1e-12
    assert len(trace) == 3


# Random request streams over a small pool, shared by the property tests below.
STREAMS = {"lens": st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12)), min_size=1, max_size=12),
           "pages": st.integers(3, 30), "mixed": st.booleans(), "cache": st.booleans(), "budget": st.integers(8, 64)}


@settings(max_examples=40, deadline=None)
@given(**STREAMS, max_seqs=st.integers(1, 8), shared=st.integers(0, 24))
def test_invariants(lens, pages, mixed, cache, budget, max_seqs, shared):
    """Never over capacity; every request finishes or is ignored because it can never fit; hits
    only on first admission; preempted requests recompute."""
    tpp = 4
    reqs = make_requests(lens, shared_prefix=shared)
    mm = _mm(pages, tpp, cache)
    cfg = SchedulerConfig(max_num_seqs=max_seqs, token_budget=max(budget, 52), mixed=mixed,
                          chunked_prefill=mixed, enable_prefix_caching=cache)
    sched, trace, _ = simulate(mm, UnitCost(), cfg, reqs)
    assert mm.max_used_pages <= pages
    for s in sched.seqs:
        fits = -(-(s.req.prompt_len + s.req.output_len - 1) // tpp) <= pages
        if fits:
            assert s.done and not s.ignored and s.num_generated == s.req.output_len
        else:
            assert s.done and (s.ignored or s.num_generated == s.req.output_len)
        assert s.hit_tokens <= s.req.prompt_len - 1
        if not cache:
            assert s.hit_tokens == 0
    assert mm.tokens == {}                       # everything freed
    assert sched.num_preemptions == sum(s.num_preemptions for s in sched.seqs)
    assert all(t["num_running"] <= max_seqs for t in trace)


@settings(max_examples=40, deadline=None)
@given(**STREAMS, gate=st.booleans())
def test_step_usage_is_the_managers_usage_every_step(lens, pages, mixed, cache, gate, budget):
    """The loop's per-step read (Scheduler.step_usage, which reuses admission's last read when
    nothing touched the pool after it) equals the manager's usage() at that point, every step; a
    negative control: the reuse happens at all (blocked admissions in mixed steps)."""
    reqs = make_requests(lens, shared_prefix=8)
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=max(budget, 52), mixed=mixed, chunked_prefill=mixed,
                          enable_prefix_caching=cache, v0_can_allocate=gate)
    real = Scheduler.step_usage

    def checked(self):
        u = real(self)
        assert u == self.mm.usage()
        return u

    with patch.object(Scheduler, "step_usage", checked):
        simulate(_mm(pages, 4, cache), UnitCost(), cfg, reqs)


def test_step_usage_reuses_admissions_read_when_the_head_stays_blocked():
    """Negative control of the test above: the reuse happens (a mixed step whose head request
    stays blocked: two requests that cannot both fit, the second waits while the first decodes)
    and not on every step."""
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=64, mixed=True, chunked_prefill=True,
                          enable_prefix_caching=False)
    real = Scheduler.step_usage
    reused = []

    def count(self):
        reused.append(self._usage is not None)
        return real(self)

    with patch.object(Scheduler, "step_usage", count):
        simulate(_mm(8), UnitCost(), cfg, make_requests([(16, 12), (16, 12)]))
    assert any(reused) and not all(reused)


def test_preempted_request_recomputes_and_hits_not_counted():
    # 6 pages of 4 tokens. Two requests of prompt 8 (2 pages) + 10 outputs: both cannot finish
    # together (need 5 pages each), so the newer is preempted, recomputes, and its cached pages
    # from before the preemption are not counted as hits.
    reqs = make_requests([(8, 10), (8, 10)], shared_prefix=0)
    mm = _mm(6, 4, cache=True)
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=64, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=True)
    sched, _, _ = simulate(mm, UnitCost(), cfg, reqs)
    victim = sched.seqs[1]
    assert victim.num_preemptions >= 1
    assert victim.hit_tokens == 0
    assert victim.recomputed_tokens > 0
    assert all(s.num_generated == 10 for s in sched.seqs)


def test_prefix_hits_counted_on_first_admission():
    # Shared 16-token prefix; the second request arrives after the first finished.
    reqs = make_requests([(20, 2), (20, 2)], shared_prefix=16, arrivals=[0.0, 10.0])
    mm = _mm(50, 4, cache=True)
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=64, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=True)
    sched, _, _ = simulate(mm, UnitCost(), cfg, reqs)
    assert [s.hit_tokens for s in sched.seqs] == [0, 16]


# -- vLLM v0's can_allocate gate (whole prompt, watermark 1 %) --------------------------------------

def _v0(budget=1024, gate=True, cache=False):
    return SchedulerConfig(max_num_seqs=8, token_budget=budget, mixed=False, chunked_prefill=False,
                           enable_prefix_caching=cache, v0_can_allocate=gate, watermark=0.01)


def test_v0_gate_waits_for_the_watermark_instead_of_preempting():
    # 100 pages of 4 tokens (watermark 1 page). Two prompts of 200 tokens (50 pages each), 2 outputs.
    # Without the gate both are admitted (100 pages) and A's first decode page preempts B. With it,
    # B needs 50 pages + the 1-page watermark while only 50 are free: it waits until A finishes.
    reqs = make_requests([(200, 2), (200, 2)])
    sched, trace, _ = simulate(_mm(100), UnitCost(), _v0(gate=False), reqs)
    assert sched.num_preemptions == 1
    sched, trace, _ = simulate(_mm(100), UnitCost(), _v0(), reqs)
    assert sched.num_preemptions == 0
    assert [t["num_prefill_tokens"] for t in trace] == [200, 0, 200, 0]
    assert [s.finish_time for s in sched.seqs] == [2.0, 4.0]


def test_v0_gate_never_admits_a_prompt_inside_the_watermark():
    # A 400-token prompt needs all 100 pages: capacity - required = 0 < 1-page watermark -> ignored
    # (AllocStatus.NEVER); without the gate it fits exactly and runs.
    reqs = make_requests([(400, 1)])
    assert simulate(_mm(100), UnitCost(), _v0(gate=False), reqs)[0].num_ignored == 0
    assert simulate(_mm(100), UnitCost(), _v0(), reqs)[0].num_ignored == 1


def test_v0_gate_counts_whole_prompts_against_the_token_budget_despite_hits():
    # R0 and R1 leave two different 196-token prefixes cached; A (R0's prefix) and B (R1's) arrive
    # after them. Each needs only 4 new tokens, but v0 counts 200 per prompt against the 300-token
    # budget, so they prefill in two steps (without the gate: one step of 4 + 4 tokens).
    import numpy as np

    from harness.workloads.request import Request

    def req(name, t, base, tail):
        ids = np.concatenate([np.arange(base, base + 196), np.arange(tail, tail + 4)]).astype(np.int32)
        return Request(name, t, ids, 1)
    reqs = [req("r0", 0.0, 1000, 5000), req("r1", 0.0, 2000, 6000),
            req("a", 10.0, 1000, 7000), req("b", 10.0, 2000, 8000)]
    _, trace, _ = simulate(_mm(300, cache=True), UnitCost(), _v0(300, gate=False, cache=True), reqs)
    assert [t["num_prefill_tokens"] for t in trace] == [200, 200, 8]
    sched, trace, _ = simulate(_mm(300, cache=True), UnitCost(), _v0(300, cache=True), reqs)
    assert [t["num_prefill_tokens"] for t in trace] == [200, 200, 4, 4]
    assert [s.hit_tokens for s in sched.seqs] == [0, 0, 196, 196]


def test_full_prompt_probe_counts_every_sliding_window_page():
    # Jenga's v0 fork counts all prompt blocks of a sliding-window layer at admission ("prefill
    # phase allocates all blocks"), not just the window: the probe must see the whole prompt.
    import jenga
    from harness.backends.sim.scheduler import FullPromptProbe
    from jenga.spec import FullAttentionSpec, SlidingWindowSpec
    specs = [FullAttentionSpec("full", 1, 2), SlidingWindowSpec("sw", 3, 2, window=8)]
    mm = jenga.make_manager("jenga", specs, 1 << 20, tokens_per_page=4, enable_prefix_cache=False)
    req = make_requests([(64, 1)])[0]
    # 64 tokens x (1 + 3 layers) x 2 bytes, exactly page-aligned: 512 bytes.
    assert FullPromptProbe(mm).required_bytes(req, 64) == 512
