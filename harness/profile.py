"""ModelProfile: everything downstream (allocators, step-time model, vLLM config writer) needs to
know about one model, derived by ``harness.models`` from a ``conf/model/*.yaml`` file."""

from __future__ import annotations

from dataclasses import dataclass, field

from jenga.spec import LayerTypeSpec


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
