"""Model zoo: a ``conf/model/*.yaml`` file → :class:`ModelProfile`, everything downstream
(allocators, step-time model, vLLM config writer) needs to know about one model.

The profile carries the jenga cache specs (one per layer type), weight bytes, parameter counts and
the facts the step-time model and the vLLM config writer need (rope, vocab, windows, MoE, Mamba).
Parameter counts: the model file states the published total; :func:`estimate_params` recomputes
them from the shapes (tests check the two agree, which catches a mistyped dimension); synthetic
models (character.ai-style, PyramidKV drafts) leave ``total_params: null`` and use the estimate.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config import compose_cell
from jenga.spec import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    LayerTypeSpec,
    MambaSpec,
    SlidingWindowSpec,
    TokenDropSpec,
    VisionEmbeddingSpec,
)

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "float32": 4}
# OCP Microscaling MXFP4: a 4-bit E2M1 value per parameter plus one 8-bit E8M0 scale per block of 32.
EXPERT_DTYPE_BYTES = {"mxfp4": (4 + 8 / 32) / 8}
LAYER_KINDS = ("full", "sliding", "chunked", "mamba", "cross", "token_drop", "mlp")
# "mlp": a decoder layer with no token mixer and so no cache (Nemotron-H's "-" blocks); "mamba" is
# any recurrent-state mixer: Mamba-1 (the ``mamba:`` section), Mamba-2, gated DeltaNet or lightning
# (linear) attention (``extra.linear_state``, see :func:`linear_state_bytes`).
CACHELESS_KINDS = frozenset({"mlp"})


@dataclass(frozen=True)
class VisionInfo:
    """Vision encoder facts for VLMs."""

    tokens_per_tile: int            # e.g. 1601 for Llama-3.2-Vision (40x40 patches + CLS)
    max_tiles: int                  # e.g. 4
    encoder_params: int             # parameters of the vision encoder (+ projector)
    embedding_bytes_per_token: int  # bytes of one vision embedding handed to the LM
    cross_attention: bool           # True: image tokens live in cross-attention only (mllama)


@dataclass(frozen=True)
class ModelProfile:
    """Derived, immutable facts about one model (weights, shapes, cache specs).

    ``specs`` are the jenga layer types with stored caches (KV sharing already folded into
    ``num_layers``; ``num_compute_layers`` counts all layers that read each type).
    ``layer_kinds`` has one entry per decoder layer: "full", "sliding", "chunked", "mamba",
    "cross", "token_drop" (for the step-time model and the HF config writer).
    """

    name: str
    hf_id: str
    architecture: str                 # HF architectures[0], e.g. "LlamaForCausalLM"
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    weight_dtype_bytes: float         # 2 for bf16, 1 for fp8
    kv_dtype_bytes: int
    total_params: int
    active_params: int                # params touched per token (MoE: shared + top-k experts)
    layer_kinds: tuple[str, ...]
    specs: tuple[LayerTypeSpec, ...]
    vision: VisionInfo | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    extra: dict = field(default_factory=dict)  # model-specific facts (mamba dims, windows, ...)

    @property
    def weight_bytes(self) -> int:
        return int(self.total_params * self.weight_dtype_bytes)


class ModelConfigError(ValueError):
    """A model file is inconsistent; the message names the model and the key."""


def _cfg(model_cfg: Any) -> dict:
    if isinstance(model_cfg, DictConfig):
        return OmegaConf.to_container(model_cfg, resolve=True)
    return dict(model_cfg)


def _dtype_bytes(name: str, key: str, model: str) -> int:
    if name not in DTYPE_BYTES:
        raise ModelConfigError(f"model {model}: {key}={name!r}; allowed: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


def layer_kinds(m: dict) -> list[str]:
    """Per-layer kinds: ``layer_pattern`` repeated to ``num_layers``, then ``layer_indices`` applied."""
    n, pattern = m["num_layers"], list(m["layer_pattern"])
    if not pattern:
        raise ModelConfigError(f"model {m['name']}: layer_pattern must not be empty")
    kinds = [pattern[i % len(pattern)] for i in range(n)]
    for kind, idx in (m.get("layer_indices") or {}).items():
        for i in idx:
            if not 0 <= i < n:
                raise ModelConfigError(f"model {m['name']}: layer_indices.{kind} has {i}, outside [0, {n})")
            kinds[i] = kind
    bad = sorted(set(kinds) - set(LAYER_KINDS))
    if bad:
        raise ModelConfigError(f"model {m['name']}: unknown layer kinds {bad}; allowed: {list(LAYER_KINDS)}")
    return kinds


def kv_share_groups(kinds: list[str], group_size: int) -> list[list[int]]:
    """Layers that share one KV cache (the first of each group stores it).

    Global ("full") layers are tied across blocks: consecutive full layers in index order form
    groups. Every other kind shares only inside a run of adjacent layers of that kind (the
    character.ai blog: neighbouring local layers share; global layers share across blocks)."""
    if group_size < 1:
        raise ModelConfigError(f"kv_share_group_size must be >= 1, got {group_size}")
    groups: list[list[int]] = []
    fulls = [i for i, k in enumerate(kinds) if k == "full"]
    groups += [fulls[j:j + group_size] for j in range(0, len(fulls), group_size)]
    run: list[int] = []
    for i, k in enumerate(kinds + ["<end>"]):
        if run and (k != kinds[run[-1]] or i != run[-1] + 1):
            groups += [run[j:j + group_size] for j in range(0, len(run), group_size)]
            run = []
        if k != "full" and k != "<end>":
            run.append(i)
    return sorted(groups)


def token_drop_keep_ratios(m: dict) -> list[float]:
    """Fraction of the context each layer keeps under the AE's PyramidInfer prefill schedule.

    Layer l keeps the recent ``recent_ratio`` of the context plus the candidate tokens left after
    layers 1..l each keep ``ratio(j)`` of the previous layer's candidates, where
    ``ratio(j) = (1-d)·(cos(π j/L)+1)/2 + d`` (cosine) or ``(1-d)·j/L + d`` (linear)."""
    td, n = m["token_drop"], m["num_layers"]
    d, recent = td["decay_ratio"], td["recent_ratio"]
    out, kept = [], 1.0
    for layer in range(n):
        if td["schedule"] == "cosine":
            r = (1.0 - d) * (math.cos(math.pi * layer / n) + 1) / 2 + d
        elif td["schedule"] == "linear":
            r = (1.0 - d) * (layer / n) + d
        else:
            raise ModelConfigError(f"model {m['name']}: token_drop.schedule={td['schedule']!r}; "
                                   "allowed: ['cosine', 'linear']")
        kept *= min(r, 1.0)
        out.append(recent + (1.0 - recent) * kept)
    return out


def attention_shape(m: dict, kind: str) -> tuple[int, int]:
    """(KV heads, head dim) of the attention layers of ``kind``: the model's own, or the per-kind
    override in ``extra.attention_by_kind`` (Gemma-4: sliding layers 16 x 256, global 4 x 512)."""
    over = ((m.get("extra") or {}).get("attention_by_kind") or {}).get(kind) or {}
    return int(over.get("num_kv_heads", m["num_kv_heads"])), int(over.get("head_dim", m["head_dim"]))


LINEAR_STATE_KEYS = {
    # vLLM ``MambaStateShapeCalculator.mamba2_state_shape``: conv (d_conv - 1, d_inner + 2 n_groups
    # d_state), SSM (num_heads, head_dim, d_state) with d_inner = num_heads x head_dim.
    "mamba2": ("num_heads", "head_dim", "d_state", "n_groups", "d_conv"),
    # vLLM ``MambaStateShapeCalculator.gated_delta_net_state_shape``: conv (2 k_heads k_dim +
    # v_heads v_dim, conv_kernel - 1), recurrent (v_heads, k_dim, v_dim).
    "gdn": ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "conv_kernel"),
    # vLLM ``MambaStateShapeCalculator.linear_attention_state_shape`` (MiniMax lightning attention,
    # ``MambaAttentionBackendEnum.LINEAR``): one state (num_heads, head_dim, head_dim), no conv state.
    "linear_attention": ("num_heads", "head_dim"),
}


def linear_state_bytes(m: dict) -> tuple[int, int]:
    """(conv bytes, recurrent-state bytes) of one layer of kind "mamba" described by
    ``extra.linear_state`` (shapes as vLLM's ``mamba_utils.MambaStateShapeCalculator``; the conv state
    in ``conv_dtype``, default the model dtype; the recurrent state in ``state_dtype``)."""
    conv, ssm = linear_state_elems(m)  # validates extra.linear_state
    ls, name = m["extra"]["linear_state"], m["name"]
    cb = _dtype_bytes(ls.get("conv_dtype", m["dtype"]), "extra.linear_state.conv_dtype", name)
    sb = _dtype_bytes(ls["state_dtype"], "extra.linear_state.state_dtype", name)
    return conv * cb, ssm * sb


def linear_state_elems(m: dict) -> tuple[int, int]:
    """(conv elements, recurrent-state elements) of one layer described by ``extra.linear_state``:
    the shapes alone, so an engine with its own state dtypes (SGLang) can size them."""
    ls = (m.get("extra") or {}).get("linear_state") or {}
    kind, name = ls.get("kind"), m["name"]
    if kind not in LINEAR_STATE_KEYS:
        raise ModelConfigError(f"model {name}: extra.linear_state.kind={kind!r}; allowed: {sorted(LINEAR_STATE_KEYS)}")
    missing = [k for k in LINEAR_STATE_KEYS[kind] + ("state_dtype",) if k not in ls]
    if missing:
        raise ModelConfigError(f"model {name}: extra.linear_state ({kind}) lacks {missing}")
    if kind == "mamba2":
        d_inner = ls["num_heads"] * ls["head_dim"]
        conv = (ls["d_conv"] - 1) * (d_inner + 2 * ls["n_groups"] * ls["d_state"])
        ssm = ls["num_heads"] * ls["head_dim"] * ls["d_state"]
    elif kind == "linear_attention":
        conv, ssm = 0, ls["num_heads"] * ls["head_dim"] * ls["head_dim"]
    else:
        conv = (2 * ls["num_k_heads"] * ls["head_k_dim"] + ls["num_v_heads"] * ls["head_v_dim"]) * (ls["conv_kernel"] - 1)
        ssm = ls["num_v_heads"] * ls["head_k_dim"] * ls["head_v_dim"]
    return conv, ssm


def _linear_mixer_params(m: dict) -> int:
    """Parameters of one Mamba-2 / gated-DeltaNet / lightning-attention mixer (HF
    ``NemotronHMamba2Mixer`` / ``Qwen3NextGatedDeltaNet`` / ``MiniMaxM1LightningAttention`` weight
    shapes; biases and norms included)."""
    ls, h = m["extra"]["linear_state"], m["hidden_size"]
    if ls["kind"] == "mamba2":
        nh, hd, ds, ng, dc = ls["num_heads"], ls["head_dim"], ls["d_state"], ls["n_groups"], ls["d_conv"]
        di = nh * hd
        conv_dim = di + 2 * ng * ds
        # in_proj -> (z, x, B, C, dt); depthwise conv (+bias); dt_bias, A_log, D; gated norm; out_proj
        return h * (2 * di + 2 * ng * ds + nh) + conv_dim * (dc + 1) + 3 * nh + di + di * h
    if ls["kind"] == "linear_attention":
        # MiniMax lightning attention (MiniMax-AI/MiniMax-M1 modeling_minimax_m1.py
        # ``MiniMaxM1LightningAttention``): qkv_proj, output_gate, out_proj (no biases), norm
        d = ls["num_heads"] * ls["head_dim"]
        return h * 3 * d + h * d + d * h + d
    kd, vd = ls["num_k_heads"] * ls["head_k_dim"], ls["num_v_heads"] * ls["head_v_dim"]
    conv_dim = 2 * kd + vd
    # in_proj_qkvz, in_proj_ba, depthwise conv (no bias), dt_bias, A_log, norm (head_v_dim), out_proj
    return (h * (2 * kd + 2 * vd) + h * 2 * ls["num_v_heads"] + conv_dim * ls["conv_kernel"]
            + 2 * ls["num_v_heads"] + ls["head_v_dim"] + vd * h)


@dataclass(frozen=True)
class ParamEstimate:
    total: int
    active: int
    embedding: int          # input embedding table (a lookup: no FLOPs)
    vision: int
    routed_experts: int = 0  # parameters of the routed experts (all of them), for MXFP4 checkpoints


def estimate_params(model_cfg: Any) -> ParamEstimate:
    """Parameters from the shapes: embeddings, attention/Mamba mixers, dense/MoE MLPs, norms."""
    m = _cfg(model_cfg)
    h = m["hidden_size"]
    ex = m.get("extra") or {}
    # Gated attention (Qwen3-Next / Qwen3.5 ``attn_output_gate``): q_proj also emits the gate.
    q_mult = 2 if ex.get("attn_output_gate") else 1

    def attn_params(kind: str) -> int:
        kvh, hd = attention_shape(m, kind)
        q, kv = m["num_heads"] * hd, kvh * hd
        return h * q * q_mult + 2 * h * kv + q * h + 2 * h

    kinds = layer_kinds(m)
    moe = m.get("moe") or {}
    n_exp, topk = moe.get("num_experts", 0), moe.get("experts_per_token", 0)
    # ``extra.mlp_matrices``: 3 for gated MLPs (SwiGLU/GeGLU), 2 for Nemotron-H's squared-ReLU MLP.
    mats = int(ex.get("mlp_matrices", 3))
    mlp_dense = mats * h * m["intermediate_size"]
    mlp_expert = 3 * h * (moe.get("expert_intermediate_size") or m["intermediate_size"])
    # ``extra.shared_expert_intermediate_size``: a shared expert narrower/wider than the routed ones
    # (Qwen3-Next, Granite-4.0-H); default: the routed experts' width.
    shared_mlp = 3 * h * int(ex.get("shared_expert_intermediate_size") or 0) if moe.get("shared_expert") else 0
    # ``extra.mixer_only_blocks`` (Nemotron-H): a layer is a mixer *or* an MLP, never both.
    mixer_only = bool(ex.get("mixer_only_blocks"))
    total = active = routed = 0
    for i, kind in enumerate(kinds):
        if kind == "mlp":
            total += mlp_dense + h
            active += mlp_dense + h
            continue
        if kind == "mamba" and ex.get("linear_state"):
            mixer = _linear_mixer_params(m)
        elif kind == "mamba":
            mb = m["mamba"]
            di, ds, dt = mb["d_inner"], mb["d_state"], mb["dt_rank"]
            mixer = (h * 2 * di + di * (mb["d_conv"] + 1) + di * (dt + 2 * ds) + dt * di + di
                     + di * ds + di + di * h + h)
        else:
            mixer = attn_params(kind)
        if mixer_only:
            total += mixer + h
            active += mixer + h
            continue
        is_moe = n_exp > 0 and i % moe.get("expert_layer_period", 1) == moe.get("expert_layer_offset", 0)
        if is_moe:
            shared = (shared_mlp or mlp_expert) if moe.get("shared_expert") else 0
            total += mixer + n_exp * mlp_expert + shared + h * n_exp
            routed += n_exp * mlp_expert
            active += mixer + topk * mlp_expert + shared + h * n_exp
        else:
            total += mixer + mlp_dense
            active += mixer + mlp_dense
    emb = m["vocab_size"] * h
    head = 0 if m.get("tie_word_embeddings") else emb
    # Vision towers: mllama-style towers in vision.encoder_params; text-only-served VLMs (Gemma-3,
    # Llama-4) list their tower's weights in extra.vision_tower_params.
    vision = ((m.get("vision") or {}).get("encoder_params") or 0) + \
        int((m.get("extra") or {}).get("vision_tower_params", 0))
    total += emb + head + h + vision
    active += emb + head + h  # the vision tower runs per image, not per token
    return ParamEstimate(total=total, active=active, embedding=emb, vision=vision, routed_experts=routed)


def _specs(m: dict, kinds: list[str]) -> tuple[list[LayerTypeSpec], dict]:
    name = m["name"]
    kvb = _dtype_bytes(m["kv_dtype"], "kv_dtype", name)

    def kv_bytes(kind: str) -> int:  # K and V of one token in one layer of this kind
        heads, hd = attention_shape(m, kind)
        return 2 * heads * hd * kvb

    per_layer = kv_bytes("full")
    groups = kv_share_groups(kinds, m.get("kv_share_group_size", 1))
    stored = Counter(kinds[g[0]] for g in groups)
    compute = Counter(kinds)
    extra: dict = {"kv_share": groups if m.get("kv_share_group_size", 1) > 1 else []}
    specs: list[LayerTypeSpec] = []
    for kind in LAYER_KINDS:
        if kind not in compute:
            continue
        n, c = stored[kind], compute[kind]
        if kind == "full":
            specs.append(FullAttentionSpec("full", n, kv_bytes("full"), c))
        elif kind == "sliding":
            if not m.get("sliding_window"):
                raise ModelConfigError(f"model {name}: sliding layers need sliding_window")
            specs.append(SlidingWindowSpec("sliding", n, kv_bytes("sliding"), c, window=m["sliding_window"]))
        elif kind == "chunked":
            if not m.get("attention_chunk_size"):
                raise ModelConfigError(f"model {name}: chunked layers need attention_chunk_size")
            specs.append(ChunkedLocalSpec("chunked", n, kv_bytes("chunked"), c, chunk=m["attention_chunk_size"]))
        elif kind == "cross":
            specs.append(CrossAttentionSpec("cross", n, per_layer, c))
        elif kind == "mamba" and (m.get("extra") or {}).get("linear_state"):
            conv, ssm = linear_state_bytes(m)
            ci = m["extra"]["linear_state"].get("checkpoint_interval", 512)
            specs.append(MambaSpec("mamba", n, conv + ssm, c, state_bytes_per_layer=conv + ssm,
                                   conv_bytes_per_layer=conv, checkpoint_interval=ci,
                                   mixer=m["extra"]["linear_state"]["kind"]))
            extra["mamba_conv_bytes_per_layer"], extra["mamba_ssm_bytes_per_layer"] = conv, ssm
            extra["mamba_state_elems_per_layer"] = linear_state_elems(m)
        elif kind == "mamba":
            mb = m.get("mamba")
            if not mb:
                raise ModelConfigError(f"model {name}: mamba layers need a mamba: section")
            sb = _dtype_bytes(mb["state_dtype"], "mamba.state_dtype", name)
            # vLLM's cache shapes: conv state (d_inner, d_conv - 1), SSM state (d_inner, d_state).
            elems = (mb["d_inner"] * (mb["d_conv"] - 1), mb["d_inner"] * mb["d_state"])
            conv, ssm = elems[0] * sb, elems[1] * sb
            specs.append(MambaSpec("mamba", n, conv + ssm, c, state_bytes_per_layer=conv + ssm,
                                   conv_bytes_per_layer=conv, checkpoint_interval=mb["checkpoint_interval"],
                                   mixer="mamba1"))
            extra["mamba_conv_bytes_per_layer"], extra["mamba_ssm_bytes_per_layer"] = conv, ssm
            extra["mamba_state_elems_per_layer"] = elems
        elif kind == "token_drop":
            specs += _token_drop_specs(m, kinds, per_layer, extra)
    vis = m.get("vision")
    if vis and vis["kind"] == "embedding":
        # Embeddings are activations: bf16 even when the weights are FP8.
        specs.append(VisionEmbeddingSpec("vision_embedding", 1, vis["embedding_dim"] * 2))
    return specs, extra


def _token_drop_specs(m: dict, kinds: list[str], per_layer: int, extra: dict) -> list[LayerTypeSpec]:
    """Bucket token-drop layers by keep ratio into ``num_buckets`` equal-sized TokenDropSpecs; each
    bucket keeps its largest ratio (never fewer tokens than any of its layers needs). Equal bucket
    sizes keep the small pages equal, so the LCM large page stays one small page (as in the artifact,
    where max-page == Jenga for PyramidKV)."""
    td = m["token_drop"]
    ratios = token_drop_keep_ratios(m)
    layers = [i for i, k in enumerate(kinds) if k == "token_drop"]
    extra["token_drop_keep_ratios"] = [round(ratios[i], 6) for i in layers]
    order = sorted(layers, key=lambda i: -ratios[i])
    nb = max(1, min(td["num_buckets"], len(order)))
    specs: list[LayerTypeSpec] = []
    for b in range(nb):
        chunk = order[b * len(order) // nb:(b + 1) * len(order) // nb]
        ratio = min(1.0, round(max(ratios[i] for i in chunk), 6))
        specs.append(TokenDropSpec(f"token_drop_{b}", len(chunk), per_layer, keep_ratio=ratio,
                                   min_tokens=td["min_tokens"], sink=td["sink"]))
    return specs


def load_profile(model_cfg: Any) -> ModelProfile:
    """Turn one model config (DictConfig or dict of ``ModelConf`` fields) into a ModelProfile."""
    m = _cfg(model_cfg)
    name = m["name"]
    kinds = layer_kinds(m)
    specs, extra = _specs(m, kinds)
    est = estimate_params(m)
    total = m.get("total_params") or est.total
    # Active = LM parameters touched per token (MoE: routed top-k + shared); the vision tower is
    # counted once per image by the step-time model (VisionInfo.encoder_params), not here.
    active = m.get("active_params") or (total - est.vision if est.active == est.total - est.vision
                                         else est.active)
    weight_dtype_bytes: float = _dtype_bytes(m["dtype"], "dtype", name)
    expert_dtype = (m.get("extra") or {}).get("expert_weight_dtype")
    if expert_dtype is not None:
        # Checkpoints whose routed experts alone are quantized (gpt-oss: MXFP4 experts, everything
        # else bf16; its config.json ``quantization_config.modules_to_not_convert``): the average
        # bytes per parameter over the whole model, so ``weight_bytes`` is what the GPU loads.
        if expert_dtype not in EXPERT_DTYPE_BYTES:
            raise ModelConfigError(f"model {name}: extra.expert_weight_dtype={expert_dtype!r}; "
                                   f"allowed: {sorted(EXPERT_DTYPE_BYTES)}")
        routed = est.routed_experts * (total / est.total)
        target = routed * EXPERT_DTYPE_BYTES[expert_dtype] + (total - routed) * weight_dtype_bytes
        # The step-time model's ``loaded_weight_bytes`` adds the bf16 embedding tables back for
        # checkpoints under 2 bytes/param (FP8 rule); solve so that its total is ``target``.
        emb = est.embedding * (1 if m.get("tie_word_embeddings") else 2)
        weight_dtype_bytes = (target - 2 * emb) / (total - emb)
    vis = m.get("vision")
    vision = None
    if vis:
        vision = VisionInfo(tokens_per_tile=vis["tokens_per_tile"], max_tiles=vis["max_tiles"],
                            encoder_params=vis["encoder_params"],
                            embedding_bytes_per_token=vis["embedding_dim"] * 2,
                            cross_attention=vis["kind"] == "cross")
    moe = m.get("moe") or {}
    nh, hd = m["num_heads"], m["head_dim"]
    extra.update({
        "model_type": m["model_type"],
        "dtype": m["dtype"],
        "kv_dtype": m["kv_dtype"],
        "rope_theta": m.get("rope_theta"),
        "rope_scaling": m.get("rope_scaling"),
        "tie_word_embeddings": m.get("tie_word_embeddings", False),
        "max_position_embeddings": m["max_position_embeddings"],
        "sliding_window": m.get("sliding_window"),
        "attention_chunk_size": m.get("attention_chunk_size"),
        # Per-layer window (None = full context), the form vLLM/HF configs use.
        "sliding_window_per_layer": [m.get("sliding_window") if k == "sliding" else None for k in kinds],
        "cross_attention_layers": [i for i, k in enumerate(kinds) if k == "cross"],
        "moe": moe,
        "mamba": m.get("mamba"),
        "token_drop": m.get("token_drop"),
        "assumed": list(m.get("assumed") or []),
        "estimated_params": est.total,
        "embedding_params": est.embedding,
        # Params multiplied per generated/prefilled token (the embedding lookup does no FLOPs).
        "matmul_params_per_token": active - est.embedding,
        # FLOPs per (query token, context token) pair of one attention layer: QK^T and AV.
        "attn_flops_per_ctx_token_per_layer": 4 * nh * hd,
        **(m.get("extra") or {}),
    })
    return ModelProfile(
        name=name, hf_id=m["hf_id"], architecture=m["architecture"], num_layers=m["num_layers"],
        hidden_size=m["hidden_size"], num_heads=nh, num_kv_heads=m["num_kv_heads"], head_dim=hd,
        intermediate_size=m["intermediate_size"], vocab_size=m["vocab_size"],
        max_model_len=m["max_position_embeddings"],
        weight_dtype_bytes=weight_dtype_bytes,
        kv_dtype_bytes=_dtype_bytes(m["kv_dtype"], "kv_dtype", name),
        total_params=int(total), active_params=int(active), layer_kinds=tuple(kinds), specs=tuple(specs),
        vision=vision, num_experts=moe.get("num_experts", 0), experts_per_token=moe.get("experts_per_token", 0),
        extra=extra)


def zoo_profile(name: str) -> ModelProfile:
    """The profile of zoo model ``name`` (``harness/conf/model/<name>.yaml``, composed with the
    cell schema's defaults as any cell's ``model`` group)."""
    return load_profile(compose_cell([f"model={name}"]).model)


def linear_flops_per_token(profile: ModelProfile) -> float:
    """Dense matmul FLOPs of one token through the LM (2 per multiply-accumulate)."""
    return 2.0 * profile.extra["matmul_params_per_token"]

