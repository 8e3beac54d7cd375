"""A local Hugging Face ``config.json`` → a model config of the zoo (``ModelConf`` fields) → profile.

So a user can point the what-if lab (``python -m harness.whatif model=path/to/config.json``) at their
own checkpoint without writing a ``harness/conf/model/*.yaml``. Nothing is downloaded: the file is
read from disk. What each architecture's fields mean follows the HF ``configuration_*.py`` of that
``model_type`` and vLLM's model code for which layers keep which cache:

- per-layer attention type: ``layer_types`` (``full_attention`` / ``sliding_attention`` /
  ``linear_attention`` / ``mamba`` / ``attention``), else Gemma-3's ``sliding_window_pattern``,
  Gemma-2's alternation, Qwen3-Next's ``full_attention_interval``, Nemotron-H's
  ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP), Jamba's
  ``attn_layer_period/offset``, Llama-4's ``attention_chunk_size`` with ``no_rope_layer_interval``,
  MiniMax's ``attn_type_list``;
- Gemma-4's per-type KV shapes (``num_global_key_value_heads``, ``global_head_dim``);
- recurrent states with vLLM's shapes (``harness.models.linear_state_bytes``): gated DeltaNet
  (``linear_*`` keys), Mamba-2 (``mamba_num_heads``/``mamba_n_heads`` ...), Mamba-1 (Jamba), MiniMax
  lightning attention (``attn_type_list``).

A config whose fields the loader cannot place raises one :class:`ConfigJsonError` naming the file,
the ``model_type`` and every missing field, before anything else runs. Parameter counts are
estimated from the shapes (``total_params: null``); the result is labelled ``assumed`` where a
value had to be defaulted (the KV dtype is the model dtype, vLLM's ``kv_cache_dtype=auto``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.models import ModelProfile, load_profile

# Fields every decoder-only config needs, whatever the architecture.
BASE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


class ConfigJsonError(ValueError):
    """The config.json cannot be turned into layer specs; the message names the missing fields."""


def _text(cfg: dict) -> dict:
    """Multimodal configs (Gemma-3/4, Qwen3.5, Llama-4) keep the language model in ``text_config``."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        out = {**{k: v for k, v in cfg.items() if k != "text_config"}, **inner}
        out["architectures"] = cfg.get("architectures") or inner.get("architectures")
        out["model_type"] = cfg.get("model_type") or inner.get("model_type")
        return out
    return dict(cfg)


