"""HF config.json writer for dummy-weight vLLM runs (runs without vLLM)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

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


@pytest.mark.slow
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
    assert {"llama3_1_8b", "gemma2_9b", "gemma3_12b", "ministral_8b", "jamba_1_5_mini", "llama4_scout"} <= set(written)


def test_qwen_with_per_layer_windows_is_refused():
    with pytest.raises(HFConfigError, match="per-layer sliding windows"):
        hf_config_dict(tiny_profile(architecture="Qwen2ForCausalLM"))


# -- Llama 4 Scout ----------------------------------------------------------------------------------

def _scout():
    return load_profile(compose_cell(["model=llama4_scout"]).model)


def test_scout_text_config_has_the_zoo_shapes_and_layer_pattern():
    prof = _scout()
    cfg = hf_config_dict(prof)
    assert cfg["architectures"] == ["Llama4ForCausalLM"] and cfg["model_type"] == "llama4_text"
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["head_dim"]) == (48, 5120, 40, 8, 128)
    # vLLM's Llama4Attention: no_rope_layers[i] == 0 -> NoPE full attention, else chunked local
    assert cfg["no_rope_layers"] == [1, 1, 1, 0] * 12
    assert [("full" if r == 0 else "chunked") for r in cfg["no_rope_layers"]] == list(prof.layer_kinds)
    assert cfg["attention_chunk_size"] == 8192
    # 16 routed experts top-1 + shared expert on every layer; dense width for intermediate_size_mlp
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["interleave_moe_layer_step"]) == (16, 1, 1)
    assert cfg["moe_layers"] == list(range(48))
    assert (cfg["intermediate_size"], cfg["intermediate_size_mlp"]) == (8192, 16384)
    assert cfg["rope_theta"] == 500000.0 and cfg["rope_scaling"]["rope_type"] == "llama3"
    assert cfg["rope_scaling"]["factor"] == 16.0 and cfg["max_position_embeddings"] == 10485760
    assert cfg["vocab_size"] == 202048 and cfg["torch_dtype"] == "bfloat16"


def test_scout_published_layout_wraps_the_same_text_config():
    prof = _scout()
    served, published = hf_config_dict(prof), hf_config_dict(prof, multimodal=True)
    assert published["architectures"] == ["Llama4ForConditionalGeneration"] and published["model_type"] == "llama4"
    assert {"architectures": ["Llama4ForCausalLM"], **published["text_config"],
            "jenga_harness_profile": prof.name} == served
    vis = published["vision_config"]
    assert (vis["model_type"], vis["hidden_size"], vis["num_hidden_layers"], vis["vision_output_dim"]) == (
        "llama4_vision_model", 1408, 34, 4096)
    with pytest.raises(HFConfigError, match="Llama 4 only"):
        hf_config_dict(tiny_profile(), multimodal=True)


def test_nope_layers_follow_the_profile_not_an_interval():
    prof = _scout()
    kinds = ("full",) + prof.layer_kinds[1:]  # one more full layer, off the every-4th pattern
    cfg = hf_config_dict(dataclasses.replace(prof, layer_kinds=kinds))
    assert cfg["no_rope_layers"][:4] == [0, 1, 1, 0]


@pytest.mark.parametrize("change,needle", [
    ({"moe": {"num_experts": 16, "experts_per_token": 1, "expert_layer_period": 2, "expert_layer_offset": 0,
              "shared_expert": True}}, "offset = period - 1"),
    ({"moe": {"num_experts": 16, "experts_per_token": 1, "shared_expert": False}}, "shared expert"),
])
def test_llama4_moe_layouts_vllm_cannot_build_are_refused(change, needle):
    prof = _scout()
    with pytest.raises(HFConfigError, match=needle) as e:
        hf_config_dict(dataclasses.replace(prof, extra={**prof.extra, **change}))
    assert "backend=sim" in str(e.value)


def test_llama4_needs_one_chunk_size_and_only_llama4_writes_chunks():
    from jenga.spec import ChunkedLocalSpec
    prof = _scout()
    two = tuple(s if not isinstance(s, ChunkedLocalSpec) else dataclasses.replace(s, num_layers=18, num_compute_layers=18)
                for s in prof.specs) + (ChunkedLocalSpec("chunked2", 18, 4096, chunk=4096),)
    with pytest.raises(HFConfigError, match="one attention_chunk_size"):
        hf_config_dict(dataclasses.replace(prof, specs=two))
    with pytest.raises(HFConfigError, match="written only as a Llama 4 config"):
        hf_config_dict(dataclasses.replace(prof, architecture="LlamaForCausalLM"))


def test_tiny_llama4_is_dense_and_moe_interleaved():
    from harness.backends.vllm.tiny import tiny_llama4_profile
    cfg = hf_config_dict(tiny_llama4_profile())
    assert cfg["no_rope_layers"] == [1, 1, 1, 0, 1] and cfg["attention_chunk_size"] == 256
    assert cfg["interleave_moe_layer_step"] == 2 and cfg["moe_layers"] == [1, 3]  # vLLM: (i + 1) % 2 == 0
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (1, 2, 0)  # inside the tiny vocab
    dense = hf_config_dict(dataclasses.replace(tiny_llama4_profile(), num_experts=0))
    assert dense["interleave_moe_layer_step"] == 0 and dense["moe_layers"] == []


def test_gpu_fig14_hands_llama4_to_vllm_where_8_gpus_are_visible():
    from harness.study.gpu_fig14 import build
    exp, skipped = build("h100", 8)
    cells = {c["model"]: c for c in exp["cells"]}
    assert cells["llama4_scout"]["systems"] == ["vllm", "hybrid_groups", "jenga"]
    assert cells["llama4_scout"]["gpu.count"] == 8
    assert not any(s.startswith("llama4_scout") for s in skipped)
    exp, skipped = build("h100", 1)
    assert "llama4_scout: needs 8 GPUs (tensor parallel), 1 visible" in skipped


def _fig14_stub(monkeypatch, tmp_path):
    """harness.study.gpu_fig14 with its output folder under tmp_path and a one-cell build (the
    real build composes every model, ~1.5 s; test_gpu_fig14_dry_run_script runs it)."""
    from harness.study import gpu_fig14 as fig14

    out = tmp_path / "repo" / "results" / "fig14_vllm"
    monkeypatch.setattr(fig14, "OUT", out)
    monkeypatch.setattr(fig14, "build", lambda gpu, n: ({"name": "fig14_vllm", "gpu": gpu, "cells": [{"model": "m"}]},
                                                        ["x: skipped"]))
    return fig14, out


def test_gpu_fig14_dry_run_writes_nothing_under_the_repo(monkeypatch, tmp_path, capsys):
    """`bash scripts/gpu_fig14.sh --dry-run` used to leave results/fig14_vllm/experiment.yaml
    (neither tracked nor ignored: a dirty `git status`); now the file goes to a temporary dir."""
    fig14, out = _fig14_stub(monkeypatch, tmp_path)
    monkeypatch.setattr("harness.study.cli.main", lambda argv: pytest.fail("a dry run ran the study"))
    assert fig14.main(["--dry-run", "--num-gpus", "1"]) == 0
    assert not out.exists() and not (tmp_path / "repo").exists()
    written = capsys.readouterr().out.split("wrote ", 1)[1].split(":", 1)[0]
    assert "fig14_vllm_dry_run_" in written and "model: m" in Path(written).read_text()


def test_gpu_fig14_real_run_still_writes_results_fig14_vllm(monkeypatch, tmp_path):
    """Negative control: without --dry-run the experiment file and the study go to results/fig14_vllm/."""
    fig14, out = _fig14_stub(monkeypatch, tmp_path)
    calls = []
    monkeypatch.setattr("harness.study.cli.main", lambda argv: calls.append(argv) or 0)
    assert fig14.main(["--num-gpus", "1", "mode=smoke"]) == 0
    assert (out / "experiment.yaml").exists()
    assert calls == [[str(out / "experiment.yaml"), "gpu=h100", "backend=vllm", "mode=smoke", "--jobs", "1",
                      "--out", str(out)]]


@pytest.mark.slow
def test_gpu_fig14_dry_run_script_leaves_git_status_clean(tmp_path):
    """The script itself, end to end (~2 s: every model's config is composed; no GPU or vLLM needed)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]

    def untracked():
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "results"],
                              cwd=root, capture_output=True, text=True, check=True).stdout

    before = untracked()
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(root), "TMPDIR": str(tmp_path)}
    r = subprocess.run(["bash", "scripts/gpu_fig14.sh", "--dry-run"], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert untracked() == before
    assert list(tmp_path.glob("fig14_vllm_dry_run_*/experiment.yaml"))
