"""Model zoo → ModelProfile: exact specs for known configs, parameter counts, KV sharing, token drop."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.config import compose_cell, options
from harness.models import (
    CACHELESS_KINDS,
    ModelConfigError,
    estimate_params,
    kv_share_groups,
    layer_kinds,
    linear_flops_per_token,
    load_profile,
    token_drop_keep_ratios,
)
from harness.tools.pages import geometry, split_mamba_ratio
from jenga.spec import MambaSpec, page_geometry

ZOO = options("model")


@pytest.fixture(scope="module")
def zoo():
    return {name: compose_cell([f"model={name}"]).model for name in ZOO}


def _spec(profile, name):
    return next(s for s in profile.specs if s.name == name)


def test_zoo_covers_the_issue(zoo):
    need = {"llama3_1_8b", "llama3_1_70b", "llama3_1_70b_fp8", "llama3_2_11b_vision", "gemma2_9b", "gemma2_27b",
            "gemma3_12b", "ministral_8b", "jamba_1_5_mini", "llama4_scout", "character_70b_fp8", "character_8b",
            "pyramidkv_70b_fp8", "pyramidkv_8b", "gemma2_2b", "ministral_1b", "character_1b_fp8",
            "llama3_2_1b_fp8", "llava_onevision_7b", "internvl2_8b", "phi3_vision", "paligemma2_10b",
            # issue 22 section 1 (today's hybrid models)
            "gemma4_31b", "gemma4_26b_a4b", "granite_4_0_h_small", "granite_4_0_h_tiny", "granite_4_0_h_micro",
            "falcon_h1_7b", "minimax_m1", "jamba_1_7_mini", "jamba_1_7_large"}
    assert need <= set(zoo)


def test_every_profile_is_consistent(zoo):
    for name, m in zoo.items():
        p = load_profile(m)
        assert p.name == name
        assert len(p.layer_kinds) == p.num_layers
        names = [s.name for s in p.specs]
        assert len(names) == len(set(names)), name
        page_geometry(p.specs, 16)  # valid geometry
        assert 0 < p.active_params <= p.total_params
        assert p.weight_bytes == int(p.total_params * p.weight_dtype_bytes)
        # every attention decoder layer reads exactly one stored attention type (Mamba-style and
        # cache-less MLP-only layers, Nemotron-H's "-", read none)
        attn = sum((s.num_compute_layers or s.num_layers) for s in p.specs
                   if s.kind not in ("mamba", "vision_embedding"))
        assert attn == sum(k not in ("mamba", *CACHELESS_KINDS) for k in p.layer_kinds), name


def test_published_parameter_counts_match_the_shapes(zoo):
    """The shapes in each file reproduce its published total within 2% (a mistyped dimension
    shows up here); models without a published total use the estimate itself."""
    for name, m in zoo.items():
        est = estimate_params(m)
        if m.total_params is None:
            assert load_profile(m).total_params == est.total
        else:
            assert est.total == pytest.approx(m.total_params, rel=0.02), name
        if m.active_params is not None:
            assert est.active == pytest.approx(m.active_params, rel=0.02), name


def test_llama_8b_exact(zoo):
    p = load_profile(zoo["llama3_1_8b"])
    (full,) = p.specs
    assert (full.kind, full.num_layers, full.bytes_per_token_per_layer) == ("full", 32, 2 * 8 * 128 * 2)
    assert full.bytes_per_token == 128 * 1024  # 128 KiB per token (paper_facts §5)
    assert estimate_params(zoo["llama3_1_8b"]).total == 8_030_261_248
    assert linear_flops_per_token(p) == 2 * (8_030_261_248 - 128256 * 4096)


def test_mllama_cross_layers(zoo):
    p = load_profile(zoo["llama3_2_11b_vision"])
    assert [i for i, k in enumerate(p.layer_kinds) if k == "cross"] == [3, 8, 13, 18, 23, 28, 33, 38]
    assert _spec(p, "full").num_layers == 32 and _spec(p, "cross").num_layers == 8
    assert _spec(p, "cross").bytes_per_token == 32 * 1024
    assert p.vision.tokens_per_tile == 1601 and p.vision.max_tiles == 4 and p.vision.cross_attention
    assert p.extra["cross_attention_layers"] == [3, 8, 13, 18, 23, 28, 33, 38]


def test_gemma2_even_layers_slide(zoo):
    p = load_profile(zoo["gemma2_9b"])
    assert all((k == "sliding") == (i % 2 == 0) for i, k in enumerate(p.layer_kinds))
    assert _spec(p, "sliding").window == 4096
    assert p.extra["sliding_window_per_layer"][:3] == [4096, None, 4096]
    assert sum(s.bytes_per_token for s in p.specs) == 336 * 1024


def test_gemma3_and_ministral_patterns(zoo):
    g3 = load_profile(zoo["gemma3_12b"])
    assert (_spec(g3, "sliding").num_layers, _spec(g3, "full").num_layers) == (40, 8)
    assert [i for i, k in enumerate(g3.layer_kinds) if k == "full"] == [5, 11, 17, 23, 29, 35, 41, 47]
    assert _spec(g3, "sliding").window == 1024
    mi = load_profile(zoo["ministral_8b"])
    assert (_spec(mi, "sliding").num_layers, _spec(mi, "full").num_layers) == (27, 9)
    assert _spec(mi, "sliding").window == 32768
    assert sum(s.bytes_per_token for s in mi.specs) == 144 * 1024


def test_jamba_layers_and_state_bytes(zoo):
    p = load_profile(zoo["jamba_1_5_mini"])
    assert [i for i, k in enumerate(p.layer_kinds) if k == "full"] == [4, 12, 20, 28]
    mamba = _spec(p, "mamba")
    assert isinstance(mamba, MambaSpec) and mamba.num_layers == 28
    conv, ssm = 8192 * 3 * 2, 8192 * 16 * 2  # vLLM shapes: (d_inner, d_conv-1), (d_inner, d_state), bf16
    assert (mamba.conv_bytes_per_layer, mamba.state_bytes_per_layer) == (conv, conv + ssm)
    assert p.num_experts == 16 and p.experts_per_token == 2
    assert p.total_params > 4 * p.active_params


def test_jamba_lcm_ratios():
    """Combined Mamba state per type: ratio 133 for attention; the artifact's split conv/SSM layout
    gives the paper's 84x (= 1344 tokens at 16 tokens per page)."""
    p = load_profile(compose_cell(["model=jamba_1_5_mini"]).model)
    g = geometry(p, 16)
    assert {r.name: r.ratio for r in g.rows} == {"full": 133, "mamba": 4}
    assert g.large_page_bytes == math.lcm(4 * 16 * 4096, 28 * (8192 * 3 * 2 + 8192 * 16 * 2))
    assert split_mamba_ratio(p, 16) == (84, 448)