def _kinds(c: dict, need: list[str]) -> list[str] | None:
    """Per-layer kinds, or None (with the fields that would decide them appended to ``need``)."""
    n = c.get("num_hidden_layers")
    lt = c.get("layer_types") or c.get("layers_block_type")
    mt = c.get("model_type", "")
    table = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding", "sliding": "sliding",
             "linear_attention": "mamba", "mamba": "mamba", "chunked_attention": "chunked", "mlp": "mlp"}
    if isinstance(lt, list) and lt:
        bad = sorted({x for x in lt if x not in table})
        if bad:
            need.append(f"layer_types values {bad} (known: {sorted(table)})")
            return None
        return [table[x] for x in lt]
    if isinstance(c.get("attn_type_list"), list) and c["attn_type_list"]:
        # MiniMax-Text-01 / MiniMax-M1: 0 = lightning (linear) attention, 1 = softmax attention
        bad = sorted({x for x in c["attn_type_list"] if x not in (0, 1)})
        if bad:
            need.append(f"attn_type_list values {bad} (known: 0 lightning, 1 softmax)")
            return None
        return ["full" if x == 1 else "mamba" for x in c["attn_type_list"]]
    if isinstance(c.get("hybrid_override_pattern"), str):
        pat = c["hybrid_override_pattern"]
        bad = sorted(set(pat) - set("M*-"))
        if bad:
            need.append(f"hybrid_override_pattern characters {bad} (known: M, *, -)")
            return None
        return [{"M": "mamba", "*": "full", "-": "mlp"}[ch] for ch in pat]
    if n is None:
        return None
    if c.get("full_attention_interval"):
        k = int(c["full_attention_interval"])
        return ["full" if (i + 1) % k == 0 else "mamba" for i in range(n)]
    if c.get("attn_layer_period"):
        p, o = int(c["attn_layer_period"]), int(c.get("attn_layer_offset", 0))
        return ["full" if i % p == o else "mamba" for i in range(n)]
    if c.get("attention_chunk_size"):
        k = int(c.get("no_rope_layer_interval", 4))
        return ["full" if (i + 1) % k == 0 else "chunked" for i in range(n)]
    if c.get("sliding_window_pattern") and c.get("sliding_window"):
        k = int(c["sliding_window_pattern"])
        return ["full" if (i + 1) % k == 0 else "sliding" for i in range(n)]
    if mt == "gemma2" and c.get("sliding_window"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if any(k.startswith(("mamba", "linear_", "ssm_")) for k in c):
        need.append("a per-layer type field (layer_types, hybrid_override_pattern, full_attention_interval "
                    "or attn_layer_period) for the recurrent layers")
        return None
    if c.get("sliding_window") and c.get("use_sliding_window", True):
        return ["sliding"] * n  # Mistral-7B-v0.1 style: every layer slides
    return ["full"] * n


def _linear_state(c: dict, need: list[str], kinds: list[str]) -> dict | None:
    if "mamba" not in kinds:
        return None
    # vLLM 0.32 (model_executor/models/config.py): NemotronH keeps the SSM state in the config's
    # mamba_ssm_cache_dtype, else float32; Qwen3.5 in mamba_ssm_dtype; others in the model dtype.
    default = "float32" if c.get("model_type") == "nemotron_h" else (c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    ssm_dtype = c.get("mamba_ssm_cache_dtype") or c.get("mamba_ssm_dtype") or default
    if "attn_type_list" in c:  # MiniMax lightning attention: a (heads, head_dim, head_dim) state per layer
        keys = {"num_heads": "num_attention_heads", "head_dim": "head_dim"}
        kind = "linear_attention"
    elif "linear_num_value_heads" in c or "linear_key_head_dim" in c:  # gated DeltaNet (Qwen3-Next / Qwen3.5)
        keys = {"num_k_heads": "linear_num_key_heads", "num_v_heads": "linear_num_value_heads",
                "head_k_dim": "linear_key_head_dim", "head_v_dim": "linear_value_head_dim",
                "conv_kernel": "linear_conv_kernel_dim"}
        kind = "gdn"
    elif "mamba_num_heads" in c or "mamba_n_heads" in c:  # Mamba-2 (Nemotron-H, Granite-4.0-H, Falcon-H1)
        keys = {"num_heads": "mamba_num_heads" if "mamba_num_heads" in c else "mamba_n_heads",
                "head_dim": "mamba_head_dim" if "mamba_head_dim" in c else "mamba_d_head",
                "d_state": "ssm_state_size" if "ssm_state_size" in c else "mamba_d_state",
                "n_groups": "n_groups" if "n_groups" in c else ("mamba_num_groups" if "mamba_num_groups" in c
                                                               else "mamba_n_groups"),
                "d_conv": "conv_kernel" if "conv_kernel" in c else "mamba_d_conv"}
        kind = "mamba2"
    else:
        return {}  # Mamba-1 (Jamba): handled by the ``mamba:`` section
    missing = [src for src in keys.values() if src not in c]
    if missing:
        need.extend(missing)
        return None
    out = {k: int(c[src]) for k, src in keys.items()}
    out.update(kind=kind, state_dtype=DTYPES.get(str(ssm_dtype), "bfloat16"))
    return out


def model_conf_from_config_json(path: str | Path) -> dict:
    """``ModelConf`` fields (a dict) for the checkpoint whose ``config.json`` is at ``path`` (a file
    or the checkpoint directory). Raises :class:`ConfigJsonError` naming every missing field."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigJsonError(f"{path}: no config.json there")
    try:
        raw = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigJsonError(f"{p}: not readable JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigJsonError(f"{p}: a config.json must be a JSON object")
    c = _text(raw)
    mt = c.get("model_type") or "?"
    need = [f for f in BASE_FIELDS if f not in c]
    kinds = _kinds(c, need)
    ls = _linear_state(c, need, kinds or [])
    mamba1 = None
    if kinds and "mamba" in kinds and ls == {}:
        keys = ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank")
        missing = [k for k in keys if k not in c]
        if missing:
            need.append(f"the recurrent layers' state shape: one of the gated-DeltaNet (linear_*), Mamba-2 "
                        f"(mamba_num_heads ...) or Mamba-1 {list(keys)} sets (lacks {missing})")
        else:
            di = int(c["mamba_expand"]) * int(c["hidden_size"])
            mamba1 = {"d_inner": di, "d_state": int(c["mamba_d_state"]), "d_conv": int(c["mamba_d_conv"]),
                      "dt_rank": int(c["mamba_dt_rank"]) if c["mamba_dt_rank"] != "auto" else -(-int(c["hidden_size"]) // 16)}
    if kinds is not None and c.get("num_hidden_layers") is not None and len(kinds) != int(c["num_hidden_layers"]):
        need.append(f"a layer list of num_hidden_layers={c['num_hidden_layers']} entries (got {len(kinds)})")
    if kinds and "sliding" in kinds and not c.get("sliding_window"):
        need.append("sliding_window")
    if need:
        raise ConfigJsonError(f"{p}: model_type {mt!r} ({(c.get('architectures') or ['?'])[0]}): the loader "
                              f"cannot place its layers; missing or unknown: {need}")
    n_heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // n_heads)
    dtype = DTYPES.get(str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"), "bfloat16")
    assumed = []
    if not (c.get("torch_dtype") or c.get("dtype")):
        assumed.append("dtype")
    n_exp = int(c.get("num_local_experts") or c.get("num_experts") or 0)
    topk = int(c.get("num_experts_per_tok") or c.get("experts_per_token") or c.get("top_k_experts") or 0)
    extra: dict[str, Any] = {"config_json": str(p)}
    moe = {}
    if n_exp and topk:
        shared = int(c.get("shared_expert_intermediate_size") or c.get("shared_intermediate_size") or 0)
        moe = {"num_experts": n_exp, "experts_per_token": topk, "expert_layer_period": int(c.get("decoder_sparse_step") or c.get("expert_layer_period") or 1),
               "expert_layer_offset": int(c.get("expert_layer_offset") or 0),
               "expert_intermediate_size": int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 0),
               "shared_expert": bool(shared)}
        if shared:
            extra["shared_expert_intermediate_size"] = shared
    if ls:
        extra["linear_state"] = ls
    if c.get("num_global_key_value_heads") or c.get("global_head_dim"):
        extra["attention_by_kind"] = {"full": {"num_kv_heads": int(c.get("num_global_key_value_heads") or c.get("num_key_value_heads") or n_heads),
                                               "head_dim": int(c.get("global_head_dim") or head_dim)}}
    if c.get("attn_output_gate"):
        extra["attn_output_gate"] = True
    if c.get("hybrid_override_pattern"):
        extra["mixer_only_blocks"] = True
        extra["mlp_matrices"] = 2
    qm = (c.get("quantization_config") or {}).get("quant_method")
    if qm == "mxfp4":
        extra["expert_weight_dtype"] = "mxfp4"
    inter = c.get("intermediate_size")
    if not moe and c.get("shared_intermediate_size"):
        # GraniteMoeHybrid with num_local_experts 0 (granite-4.0-h-micro): HF's decoder layer runs only
        # shared_mlp, whose width is shared_intermediate_size; intermediate_size is the (absent) experts'.
        inter = c["shared_intermediate_size"]
    if inter is None:
        inter = moe.get("expert_intermediate_size") or 4 * int(c["hidden_size"])
        assumed.append("intermediate_size")
    m = {
        "name": p.parent.name or "config_json",
        "hf_id": str(raw.get("_name_or_path") or p.parent.name),
        "architecture": (c.get("architectures") or [mt])[0],
        "model_type": mt,
        "dtype": dtype,
        "kv_dtype": dtype,
        "num_layers": int(c["num_hidden_layers"]),
        "hidden_size": int(c["hidden_size"]),
        "num_heads": n_heads,
        "num_kv_heads": int(c.get("num_key_value_heads") or n_heads),
        "head_dim": head_dim,
        "intermediate_size": int(inter),
        "vocab_size": int(c["vocab_size"]),
        "max_position_embeddings": int(c.get("max_position_embeddings") or 131072),
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", c.get("tie_word_embeddings", False))),
        "rope_theta": float(c.get("rope_theta") or 10000.0),
        "total_params": None,
        "active_params": None,
        "layer_pattern": kinds,
        "layer_indices": {},
        "sliding_window": int(c["sliding_window"]) if "sliding" in kinds else None,
        "attention_chunk_size": int(c["attention_chunk_size"]) if "chunked" in kinds else None,
        "kv_share_group_size": 1,
        "moe": moe,
        "mamba": ({**mamba1, "state_dtype": dtype, "checkpoint_interval": 512} if mamba1 else None),
        "vision": None,
        "token_drop": None,
        "assumed": assumed + (["max_position_embeddings"] if "max_position_embeddings" not in c else []),
        "extra": extra,
    }
    return m


def profile_from_config_json(path: str | Path) -> ModelProfile:
    """The :class:`ModelProfile` (cache specs, weights) of a local ``config.json``."""
    return load_profile(model_conf_from_config_json(path))
