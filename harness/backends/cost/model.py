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
- **serving-path output processing** (:class:`OutputProc`): the API server's per-sequence work
  after each forward (detokenization, ``RequestOutput``, stats, pickling to the front-end
  process); v0 only, serial when v0's async output processing is off (``enforce_eager``), else
  overlapped with the forward.
- **overhead**: per engine version (v0 / v1), a fixed CPU time per step plus CPU time per
  scheduled request, plus the model runner's input preparation that grows with what the step
  holds (:class:`InputPrep`: block-table entries per KV group, prefill tokens; v0 only — see
  there for the code path and how the constants were measured). One set of constants per engine
  version and block manager, never per model.
- **running set** (:class:`RunningScan`, :meth:`CostModel.running_time`, added by the loop because
  it needs the scheduler's running set): v0's scheduler walks every *running* sequence each step,
  scheduled or not (budget, finished check; the per-layer fork also ``free_skipped_blocks`` per KV
  group).
- **TP** divides compute and memory and adds two all-reduces per layer: ring all-reduce bytes over
  the GPU's per-direction link bandwidth plus a per-collective latency (both per GPU in
  ``conf/gpu``; L4 has PCIe only).
- **Mamba** mixers add their own kernel (``selective_state_update`` / ``causal_conv1d_update`` in
  decode, ``selective_scan_fwd`` + ``causal_conv1d_fwd`` in prefill): per sequence the conv and SSM
  state read and written, per token the scan's activations and its element-wise recurrence FLOPs.
  On the per-layer (Jenga) v0 fork its ``*_with_cache`` wrappers also gather each chunk's inputs
  into contiguous copies and scatter the outputs back (:meth:`CostModel.mamba_layout_time`).
- **GPU efficiency**: ``mfu``/``mbu`` from ``conf/gpu/<gpu>.yaml`` (datasheet defaults) unless a
  measured table ``conf/gpu/profiles/<gpu>.yaml`` (``scripts/profile_gpu.py``) exists.

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
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from harness.backends.cost import mamba_kernels
from harness.backends.settings import EngineSettings, GpuSettings
from harness.models import ModelProfile
from jenga.registry import uniform_block_table_systems

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
#   most per-request Python out of the hot loop. Published v0 figures agree in size: 5-13 ms of
#   GPU bubble per decode step from scheduling, input preparation and output processing
#   (vllm-project/vllm#6854, the multi-step RFC, v0.5.x), and "when BS is 200, all this together
#   [sampling, prepare input, process_model_output, scheduler] can be 20 ms" (vllm#6801, v0.5.x);
#   ours is 3 + 200 x 0.06 = 15 ms at batch 200 (v0.6.3 overlaps output processing with the next
#   step, except under enforce_eager: ``OutputProc``). The parts that grow with blocks, prompt
#   tokens and images are in ``InputPrep`` below.
# - eager_layer_s: a public vLLM measurement of a 28-layer 7B model in eager mode gives ~22 ms TPOT
#   vs ~13 ms with CUDA graphs (vllm-project/vllm-omni#7960), i.e. ~0.5-0.8 ms of launch-bound
#   time per decoder layer; we take 0.5 ms.
ENGINE_OVERHEAD: dict[str, EngineOverhead] = {
    "v0": EngineOverhead(step_s=3.0e-3, per_request_s=60e-6, eager_layer_s=500e-6, max_graph_batch=256),
    "v1": EngineOverhead(step_s=1.5e-3, per_request_s=12e-6, eager_layer_s=500e-6, max_graph_batch=512),
}


@dataclass(frozen=True)
class InputPrep:
    """Model-runner CPU time that grows with what a step holds (seconds per unit).

    vLLM v0 (both artifact forks) rebuilds the step's attention metadata in Python every step:

    - ``vllm-v0-baseline`` ``vllm/attention/backends/utils.py``,
      ``CommonMetadataBuilder._add_seq_group``: each sequence's block table is copied
      (``block_tables[seq_id][-curr_sliding_window_block:]``) and ``build`` writes it into the
      CUDA-graph table row by row (``input_block_tables[i, :len(block_table)] = block_table``) or
      into ``make_tensor_with_pad`` (eager and prefill). mllama's encoder-decoder runner does the
      same for the cross-attention table (``vllm/worker/enc_dec_model_runner.py``,
      ``_prepare_encoder_model_input_tensors``: ``make_tensor_with_pad(cross_block_tables)``). → ``uniform_entry_s`` per block-table entry.
    - ``vllm-v0-jenga`` (``--use-per-layer-block-manager``): one metadata builder per KV group
      (``ModelInputForGPUBuilder`` in ``vllm/worker/model_runner.py`` loops over
      ``attn_metadata_builders``), and the same ``_add_seq_group`` builds
      ``[2 * x for x in block_table]`` twice per sequence and group (block table and slot
      mapping) before the numpy write. → ``per_layer_entry_s`` per entry per group.
    - Prefill inputs: ``ModelInputForGPUBuilder.build`` flattens tokens and positions into Python
      lists and ``async_tensor_h2d`` converts them (``prefill_token_s`` per prompt token); each
      metadata builder's ``compute_slot_mapping`` (numpy path) extends a Python list with one numpy
      scalar per token, converted the same way (``slot_token_s`` per token, per group in the
      per-layer manager).

    - Multimodal inputs: ``_compute_multi_modal_input`` calls ``multi_modal_input_mapper`` for
      every image prefill, and mllama registers the default mapper
      (``vllm/multimodal/image.py`` ``ImagePlugin._default_input_mapper``: the HF image
      processor's ``preprocess(data, return_tensors="pt")``), in the worker, between steps. With
      the artifact's transformers 4.45.2 (``environment.md``) that is the numpy
      ``MllamaImageProcessor``: resize, pad, float64 rescale, normalize, split into tiles, pack,
      then the tensor copies. → ``mm_input_per_image_token_s`` per image token of the request
      (its work scales with the padded canvas: patch² × 3 values per image token).

    The v0 constants were measured on this project's CPU (AMD EPYC vCPU, Python 3.11) as thread
    CPU time (the host is shared, wall time is inflated): block-table entries and tokens with
    ``scripts/bench_v0_python.py`` (numpy 2.4, torch 2.13 CPU; medians of five runs: 18-30,
    67-101, 144-179, 115-188 ns); the image mapper with transformers 4.45.2's
    ``MllamaImageProcessor.preprocess`` on random RGB images of 560² to 1920×1080 px (same script,
    ``--mm``, in a venv with ``transformers==4.45.2 numpy<2``): 4.0-11.3 ms per 560-px tile, median
    8.4 ms for the 4-tile canvases that dominate MMMU-Pro, plus ~0.4 ms per tile of tensor copies
    (``BatchFeature`` → torch, ``MultiModalInputs.batch``) → 8.8 ms per 1601-token tile. The
    artifact's host CPU is not published, so these are per engine version and host, never per
    model.
    vLLM v1 (``vllm-v1`` fork, ``vllm/v1/worker/block_table.py`` ``BlockTable.append_row`` and
    ``gpu_model_runner.py`` ``_prepare_inputs``) keeps persistent numpy block tables that only
    append new blocks and builds inputs with vectorised numpy: per-entry and per-token Python work
    is gone, hence zeros; its HF image processor runs in the front-end process
    (``vllm/v1/engine/processor.py``), overlapped with the engine core's steps.
    """

    uniform_entry_s: float
    per_layer_entry_s: float
    prefill_token_s: float
    slot_token_s: float
    mm_input_per_image_token_s: float