def test_llama4_chunked(zoo):
    p = load_profile(zoo["llama4_scout"])
    assert _spec(p, "chunked").chunk == 8192 and _spec(p, "chunked").num_layers == 36
    assert [i for i, k in enumerate(p.layer_kinds) if k == "full"][:3] == [3, 7, 11]
    assert sum(s.bytes_per_token for s in p.specs) == 192 * 1024


def test_character_kv_sharing_folds_into_num_layers(zoo):
    p = load_profile(zoo["character_70b_fp8"])
    full, sw = _spec(p, "full"), _spec(p, "sliding")
    assert (full.num_layers, full.num_compute_layers) == (7, 13)      # 13 global layers, pairs
    assert (sw.num_layers, sw.num_compute_layers) == (40, 67)         # runs of 5 -> 2+2+1, last run of 2
    assert full.bytes_per_token_per_layer == 2 * 1 * 128 * 2          # MQA, bf16 KV
    assert sw.window == 1024
    groups = p.extra["kv_share"]
    assert sorted(i for g in groups for i in g) == list(range(80))
    assert [5, 11] in groups and [0, 1] in groups and [4] in groups


@given(st.lists(st.sampled_from(["full", "sliding", "mamba", "cross"]), min_size=1, max_size=60),
       st.integers(1, 4))
def test_kv_share_groups_partition_layers(kinds, size):
    groups = kv_share_groups(kinds, size)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(len(kinds)))
    for g in groups:
        assert 1 <= len(g) <= size
        assert len({kinds[i] for i in g}) == 1
        if kinds[g[0]] != "full":  # non-global layers share only with adjacent layers
            assert g == list(range(g[0], g[0] + len(g)))
    if size == 1:
        assert len(groups) == len(kinds)


def test_pyramidkv_budget_schedule(zoo):
    m = zoo["pyramidkv_70b_fp8"]
    r = token_drop_keep_ratios(m)
    # layer 0: cos(0)=1 -> ratio 1.0 (keeps all); layer 1 keeps 0.2 + 0.8*ratio(1)
    ratio1 = 0.1 * (math.cos(math.pi / 80) + 1) / 2 + 0.9
    assert r[0] == 1.0 and r[1] == pytest.approx(0.2 + 0.8 * ratio1)
    assert all(a >= b for a, b in itertools.pairwise(r))  # deeper layers keep less
    assert r[-1] > 0.2
    p = load_profile(m)
    assert [s.num_layers for s in p.specs] == [20, 20, 20, 20]
    keeps = [s.keep_ratio for s in p.specs]
    assert keeps == sorted(keeps, reverse=True) and keeps[0] == 1.0
    # each bucket keeps its largest layer ratio: never below any member layer
    assert keeps[-1] == pytest.approx(max(sorted(r)[:20]), abs=1e-6)
    assert geometry(p).max_ratio == 1  # equal buckets: max-page == Jenga, as in the artifact


def test_bad_model_values_name_the_key(zoo):
    m = dict(zoo["llama3_1_8b"])
    with pytest.raises(ModelConfigError, match=r"dtype='int3'.*allowed"):
        load_profile({**m, "dtype": "int3"})
    with pytest.raises(ModelConfigError, match=r"unknown layer kinds \['sparse'\]"):
        layer_kinds({**m, "layer_pattern": ["sparse"]})
    with pytest.raises(ModelConfigError, match=r"layer_indices.cross has 99"):
        layer_kinds({**m, "layer_indices": {"cross": [99]}})
    with pytest.raises(ModelConfigError, match="sliding_window"):
        load_profile({**m, "layer_pattern": ["sliding"], "sliding_window": None})
