"""Time of the Mamba mixers' CUDA kernels from their launch structure (issue 21 §3: "the Mamba
selective scan is latency-bound, not a roofline").

Source: the artifact's v0 forks (``heheda12345/Jenga-SOSP25-AE`` branches ``vllm-v0-jenga`` and
``vllm-v0-baseline``; both carry the same two kernels, vLLM PR #7651's copy of ``mamba_ssm`` /
``causal-conv1d``):

``csrc/mamba/mamba_ssm/selective_scan_fwd.cu``
  ``selective_scan_fwd`` picks the launch from ``params.seqlen``, which is the *total* token count
  of the varlen batch (``seqlen = varlen ? u.sizes()[1] : ...``): ``selective_scan_fwd_cuda``
  launches ``<kNThreads, kNItems>`` = <32, 4> up to 128 tokens, <32, 8> to 256, <32, 16> to 512,
  <64, 16> to 1024, else <128, 16> (:func:`scan_config`). ``selective_scan_fwd_launch``:
  ``dim3 grid(params.batch, params.dim / kNRows)`` with ``kNRows = 1`` — **one thread block per
  (sequence, channel)** — and ``__launch_bounds__(kNThreads, kMinBlocks)``, ``kMinBlocks = 3`` for
  128 threads, else 5. Inside ``selective_scan_fwd_kernel`` each block walks its sequence in
  ``n_chunks = ceil(seqlen_i / 2048)`` chunks, and per chunk, **sequentially**: loads ``u`` and
  ``delta`` (``load_input``, cub ``BLOCK_LOAD_WARP_TRANSPOSE`` through shared memory, a
  ``__syncthreads`` between them since varlen disables direct IO), softplus, then ``for
  (state_idx = 0; state_idx < dstate; ++state_idx)``: load this state's ``B`` and ``C`` rows
  (``load_weight``), ``exp2f`` per item, a cub ``BlockScan<float2, kNThreads,
  BLOCK_SCAN_WARP_SCANS>::InclusiveScan`` with the running-prefix callback (thread-local scan over
  ``kNItems``, a 5-step warp shuffle scan, for more than one warp the warp aggregates through
  shared memory between two barriers, then the thread-local down-sweep), and the output FMA; then
  stores ``out``, loads ``z``, gates and stores ``out_z``. One block's time is that chain of
  latencies (:func:`scan_block_cycles`); the GPU runs ``SMs x resident blocks`` such chains at
  once (:func:`resident_blocks`), so a launch takes ``max(longest block, total block-cycles /
  (SMs x resident))`` — not bytes over bandwidth.

``csrc/mamba/causal_conv1d/causal_conv1d.cu``
  ``causal_conv1d_fwd_launch``: ``dim3 grid(params.batch, params.dim)`` of 128 threads
  (``causal_conv1d_fwd_cuda``: <128, width 4> for Jamba), 8 bf16 per thread, so a 1024-token chunk
  per iteration; per block: the weights and the initial conv state, per chunk one load, a
  shared-memory exchange between two barriers, ``width`` FMAs per item, SiLU, a store; then the
  final-state load and store (:func:`conv_block_cycles`).

Which calls run (``vllm/model_executor/layers/mamba/ops/mamba_ssm.py`` and ``causal_conv1d.py``):

- ``vllm-v0-jenga`` (``models/jamba.py`` ``JambaMambaMixer.forward`` always goes through
  ``causal_conv1d_fn_with_cache`` and ``selective_scan_fn_with_cache``): a prefill batch runs one
  conv and one scan launch **per chunk step** (``for step in ssm_metadata.steps``; step *i* holds
  every prefilling sequence's *i*-th ``--linear-chunk-size`` chunk: ``vllm/attention/backends/
  utils.py`` ``LAMetadataBuilder._add_seq_group``; decode tokens join step 0); a decode-only
  batch runs **the same ``selective_scan_fwd`` and ``causal_conv1d_fwd``** with one token per
  sequence (``num_prefills == 0`` branch), not ``selective_state_update``.
- ``vllm-v0-baseline`` (upstream Jamba): prefill runs ``causal_conv1d_fn`` / ``selective_scan_fn``
  once over the whole varlen batch; decode runs the Triton ``selective_state_update`` /
  ``causal_conv1d_update`` (one short load-compute-store per program), left on the roofline.

Constants, per GPU, never per model (:data:`SM_ARCH`, :data:`LATENCY_CYCLES`):

- SM count and clock from each GPU's datasheet (H100/H200 SXM: 132 SMs, FP32 67 TFLOP/s = 132 x
  128 lanes x 2 x 1.98 GHz; L4: 7424 CUDA cores = 58 SMs, FP32 30.3 TFLOP/s → 2.04 GHz); resident
  limits per SM from the CUDA C++ Programming Guide's "Technical Specifications per Compute
  Capability" table (9.0: 32 blocks, 2048 threads; 8.9: 24 blocks, 1536 threads; 64 K 32-bit
  registers both).
- Latencies in SM clock cycles: global memory 400, L2 200, shared memory 20, arithmetic 4 — the
  published per-architecture table of Ultrasonics Sonochemistry 99 (2023) 106546, Table 3
  ("Hardware features of different Nvidia GPU architectures", PMC10448217; the same values for
  V100, A100 and H100, so taken for L4 too). ``B``/``C`` rows were written by the preceding
  kernels and are small (dstate x tokens bf16), so their loads are L2 hits; ``u``, ``delta``,
  ``z`` (and the conv input) were written by the kernels just before (in the Jenga fork by the
  ``.contiguous()`` copies of the same step), so they are L2 hits too when the launch's three
  activations fit in the datasheet L2 (H100/H200 50 MB, L4 48 MB), else global-latency loads.
- Registers per thread are not published for this kernel: :func:`scan_registers` estimates them
  from the per-thread arrays the kernel keeps live across the state loop (``u_vals``,
  ``delta_vals``, ``delta_u_vals``, ``out_vals``, ``B_vals``, ``C_vals``: one register per item
  each, half for bf16 loads; ``thread_data``: a float2 per item) plus ~32 for pointers, indices
  and scan temporaries, capped by the launch bound. The kernel's own comment ("Setting
  MinBlocksPerMP to be 3 (instead of 2) for 128 threads improves occupancy") says the 128-thread
  variant is register-limited to ~3 blocks per SM, which the estimate reproduces (160 registers →
  3). A lent GPU replaces this with ``cuobjdump --dump-resource-usage`` (docs/fidelity/calibration.md §4).

The cycle counts are the kernel's dependency chain with these latencies; instruction throughput
limits and the memory roofline are taken care of by the caller (``max`` with the roofline).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmArch:
    """Per-GPU SM resources (datasheet / CUDA programming guide)."""

    sms: int
    clock_hz: float
    max_blocks_per_sm: int
    max_threads_per_sm: int
    regs_per_sm: int
    l2_bytes: int          # datasheet L2 size: a launch whose activations fit was just written there


SM_ARCH: dict[str, SmArch] = {
    "h100": SmArch(sms=132, clock_hz=1.98e9, max_blocks_per_sm=32, max_threads_per_sm=2048, regs_per_sm=65536,
                   l2_bytes=50 << 20),
    "h200": SmArch(sms=132, clock_hz=1.98e9, max_blocks_per_sm=32, max_threads_per_sm=2048, regs_per_sm=65536,
                   l2_bytes=50 << 20),
    "l4": SmArch(sms=58, clock_hz=2.04e9, max_blocks_per_sm=24, max_threads_per_sm=1536, regs_per_sm=65536,
                 l2_bytes=48 << 20),
}


@dataclass(frozen=True)
class Latency:
    """Dependent-access latencies in SM cycles (Ultrasonics Sonochemistry 99 (2023) 106546, Table 3)."""

    global_mem: int = 400
    l2: int = 200
    shared: int = 20
    alu: int = 4


LATENCY_CYCLES = Latency()
SCAN_CHUNK = 2048          # selective_scan_fwd_kernel: n_chunks = (seqlen + 2048 - 1) / 2048
CONV_THREADS = 128         # causal_conv1d_fwd_cuda: <128, width>
CONV_ELTS = 8              # kNElts for 2-byte inputs


def scan_config(total_tokens: int) -> tuple[int, int]:
    """``(kNThreads, kNItems)`` that ``selective_scan_fwd_cuda`` (non-ROCm branch) picks from
    ``params.seqlen`` = the launch's total tokens."""
    if total_tokens <= 128:
        return 32, 4
    if total_tokens <= 256:
        return 32, 8
    if total_tokens <= 512:
        return 32, 16
    if total_tokens <= 1024:
        return 64, 16
    return 128, 16


