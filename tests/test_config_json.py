"""harness.config_json: a local HF config.json -> the same layer specs as the zoo's yaml for that model
(the yaml files were written from the same published configs), and one clear error otherwise."""

from __future__ import annotations

import json

import pytest

from harness.config import compose_cell
from harness.config_json import ConfigJsonError, model_conf_from_config_json, profile_from_config_json
from harness.models import load_profile

GPT_OSS_20B = {  # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (fields used)
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 24,
    "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
    "max_position_embeddings": 131072, "sliding_window": 128, "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "quantization_config": {"quant_method": "mxfp4"},
    "torch_dtype": "bfloat16"}
QWEN3_NEXT = {  # Qwen/Qwen3-Next-80B-A3B-Instruct config.json (fields used)
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48,
    "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 5120, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_experts": 512, "num_experts_per_tok": 10, "decoder_sparse_step": 1, "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 262144, "torch_dtype": "bfloat16", "attn_output_gate": True}
NEMOTRON = {  # nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json (fields used)
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 56,
    "hidden_size": 4480, "intermediate_size": 15680, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 131072, "ssm_state_size": 128, "conv_kernel": 4, "n_groups": 8,
    "mamba_num_heads": 128, "mamba_head_dim": 80, "torch_dtype": "bfloat16",
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"}
GEMMA4_31B = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": {
    "model_type": "gemma4_text", "num_hidden_layers": 60, "hidden_size": 5376, "intermediate_size": 21504,
    "num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4, "head_dim": 256,
    "global_head_dim": 512, "vocab_size": 262144, "sliding_window": 1024, "tie_word_embeddings": True,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10, "dtype": "bfloat16"}}

MINIMAX_M1 = {  # github.com/MiniMax-AI/MiniMax-M1 config.json (fields used; no torch_dtype published)
    "architectures": ["MiniMaxM1ForCausalLM"], "model_type": "minimax_m1", "num_hidden_layers": 80,
    "hidden_size": 6144, "intermediate_size": 9216, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 128, "num_local_experts": 32, "num_experts_per_tok": 2, "shared_intermediate_size": 0,
    "vocab_size": 200064, "max_position_embeddings": 10240000, "tie_word_embeddings": False,
    "attn_type_list": ([0] * 7 + [1]) * 10}
GRANITE_H_SMALL = {  # ibm-granite/granite-4.0-h-small config.json (fields used)
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "num_hidden_layers": 40,
    "hidden_size": 4096, "intermediate_size": 768, "shared_intermediate_size": 1536, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10, "vocab_size": 100352,
    "max_position_embeddings": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
    "mamba_expand": 2,
    "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4}
GRANITE_H_MICRO = {  # ibm-granite/granite-4.0-h-micro config.json (the published fields used; vocab, tie and dtype
    # are not in the copy found -- the family's values, as the zoo file assumes them)
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "num_hidden_layers": 40,
    "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_n_heads": 64, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "num_local_experts": 0,
    "shared_intermediate_size": 8192, "max_position_embeddings": 131072, "vocab_size": 100352,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4}


def _write(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _shape(specs):
    return sorted((s.kind, s.num_layers, s.bytes_per_token_per_layer, getattr(s, "window", None),
                   getattr(s, "state_bytes_per_layer", None)) for s in specs)


@pytest.mark.parametrize("zoo,cfg", [("gpt_oss_20b", GPT_OSS_20B), ("qwen3_next_80b_a3b", QWEN3_NEXT),
                                     ("nemotron_nano_9b_v2", NEMOTRON), ("gemma4_31b", GEMMA4_31B),
                                     ("minimax_m1", MINIMAX_M1), ("granite_4_0_h_small", GRANITE_H_SMALL),
                                     ("granite_4_0_h_micro", GRANITE_H_MICRO)])
def test_config_json_gives_the_zoo_specs(tmp_path, zoo, cfg):
    got = profile_from_config_json(_write(tmp_path, zoo, cfg))
    want = load_profile(compose_cell([f"model={zoo}"]).model)
    assert _shape(got.specs) == _shape(want.specs)
    assert got.layer_kinds == want.layer_kinds
    # same shapes -> same parameter estimate (within the few norms/biases the loader cannot know)
    assert got.total_params == pytest.approx(want.total_params, rel=0.01)


def test_dense_granite_hybrid_mlp_is_the_shared_mlp(tmp_path):
    """No routed experts: the layer's only MLP is shared_mlp (shared_intermediate_size wide), not
    intermediate_size (the experts' width); with experts, intermediate_size stays the experts' width."""
    dense = profile_from_config_json(_write(tmp_path, "d", dict(GRANITE_H_MICRO, intermediate_size=512)))
    assert dense.total_params == profile_from_config_json(_write(tmp_path, "e", GRANITE_H_MICRO)).total_params
    moe = model_conf_from_config_json(_write(tmp_path, "m", GRANITE_H_SMALL))
    assert moe["intermediate_size"] == 768 and moe["moe"]["expert_intermediate_size"] == 768


def test_gpt_oss_weights_are_mxfp4(tmp_path):
    p = profile_from_config_json(_write(tmp_path, "g", GPT_OSS_20B))
    assert p.weight_dtype_bytes < 1.0          # experts at 4.25 bits; bf16 would be 2.0
    q = dict(GPT_OSS_20B, quantization_config=None)
    assert profile_from_config_json(_write(tmp_path, "h", q)).weight_dtype_bytes == 2


def test_unknown_architecture_names_the_missing_fields(tmp_path):
    cfg = {"architectures": ["FooHybridForCausalLM"], "model_type": "foo_hybrid", "hidden_size": 1024,
           "num_attention_heads": 8, "mamba_state": 64}
    with pytest.raises(ConfigJsonError) as e:
        model_conf_from_config_json(_write(tmp_path, "foo", cfg))
    msg = str(e.value)
    assert "foo_hybrid" in msg and "num_hidden_layers" in msg and "vocab_size" in msg
    assert msg.count("\n") == 0  # one line


def test_recurrent_layers_without_state_shape_are_refused(tmp_path):
    cfg = dict(QWEN3_NEXT)
    del cfg["linear_num_value_heads"]
    with pytest.raises(ConfigJsonError, match="linear_num_value_heads"):
        model_conf_from_config_json(_write(tmp_path, "q", cfg))


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ConfigJsonError, match="no config.json"):
        model_conf_from_config_json(tmp_path / "nope")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(ConfigJsonError, match="not readable JSON"):
        model_conf_from_config_json(tmp_path / "bad")


def test_plain_llama_is_all_full_attention(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
           "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    p = profile_from_config_json(_write(tmp_path, "llama", cfg))
    assert [(s.kind, s.num_layers, s.bytes_per_token_per_layer) for s in p.specs] == [("full", 32, 2 * 8 * 128 * 2)]
