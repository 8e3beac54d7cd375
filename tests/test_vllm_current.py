"""Today's vLLM as its own system (``vllm_current``, jenga/baselines/current.py): reachable-only
sliding-window caching (D3), shared-prefix junction pinning (D2), the full-prompt admission gate
(D1, harness/backends/sim/scheduler.py) and its sizing, plus the live-copy ownership of a cached key."""

from __future__ import annotations

from conftest import req
from current_fakes import ARTICLE, full_manager, manager, run_prompt
from sim_fakes import make_requests

from harness.backends.sim.engine import simulate
from harness.backends.sim.scheduler import SchedulerConfig
from harness.tools.crosscheck import worst_gap
from jenga import FullAttentionSpec, make_manager
from jenga.baselines.current import full_sequence_demand
from jenga.testing import check_invariants


def _sliding_keys(m) -> int:
    return sum(len(m.index[t]) for t, st in enumerate(m.types) if st.name.startswith("sw"))


def test_only_reachable_sliding_pages_are_cached():
    """D3: a request of 23 prompt tokens that decoded 2 more caches only the 3 sliding pages before
    its replay boundary (22) -- the same whether it finished or was preempted (free is free);
    hybrid_groups caches all 25 (out-of-window ones stale)."""
    for system, expect in (("vllm_current", 3), ("hybrid_groups", 25)):
        m = manager(system)
        run_prompt(m, req("a", ARTICLE + [100, 101, 102]), decode=2)
        m.free(req("a", []))  # free goes by request id
        assert _sliding_keys(m) == expect, system
        check_invariants(m)


def test_junction_makes_the_next_sibling_hit_the_whole_article():
    """D2: q1's sliding tail is at its own prompt end, so sibling q2 hits full attention through the
    article but not the sliding layer: junction 20. q2 caches its sliding pages 17-19 while computing,
    so q3 hits all 20 article tokens. Negative control: without the junction q3 misses."""
    m = manager("vllm_current")
    run_prompt(m, req("q1", ARTICLE + [100, 101, 102, 103]))
    m.free(req("q1", []))
    q2 = req("q2", ARTICLE + [200, 201, 202, 203])
    assert run_prompt(m, q2) == 0 and m.junction["q2"] == 20
    m.free(q2)
    assert run_prompt(m, req("q3", ARTICLE + [300, 301, 302, 303])) == 20
    check_invariants(m)

    control = manager("vllm_current")
    control.lookup_prefix = lambda r, f=control.lookup_prefix: (f(r), control.junction.clear())[0]
    run_prompt(control, req("q1", ARTICLE + [100, 101, 102, 103]))
    control.free(req("q1", []))
    run_prompt(control, req("q2", ARTICLE + [200, 201, 202, 203]))
    control.free(req("q2", []))
    assert run_prompt(control, req("q3", ARTICLE + [300, 301, 302, 303])) == 0


def test_full_sequence_demand_exact():
    """vLLM 0.32's allocate_slots(full_sequence_must_fit): full needs every page of the sequence;
    the sliding window is capped at cdiv(min(W - 1 + in_flight, N), block) + 1."""
    m = manager("vllm_current")
    r = req("x", list(range(1000, 1100)))
    m.lookup_prefix(r)
    # full 100 pages; sliding min(100, cdiv(min(3 + 10, 100), 1) + 1 = 14) -> 114 pages of 8 bytes
    assert full_sequence_demand(m, r, 0, 100, 10) == (100 + 14) * 8
    # a 20-token hit on pages another running request holds costs nothing for them
    run_prompt(m, req("o", ARTICLE + [5]))  # still running: holds the article's pages
    sib = req("s", ARTICLE + list(range(50, 60)))
    hit = m.lookup_prefix(sib)
    assert hit == 20
    # full: 30 - 20 = 10; sliding: min(30, 14) - max(skipped 17, hit 20) -> 0, its 3 hit pages held
    assert full_sequence_demand(m, sib, hit, 30, 10) == 10 * 8


def test_full_prompt_admission_gate_prevents_mid_prefill_preemption():
    """D1 on a tiny pool: two 40-token prompts, budget 8 tokens/step, room for 60 tokens. Without
    the gate both are admitted chunk by chunk and one is preempted; with it the second waits."""
    def run(gate: bool):
        m = make_manager("vllm", [FullAttentionSpec("full", 1, 8)], 60 * 8, tokens_per_page=1)
        cfg = SchedulerConfig(max_num_seqs=8, token_budget=8, mixed=True, chunked_prefill=True,
                              enable_prefix_caching=False, full_prompt_admission=gate)
        sched, _trace, _ = simulate(m, _UnitCost(), cfg, make_requests([(40, 4), (40, 4)]))
        return sched.num_preemptions
    assert run(False) > 0
    assert run(True) == 0


class _UnitCost:
    def step_time(self, batch):
        return 1.0


def test_live_copy_takes_the_key_of_a_cached_page():
    """A request that recomputes a cached prefix (no hit) registers its own pages: once the cached
    copies are evicted, the prefix is still found through the live copy."""
    m = full_manager("vllm")
    a = req("a", ARTICLE)
    run_prompt(m, a)
    m.free(a)
    b = req("b", ARTICLE + [7])
    assert m.allocate(b, 21)  # computed from scratch, no lookup: its pages duplicate a's cached ones
    filler = req("f", list(range(500, 540)))
    assert m.allocate(filler, 40)  # 64 - 21 - 40 = 3 free: evicts 17 of a's 20 cached pages
    assert m.lookup_prefix(req("c", ARTICLE + [8])) == 20
    check_invariants(m)


def test_worst_gap_counts_missing_rows_as_full_gap():
    rows = [{"cell": "a", "sim_system": "vllm", "variant": "default", "diff_throughput_req_s": 0.02},
            {"cell": "b", "sim_system": "vllm_current", "variant": "no_full_isl", "diff_throughput_req_s": 0.04}]
    assert worst_gap(rows) == (0.04, "b vllm_current", "no_full_isl")
    rows.append({"cell": "c", "sim_system": "vllm", "variant": "default", "diff_throughput_req_s": None})
    assert worst_gap(rows)[0] == 1.0
