"""Step-time model and KV capacity: exact values on hand-built profiles, span sums vs brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost import model as costmod
from harness.backends.cost.model import CostModel, _span_sum, profile_tokens
from jenga.spec import ChunkedLocalSpec, FullAttentionSpec, SlidingWindowSpec


def _brute(kind, spec, c, n):
    total = 0
    for i in range(c, c + n):
        if kind == "full":
            total += i + 1
        elif kind == "sliding":
            total += min(i + 1, spec.window)
        elif kind == "chunked":
            total += i % spec.chunk + 1
    return total


@given(c=st.integers(0, 300), n=st.integers(1, 300), w=st.integers(1, 64))
def test_span_sums_match_brute_force(c, n, w):
    specs = {"full": FullAttentionSpec("f", 1, 2), "sliding": SlidingWindowSpec("s", 1, 2, window=w),
             "chunked": ChunkedLocalSpec("c", 1, 2, chunk=w)}
    for kind, spec in specs.items():
        assert _span_sum(kind, spec, c, n) == _brute(kind, spec, c, n)


def test_kv_capacity_formula_exact():
    prof = tiny_profile(active_params=10**9)
    eng = tiny_engine(max_model_len=4096, max_num_seqs=8)
    cm = CostModel(prof, tiny_gpu(), eng)
    # Profiling pass (v0): 4096 tokens x (3*4096 + 4*1024) x 2 B; the sampler's sort over 8 rows
    # x 1000 logits x 32 B runs after the forward and is smaller, so it does not add.
    act = 4096 * (3 * 4096 + 4 * 1024) * 2
    assert cm.activation_peak_bytes() == act
    # v1 (token budget 8192): the forward plus 8 rows of fp32 logits.
    v1 = CostModel(prof, tiny_gpu(), tiny_engine(max_model_len=4096, max_num_seqs=8, engine_version="v1"))
    assert v1.activation_peak_bytes() == 8192 * (3 * 4096 + 4 * 1024) * 2 + 8 * 1000 * 4
    expected = int(80 * 2**30 * 0.9 - 2 * 10**9 - act - costmod.NON_TORCH_BYTES)
    assert cm.kv_capacity_bytes() == expected
    assert CostModel(prof, tiny_gpu(), tiny_engine(kv_cache_bytes=12345)).kv_capacity_bytes() == 12345


def test_capacity_grows_with_utilization_and_shrinks_with_budget():
    prof = tiny_profile()
    lo = CostModel(prof, tiny_gpu(), tiny_engine(gpu_memory_utilization=0.9)).kv_capacity_bytes()
    hi = CostModel(prof, tiny_gpu(), tiny_engine(gpu_memory_utilization=0.937)).kv_capacity_bytes()
    assert abs((hi - lo) - 0.037 * 80 * 2**30) < 2
    big = CostModel(prof, tiny_gpu(), tiny_engine(max_model_len=65536)).kv_capacity_bytes()
    assert big < lo


def test_no_memory_left_is_a_clear_error():
    prof = tiny_profile(active_params=50 * 10**9)
    with pytest.raises(ValueError, match="no KV cache memory"):
        CostModel(prof, tiny_gpu(), tiny_engine()).kv_capacity_bytes()


def test_profile_tokens_follow_vllm_defaults():
    assert profile_tokens(tiny_engine(), 131072) == 131072
    assert profile_tokens(tiny_engine(), 1024) == 2048
    assert profile_tokens(tiny_engine(engine_version="v1"), 131072) == 8192
    assert profile_tokens(tiny_engine(enable_chunked_prefill=True), 131072) == 512
    assert profile_tokens(tiny_engine(engine_version="v1", max_num_batched_tokens=2048), 131072) == 2048


def test_decode_step_exact_memory_bound():
    prof = tiny_profile(active_params=10**9, layers=2, bytes_per_token_per_layer=256)
    cm = CostModel(prof, tiny_gpu(), tiny_engine())
    batch = [(1, 999, 0)] * 4
    kv = 4 * 1000 * 256 * 2
    oh = cm.overhead
    # v0 input preparation: each of the 4 decode sequences' block table (1000 tokens = 63 blocks of
    # 16) goes through the uniform manager's copy + numpy write.
    prep = 4 * 63 * costmod.INPUT_PREP["v0"].uniform_entry_s
    assert cm.step_time(batch) == pytest.approx((2e9 + kv) / 1e12 + oh.step_s + 4 * oh.per_request_s + prep,
                                                rel=1e-12)


def test_prefill_compute_bound_fp8_and_tp():
    prof = tiny_profile(active_params=10**9)
    gpu = tiny_gpu()
    cm = CostModel(prof, gpu, tiny_engine())
    n = 8192
    flops = 2e9 * n + 4 * 8 * 128 * (n * (n + 1) // 2) * 2
    oh = cm.overhead
    # v0 prefill input preparation: tokens + positions and one slot mapping per prompt token, and
    # the 512-block table through the uniform manager.
    v0 = costmod.INPUT_PREP["v0"]
    prep = n * (v0.prefill_token_s + v0.slot_token_s) + 512 * v0.uniform_entry_s
    fixed = oh.step_s + oh.per_request_s + prep
    assert cm.step_time([(n, 0, 0)]) == pytest.approx(flops / 1e15 + fixed)
    fp8 = CostModel(tiny_profile(active_params=10**9, weight_dtype_bytes=1), gpu, tiny_engine())
    assert fp8.step_time([(n, 0, 0)]) == pytest.approx(flops / 2e15 + fixed)
    # TP2 without allreduce_* keys: per-direction link = interconnect / 2 = 5e10 B/s.
    tp2 = CostModel(prof, tiny_gpu(count=2), tiny_engine())
    comm = 2 * 2 * (costmod.ALLREDUCE_LATENCY_S + 2 * 0.5 * n * 1024 * 2 / 5e10)
    assert tp2.step_time([(n, 0, 0)]) == pytest.approx(flops / 2e15 + comm + fixed)


def test_sliding_window_decode_is_cheaper_than_full_at_long_context():
    full = tiny_profile()
    sw = tiny_profile(specs=(SlidingWindowSpec("sw", 2, 1024, window=512),), layer_kinds=("sliding",) * 2)
    b = [(1, 100_000, 0)] * 64
    assert CostModel(sw, tiny_gpu(), tiny_engine()).step_time(b) < CostModel(full, tiny_gpu(), tiny_engine()).step_time(b)


def test_eager_adds_launch_cost_and_v1_is_cheaper_per_request():
    prof = tiny_profile(layers=40)
    b = [(1, 10, 0)]
    graph = CostModel(prof, tiny_gpu(), tiny_engine()).step_time(b)
    eager = CostModel(prof, tiny_gpu(), tiny_engine(enforce_eager=True)).step_time(b)
    assert eager > graph
    many = [(1, 10, 0)] * 200
    assert CostModel(prof, tiny_gpu(), tiny_engine(engine_version="v1")).step_time(many) < \
        CostModel(prof, tiny_gpu(), tiny_engine()).step_time(many)
    with pytest.raises(ValueError, match="engine_version"):
        CostModel(prof, tiny_gpu(), tiny_engine(engine_version="v9"))


def test_fp8_keeps_embedding_and_lm_head_in_bf16():
    fp8 = tiny_profile(active_params=10**9, weight_dtype_bytes=1,
                       extra={"embedding_params": 1000, "tie_word_embeddings": False})
    assert CostModel.loaded_weight_bytes(fp8) == 10**9 + 2 * 1000
    tied = tiny_profile(active_params=10**9, weight_dtype_bytes=1,
                        extra={"embedding_params": 1000, "tie_word_embeddings": True})
    assert CostModel.loaded_weight_bytes(tied) == 10**9 + 1000
    assert CostModel.loaded_weight_bytes(tiny_profile(active_params=10**9)) == 2 * 10**9


def test_v0_profiling_peak_is_the_sampler_sort_when_it_exceeds_the_forward():
    # 2048 tokens over 256 dummy sequences of a 128k vocabulary (PyramidKV-like): v0's profiling
    # pass samples every sequence with top_k = vocab - 1, so the sort of 256 x 128256 logits at
    # 32 B each (0.98 GiB) is the peak, not the 2048-token forward; it is never divided by TP.
    prof = tiny_profile(active_params=10**9, vocab_size=128256)
    for count in (1, 4):
        cm = CostModel(prof, tiny_gpu(count=count), tiny_engine(max_model_len=2048, max_num_seqs=256))
        assert cm.activation_peak_bytes() == 256 * 128256 * costmod.SAMPLER_BYTES_PER_LOGIT


def test_fp8_profiling_peak_adds_the_quantized_mlp_input():
    # FP8 linears quantize their input (w8a8_utils.apply_fp8_linear): at the down projection one
    # byte per intermediate element more is live than for bf16 weights; a bf16 model of the same
    # shape is the control.
    eng = tiny_engine(max_model_len=4096, max_num_seqs=8)
    bf16 = CostModel(tiny_profile(active_params=10**9), tiny_gpu(), eng).activation_peak_bytes()
    fp8 = CostModel(tiny_profile(active_params=10**9, weight_dtype_bytes=1), tiny_gpu(), eng)
    assert fp8.activation_peak_bytes() - bf16 == 4096 * 4096 * costmod.FP8_QUANT_INPUT_BYTES


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 9000), c=st.integers(0, 200_000))
def test_one_token_decode_closed_forms_equal_the_general_sums(size, c):
    """step_time sums a batch's one-token decodes of sliding and chunked layers in closed form
    (min(c + 1, W) and (c mod chunk) + 1 keys each); they must equal _span_sum and _keys_read at
    n = 1, which the prefill entries still use. Negative control: at n = 2 the forms differ."""
    from types import SimpleNamespace

    from harness.backends.cost.model import _keys_read, _span_sum

    spec = SimpleNamespace(window=size, chunk=size)
    assert _span_sum("sliding", spec, c, 1) == _keys_read("sliding", spec, c, 1) == (c + 1 if c < size else size)
    assert _span_sum("chunked", spec, c, 1) == _keys_read("chunked", spec, c, 1) == c % size + 1
    assert _span_sum("sliding", spec, c, 2) != (c + 1 if c < size else size)