INPUT_PREP: dict[str, InputPrep] = {
    "v0": InputPrep(uniform_entry_s=20e-9, per_layer_entry_s=75e-9, prefill_token_s=160e-9,
                    slot_token_s=125e-9, mm_input_per_image_token_s=8.8e-3 / 1601),
    "v1": InputPrep(uniform_entry_s=0.0, per_layer_entry_s=0.0, prefill_token_s=0.0, slot_token_s=0.0,
                    mm_input_per_image_token_s=0.0),
}

@dataclass(frozen=True)
class OutputProc:
    """Engine-process CPU time per scheduled sequence per step for what the OpenAI API server's
    streaming path adds after the forward (seconds per sequence).

    The artifact measured Fig. 14 with ``benchmark_serving.py`` (``--request-rate`` inf,
    ``"stream": True`` in ``backend_request_func.py``) against ``vllm.entrypoints.openai.api_server``
    (``figure14.md``; docs/fidelity/serving_path.md). In vLLM v0 (both forks) the front end runs in
    its own process (``MQLLMEngine``, ``vllm/engine/multiprocessing/engine.py``), and the engine
    process does, per step and per scheduled sequence, after the forward:

    - incremental detokenization (``Detokenizer.decode_sequence_inplace`` →
      ``detokenize_incrementally``, ``vllm/transformers_utils/detokenizer.py``);
    - ``RequestOutputFactory.create`` → ``RequestOutput.from_seq_group`` (DELTA outputs);
    - the stats the server logs (``--disable-log-stats`` is not passed): ``_get_stats`` collects one
      inter-token latency per decoding sequence and ``PrometheusStatLogger._log_histogram``
      observes each one;
    - ``MQLLMEngine._send_outputs``: ``pickle.dumps`` of the step's outputs before the ZMQ send.

    Measured with ``scripts/bench_serving_path.py`` (thread CPU time, this project's host,
    three runs): 6.0-7.1 µs detokenization, 1.4-1.6 µs ``RequestOutput``, 1.7-2.0 µs pickle,
    2.2-2.3 µs stats → 12 µs per sequence per step. These are equivalents of the code path
    (vLLM 0.32's ``detokenize_incrementally``, which is v0's function, on a byte-level BPE tokenizer
    trained locally; 0.32's ``RequestOutput``), not the 0.6.3 objects.

    Whether it is on the step's critical path is the engine's ``use_async_output_proc``: v0.6.3
    overlaps output processing with the next step's forward (``LLMEngine.step``: ``_process_model_
    outputs`` runs from the model runner's ``async_callback``), but ``ModelConfig.verify_async_
    output_proc`` turns that off under ``enforce_eager`` (and ``--disable-async-output-proc``), and
    then ``step`` runs it serially after the forward, and ``MQLLMEngine`` sends synchronously
    (``use_async_sockets = use_async_output_proc``). v1 (``vllm-v1``): detokenization and
    ``RequestOutput``s are in the front-end process (``AsyncLLM._run_output_handler`` →
    ``OutputProcessor.process_outputs``) and the engine core serializes its outputs in a separate
    thread (``EngineCoreProc.process_output_socket``), hence zero here (its scheduler's per-request
    update stays in ``EngineOverhead.per_request_s``).
    """

    per_seq_s: float


OUTPUT_PROC: dict[str, OutputProc] = {
    "v0": OutputProc(per_seq_s=12e-6),
    "v1": OutputProc(per_seq_s=0.0),
}


@dataclass(frozen=True)
class RunningScan:
    """Scheduler CPU time per *running* sequence per step, whether or not the step schedules it
    (seconds). Under v0's prefill-first policy the running set waits unscheduled through every
    prefill step while later prompts are admitted, so this grows with the running set, not the
    batch (``EngineOverhead.per_request_s`` prices the scheduled sequences).

    - Both v0 forks (``vllm/core/scheduler.py``): ``Scheduler._schedule_default`` adds every running
      group to the budget before admitting prefills (``budget.add_num_seqs``), and
      ``free_finished_seq_groups`` (after every step, from ``LLMEngine._process_model_outputs``)
      checks ``is_finished`` of every running group. → ``per_idle_seq_s`` per running sequence the
      step does not schedule (a scheduled one is inside ``per_request_s``).
    - ``vllm-v0-jenga`` / ``vllm-v0-pyramidinfer`` only (the per-layer block manager):
      ``Scheduler.schedule`` first calls ``block_manager.free_skipped_blocks`` for every running
      group ("so it can be freed after prefill"): ``PerlayerBlockSpaceManager`` →
      ``CustomBlockManager.free_skipped_blocks`` loops over the KV groups
      (``kv_cache_config.block_table_sharing``) and calls the group's manager
      (``vllm/core/block_v3/custom_block.py``: ``LinearAttentionManager.free_skipped_blocks`` reads
      the computed-token count, fetches the null block, walks ``free_start .. len(blocks) - 3``;
      ``SelfAttentionManager``'s is ``pass``). → ``per_seq_group_s`` per running sequence and KV
      group (scheduled or not).

    Measured with ``scripts/bench_v0_python.py`` (``running_seq_ns`` / ``running_seq_group_ns``:
    loops with the same calls, Jamba's three groups; thread CPU time on this project's shared vCPU,
    ten runs at load 3-4.4 on 2 cores: 0.89-2.05 µs and 1.25-3.04 µs; in the runs where the
    script's ``uniform_entry`` reproduced the 18-30 ns that ``InputPrep`` was set from, 0.89-1.17
    and 1.25-1.71 µs) → 1.0 µs and 1.3 µs, on the same footing as ``InputPrep``. v1 schedules every
    running request every step (its per-request cost is ``EngineOverhead.per_request_s``), hence
    zeros.
    """

    per_idle_seq_s: float
    per_seq_group_s: float


RUNNING_SCAN: dict[str, RunningScan] = {
    "v0": RunningScan(per_idle_seq_s=1.0e-6, per_seq_group_s=1.3e-6),
    "v1": RunningScan(per_idle_seq_s=0.0, per_seq_group_s=0.0),
}


# Systems that ran on the artifact's upstream (uniform) block manager; every other system ran on
# Jenga's PerlayerBlockSpaceManager fork (figure14.md: max page / static partition / Jenga pass
# --use-per-layer-block-manager; the vLLM bars use vllm-v0-baseline).
UNIFORM_BLOCK_MANAGER_SYSTEMS = uniform_block_table_systems()


def block_manager_of(system: str) -> str:
    """``uniform`` (one block table per sequence) or ``per_layer`` (one per KV group)."""
    return "uniform" if system in UNIFORM_BLOCK_MANAGER_SYSTEMS else "per_layer"


