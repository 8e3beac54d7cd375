"""HF config.json writer for dummy-weight vLLM runs (runs without vLLM)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.backends.vllm.hf_config import (
    SUPPORTED_ARCHITECTURES,
    HFConfigError,
    hf_config_dict,
    write_hf_config,
)
from harness.backends.vllm.tiny import tiny_profile
from harness.config import compose_cell, options
from harness.models import load_profile


def test_tiny_gemma2_config_has_the_profile_shapes(tmp_path):
    path = write_hf_config(tiny_profile(), tmp_path / "m")
    cfg = json.loads(path.read_text())
    assert path == tmp_path / "m" / "config.json"
    assert cfg["architectures"] == ["Gemma2ForCausalLM"] and cfg["model_type"] == "gemma2"
    assert cfg["num_hidden_layers"] == 4
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"] * 2
    assert cfg["sliding_window"] == 256
    assert (cfg["num_key_value_heads"], cfg["head_dim"], cfg["hidden_size"]) == (1, 32, 64)
    assert cfg["torch_dtype"] == "float32" and cfg["max_position_embeddings"] == 2048


def test_interleaved_mistral_is_written_as_llama_with_layer_types():
    prof = load_profile(compose_cell(["model=ministral_8b"]).model)
    cfg = hf_config_dict(prof)
    assert cfg["architectures"] == ["LlamaForCausalLM"]  # vLLM's llama.py reads per-layer layer_types
    assert cfg["layer_types"].count("full_attention") == 9
    assert cfg["layer_types"].count("sliding_attention") == 27
    assert cfg["sliding_window"] == 32768


def test_jamba_period_and_offset_come_from_the_layer_pattern():
    prof = load_profile(compose_cell(["model=jamba_1_5_mini"]).model)
    cfg = hf_config_dict(prof)
    assert (cfg["attn_layer_period"], cfg["attn_layer_offset"]) == (8, 4)
    assert cfg["num_experts"] == 16 and cfg["num_experts_per_tok"] == 2
    assert (cfg["mamba_d_state"], cfg["mamba_d_conv"], cfg["mamba_expand"]) == (16, 4, 2)


def test_non_periodic_jamba_pattern_is_refused():
    prof = load_profile(compose_cell(["model=jamba_1_5_mini"]).model)
    kinds = list(prof.layer_kinds)
    kinds[0], kinds[4] = "full", "mamba"
    kinds[1] = "full"
    with pytest.raises(HFConfigError, match="not periodic"):
        hf_config_dict(dataclasses.replace(prof, layer_kinds=tuple(kinds)))


@pytest.mark.parametrize("model,needle", [
    ("character_8b", "shares KV"),              # cross-layer KV sharing
    ("pyramidkv_8b", "token_drop"),              # per-layer token dropping
    ("llama3_2_11b_vision", "not served by vLLM >= 0.11"),
])
def test_inexpressible_models_name_the_reason_and_a_backend(model, needle):
    prof = load_profile(compose_cell([f"model={model}"]).model)
    with pytest.raises(HFConfigError) as e:
        hf_config_dict(prof)
    assert needle in str(e.value) and "backend=sim" in str(e.value)


def test_unknown_architecture_lists_the_supported_ones():
    prof = dataclasses.replace(tiny_profile(), architecture="FooForCausalLM")
    with pytest.raises(HFConfigError) as e:
        hf_config_dict(prof)
    for arch in SUPPORTED_ARCHITECTURES:
        assert arch in str(e.value)


def test_every_zoo_model_either_writes_or_says_why(tmp_path):
    written = []
    for name in options("model"):
        prof = load_profile(compose_cell([f"model={name}"]).model)
        try:
            cfg = json.loads(write_hf_config(prof, tmp_path / name).read_text())
        except HFConfigError as e:
            assert name in str(e) and "backend=" in str(e)
            continue
        written.append(name)
        assert cfg["num_hidden_layers"] == len(prof.layer_kinds)
        assert cfg["num_key_value_heads"] == prof.num_kv_heads and cfg["head_dim"] == prof.head_dim
    assert {"llama3_1_8b", "gemma2_9b", "gemma3_12b", "ministral_8b", "jamba_1_5_mini"} <= set(written)


def test_qwen_with_per_layer_windows_is_refused():
    with pytest.raises(HFConfigError, match="per-layer sliding windows"):
        hf_config_dict(tiny_profile(architecture="Qwen2ForCausalLM"))
