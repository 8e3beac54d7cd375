"""vllm_hma against vLLM 0.32's own code (``make test-vllm``): the recurrent-state bytes from vLLM's
shape calculators, and for every hybrid zoo model the planner's groups, block sizes, block count and
the KV cache size / max concurrency vLLM reports (``get_kv_cache_capacity``) -- all exact."""

from __future__ import annotations

import pytest

from harness.backends.vllm.plan import have_vllm
from harness.config import compose_cell
from harness.models import load_profile

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]

HYBRIDS = ["gemma3_4b", "gemma3_12b", "gemma3_27b", "gemma4_31b", "gpt_oss_20b", "gpt_oss_120b",
           "qwen3_next_80b_a3b", "qwen3_5_4b", "qwen3_5_35b_a3b", "nemotron_nano_9b_v2", "jamba_1_5_mini"]
GiB = 1 << 30


def _profile(name):
    return load_profile(compose_cell([f"model={name}"]).model)


@pytest.mark.parametrize("name", ["qwen3_next_80b_a3b", "qwen3_5_4b", "qwen3_5_35b_a3b", "nemotron_nano_9b_v2"])
def test_state_bytes_match_vllms_shape_calculator(name):
    import math

    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as C
    m = compose_cell([f"model={name}"]).model
    ls = m.extra.linear_state
    if ls.kind == "gdn":
        shapes = C.gated_delta_net_state_shape(1, ls.num_k_heads, ls.num_v_heads, ls.head_k_dim, ls.head_v_dim,
                                               ls.conv_kernel)
    else:
        shapes = C.mamba2_state_shape(1, ls.num_heads * ls.head_dim, ls.n_groups, ls.num_heads, ls.head_dim,
                                      ls.d_state, ls.d_conv)
    size = {"bfloat16": 2, "float32": 4}
    conv, state = (math.prod(s) for s in shapes)
    want = conv * 2 + state * size[ls.state_dtype]
    spec = next(s for s in _profile(name).specs if s.kind == "mamba")
    assert spec.state_bytes_per_layer == want
    assert spec.conv_bytes_per_layer == conv * torch.tensor([], dtype=torch.bfloat16).element_size()


@pytest.mark.parametrize("name", HYBRIDS)
def test_vllm_hma_geometry_and_reported_capacity_match_vllm(name, tmp_path):
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    import jenga
    from harness.backends.vllm.plan import (
        EngineKnobs,
        make_vllm_config,
        plan_kv_cache,
        vllm_layer_specs,
        write_proxy_model_dir,
    )
    from jenga.baselines.vllm_hma import reported_capacity
    prof = _profile(name)
    mml, budget = 32768, 40 * GiB
    knobs = EngineKnobs(hybrid=True, block_size=16, max_model_len=mml, max_num_batched_tokens=8192,
                        enable_prefix_caching=True)
    vc = make_vllm_config(prof, knobs, write_proxy_model_dir(prof, mml, tmp_path / "m"))
    has_mamba = any(s.kind == "mamba" for s in prof.specs)
    planned = plan_kv_cache(vc, vllm_layer_specs(prof, 16, "align" if has_mamba else "none"), budget)
    kvc = planned.kv_cache_config
    vllm_tokens, vllm_conc = get_kv_cache_capacity(vc, kvc)

    mm = jenga.make_manager("vllm_hma", prof.specs, budget, enable_prefix_cache=True)
    ours = reported_capacity(mm, mml, max_num_batched_tokens=8192, max_concurrent_batches=vc.max_concurrent_batches)
    vgroups = sorted(g.kv_cache_spec.block_size for g in kvc.kv_cache_groups)
    assert vgroups == sorted(t.tokens_per_page for t in mm.types), name
    assert kvc.num_blocks == ours["num_blocks"], name
    assert vllm_conc == pytest.approx(ours["max_concurrency"], rel=1e-12), name
    assert vllm_tokens == ours["kv_capacity_tokens"], name
