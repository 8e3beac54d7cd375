"""``trtllm_pools``: TensorRT-LLM's KV cache manager for variable sliding windows (VSWA), as a what-if
system.

Engine followed: **TensorRT-LLM** main as of 2026-08 (the C++ ``kv_cache_manager`` with per-window
``WindowBlockManager``s; ``KvCacheConfig`` defaults ``tokens_per_block = 32``, ``enable_block_reuse``
on, ``enable_partial_reuse`` on). Source, by file and function:

- ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``, ``BaseKVCacheManager::groupLayersByWindowSize``:
  layers are grouped by their ``max_attention_window`` entry (full attention: ``max_seq_len``);
  ``BlockManager::BlockManager`` builds one ``WindowBlockManager`` per window size, and inside it one
  pool per KV-head count (``numLayersPerPool``) sharing the window's block ids.
- Same file, ``BaseKVCacheManager::calculateMaxNumBlocks``: ``cacheSizeBytesPerToken`` per window (its
  layers' K+V bytes), then ``BlockManager::calculateWindowSizeToShare``: each window's weight is
  ``(its bytes per token / all windows' bytes per token) * windowSize``, normalised to sum to 1; its
  primary blocks are ``ceilDiv(allottedPrimaryMemBytes * share / bytesPerToken, tokensPerBlock)``. The
  split is static: a window's idle blocks never serve another window (the KV-cache docs call this
  "not optimal"). With one window the whole memory goes to it.
- Same file, ``KVCacheManager::getMaxCapacityBatchSize`` / ``calculateMaxBlockRequirementsPerBeam``: a
  sequence needs ``ceilDiv(min(seqLen, windowSize), tokensPerBlock)`` blocks per window (beam 1, no
  sink tokens); the max batch size is the smallest over windows of ``primaryBlocks / need``.
- Same file, ``WindowBlockManager::detachFrontBlock``: a block that leaves the sliding window is
  detached from the sequence and, with no other reference, released to the eviction policy -- reusable
  until evicted (TRT-LLM#6768, #7922). That is the shared sliding-window rule of this repository's
  ``SlidingPolicy`` (out-of-window pages released as *stale* cached pages; a prefix hit needs the
  window's pages before the hit point); reuse is per window pool, each pool evicting by LRU on its own.

Simplified: ``KVCacheManager::addSequence`` sizes a sequence's context blocks by
``min(inputLength, maxTokenNum)`` with ``maxTokenNum = max(windowSize, maxSequenceLength)`` for every
window ("SWA allocates blocks linearly"), detaching them as the window moves; here a sliding layer
holds its window plus the tokens of the step being computed (chunked prefill), so long prompts in one
chunk under-count TRT-LLM's sliding-pool demand.

Not modelled -- refused with one error naming the source: Mamba / linear-attention layers. What the
source shows (read 2026-08): ``BlockManager::BlockManager`` (kvCacheManager.cpp) gives the recurrent
states their own ``WindowBlockManager`` under the sentinel window ``LinearAttentionMetadata::
kRecurrentStates`` (-1), beside a required full-attention window; one block of its pool holds every
recurrent layer's state (``pool.blockSize = allRecurrentStatesBytes``, kvFactor 1); its
``numPlaceholderBlocks`` defaults to the full-attention window's primary block count, so positions
between snapshots cost no memory (``KVCacheBlock::createPlaceholder``, ``MaybePlaceholderLRUEvictionPolicy``);
``statesSnapshotInterval`` must be a multiple of ``tokens_per_block``; real state blocks sit at every
``statesSnapshotInterval`` tokens, at the end of the prompt and, with ``saveLastSnapshot``, at the
end (``RnnCacheTransBufferManager``'s ``maxRealBlocksPerSeq``); partial reuse is refused with linear
attention; periodic snapshots default to off, so block reuse never engages without
``mamba_state_config.periodic_snapshot_interval``. What is missing to model it faithfully: the
number of primary blocks the ``kRecurrentStates`` window is given (``blocksPerWindow[-1]``) -- the
memory split between it and the attention windows, computed on the Python side
(``tensorrt_llm/_torch/pyexecutor/kv_cache`` ``mamba_cache_manager`` / ``calculate_max_num_blocks``
with linear attention, which changes often: ``mamba_cache_manager_v2.py``, ``legacy.py``) and not
read here -- and whether a hit must end on a real (non-placeholder) block of every window (the
lookup in ``WindowBlockManager::loadOrAllocateBlocks`` with placeholders). Llama-4's chunked attention and vision-embedding caches are refused likewise (TRT-LLM has no
such window kind in this manager).
"""

from __future__ import annotations

import math

from jenga.manager_base import PagedManager
from jenga.pools.flat import PartitionedPool
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec, SpecError

ENGINE_VERSION = ("TensorRT-LLM main 2026-08 (kvCacheManager.cpp: one WindowBlockManager per window size, "
                  "calculateWindowSizeToShare static split; tokens_per_block 32)")
TOKENS_PER_BLOCK = 32  # KvCacheConfig.tokens_per_block default (tensorrt_llm/llmapi/llm_args.py)


def window_of(spec, max_seq_len: int) -> int:
    """The ``max_attention_window`` entry of a layer type: its window, or ``max_seq_len`` for full
    attention (a window larger than ``max_seq_len`` is kept as given, as TRT-LLM warns and keeps it)."""
    if isinstance(spec, MambaSpec):
        raise SpecError("trtllm_pools: Mamba / linear-attention layers are not modelled (TensorRT-LLM keeps "
                        "their states in a kRecurrentStates window with snapshots every "
                        "mamba_state_config.periodic_snapshot_interval tokens; its memory split is not "
                        "reproduced here) -- use vllm_hma, sglang_pools or sglang_unified for this model")
    if type(spec) is FullAttentionSpec:
        return max_seq_len
    if type(spec) is SlidingWindowSpec:
        return spec.window
    raise SpecError(f"trtllm_pools: layer kind {spec.kind!r} ({spec.name}) has no TensorRT-LLM window-pool "
                    "equivalent here (only full and sliding-window attention are modelled)")


