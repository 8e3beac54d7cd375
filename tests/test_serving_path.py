"""The API server's per-sequence output processing (harness/backends/cost/model.py ``OutputProc``; issue 9 §0,
docs/fidelity/serving_path.md): serial after the forward when v0's async output processing is off
(enforce_eager, --disable-async-output-proc), overlapped otherwise, absent on v1."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost.model import OUTPUT_PROC, CostModel, OutputProc

PER_SEQ = OUTPUT_PROC["v0"].per_seq_s


def _pair(**engine):
    """The cell's cost model and the same with the output term zeroed (the 'before')."""
    cm = CostModel(tiny_profile(), tiny_gpu(), tiny_engine(**engine))
    zero = CostModel(tiny_profile(), tiny_gpu(), tiny_engine(**engine))
    zero.output_proc = OutputProc(per_seq_s=0.0)
    return cm, zero


def test_measured_constant_is_positive_and_v1_has_none():
    # Negative control for the comparisons below: with a zero constant they would pass vacuously.
    assert PER_SEQ == pytest.approx(12e-6)
    assert OUTPUT_PROC["v1"].per_seq_s == 0.0


@pytest.mark.parametrize("b", [1, 7, 52])
def test_eager_v0_adds_per_sequence_output_serially_exact(b):
    cm, zero = _pair(enforce_eager=True)
    assert not cm.async_output
    batch = [(1, 500, 0)] * b
    assert cm.step_time(batch) - zero.step_time(batch) == pytest.approx(b * PER_SEQ, rel=1e-9)


def test_disable_async_output_proc_makes_graphed_v0_serial():
    cm, zero = _pair(enforce_eager=False, disable_async_output_proc=True)
    assert not cm.async_output
    batch = [(1, 500, 0)] * 10
    assert cm.step_time(batch) - zero.step_time(batch) == pytest.approx(10 * PER_SEQ, rel=1e-9)


def test_async_v0_hides_output_under_the_forward_exact():
    cm, zero = _pair(enforce_eager=False)
    assert cm.async_output
    # A graphed decode step: launch 0, GPU time far above 10 × 12 µs → nothing added.
    batch = [(1, 500, 0)] * 10
    assert cm.step_time(batch) == zero.step_time(batch)
    # Exact overlap rule: max(gpu, launch + out).
    assert cm.output_time(1e-3, 0.0, 10) == 1e-3
    assert cm.output_time(1e-4, 0.0, 10) == pytest.approx(10 * PER_SEQ)
    assert cm.output_time(1e-4, 2e-4, 10) == pytest.approx(2e-4 + 10 * PER_SEQ)


def test_v1_has_no_output_term():
    cm, zero = _pair(engine_version="v1", enforce_eager=True)
    batch = [(1, 500, 0)] * 20
    assert cm.step_time(batch) == zero.step_time(batch)


@settings(max_examples=60, deadline=None)
@given(gpu=st.floats(0, 1), launch=st.floats(0, 1), seqs=st.integers(0, 2000), eager=st.booleans())
def test_output_time_monotone_and_bounded(gpu, launch, seqs, eager):
    cm = CostModel(tiny_profile(), tiny_gpu(), tiny_engine(enforce_eager=eager))
    t = cm.output_time(gpu, launch, seqs)
    assert cm.output_time(gpu, launch, seqs + 1) >= t
    assert cm.output_time(gpu + 0.01, launch, seqs) >= t
    # Never below the forward, never above the fully serial sum.
    assert max(gpu, launch) <= t <= max(gpu, launch) + seqs * PER_SEQ + 1e-12


def _load_bench():
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_serving_path.py"
    spec = importlib.util.spec_from_file_location("bench_serving_path", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.vllm
def test_bench_serving_path_runs_small():
    pytest.importorskip("tokenizers")
    pytest.importorskip("prometheus_client")
    bench = _load_bench()
    tok, texts = bench.build_tokenizer(vocab_size=400, max_bytes=50_000)
    assert bench.bench_detok(tok, texts, seqs=4, steps=10) > 0
    assert bench.bench_request_output(seqs=4, steps=5) > 0
    assert bench.bench_pickle(seqs=4, steps=5) > 0
    assert bench.bench_stats(seqs=4, steps=5) > 0