# Per-collective latency when a GPU yaml gives none: vLLM's custom all-reduce over NVLink is a
# one-shot kernel of a few microseconds (ASSUMED 8 us; per GPU in conf/gpu/*.yaml).
ALLREDUCE_LATENCY_S = 8e-6
# Mamba recurrence FLOPs per (token, d_inner, d_state) element: dA = exp(dt*A), dB*x, h = dA*h +
# dBx, y += C*h (mamba_ssm selective_scan: ~6 multiply/adds + one exp) — ASSUMED count, tiny anyway.
MAMBA_SCAN_FLOPS_PER_ELEMENT = 7
# Elements the per-layer (Jenga) v0 fork's Mamba wrappers copy per token per Mamba layer, as
# (d_inner, d_state) multiples (vllm-v0-jenga vllm/model_executor/layers/mamba/ops/mamba_ssm.py
# ``selective_scan_fn_with_cache``, causal_conv1d.py ``causal_conv1d_fn_with_cache``).
# Prefill, per chunk step: u, delta, z each ``x[step.token_positions]`` (read + write) then
# ``.transpose(-2, -1).contiguous()`` (read + write): 4 d_inner each; B and C the same: 4 d_state
# each; the output ``out_tensor[step.token_positions] = z_step.transpose(-2, -1)``: 2 d_inner; the
# conv input gathered the same way (4 d_inner) and its output scattered back (2 d_inner).
# Decode (``num_prefills == 0``): ``.contiguous()`` of the transposed u, delta, z (2 d_inner each),
# B, C (2 d_state each) and the conv input (2 d_inner). vllm-v0-baseline's Jamba (upstream
# ``selective_scan_fn`` on the whole varlen batch, ``selective_state_update`` in decode) has none.
MAMBA_LAYOUT_PREFILL = (20, 8)
MAMBA_LAYOUT_DECODE = (8, 4)
PROFILES_DIR = Path(__file__).resolve().parents[2] / "conf" / "gpu" / "profiles"
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
# The same live set as tensors, in the order the profiling pass allocates them (bytes per logit).
SAMPLER_TENSOR_BYTES = (2, 4, 4, 8, 1, 4, 4, 1, 4)
assert sum(SAMPLER_TENSOR_BYTES) == SAMPLER_BYTES_PER_LOGIT
# torch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, the artifact's torch 2.4/2.5):
# a request above 10 MiB gets its own segment rounded up to 2 MiB (``get_allocation_size``:
# kMinLargeAlloc, kRoundLarge); one of 1-10 MiB a 20 MiB segment (kLargeBuffer); a freed block goes
# back to the pool and a later request takes the smallest free block that holds it, splitting the
# rest (``get_free_block``, ``alloc_found_block``). Cached segments go back to the driver only
# through ``empty_cache`` or after a failed cudaMalloc (``release_cached_blocks``).
ALLOC_ROUND_LARGE = 2 << 20
ALLOC_LARGE_BUFFER = 20 << 20
ALLOC_MIN_LARGE = 10 << 20