def split(windows_bpt, capacity_bytes: int, tokens_per_block: int = TOKENS_PER_BLOCK) -> tuple[dict, dict]:
    """``(share, blocks)`` per window size from ``(window, bytes per token)`` pairs, one per layer type:
    ``BlockManager::calculateWindowSizeToShare`` (weight = bytes-per-token fraction x window size,
    normalised; one window takes everything) and ``BaseKVCacheManager::calculateMaxNumBlocks``'s
    ``ceilDiv(int(memory * share / bytesPerToken), tokensPerBlock)``."""
    bpt: dict[int, int] = {}
    for w, b in windows_bpt:
        bpt[w] = bpt.get(w, 0) + b
    if len(bpt) == 1:
        share = {next(iter(bpt)): 1.0}
    else:
        total = sum(bpt.values())
        contrib = {w: b / total * w for w, b in bpt.items()}
        csum = sum(contrib.values())
        share = {w: c / csum for w, c in contrib.items()}
    blocks = {w: -(-int(capacity_bytes * share[w] / bpt[w]) // tokens_per_block) for w in sorted(bpt)}
    return share, blocks


def blocks_per_window(specs, capacity_bytes: int, max_seq_len: int,
                      tokens_per_block: int = TOKENS_PER_BLOCK) -> dict[int, int]:
    """Primary blocks per window size of ``specs`` (see :func:`split`)."""
    return split([(window_of(s, max_seq_len), s.bytes_per_token) for s in specs], capacity_bytes,
                 tokens_per_block)[1]


class TrtllmPools(PagedManager):
    """One static pool per window size (see the module docstring). Options: ``max_seq_len`` (the full
    layers' window, which also weighs the split; default 32768 -- harness.whatif passes the cell's
    ``max_model_len``) and ``max_attention_window`` (one int: cap every layer's window at it, as
    ``KvCacheConfig.max_attention_window=[w]`` does, turning full layers into ``w``-windows)."""

    system_name = "trtllm_pools"
    engine_version = ENGINE_VERSION
    option_names = ("max_seq_len", "max_attention_window")

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = TOKENS_PER_BLOCK,
                 enable_prefix_cache: bool = False, **options):
        cap_w = options.get("max_attention_window")
        if cap_w is not None and (not isinstance(cap_w, int) or isinstance(cap_w, bool) or cap_w <= 0):
            raise SpecError(f"max_attention_window must be a positive integer or null, got {cap_w!r}")
        if cap_w is not None:
            # a capped layer is a sliding-window layer to TRT-LLM: its out-of-window blocks detach
            specs = [SlidingWindowSpec(s.name, s.num_layers, s.bytes_per_token_per_layer, s.num_compute_layers,
                                       window=min(cap_w, getattr(s, "window", cap_w)))
                     if type(s) in (FullAttentionSpec, SlidingWindowSpec) else s for s in specs]
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)

    def make_pool(self, **options):
        msl = options.get("max_seq_len", 32768)
        if not isinstance(msl, int) or isinstance(msl, bool) or msl <= 0:
            raise SpecError(f"max_seq_len must be a positive integer, got {msl!r}")
        self.max_seq_len = msl
        wins = [window_of(s, msl) for s in self.specs]  # capped windows are SlidingWindowSpecs already
        self.windows = wins
        tpb = self.tokens_per_page
        self.share, self.blocks = split([(w, s.bytes_per_token) for w, s in zip(wins, self.specs)],
                                        self.capacity_bytes, tpb)
        bpt: dict[int, int] = {}
        for w, s in zip(wins, self.specs):
            bpt[w] = bpt.get(w, 0) + s.bytes_per_token
        share = self.share
        # ceilDiv may overshoot by one block per window; the pool keeps what fits in the bytes.
        fit = {w: min(n, int(self.capacity_bytes * share[w]) // (tpb * bpt[w])) for w, n in self.blocks.items()}
        if any(n <= 0 for n in fit.values()):
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) leaves a window pool empty under "
                            f"TensorRT-LLM's split {self.blocks}")
        self.pool_blocks = fit
        shares = [fit[w] * st.page_bytes for w, st in zip(wins, self.types)]
        return PartitionedPool([st.page_bytes for st in self.types], shares, self.capacity_bytes,
                               self.enable_prefix_cache)


def reported_capacity(mm: TrtllmPools, max_model_len: int) -> dict:
    """TensorRT-LLM's start-up numbers: primary blocks per window, the full window's tokens (its
    blocks x tokens_per_block; the largest window's when no layer is full) and
    ``getMaxCapacityBatchSize`` at ``max_model_len`` (input + output = max_model_len, beam 1)."""
    tpb = mm.tokens_per_page
    conc = min(n / math.ceil(min(max_model_len, w) / tpb) for w, n in mm.blocks.items())
    top = max(mm.blocks)
    return {"blocks_per_window": dict(mm.blocks), "window_share": {w: round(s, 6) for w, s in mm.share.items()},
            "kv_capacity_tokens": mm.blocks[top] * tpb, "max_concurrency": conc,
            "max_batch_size": int(min(n // math.ceil(min(max_model_len, w) / tpb) for w, n in mm.blocks.items()))}
