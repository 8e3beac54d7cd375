"""Step-time model and KV capacity for the sim backend (contract §5).

A step's time is ``max(compute, memory, eager launch) + engine overhead``:

- **compute** = (2 · active params · new tokens + attention FLOPs + vision-encoder FLOPs)
  / (peak · mfu · TP). Attention FLOPs are ``4 · heads · head_dim`` per (query, key) pair and
  per compute layer, summed over each layer type's span: full = whole context, sliding =
  ``min(ctx, window)``, chunked = position inside its chunk, cross = the request's image tokens,
  token-drop = kept tokens on decode (prefill attends to the whole prompt before dropping).
  Mamba layers cost per token only (their projections are in the parameters). FP8 models use
  the GPU's FP8 peak.
- **memory** = (weight bytes touched + KV/state bytes read) / (bandwidth · mbu · TP). MoE steps
  touch only the experts some token routed to (expected number for the batch's tokens).
- **eager launch**: eager mode (and any step CUDA graphs do not cover: prefills, decode batches
  above the largest captured graph) issues kernels from Python, ~per-layer CPU time that the GPU
  work overlaps, hence the max.
- **overhead**: per engine version (v0 / v1), a fixed CPU time per step plus CPU time per
  scheduled request. One set of constants per engine version, never per model.
- **TP** divides compute and memory and adds two all-reduces per layer (bytes over the
  interconnect plus a fixed latency).

KV capacity (vLLM's start-up profiling, per cell)::

    kv = memory · gpu_memory_utilization · TP − weights − TP · (activation peak + non-torch)

The activation peak is that of vLLM's profiling forward pass of ``P`` tokens (P = the scheduler
token budget, see :func:`profile_tokens`), the largest live set of one decoder layer:
``P · (3 · intermediate / TP + 4 · hidden) · 2 bytes`` (MoE: ``top_k`` copies of the expert
intermediate; FP8 weights add the down projection's dynamically quantized input, ``P ·
intermediate / TP`` bytes, see :data:`FP8_QUANT_INPUT_BYTES`), plus, for VLMs, the vision encoder's dummy pass over ``max_num_seqs`` images of
``max_tiles`` tiles (``VISION_ACT_FACTOR`` × embedding bytes per image token); then the sampler
over ``R = min(max_num_seqs, P)`` rows (one per dummy sequence: logits are computed for each
sequence's last token only):

- **v0** (vLLM 0.6.x ``ModelRunner.profile_run``, read in the source): the dummy requests sample
  with ``top_k = vocab − 1, top_p = 0.99`` "to reflect the accurate memory usage", which runs
  ``_apply_top_k_top_p``: a full-vocabulary sort (fp32 values + int64 indices), softmax, cumsum,
  two masks and the scattered result, beside the bf16 logits and their fp32 copy,
  ``SAMPLER_BYTES_PER_LOGIT`` bytes per logit in all (the fork's version scatters through the
  sort indices; it has no inverse permutation). The sampler runs after the forward has released its activations, so the
  peak is ``max(forward, sampler)``. Logits are gathered to TP rank 0 (``tensor_model_parallel_
  gather``) and the block count is the minimum over ranks, so the sampler term is not divided by
  TP.
- **v1**: ``forward + R · vocab · 4 B / TP`` (fp32 logits; the April-2025 V1 runner's sampler
  memory was not checked against its source).

``engine.kv_cache_bytes`` overrides all of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.profile import ModelProfile

GiB = 1 << 30


@dataclass(frozen=True)
class EngineOverhead:
    """CPU-side costs of one engine version (seconds)."""

    step_s: float          # scheduler + input preparation + sampling, per step
    per_request_s: float   # per scheduled request per step (sequence-group bookkeeping, outputs)
    eager_layer_s: float   # Python + launch time of one decoder layer when not in a CUDA graph
    max_graph_batch: int   # largest decode batch captured in a CUDA graph


# Estimates, per engine version and never per model (see results/fig14/FIDELITY.md):
# - step_s / per_request_s: v0.6-era profiles put ~30-40% of a small-batch decode step in CPU work
#   (scheduler, input preparation, output processing per sequence group); the v1 rewrite moved
#   most per-request Python out of the hot loop.
# - eager_layer_s: a public vLLM measurement of a 28-layer 7B model in eager mode gives ~22 ms TPOT
#   vs ~13 ms with CUDA graphs (vllm-project/vllm-omni#7960), i.e. ~0.5-0.8 ms of launch-bound
#   time per decoder layer; we take 0.5 ms.
ENGINE_OVERHEAD: dict[str, EngineOverhead] = {
    "v0": EngineOverhead(step_s=3.0e-3, per_request_s=60e-6, eager_layer_s=500e-6, max_graph_batch=256),
    "v1": EngineOverhead(step_s=1.5e-3, per_request_s=12e-6, eager_layer_s=500e-6, max_graph_batch=512),
}

ALLREDUCE_LATENCY_S = 8e-6        # one small all-reduce over NVLink (custom all-reduce kernel)
# Memory outside torch's allocator that vLLM's profiler adds (CUDA context, cuBLAS workspace); vLLM
# logs typically report 0.1-0.3 GiB for one GPU ("non_torch_memory takes 0.16GiB").
NON_TORCH_BYTES = GiB // 5
NCCL_BYTES = GiB // 2             # NCCL + custom all-reduce buffers per GPU when TP > 1
ACT_BYTES = 2                     # activations are bf16 even for fp8-weight models
VISION_ACT_FACTOR = 3             # live bytes per image token in the encoder pass / embedding bytes
# Live bytes per logit at the peak of the v0 forks' ``_apply_top_k_top_p`` (profiling pass;
# Jenga-SOSP25-AE vllm-v0-baseline / vllm-v0-jenga, vllm/model_executor/layers/sampler.py): the
# LM head's bf16 logits (2, still held by the model runner) + their fp32 copy (``logits.to(
# torch.float)`` in ``Sampler.forward``, 4) + sorted values (4) + sort indices (int64 8) + top-k
# mask (bool 1) + softmax (4) + cumsum (4) + top-p mask (bool 1) + the result scattered back
# through the sort indices (``torch.empty_like(logits_sort).scatter_``, 4). That fork has no
# inverse permutation (older vLLM gathered through one, 8 more bytes).
SAMPLER_BYTES_PER_LOGIT = 32
# FP8 linear layers quantize their input on the fly before the GEMM (``apply_fp8_linear`` in
# vllm/model_executor/layers/quantization/utils/w8a8_utils.py of both v0 forks and of vLLM V1:
# ``qinput, x_scale = ops.scaled_fp8_quant(input, ...)`` then ``cutlass_scaled_mm``). At the MLP's
# peak (down projection) that is one more byte per intermediate element live beside its bf16 input
# and the still-referenced gate_up output (``LlamaMLP.forward`` keeps ``gate_up`` until it returns).
FP8_QUANT_INPUT_BYTES = 1


def _get(cfg, key: str, default=None):
    """Read ``key`` from a DictConfig, dataclass or dict."""
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    return getattr(cfg, key, default) if hasattr(cfg, key) else default


def profile_tokens(engine, max_model_len: int) -> int:
    """The scheduler's token budget, which is also the size of vLLM's profiling pass.

    v0 with chunked prefill off: ``max(max_num_batched_tokens or 0, max_model_len, 2048)``
    (a whole prompt must fit one step); v0 with chunked prefill on: 512 (v0.6 default); v1:
    8192 (the OpenAI-server default of the April-2025 v1 engine). An explicit
    ``max_num_batched_tokens`` wins where vLLM lets it.
    """
    explicit = _get(engine, "max_num_batched_tokens")
    version = _get(engine, "engine_version", "v0")
    chunked = bool(_get(engine, "enable_chunked_prefill", False)) or version == "v1"
    if not chunked:
        return max(int(explicit or 0), int(max_model_len), 2048)
    if explicit:
        return int(explicit)
    return 8192 if version == "v1" else 512


def _span_sum(kind: str, spec, c: int, n: int) -> int:
    """Sum over query positions c..c+n-1 of the number of keys each attends to in this type."""
    if kind == "full" or kind == "token_drop":
        return n * c + n * (n + 1) // 2
    if kind == "sliding":
        w = spec.window

        def g(x: int) -> int:
            return x * (x + 1) // 2 if x <= w else w * (w + 1) // 2 + (x - w) * w
        return g(c + n) - g(c)
    if kind == "chunked":
        ch = spec.chunk

        def f(x: int) -> int:
            q, r = divmod(x, ch)
            return q * ch * (ch + 1) // 2 + r * (r + 1) // 2
        return f(c + n) - f(c)
    return 0


def _keys_read(kind: str, spec, c: int, n: int) -> int:
    """Distinct cached keys one step reads for this type (KV bytes = keys × bytes per token)."""
    end = c + n
    if kind == "full":
        return end
    if kind == "sliding":
        return min(end, spec.window + n - 1)
    if kind == "chunked":
        return end - (c // spec.chunk) * spec.chunk
    if kind == "token_drop":
        return spec.kept_tokens(c) + n if n == 1 else end
    return 0


class CostModel:
    """Step time of one scheduler step and the KV capacity of one cell."""

    def __init__(self, profile: ModelProfile, gpu, engine) -> None:
        self.profile = profile
        self.gpu = gpu
        self.engine = engine
        self.tp = int(_get(gpu, "count", 1) or 1)
        version = str(_get(engine, "engine_version", "v0"))
        if version not in ENGINE_OVERHEAD:
            raise ValueError(f"engine.engine_version must be one of {sorted(ENGINE_OVERHEAD)}, got {version!r}")
        self.overhead = ENGINE_OVERHEAD[version]
        self.eager = bool(_get(engine, "enforce_eager", False))
        fp8 = profile.weight_dtype_bytes <= 1
        peak = float(_get(gpu, "peak_fp8_flops" if fp8 else "peak_bf16_flops"))
        self.flops_per_s = peak * float(_get(gpu, "mfu", 0.5)) * self.tp
        self.bytes_per_s = float(_get(gpu, "hbm_bytes_per_s")) * float(_get(gpu, "mbu", 0.7)) * self.tp
        self.link_bytes_per_s = float(_get(gpu, "interconnect_bytes_per_s", 0) or 0)
        self.attn_flops_per_pair = 4 * profile.num_heads * profile.head_dim
        # Linear-layer FLOPs per token: the matmul parameters (the embedding lookup is free).
        self.matmul_params = float(profile.extra.get("matmul_params_per_token", profile.active_params))
        self.weight_bytes = self.loaded_weight_bytes(profile)
        # (kind, spec, compute layers, bytes per token per layer) per layer type with a cache.
        self._types = [(s.kind, s, s.num_compute_layers or s.num_layers, s.bytes_per_token_per_layer)
                       for s in profile.specs]
        self._mamba_state_bytes = sum(s.state_bytes for s in profile.specs if s.kind == "mamba")
        self._moe = profile.num_experts > 0 and profile.experts_per_token > 0
        if self._moe:
            e, k = profile.num_experts, profile.experts_per_token
            self._expert_bytes = (profile.total_params - profile.active_params) / (e - k) * profile.weight_dtype_bytes
            self._shared_bytes = profile.active_params * profile.weight_dtype_bytes - k * self._expert_bytes
        # The vision encoder runs once per image token at prefill (a dense ViT: 2 FLOPs/param/token).
        self._vision_flops_per_token = 2.0 * profile.vision.encoder_params if profile.vision else 0.0

    @staticmethod
    def loaded_weight_bytes(profile: ModelProfile) -> int:
        """Bytes of the weights vLLM loads. FP8 checkpoints quantize only the decoder's linear
        layers: the input embedding and the LM head stay bf16 (vLLM's fp8 methods skip them and
        the usual FP8 recipes list ``lm_head`` as ignored)."""
        base = profile.weight_bytes
        if profile.weight_dtype_bytes >= 2:
            return base
        emb = int(profile.extra.get("embedding_params", 0))
        copies = 1 if profile.extra.get("tie_word_embeddings", False) else 2
        return int(base + emb * copies * (ACT_BYTES - profile.weight_dtype_bytes))

    # -- step time ------------------------------------------------------------------------------
    def weight_bytes_read(self, num_tokens: int) -> float:
        """Weight bytes one step touches (MoE: shared + expected distinct experts hit)."""
        p = self.profile
        if not self._moe:
            return float(self.weight_bytes)
        e, k = p.num_experts, p.experts_per_token
        touched = e * (1.0 - (1.0 - k / e) ** num_tokens)
        return self._shared_bytes + touched * self._expert_bytes

    def step_time(self, batch: Sequence[tuple]) -> float:
        """Seconds for one step. ``batch``: per scheduled request ``(num_new_tokens,
        num_context_tokens_before, num_image_tokens_encoded_this_step[, num_cross_tokens])``;
        ``num_cross_tokens`` (optional) is the request's image tokens its cross-attention layers
        read. An empty batch costs nothing."""
        if not batch:
            return 0.0
        p = self.profile
        tokens = 0
        attn_pairs = 0       # (query, key) pairs × compute layers
        kv_bytes = 0
        img_tokens = 0
        is_prefill = False
        for entry in batch:
            n, c = entry[0], entry[1]
            img_tokens += entry[2]
            cross = entry[3] if len(entry) > 3 else 0
            tokens += n
            if n > 1:
                is_prefill = True
            for kind, spec, layers, bpt in self._types:
                if kind == "cross":
                    attn_pairs += n * cross * layers
                    kv_bytes += cross * bpt * layers
                elif kind == "mamba" or kind == "vision_embedding":
                    continue
                else:
                    if n == 1 and kind == "token_drop":
                        keys = spec.kept_tokens(c) + 1
                        attn_pairs += keys * layers
                        kv_bytes += keys * bpt * layers
                        continue
                    attn_pairs += _span_sum(kind, spec, c, n) * layers
                    kv_bytes += _keys_read(kind, spec, c, n) * bpt * layers
        kv_bytes += 2 * self._mamba_state_bytes * len(batch)
        flops = 2.0 * self.matmul_params * tokens + self.attn_flops_per_pair * attn_pairs
        flops += self._vision_flops_per_token * img_tokens
        compute = flops / self.flops_per_s
        memory = (self.weight_bytes_read(tokens) + kv_bytes) / self.bytes_per_s
        gpu_time = max(compute, memory)
        if self.tp > 1:
            msg = tokens * p.hidden_size * ACT_BYTES
            ring = 2.0 * (self.tp - 1) / self.tp * msg / self.link_bytes_per_s if self.link_bytes_per_s else 0.0
            gpu_time += 2 * p.num_layers * (ALLREDUCE_LATENCY_S + ring)
        graphed = not self.eager and not is_prefill and len(batch) <= self.overhead.max_graph_batch
        launch = 0.0 if graphed else p.num_layers * self.overhead.eager_layer_s
        return max(gpu_time, launch) + self.overhead.step_s + self.overhead.per_request_s * len(batch)

    # -- capacity -------------------------------------------------------------------------------
    def activation_peak_bytes(self) -> int:
        """Per-GPU activation peak of vLLM's start-up profiling pass (see module docstring)."""
        p = self.profile
        max_len = int(_get(self.engine, "max_model_len") or p.max_model_len)
        seqs = int(_get(self.engine, "max_num_seqs", 256))
        tokens = profile_tokens(self.engine, max_len)
        inter = p.intermediate_size * (max(1, p.experts_per_token) if self._moe else 1)
        layer = tokens * (3 * inter / self.tp + 4 * p.hidden_size) * ACT_BYTES
        if p.weight_dtype_bytes <= 1:
            layer += tokens * inter / self.tp * FP8_QUANT_INPUT_BYTES
        vision = 0.0
        if p.vision is not None:
            per_image = p.vision.max_tiles * p.vision.tokens_per_tile
            vision = seqs * per_image * p.vision.embedding_bytes_per_token * VISION_ACT_FACTOR / self.tp
        rows = min(seqs, tokens)
        if str(_get(self.engine, "engine_version", "v0")) == "v0":
            # After the forward, on rank 0, with the dummy top-k/top-p sort (module docstring).
            return int(max(layer + vision, rows * p.vocab_size * SAMPLER_BYTES_PER_LOGIT))
        return int(layer + vision + rows * p.vocab_size * 4 / self.tp)

    def kv_capacity_bytes(self) -> int:
        """KV bytes for the whole TP group; ``engine.kv_cache_bytes`` overrides the estimate."""
        explicit = _get(self.engine, "kv_cache_bytes")
        if explicit:
            return int(explicit)
        util = float(_get(self.engine, "gpu_memory_utilization", 0.9))
        per_gpu_extra = NON_TORCH_BYTES + (NCCL_BYTES if self.tp > 1 else 0)
        total = float(_get(self.gpu, "memory_bytes")) * util * self.tp
        kv = total - self.weight_bytes - self.tp * (self.activation_peak_bytes() + per_gpu_extra)
        if kv <= 0:
            raise ValueError(
                f"no KV cache memory left for {self.profile.name} on {self.tp}x{_get(self.gpu, 'name')}: "
                f"weights {self.weight_bytes / GiB:.1f} GiB + activation peak "
                f"{self.tp * self.activation_peak_bytes() / GiB:.1f} GiB exceed "
                f"memory x gpu_memory_utilization ({total / GiB:.1f} GiB)")
        return int(kv)