def scan_registers(threads: int, items: int, regs_per_sm: int = 65536) -> int:
    """Estimated registers per thread (module docstring), capped by ``__launch_bounds__(threads,
    kMinBlocks)`` and the 255-register limit, in the allocation unit of 8."""
    k_min_blocks = 3 if threads >= 128 else 5
    cap = min(255, regs_per_sm // (k_min_blocks * threads)) // 8 * 8
    est = 32 + 8 * items
    return min(cap, -(-est // 8) * 8)


def resident_blocks(threads: int, regs: int, arch: SmArch) -> int:
    """Blocks one SM holds at once: the least of the block, thread and register limits."""
    by_regs = arch.regs_per_sm // (threads * regs)
    return max(1, min(arch.max_blocks_per_sm, arch.max_threads_per_sm // threads, by_regs))


def scan_block_cycles(threads: int, items: int, dstate: int, n_chunks: int, lat: Latency = LATENCY_CYCLES,
                      act_latency: int | None = None) -> int:
    """One ``selective_scan_fwd_kernel`` block's dependency chain (module docstring);
    ``act_latency``: cycles of one ``u``/``delta``/``z`` load (default global memory)."""
    act = lat.global_mem if act_latency is None else act_latency
    warps = max(1, threads // 32)
    per_state = (lat.l2                              # B and C rows (independent loads, overlapped)
                 + 2 * lat.shared                    # warp-transpose through shared memory
                 + items + lat.alu                   # exp2f per item (pipelined)
                 + 2 * items * lat.alu               # thread-local scan and down-sweep (dependent)
                 + 5 * (lat.shared + 2 * lat.alu)    # warp shuffle scan of a float2, 5 steps
                 + ((3 * lat.shared + warps * lat.alu) if warps > 1 else 0)   # aggregates + barriers
                 + items)                            # out += y * C (pipelined)
    per_chunk = (2 * (act + 2 * lat.shared)              # u, delta (barrier between them)
                 + 2 * items * lat.alu                    # softplus, delta * u
                 + dstate * per_state
                 + 2 * (2 * lat.shared)                   # store out; store out_z
                 + act + items * lat.alu)                 # load z, SiLU gate
    return n_chunks * per_chunk


def conv_block_cycles(width: int, n_chunks: int, lat: Latency = LATENCY_CYCLES, act_latency: int | None = None) -> int:
    """One ``causal_conv1d_fwd_kernel`` block's dependency chain: weights and initial state, per
    chunk a load, the shared-memory exchange between two barriers, ``width`` FMAs and SiLU per item,
    a store; then the final-state load and store."""
    act = lat.global_mem if act_latency is None else act_latency
    per_chunk = act + 3 * lat.shared + CONV_ELTS * (width + 4) * lat.alu // 2 + 2 * lat.shared
    return lat.global_mem + n_chunks * per_chunk + act + 2 * lat.shared


def _launch_seconds(block_cycles: list[tuple[int, int]], threads: int, regs: int, arch: SmArch) -> float:
    """``block_cycles``: (blocks, cycles each). Waves over ``SMs x resident`` slots, never shorter
    than the longest block."""
    slots = arch.sms * resident_blocks(threads, regs, arch)
    work = sum(n * c for n, c in block_cycles)
    longest = max((c for n, c in block_cycles if n), default=0)
    return max(longest, work / slots) / arch.clock_hz


def _act_latency(tokens: int, dim: int, arch: SmArch) -> int:
    """L2 latency when the launch's ``u``, ``delta``, ``z`` (bf16) fit in L2, else global."""
    return LATENCY_CYCLES.l2 if 3 * tokens * dim * 2 <= arch.l2_bytes else LATENCY_CYCLES.global_mem


def selective_scan_fwd_seconds(seq_lens: list[int], dim: int, dstate: int, arch: SmArch) -> float:
    """One ``selective_scan_fwd`` launch over a varlen batch (``seq_lens`` tokens per sequence,
    ``dim`` channels on this GPU)."""
    seq_lens = [n for n in seq_lens if n > 0]
    if not seq_lens:
        return 0.0
    threads, items = scan_config(sum(seq_lens))
    regs = scan_registers(threads, items, arch.regs_per_sm)
    by_chunks: dict[int, int] = {}
    for n in seq_lens:
        k = -(-n // SCAN_CHUNK)
        by_chunks[k] = by_chunks.get(k, 0) + dim
    act = _act_latency(sum(seq_lens), dim, arch)
    blocks = [(count, scan_block_cycles(threads, items, dstate, k, act_latency=act)) for k, count in by_chunks.items()]
    return _launch_seconds(blocks, threads, regs, arch)


def causal_conv1d_fwd_seconds(seq_lens: list[int], dim: int, width: int, arch: SmArch) -> float:
    """One ``causal_conv1d_fwd`` launch over a varlen batch."""
    seq_lens = [n for n in seq_lens if n > 0]
    if not seq_lens:
        return 0.0
    chunk = CONV_THREADS * CONV_ELTS
    by_chunks: dict[int, int] = {}
    for n in seq_lens:
        k = -(-n // chunk)
        by_chunks[k] = by_chunks.get(k, 0) + dim
    act = _act_latency(sum(seq_lens), dim, arch)
    blocks = [(count, conv_block_cycles(width, k, act_latency=act)) for k, count in by_chunks.items()]
    regs = 64   # ESTIMATE: 2 x 8 bf16 loads, 16 floats, 8 outputs, 4 weights, pointers
    return _launch_seconds(blocks, CONV_THREADS, regs, arch)


def jenga_fork_launches(batch, chunk_size: int) -> list[list[int]]:
    """Per-launch sequence lengths of ``selective_scan_fn_with_cache`` / ``causal_conv1d_fn_with_cache``
    (``vllm-v0-jenga``) for one step: ``batch`` entries ``(new tokens, context, ...)``. With any
    prefill, step *i* holds each prefill's *i*-th ``chunk_size`` chunk from its (chunk-aligned)
    context, and decode tokens join step 0 (``LAMetadataBuilder._add_seq_group``); a decode-only
    batch is one launch of one token per sequence."""
    steps: list[list[int]] = [[]]
    for entry in batch:
        n, c = int(entry[0]), int(entry[1])
        if n > 1:
            start, i = c, 0
            while start < c + n:
                end = min(start - start % chunk_size + chunk_size, c + n)
                if len(steps) <= i:
                    steps.append([])
                steps[i].append(end - start)
                start, i = end, i + 1
        elif n == 1:
            steps[0].append(1)
    return [s for s in steps if s]