def caching_allocator_new_bytes(free_blocks: Sequence[float], requests: Sequence[float]) -> int:
    """Bytes of new segments torch's caching allocator reserves for ``requests`` (held at once, in
    order) when ``free_blocks`` are cached: each request takes the smallest free block that holds it
    (the rest stays free), else a new segment (:data:`ALLOC_ROUND_LARGE` / :data:`ALLOC_LARGE_BUFFER`)."""
    free = sorted(float(b) for b in free_blocks if b > 0)
    new = 0
    for r in requests:
        if r <= 0:
            continue
        i = next((k for k, b in enumerate(free) if b >= r), None)
        if i is not None:
            rest = free.pop(i) - r
            if rest > 0:
                free.append(rest)
                free.sort()
            continue
        seg = ALLOC_LARGE_BUFFER if r < ALLOC_MIN_LARGE else -(-int(r) // ALLOC_ROUND_LARGE) * ALLOC_ROUND_LARGE
        new += seg
        if seg > r:
            free.append(seg - r)
            free.sort()
    return int(new)
# FP8 linear layers quantize their input on the fly before the GEMM (``apply_fp8_linear`` in
# vllm/model_executor/layers/quantization/utils/w8a8_utils.py of both v0 forks and of vLLM V1:
# ``qinput, x_scale = ops.scaled_fp8_quant(input, ...)`` then ``cutlass_scaled_mm``). At the MLP's
# peak (down projection) that is one more byte per intermediate element live beside its bf16 input
# and the still-referenced gate_up output (``LlamaMLP.forward`` keeps ``gate_up`` until it returns).
FP8_QUANT_INPUT_BYTES = 1
# vLLM v0 replays a captured CUDA graph only when the batch's longest sequence is at most
# ``max_seq_len_to_capture`` (vllm-v0-baseline and vllm-v0-jenga: ``vllm/engine/arg_utils.py``
# ``EngineArgs.max_seq_len_to_capture = 8192``; ``vllm/worker/model_runner.py``
# ``ModelInputForGPUBuilder._use_captured_graph``: ``max_decode_seq_len <= max_seq_len_to_capture``
# and the same for the encoder length). Longer decodes run eager. The artifact passes no such flag.
V0_MAX_SEQ_LEN_TO_CAPTURE = 8192
# Mechanisms of issue 21 §2-§3 that a GPU yaml's ``calibration`` block switches on (all default to
# on when the block exists; ``gpu.calibration.mechanisms.<name>=false`` turns one off, which is how
# FIDELITY.md's before -> after per mechanism is produced). Without a calibration block none is on:
# the datasheet ``mfu``/``mbu`` path of earlier rounds.
MECHANISMS = ("gemm_curve", "allreduce", "eager_host", "graph_seq_rule", "vision_flops", "vision_mask_memory",
              "untuned_fused_moe", "mamba_scan_latency", "reserved_peak", "fused_moe_curve")


def _plain(obj) -> dict:
    """A GPU yaml's ``calibration`` block as a plain dict (it may arrive as a DictConfig)."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    from omegaconf import OmegaConf
    return OmegaConf.to_container(obj, resolve=True)


def gemm_time(flops: float, weight_bytes: float, peak_flops: float, bytes_per_s: float, gemm: dict,
              kernels: int = 0) -> float:
    """Time of a set of linear layers from their FLOPs and weight bytes with the measured GEMM
    efficiency curve (``scripts/calibrate.py``, fitted on Vidur's H100 operator profiles): the
    compute time at ``mfu`` of the datasheet peak and the weight-streaming time at ``mbu`` of the
    datasheet bandwidth combine as a power mean, ``(c^p + m^p)^(1/p)``. Large token counts tend to
    ``c``, one token to ``m``; near the ridge both count, which one ``max`` would miss (Vidur's
    128-512-token GEMMs run below both roofs), plus ``floor_s`` per GEMM kernel (``kernels``: the
    step's linear-layer launches; Vidur's 1-token TP-8 shards take ~10 us whatever their size)."""
    c = flops / (peak_flops * gemm["mfu"])
    m = weight_bytes / (bytes_per_s * gemm["mbu"])
    p = gemm["blend"]
    return (c ** p + m ** p) ** (1.0 / p) + kernels * float(gemm.get("floor_s", 0.0))


def gpu_efficiency(gpu, profiles_dir: Path | None = None, tp: int = 1) -> dict:
    """``mfu_bf16``, ``mfu_fp8``, ``mbu`` and their ``source`` for one GPU: the measured table
    ``<profiles_dir>/<gpu name>.yaml`` written by ``scripts/profile_gpu.py`` when it exists (its
    ``by_tp[tp]`` entry when it has one: one GPU's shard of a TP group runs narrower GEMMs; its
    ``mfu_fp8`` may be absent where the device had no FP8 GEMM: then the bf16 value), else the GPU
    yaml's datasheet defaults ``mfu``/``mbu``."""
    gpu = GpuSettings.of(gpu)
    name = str(gpu.name or "")
    path = (profiles_dir or PROFILES_DIR) / f"{name}.yaml"
    if name and path.is_file():
        table = yaml.safe_load(path.read_text()) or {}
        prof = {**table, **((table.get("by_tp") or {}).get(tp) or {})}
        for key in ("mfu_bf16", "mbu"):
            if not isinstance(prof.get(key), (int, float)) or not 0 < prof[key] <= 1.5:
                raise ValueError(f"{path}: {key} must be a number in (0, 1.5], got {prof.get(key)!r}")
        fp8 = prof.get("mfu_fp8") or prof["mfu_bf16"]
        return {"mfu_bf16": float(prof["mfu_bf16"]), "mfu_fp8": float(fp8), "mbu": float(prof["mbu"]),
                "source": f"profiled: {path.name} ({table.get('device', '?')}, TP {tp})"}
    mfu = float(gpu.mfu)
    return {"mfu_bf16": mfu, "mfu_fp8": mfu, "mbu": float(gpu.mbu), "source": "datasheet defaults"}


def allreduce_time(msg_bytes: float, tp: int, link_bytes_per_s: float, latency_s: float) -> float:
    """One ring all-reduce of ``msg_bytes`` over ``tp`` GPUs: each GPU sends and receives
    ``2 (tp - 1) / tp`` of the message over its per-direction link (NCCL's bus-bandwidth model,
    nccl-tests PERFORMANCE.md), plus a fixed per-collective latency. Zero for tp = 1."""
    if tp <= 1:
        return 0.0
    ring = 2.0 * (tp - 1) / tp * msg_bytes / link_bytes_per_s if link_bytes_per_s else 0.0
    return latency_s + ring


def expected_distinct_experts(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected experts of one MoE layer that ``tokens`` tokens route to, each token picking
    ``top_k`` of ``num_experts`` uniformly: ``E (1 - (1 - k/E)^T)`` (1 token → k experts; many → E).
    Uniform routing is the assumption; real routers are skewed, which touches fewer."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def profile_tokens(engine, max_model_len: int) -> int:
    """The scheduler's token budget, which is also the size of vLLM's profiling pass.

    v0 with chunked prefill off: ``max(max_num_batched_tokens or 0, max_model_len, 2048)``
    (a whole prompt must fit one step); v0 with chunked prefill on: 512 (v0.6 default); v1:
    8192 (the OpenAI-server default of the April-2025 v1 engine). An explicit
    ``max_num_batched_tokens`` wins where vLLM lets it.
    """
    engine = EngineSettings.of(engine)
    explicit = engine.max_num_batched_tokens
    version = engine.engine_version
    if not engine.mixed_batches:
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

    def __init__(self, profile: ModelProfile, gpu, engine, block_manager: str = "uniform",
                 profiles_dir: Path | None = None) -> None:
        self.profile = profile
        self.gpu = gpu = GpuSettings.of(gpu)
        self.engine = engine = EngineSettings.of(engine)
        self.tp = gpu.tp
        version = str(engine.engine_version)
        if version not in ENGINE_OVERHEAD:
            raise ValueError(f"engine.engine_version must be one of {sorted(ENGINE_OVERHEAD)}, got {version!r}")
        if block_manager not in ("uniform", "per_layer"):
            raise ValueError(f"block_manager must be 'uniform' or 'per_layer', got {block_manager!r}")
        self.overhead = ENGINE_OVERHEAD[version]
        self.prep = INPUT_PREP[version]
        self.block_manager = block_manager
        self.block_size = int(engine.tokens_per_page)
        self.eager = bool(engine.enforce_eager)
        self.output_proc = OUTPUT_PROC[version]
        self.running_scan = RUNNING_SCAN[version]
        # v0's use_async_output_proc (ModelConfig.verify_async_output_proc): on by default, off
        # under enforce_eager or --disable-async-output-proc. v1 has no such switch (OutputProc).
        self.async_output = version == "v0" and not self.eager and \
            not bool(engine.disable_async_output_proc)
        fp8 = profile.weight_dtype_bytes <= 1
        self.efficiency = gpu_efficiency(gpu, profiles_dir, self.tp)
        peak = float(gpu.peak_fp8_flops if fp8 else gpu.peak_bf16_flops)
        self.flops_per_s = peak * self.efficiency["mfu_fp8" if fp8 else "mfu_bf16"] * self.tp
        self.bytes_per_s = float(gpu.hbm_bytes_per_s) * self.efficiency["mbu"] * self.tp
        # Per-direction link bandwidth for the ring all-reduce; GPU yamls without it fall back to
        # half the datasheet's bidirectional interconnect figure.
        self.link_bytes_per_s = float(gpu.allreduce_bytes_per_s or 0) or \
            float(gpu.interconnect_bytes_per_s or 0) / 2
        self.allreduce_latency_s = float(gpu.allreduce_latency_s or 0) or ALLREDUCE_LATENCY_S
        self.attn_flops_per_pair = 4 * profile.num_heads * profile.head_dim
        # Linear-layer FLOPs per token: the matmul parameters (the embedding lookup is free).
        self.matmul_params = float(profile.extra.get("matmul_params_per_token", profile.active_params))
        self.weight_bytes = self.loaded_weight_bytes(profile)
        # (kind, spec, compute layers, bytes per token per layer) per layer type with a cache.
        self._types = [(s.kind, s, s.num_compute_layers or s.num_layers, s.bytes_per_token_per_layer)
                       for s in profile.specs]
        self._mamba_state_bytes = sum(s.state_bytes for s in profile.specs if s.kind == "mamba")
        # Mamba mixer kernels (vLLM ``MambaMixer``; shapes from the model's ``mamba:`` section).
        mb = profile.extra.get("mamba") or {}
        self._mamba_layers = sum(s.num_compute_layers or s.num_layers for s in profile.specs if s.kind == "mamba")
        if self._mamba_layers and mb:
            di, ds, dc = mb["d_inner"], mb["d_state"], mb["d_conv"]
            # Per token and layer the scan reads x, dt, z (d_inner each) and B, C (d_state each) and
            # writes y (d_inner), bf16 activations; the causal conv reads d_conv inputs per channel.
            self._mamba_shape = (di, ds, dc)
            self._mamba_chunk = min((s.checkpoint_interval for s in profile.specs if s.kind == "mamba"), default=0)
            self._mamba_act_bytes = ((4 * di + 2 * ds) + dc * di) * ACT_BYTES
            self._mamba_flops = MAMBA_SCAN_FLOPS_PER_ELEMENT * di * ds + 2 * di * dc
            # Only the Jenga v0 fork's wrappers copy (MAMBA_LAYOUT_*).
            fork = version == "v0" and block_manager == "per_layer"
            self._mamba_layout_bytes = tuple(
                (a * di + b * ds) * ACT_BYTES if fork else 0
                for a, b in (MAMBA_LAYOUT_PREFILL, MAMBA_LAYOUT_DECODE))
        else:
            self._mamba_act_bytes = self._mamba_flops = 0
            self._mamba_layout_bytes = (0, 0)
            self._mamba_shape = None
            self._mamba_chunk = 0
        self._moe = profile.num_experts > 0 and profile.experts_per_token > 0
        if self._moe:
            e, k = profile.num_experts, profile.experts_per_token
            # Routed-expert parameters = total - active - the vision tower a text-served VLM loads
            # (``extra.vision_tower_params``: Llama-4's tower is in its published total).
            routed = profile.total_params - profile.active_params - float(profile.extra.get("vision_tower_params", 0))
            self._expert_bytes = routed / (e - k) * profile.weight_dtype_bytes
            self._shared_bytes = profile.active_params * profile.weight_dtype_bytes - k * self._expert_bytes
        # The vision encoder runs once per image token at prefill (a dense ViT: 2 FLOPs/param/token).
        self._vision_flops_per_token = 2.0 * profile.vision.encoder_params if profile.vision else 0.0
        self._calibrate(gpu, version, peak)
        self._group_types()

    def _group_types(self) -> None:
        """The layer types grouped by how a step prices them, for :meth:`step_time` and
        :meth:`input_prep_time` (a step sums each group's span and keys over its entries once, then
        multiplies by the group's layers: integers, so exactly the per-entry, per-type sums).
        Token-drop kept counts are memoised per type (a pure function of the context length)."""
        full = [t for t in self._types if t[0] == "full"]
        self._full_layers = sum(t[2] for t in full)
        self._full_bytes = sum(t[3] * t[2] for t in full)
        cross = [t for t in self._types if t[0] == "cross"]
        self._cross_compute_layers = sum(t[2] for t in cross)
        self._cross_bytes = sum(t[3] * t[2] for t in cross)
        self._has_cross = bool(cross)
        # (spec, compute layers, bytes per token x layers, kept-token memo) per token-drop type
        self._token_drop = [(t[1], t[2], t[3] * t[2], {}) for t in self._types if t[0] == "token_drop"]
        # (kind, spec, compute layers, bytes per token x layers) per sliding / chunked type
        self._local = [(t[0], t[1], t[2], t[3] * t[2]) for t in self._types if t[0] in ("sliding", "chunked")]
        # v0 input preparation (input_prep_time): KV groups, and per group what its table holds
        kinds = [t[0] for t in self._types if t[0] != "vision_embedding"]
        self._prep_groups = len(kinds)
        self._prep_token_tables = sum(k not in ("cross", "mamba", "token_drop") for k in kinds)
        self._prep_cross_tables = kinds.count("cross")
        self._prep_mamba_tables = kinds.count("mamba")

    def _kept(self, memo: dict, spec, num_tokens: int) -> int:
        k = memo.get(num_tokens)
        if k is None:
            k = memo[num_tokens] = spec.kept_tokens(num_tokens)
        return k

    def _calibrate(self, gpu, version: str, peak: float) -> None:
        """Apply the GPU yaml's ``calibration`` block (``scripts/calibrate.py``; issue 21): the
        measured GEMM curve, the all-reduce fit, the v0 eager host cost per layer, and the
        source-level mechanisms (:data:`MECHANISMS`). Without the block: none of them."""
        cal = _plain(gpu.calibration)
        switches = cal.get("mechanisms") or {}
        self.mechanisms = {m: bool(cal) and bool(switches.get(m, True)) for m in MECHANISMS}
        on = self.mechanisms
        self.calibration_source = cal.get("source", "none (datasheet mfu/mbu)")
        self.gemm = dict(cal["gemm"]) if on["gemm_curve"] and cal.get("gemm") else None
        if self.gemm:
            # Peaks of the whole TP group; the fitted efficiencies apply to every kernel class
            # (attention and Mamba kernels have no published profile of their own here).
            self.peak_flops = peak * self.tp
            self.peak_bytes_per_s = float(gpu.hbm_bytes_per_s) * self.tp
            self.flops_per_s = self.peak_flops * float(self.gemm["mfu"])
            self.bytes_per_s = self.peak_bytes_per_s * float(self.gemm["mbu"])
            self.efficiency = {**self.efficiency, "mfu_bf16": float(self.gemm["mfu"]),
                               "mfu_fp8": float(self.gemm["mfu"]), "mbu": float(self.gemm["mbu"]),
                               "source": f"calibrated: {self.calibration_source}"}
        ar = cal.get("allreduce") if on["allreduce"] else None
        if ar:
            self.link_bytes_per_s = float(ar["bytes_per_s"])
            self.allreduce_latency_s = float(ar["latency_s"])
        eager = (cal.get("eager_layer_s") or {}).get(version) if on["eager_host"] else None
        if eager is not None:
            self.overhead = replace(self.overhead, eager_layer_s=float(eager))
        self.max_seq_len_to_capture = V0_MAX_SEQ_LEN_TO_CAPTURE if on["graph_seq_rule"] and version == "v0" else None
        # mllama's vision encoder (vllm-v0-baseline vllm/model_executor/models/mllama.py):
        # ``MllamaVisionEncoder`` layers run ``F.scaled_dot_product_attention`` over all tiles of an
        # image at once (``MllamaVisionModel.forward`` pads each tile's 1601 patches to a multiple of
        # 8 and reshapes to ``num_tiles * 1608`` tokens) with the dense additive mask of
        # ``_prepare_aspect_ratio_attention_mask``: 4 N^2 d FLOPs per encoder layer per image. Each
        # cross-attention layer (``MllamaTextCrossAttention.forward``) runs the whole ``qkv_proj``
        # over the image tokens and keeps only K and V.
        p = self.profile
        vx = p.extra or {}
        self._vision_layers = int(vx.get("vision_layers", 0))
        self._vision_hidden = int(vx.get("vision_hidden", 0))
        self._cross_layers = sum(s.num_layers for s in p.specs if s.kind == "cross")
        self._vision_on = bool(on["vision_flops"] and p.vision is not None and self._vision_layers
                               and self._vision_hidden)
        # Jamba's FFNs on the fused-MoE kernel's default config where the fork has no tuned one for
        # this GPU (model yaml ``extra.fused_moe_*``): the FFN weights stream ``slowdown`` x slower
        # in the memory-bound regime (the fitted slowdown: calibration/points.csv, vLLM PR #2979's
        # H100 decode ITL untuned vs tuned). Compute-bound prefill keeps the GEMM curve.
        # v0: PR #2979's decode ITL ratio (memory side only). v1 (the ``vllm-v1`` fork, upstream
        # base 2025-04-07, before vLLM PR #16488 added ``E=16,N=1024,device_name=NVIDIA_H100_80GB_
        # HBM3.json``; its ``fused_moe/configs/`` has E=16,N=1024 for MI300X only, so Llama-4-Scout at
        # TP 8 on H100 runs ``get_default_config``): PR #16488's TPOT and TTFT ratios
        # (``untuned_fused_moe_v1``: memory and compute sides).
        if version == "v1":
            v1 = cal.get("untuned_fused_moe_v1") or {}
            slow, cslow = float(v1.get("memory", 1.0)), float(v1.get("compute", 1.0))
        else:
            slow, cslow = float(cal.get("untuned_fused_moe_slowdown", 1.0)), 1.0
        if not on["untuned_fused_moe"]:
            slow = cslow = 1.0
        fused_ffn = bool(vx.get("fused_moe_ffn"))
        untuned = fused_ffn and str(gpu.name) not in set(vx.get("fused_moe_tuned_gpus") or [])
        self._moe_slowdown = slow if untuned and self.gemm else 1.0
        self._moe_compute_slowdown = cslow if untuned and self.gemm else 1.0
        self._dense_ffn_bytes = float(vx.get("dense_ffn_params", 0)) * p.weight_dtype_bytes
        # FFNs that run through vLLM's Triton ``FusedMoE`` (``fused_experts`` → ``fused_moe_kernel``,
        # ``vllm/model_executor/layers/fused_moe/fused_moe.py`` in every fork) are priced on the
        # fitted fused-MoE curve (``calibration.fused_moe``: vLLM PR #24700's H100
        # ``benchmark_moe.py`` times), not on the dense cuBLAS curve: Jamba's dense FFNs
        # (``JambaMLP(JambaMoE)``, one expert) and sparse ones; Llama-4's routed experts
        # (``Llama4MoE.experts = FusedMoE(...)``; its ``shared_expert`` is a dense ``LlamaMLP``).
        # Per token: the FFN parameters one token multiplies; one ``fused_moe`` call per FFN layer.
        moe_curve = cal.get("fused_moe") if on["fused_moe_curve"] else None
        self.moe_gemm = dict(moe_curve) if (moe_curve and fused_ffn and self.gemm) else None
        if self.moe_gemm:
            k = max(1, p.experts_per_token) if self._moe else 0
            expert_params = self._expert_bytes / p.weight_dtype_bytes if self._moe else 0.0
            self._fused_params = float(vx.get("dense_ffn_params", 0)) + k * expert_params
            self._fused_calls = p.num_layers
        # The v0 forks' Mamba kernels timed from their launch structure (mamba_kernels.py): needs the
        # GPU's SM resources (``mamba_kernels.SM_ARCH``) and the model's Mamba shapes.
        self._scan_arch = mamba_kernels.SM_ARCH.get(str(gpu.name)) if (
            on["mamba_scan_latency"] and version == "v0" and self._mamba_layers and self._mamba_shape) else None

    def _vision_extra_flops(self, img_tokens: int) -> float:
        """FLOPs the encoder's dense-mask attention and the cross layers' full ``qkv_proj`` add for
        one request's image tokens encoded this step (see :meth:`_calibrate`)."""
        if not self._vision_on or img_tokens <= 0:
            return 0.0
        p = self.profile
        tpt = p.vision.tokens_per_tile
        tiles = -(-img_tokens // tpt)
        n = tiles * (-(-tpt // 8) * 8)
        enc = 4.0 * n * n * self._vision_hidden * self._vision_layers
        cross = 2.0 * img_tokens * p.hidden_size * (p.num_heads + 2 * p.num_kv_heads) * p.head_dim * self._cross_layers
        return enc + cross

    def vision_mask_bytes(self) -> int:
        """Bytes of the (seqs, 1, N, N) additive masks of mllama's profiling pass (v0 encodes one
        max-size image per dummy sequence, ``enc_dec_model_runner.profile_run``; N = max tiles x
        1608), model dtype. Zero unless the ``vision_mask_memory`` mechanism is on."""
        p = self.profile
        if not (self.mechanisms["vision_mask_memory"] and p.vision is not None and p.vision.cross_attention
                and self.engine.engine_version == "v0"):
            return 0
        n = p.vision.max_tiles * (-(-p.vision.tokens_per_tile // 8) * 8)
        return int(self.engine.max_num_seqs) * n * n * ACT_BYTES

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
        touched = expected_distinct_experts(p.num_experts, p.experts_per_token, num_tokens)
        return self._shared_bytes + touched * self._expert_bytes

    def mamba_kernel_time(self, tokens: int, seqs: int, batch: Sequence[tuple] | None = None) -> float:
        """The Mamba mixers' own kernels, summed over Mamba layers (they run between the matmuls,
        so they add to the step): every sequence's conv + SSM state read and written once
        (``selective_state_update`` in decode; the chunked ``selective_scan_fwd`` in prefill
        loads the initial state and stores the final one), every token's scan activations and
        recurrence FLOPs. Roofline of that kernel: max(bytes / bandwidth, FLOPs / compute).

        With the ``mamba_scan_latency`` mechanism (v0, ``batch`` given) the step's
        ``selective_scan_fwd`` and ``causal_conv1d_fwd`` launches are timed from their launch
        structure (:meth:`mamba_latency_time`) and the larger of the two times counts."""
        if not self._mamba_layers:
            return 0.0
        nbytes = 2 * self._mamba_state_bytes * seqs + tokens * self._mamba_layers * self._mamba_act_bytes
        flops = tokens * self._mamba_layers * self._mamba_flops
        roof = max(nbytes / self.bytes_per_s, flops / self.flops_per_s)
        if batch is None or self._scan_arch is None:
            return roof
        return max(roof, self.mamba_latency_time(batch))

    def mamba_latency_time(self, batch: Sequence[tuple]) -> float:
        """Latency-bound time of the v0 forks' Mamba kernels for one step, summed over Mamba layers
        (``harness.backends.cost.mamba_kernels``): one block per (sequence, channel) on this GPU's
        ``d_inner / TP`` channels.

        - per-layer manager (``vllm-v0-jenga``: ``selective_scan_fn_with_cache``,
          ``causal_conv1d_fn_with_cache``): one conv and one scan launch per chunk step of
          ``--linear-chunk-size`` (the Mamba spec's ``checkpoint_interval``), decode tokens in step
          0; a decode-only step runs the same two kernels with one token per sequence;
        - uniform manager (``vllm-v0-baseline``, upstream Jamba): prefill runs each kernel once over
          the step's prefills; decode runs ``selective_state_update`` / ``causal_conv1d_update``,
          left on the roofline (zero here)."""
        arch = self._scan_arch
        if arch is None or not batch:
            return 0.0
        di, ds, dc = self._mamba_shape
        dim = max(1, di // self.tp)
        if self.block_manager == "per_layer":
            launches = mamba_kernels.jenga_fork_launches(batch, self._mamba_chunk or 1 << 30)
        else:
            launches = [[int(e[0]) for e in batch if e[0] > 1]]
        t = 0.0
        for lens in launches:
            t += mamba_kernels.selective_scan_fwd_seconds(lens, dim, ds, arch)
            t += mamba_kernels.causal_conv1d_fwd_seconds(lens, dim, dc, arch)
        return self._mamba_layers * t

    def mamba_layout_time(self, prefill_tokens: int, decode_tokens: int) -> float:
        """The per-layer (Jenga) v0 fork's Mamba wrappers' layout copies (:data:`MAMBA_LAYOUT_PREFILL`,
        :data:`MAMBA_LAYOUT_DECODE`), summed over Mamba layers: memory-bound gathers, transposes and
        scatters between the matmuls, so they add to the step. Zero on the uniform manager (the
        baseline fork's upstream Mamba path) and on v1."""
        pre, dec = self._mamba_layout_bytes
        if not self._mamba_layers or not (pre or dec):
            return 0.0
        return self._mamba_layers * (prefill_tokens * pre + decode_tokens * dec) / self.bytes_per_s

    def kv_groups(self) -> int:
        """KV groups the per-layer block manager builds with two-level pages
        (``CustomBlockManager._compile_two_level``: one per app property): one per layer type with
        a cache, and two for Mamba types that carry a conv state (``models/jamba.py``
        ``custom_block_manager_for_jamba`` registers ``<i>-conv`` and ``<i>-ssm`` managers, whose
        page sizes and so properties differ). Vision embeddings share another group's table."""
        n = 0
        for kind, spec, _layers, _bpt in self._types:
            if kind == "vision_embedding":
                continue
            n += 2 if kind == "mamba" and getattr(spec, "conv_bytes_per_layer", 0) else 1
        return n

    def running_time(self, num_running: int, num_scheduled: int) -> float:
        """v0 scheduler CPU per step over the running set (:class:`RunningScan`): the running
        sequences the step does not schedule, plus, on the per-layer manager, every running
        sequence once per KV group (``free_skipped_blocks``). Serial: ``Scheduler.schedule`` runs
        before the forward in every v0 mode."""
        scan = self.running_scan
        t = max(0, num_running - num_scheduled) * scan.per_idle_seq_s
        if self.block_manager == "per_layer":
            t += num_running * self.kv_groups() * scan.per_seq_group_s
        return t

    def input_prep_time(self, batch: Sequence[tuple]) -> float:
        """v0 model-runner Python that grows with the step's block tables, prefill tokens and
        images mapped this step (:class:`InputPrep`); zero on v1.

        Block-table entries one scheduled sequence puts through v0's input preparation, and the
        number of tables they sit in: uniform manager → one table of all its tokens (+ mllama's
        cross table); per-layer manager → one table per KV group (layer type): attention types
        keep one entry per block of the sequence (freed sliding-window blocks stay as null
        entries), cross = image-token blocks, Mamba = one state entry, token-drop = kept tokens."""
        prep = self.prep
        if not (prep.uniform_entry_s or prep.per_layer_entry_s or prep.prefill_token_s or prep.slot_token_s
                or prep.mm_input_per_image_token_s):
            return 0.0
        uniform = self.block_manager == "uniform"
        per_entry = prep.uniform_entry_s if uniform else prep.per_layer_entry_s
        groups = 1 if uniform else self._prep_groups
        per_prefill_token = prep.prefill_token_s + groups * prep.slot_token_s
        per_image_token = prep.mm_input_per_image_token_s
        bs = self.block_size
        # Tables per kind of entry (uniform: one table of tokens and mllama's cross table).
        token_tables = 1 if uniform else self._prep_token_tables
        cross_tables = 1 if uniform else self._prep_cross_tables
        fixed = 0 if uniform else self._prep_mamba_tables
        token_drop = () if uniform else self._token_drop
        t = 0.0
        # Term by term, in order (a float sum); a zero term (no image) adds nothing.
        for entry in batch:
            n, c = entry[0], entry[1]
            if entry[2]:
                t += entry[2] * per_image_token
            entries = token_tables * -(-(c + n) // bs) + fixed
            if len(entry) > 3 and entry[3]:
                entries += cross_tables * -(-entry[3] // bs)
            for spec, _layers, _bytes, memo in token_drop:
                entries += -(-self._kept(memo, spec, c + n) // bs)
            t += entries * per_entry
            if n > 1:
                t += n * per_prefill_token
        return t

    def step_time(self, batch: Sequence[tuple]) -> float:
        """Seconds for one step. ``batch``: per scheduled request ``(num_new_tokens,
        num_context_tokens_before, num_image_tokens_encoded_this_step[, num_cross_tokens])``;
        ``num_cross_tokens`` (optional) is the request's image tokens its cross-attention layers
        read. An empty batch costs nothing."""
        if not batch:
            return 0.0
        p = self.profile
        tokens = prefill_tokens = img_tokens = 0
        span = keys = 0          # full attention: (query, key) pairs and keys read, summed over entries
        span_nd = keys_nd = 0    # the same over the entries that are not one-token decodes
        cross_span = cross_keys = 0
        max_end = 0
        decode_ctx = []          # context of each one-token decode (token-drop layers read their kept set)
        for entry in batch:
            n, c = entry[0], entry[1]
            img_tokens += entry[2]
            tokens += n
            end = c + n
            max_end = max(max_end, end)
            pairs = n * c + n * (n + 1) // 2
            span += pairs
            keys += end
            if n == 1:
                decode_ctx.append(c)
            else:
                span_nd += pairs
                keys_nd += end
                if n > 1:
                    prefill_tokens += n
            if self._has_cross and len(entry) > 3:
                cross_span += n * entry[3]
                cross_keys += entry[3]
        is_prefill = prefill_tokens > 0
        # Each layer group's pairs and keys (integers: the order of the sums does not matter).
        attn_pairs = span * self._full_layers + cross_span * self._cross_compute_layers
        kv_bytes = keys * self._full_bytes + cross_keys * self._cross_bytes
        for spec, layers, nbytes, memo in self._token_drop:
            # Decode reads the kept tokens (+ the new one); prefill attends to the whole prompt.
            kept = sum(self._kept(memo, spec, c) for c in decode_ctx) + len(decode_ctx)
            attn_pairs += (span_nd + kept) * layers
            kv_bytes += (keys_nd + kept) * nbytes
        if self._local:
            # A one-token decode at context c attends to, and reads, min(c + 1, W) keys of a
            # sliding layer and (c mod chunk) + 1 of a chunked one (_span_sum and _keys_read at
            # n = 1): one comprehension over the decodes, the general sums over the rest only
            # (integers, so the same totals).
            rest = [e for e in batch if e[0] != 1] if decode_ctx else batch
            for kind, spec, layers, nbytes in self._local:
                if kind == "sliding":
                    w = spec.window
                    dec = sum([c + 1 if c < w else w for c in decode_ctx])
                else:
                    ch = spec.chunk
                    dec = sum([c % ch for c in decode_ctx]) + len(decode_ctx)
                attn_pairs += (dec + sum(_span_sum(kind, spec, e[1], e[0]) for e in rest)) * layers
                kv_bytes += (dec + sum(_keys_read(kind, spec, e[1], e[0]) for e in rest)) * nbytes
        vision_flops = self._vision_flops_per_token * img_tokens
        if self._vision_on:
            vision_flops += sum(self._vision_extra_flops(e[2]) for e in batch)
        if self.gemm:
            # Calibrated: linear layers on the measured GEMM curve, then attention (roofline of its
            # FLOPs and KV bytes) and the vision encoder, in sequence as the kernels run.
            wbytes = self.weight_bytes_read(tokens)
            ffn = self._dense_ffn_bytes + (wbytes - self._shared_bytes if self._moe else 0.0)
            if self.moe_gemm:
                # The fused-MoE FFNs on their own curve (see _calibrate), the rest on the dense one;
                # the untuned-config slowdowns act on the fused part only.
                fflops = 2.0 * self._fused_params * tokens
                linear = gemm_time(2.0 * self.matmul_params * tokens - fflops, wbytes - ffn,
                                   self.peak_flops, self.peak_bytes_per_s, self.gemm,
                                   kernels=4 * p.num_layers - 2 * self._fused_calls)
                linear += gemm_time(fflops * self._moe_compute_slowdown, ffn * self._moe_slowdown,
                                    self.peak_flops, self.peak_bytes_per_s, self.moe_gemm,
                                    kernels=self._fused_calls)
            else:
                if self._moe_slowdown != 1.0:
                    wbytes += (self._moe_slowdown - 1.0) * ffn
                linear = gemm_time(2.0 * self.matmul_params * tokens, wbytes,
                                   self.peak_flops, self.peak_bytes_per_s, self.gemm, kernels=4 * p.num_layers)
            attention = max(self.attn_flops_per_pair * attn_pairs / self.flops_per_s, kv_bytes / self.bytes_per_s)
            gpu_time = linear + attention + vision_flops / self.flops_per_s
        else:
            flops = 2.0 * self.matmul_params * tokens + self.attn_flops_per_pair * attn_pairs + vision_flops
            compute = flops / self.flops_per_s
            memory = (self.weight_bytes_read(tokens) + kv_bytes) / self.bytes_per_s
            gpu_time = max(compute, memory)
        if self._mamba_layers:
            gpu_time += self.mamba_kernel_time(tokens, len(batch), batch)
            gpu_time += self.mamba_layout_time(prefill_tokens, tokens - prefill_tokens)
        if self.tp > 1:
            # Row-parallel o_proj / out_proj and down_proj (or the MoE combine) each end in an
            # all-reduce of the step's hidden states: two per layer.
            msg = tokens * p.hidden_size * ACT_BYTES
            gpu_time += 2 * p.num_layers * allreduce_time(msg, self.tp, self.link_bytes_per_s,
                                                          self.allreduce_latency_s)
        graphed = not self.eager and not is_prefill and len(batch) <= self.overhead.max_graph_batch
        if graphed and self.max_seq_len_to_capture is not None:
            graphed = max_end <= self.max_seq_len_to_capture
        launch = 0.0 if graphed else p.num_layers * self.overhead.eager_layer_s
        cpu = self.overhead.step_s + self.overhead.per_request_s * len(batch) + self.input_prep_time(batch)
        return self.output_time(gpu_time, launch, len(batch)) + cpu

    def output_time(self, gpu_time: float, launch: float, seqs: int) -> float:
        """Forward plus the serving path's output processing (:class:`OutputProc`): serial after
        the forward when async output processing is off, else overlapped with the (next) forward,
        so it costs only what exceeds the GPU time beyond the launch CPU it competes with."""
        out = self.output_proc.per_seq_s * seqs
        if self.async_output:
            return max(gpu_time, launch + out)
        return max(gpu_time, launch) + out

    # -- capacity -------------------------------------------------------------------------------
    def activation_peak_bytes(self) -> int:
        """Per-GPU activation peak of vLLM's start-up profiling pass (see module docstring)."""
        p = self.profile
        max_len = self.engine.model_len(p)
        seqs = int(self.engine.max_num_seqs)
        tokens = profile_tokens(self.engine, max_len)
        inter = p.intermediate_size * (max(1, p.experts_per_token) if self._moe else 1)
        layer = tokens * (3 * inter / self.tp + 4 * p.hidden_size) * ACT_BYTES
        if p.weight_dtype_bytes <= 1:
            layer += tokens * inter / self.tp * FP8_QUANT_INPUT_BYTES
        vision = 0.0
        if p.vision is not None:
            per_image = p.vision.max_tiles * p.vision.tokens_per_tile
            vision = seqs * per_image * p.vision.embedding_bytes_per_token * VISION_ACT_FACTOR / self.tp
            mask = self.vision_mask_bytes()
            if mask:
                # The mask lives through the encoder (every rank builds it); while it is built,
                # ``attention_mask @ attention_mask.transpose(-1, -2) * finfo.min`` holds two.
                vision = max(vision + mask, 2 * mask)
        rows = min(seqs, tokens)
        if self.engine.engine_version == "v0":
            # After the forward, on rank 0, with the dummy top-k/top-p sort (module docstring).
            live = max(layer + vision, rows * p.vocab_size * SAMPLER_BYTES_PER_LOGIT)
            if not self.mechanisms["reserved_peak"]:
                return int(live)
            # Both v0 forks size the pool from ``init_gpu_memory - mem_get_info()[0]`` right after
            # ``profile_run`` with no ``torch.cuda.empty_cache()`` in between (``vllm/worker/worker.py``
            # ``Worker.determine_num_available_blocks``; the Jenga fork's ``get_available_memory``
            # is the same), so what counts is what torch's caching allocator *reserved*: the
            # forward's segments stay cached when its activations are freed, and a sampler tensor
            # that no freed block holds gets a new segment (:func:`caching_allocator_new_bytes`).
            blocks = [tokens * 2 * inter / self.tp * ACT_BYTES, tokens * inter / self.tp * ACT_BYTES] + \
                [tokens * p.hidden_size * ACT_BYTES] * 4
            if p.weight_dtype_bytes <= 1:
                blocks.append(tokens * inter / self.tp * FP8_QUANT_INPUT_BYTES)
            if vision:
                blocks.append(vision)
            sampler = [rows * p.vocab_size * b for b in SAMPLER_TENSOR_BYTES]
            return int(max(live, layer + vision + caching_allocator_new_bytes(blocks, sampler)))
        return int(layer + vision + rows * p.vocab_size * 4 / self.tp)

    def kv_capacity_bytes(self) -> int:
        """KV bytes for the whole TP group; ``engine.kv_cache_bytes`` overrides the estimate."""
        explicit = self.engine.kv_cache_bytes
        if explicit:
            return int(explicit)
        util = float(self.engine.gpu_memory_utilization)
        per_gpu_extra = NON_TORCH_BYTES + (NCCL_BYTES if self.tp > 1 else 0)
        total = float(self.gpu.memory_bytes) * util * self.tp
        kv = total - self.weight_bytes - self.tp * (self.activation_peak_bytes() + per_gpu_extra)
        if kv <= 0:
            raise ValueError(
                f"no KV cache memory left for {self.profile.name} on {self.tp}x{self.gpu.name}: "
                f"weights {self.weight_bytes / GiB:.1f} GiB + activation peak "
                f"{self.tp * self.activation_peak_bytes() / GiB:.1f} GiB exceed "
                f"memory x gpu_memory_utilization ({total / GiB:.1f} GiB)")
        return int(kv)
