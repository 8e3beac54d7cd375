"""Two v0 per-step mechanisms read in the Jenga fork (docs/fidelity/absolute.md §8): the scheduler's
walk over the running set every step (``CostModel.running_time``) and the Mamba wrappers' layout
copies (``CostModel.mamba_layout_time``). Exact values, where they are zero, and the loop wiring."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_fakes import make_requests, tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost import model as costmod
from harness.backends.cost.model import CostModel
from harness.backends.sim.engine import run_loop
from harness.backends.sim.scheduler import Scheduler, SchedulerConfig
from jenga import make_manager
from jenga.spec import FullAttentionSpec, MambaSpec

DI, DS, DC = 256, 16, 4


def _hybrid(conv: bool = True, mamba_layers: int = 3):
    conv_b, ssm_b = DI * DC * 2, DI * DS * 2
    specs = (FullAttentionSpec("full", 1, 1024),
             MambaSpec("mamba", mamba_layers, conv_b + ssm_b, state_bytes_per_layer=conv_b + ssm_b,
                       conv_bytes_per_layer=conv_b if conv else 0, checkpoint_interval=64))
    layers = 1 + mamba_layers
    return tiny_profile(specs=specs, layers=layers, layer_kinds=("full",) + ("mamba",) * mamba_layers,
                        extra={"mamba": {"d_inner": DI, "d_state": DS, "d_conv": DC}})


def _cm(manager="per_layer", version="v0", **prof):
    return CostModel(_hybrid(**prof), tiny_gpu(hbm_bytes_per_s=1e9), tiny_engine(engine_version=version),
                     block_manager=manager)


# -- running set ---------------------------------------------------------------------------------

def test_kv_groups_counts_conv_and_ssm_apart():
    assert _cm().kv_groups() == 3                       # attention, conv, SSM (as the fork's Jamba)
    assert _cm(conv=False).kv_groups() == 2             # a Mamba type without a conv state: one group
    assert CostModel(tiny_profile(), tiny_gpu(), tiny_engine()).kv_groups() == 1


def test_running_time_exact_per_fork():
    v0 = costmod.RUNNING_SCAN["v0"]
    per, uni = _cm(), _cm(manager="uniform")
    # A prefill step schedules 4 of 1000 running sequences: 996 wait unscheduled.
    assert uni.running_time(1000, 4) == pytest.approx(996 * v0.per_idle_seq_s)
    assert per.running_time(1000, 4) == pytest.approx(996 * v0.per_idle_seq_s + 1000 * 3 * v0.per_seq_group_s)
    # A decode step that schedules every running sequence: only the per-layer fork's group walk.
    assert uni.running_time(500, 500) == 0.0
    assert per.running_time(500, 500) == pytest.approx(500 * 3 * v0.per_seq_group_s)
    # v1 schedules every running request every step; its cost is per scheduled request.
    assert _cm(version="v1").running_time(1000, 4) == 0.0
    assert v0.per_idle_seq_s > 0 and v0.per_seq_group_s > 0


@settings(max_examples=40, deadline=None)
@given(r=st.integers(0, 2000), extra=st.integers(1, 100), s=st.integers(0, 50),
       manager=st.sampled_from(["uniform", "per_layer"]))
def test_running_time_grows_with_the_running_set(r, extra, s, manager):
    cm = _cm(manager=manager)
    s = min(s, r)
    assert cm.running_time(r + extra, s) > cm.running_time(r, s) >= 0.0


def test_loop_adds_running_cost_per_step_and_none_leaves_it_out():
    """The loop charges ``running_cost(len(running), len(step))`` once per step; without the hook
    (negative control) the same run costs only the steps."""
    specs = list(tiny_profile().specs)
    reqs = make_requests([(64, 3)] * 6)
    cfg = SchedulerConfig(max_num_seqs=8, token_budget=128, mixed=False, chunked_prefill=False,
                          enable_prefix_caching=False)
    calls: list[tuple[int, int]] = []

    def running_cost(n_running, n_sched):
        calls.append((n_running, n_sched))
        return 1e-3 * n_running

    mm = make_manager("jenga", specs, 1 << 24, tokens_per_page=16)
    trace, _ = run_loop(Scheduler(mm, cfg, [r.fresh_copy() for r in reqs]), mm, lambda step: 0.0,
                        running_cost=running_cost)
    assert len(calls) == len(trace)
    assert [c[0] for c in calls] == [t["num_running"] for t in trace]
    assert sum(t["dt_s"] for t in trace) == pytest.approx(1e-3 * sum(t["num_running"] for t in trace))
    # Prefill-first: some step leaves running sequences unscheduled while it admits others.
    assert any(n > s for n, s in calls)
    mm2 = make_manager("jenga", specs, 1 << 24, tokens_per_page=16)
    trace2, _ = run_loop(Scheduler(mm2, cfg, [r.fresh_copy() for r in reqs]), mm2, lambda step: 0.0)
    assert sum(t["dt_s"] for t in trace2) == 0.0


# -- Mamba layout copies -------------------------------------------------------------------------

def test_mamba_layout_bytes_exact_on_the_jenga_fork():
    cm = _cm()                                           # 3 Mamba layers, 1 GB/s
    pre = (20 * DI + 8 * DS) * 2
    dec = (8 * DI + 4 * DS) * 2
    assert cm.mamba_layout_time(1000, 0) == pytest.approx(3 * 1000 * pre / 1e9)
    assert cm.mamba_layout_time(0, 7) == pytest.approx(3 * 7 * dec / 1e9)
    assert cm.mamba_layout_time(1000, 7) == pytest.approx(3 * (1000 * pre + 7 * dec) / 1e9)


def test_mamba_layout_only_on_the_per_layer_v0_fork():
    # Negative controls: the baseline fork's upstream Mamba path, v1, a dense model.
    assert _cm(manager="uniform").mamba_layout_time(1000, 7) == 0.0
    assert _cm(version="v1").mamba_layout_time(1000, 7) == 0.0
    dense = CostModel(tiny_profile(), tiny_gpu(), tiny_engine(), block_manager="per_layer")
    assert dense.mamba_layout_time(1000, 7) == 0.0


def test_step_time_includes_layout_for_prefill_and_decode():
    per, uni = _cm(), _cm(manager="uniform")
    prefill, decode = [(512, 0, 0), (300, 0, 0)], [(1, 500, 0)] * 5
    # Same GPU model otherwise; the difference is the layout copies plus the (per-group) input
    # preparation that the per-layer fork also pays.
    d_pre = per.step_time(prefill) - uni.step_time(prefill)
    d_dec = per.step_time(decode) - uni.step_time(decode)
    def prep(b):
        return per.input_prep_time(b) - uni.input_prep_time(b)

    assert d_pre == pytest.approx(per.mamba_layout_time(812, 0) + prep(prefill), rel=1e-9)
    assert d_dec == pytest.approx(per.mamba_layout_time(0, 5) + prep(decode), rel=1e-9)
    assert per.mamba_layout_time(812, 0) > 0
