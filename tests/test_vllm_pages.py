"""Page geometry: vLLM's KV cache planner vs our UniformPaged / HybridGroups, for every zoo model.

Where the designs agree (hybrid manager off ↔ UniformPaged, on ↔ HybridGroups) groups, tokens per
block, bytes per block and block counts must be identical. The documented differences by design:
- cross-attention (Llama-3.2-Vision): vLLM >= 0.11 serves no mllama, and its scheduler has no
  cross-attention manager for decoder models, so there is nothing to plan;
- token dropping (PyramidKV): vLLM has no such layer type;
- Mamba hybrids with the hybrid manager off: vLLM refuses to start ("Failed to promote");
- Jenga's LCM pool: one large page = LCM of per-type small pages, vs vLLM's equal pages.
"""

from __future__ import annotations

import math

import pytest

from harness.backends.vllm.plan import have_vllm
from harness.config import compose_cell, options
from harness.models import load_profile
from harness.tools.vllm_pages import MAX_PLAN_LEN

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]

BUDGET = 16 << 30
ATTENTION = ("full", "sliding", "chunked")


@pytest.fixture(scope="module")
def rows():
    from harness.tools.vllm_pages import compare
    cache: dict = {}
    out = {}
    for name in options("model"):
        prof = load_profile(compose_cell([f"model={name}"]).model)
        out[name] = (prof, compare(prof, BUDGET, 16, cache))
    return out


def test_planner_agrees_with_ours_wherever_the_designs_agree(rows):
    checked = 0
    for name, (prof, (off, on)) in rows.items():
        kinds = {s.kind for s in prof.specs}
        for r in (off, on):
            if {"cross"} & kinds:
                assert "'cross'" in r.vllm_error, name
            elif {"token_drop"} & kinds:
                assert "'token_drop'" in r.vllm_error, name
            elif "mamba" in kinds and not r.hybrid:
                assert "Failed to promote" in r.vllm_error, name
            elif not r.hybrid and not r.vllm_error and not r.agree and len(
                    {s.bytes_per_token // s.num_layers for s in prof.specs if s.kind in ATTENTION}) > 1:
                # hybrid manager off on a model whose layers' pages differ (Gemma-4-26B-A4B: its full
                # layers have other KV heads and head size than its sliding ones): vLLM 0.32 plans one
                # FullAttentionSpec group labelled with the largest layer page, so its bytes per
                # block read 30 x that page; the block count -- the capacity -- is the same as ours
                assert r.vllm_num_blocks == r.ours_num_pages and r.vllm_groups[0][2] == sum(
                    s.num_layers for s in prof.specs if s.kind in ATTENTION), (name, r)
                checked += 1
            elif r.vllm_error and "is needed, which is larger than" in r.vllm_error:
                # hybrid manager off on a model whose 32k request needs more than the budget
                # (Gemma-4-31B: 27.5 GiB): vLLM refuses to start; ours cannot hold one either
                assert not r.hybrid and r.ours_num_pages * 16 < MAX_PLAN_LEN, (name, r)
            else:
                assert r.agree, (name, r)
                checked += 1
    assert checked >= 30


def test_hybrid_off_is_one_group_of_every_layer_at_the_uniform_page(rows):
    prof, (off, _) = rows["gemma3_12b"]
    assert off.vllm_groups == [("FullAttentionSpec", 16, 48)]
    page = 16 * sum(s.bytes_per_token for s in prof.specs)
    assert off.vllm_bytes_per_block == page and off.vllm_num_blocks == BUDGET // page


def test_hybrid_on_gives_equal_pages_where_jenga_gives_an_lcm_page(rows):
    prof, (_, on) = rows["gemma3_12b"]
    # 40 sliding + 8 full layers: vLLM deals them into 6 groups of 8 layers, all pages equal
    assert sorted(on.vllm_groups) == sorted([("SlidingWindowSpec", 16, 8)] * 5 + [("FullAttentionSpec", 16, 8)])
    small = [s.small_page_bytes(16) for s in prof.specs]
    assert on.jenga_large_page_bytes == math.lcm(*small) != on.vllm_bytes_per_block


def test_jamba_attention_block_is_raised_to_cover_the_mamba_state(rows):
    prof, (_, on) = rows["jamba_1_5_mini"]
    attn = [b for s, b, _ in on.vllm_groups if s == "FullAttentionSpec"]
    mamba_layer = next(s for s in prof.specs if s.kind == "mamba").state_bytes_per_layer
    attn_layer_token = next(s for s in prof.specs if s.kind == "full").bytes_per_token_per_layer
    assert attn == [16 * math.ceil(mamba_layer / (16 * attn_layer_token))]
    assert on.agree


def test_llama4_scout_chunked_and_full_groups(rows):
    # 36 chunked-local + 12 full layers of equal pages: vLLM deals them into 4 groups of 12, and with
    # the hybrid manager off promotes every layer to full attention in one group
    _, (off, on) = rows["llama4_scout"]
    assert sorted(on.vllm_groups) == sorted([("ChunkedLocalAttentionSpec", 16, 12)] * 3 + [("FullAttentionSpec", 16, 12)])
    assert off.vllm_groups == [("FullAttentionSpec", 16, 48)]
    assert on.agree and off.agree
