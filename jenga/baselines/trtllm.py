"""``trtllm_pools``: TensorRT-LLM's KV cache manager for variable sliding windows (VSWA), as a what-if
system.

Engine followed: **TensorRT-LLM** main (2026), its default PyTorch backend (``LLM(backend="pytorch")``)
with the V1 C++ ``kv_cache_manager`` underneath (per-window ``WindowBlockManager``s; ``KvCacheConfig``
defaults ``tokens_per_block = 32``, ``enable_block_reuse`` on, ``enable_partial_reuse`` on). The
stored file versions read carry no commit in the public code index; they are named by path and index
document id.

Source check (behaviour modelled | engine file and function | agrees?):

======================================  ===========================================================  ==========
Layers grouped by window size, one      ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``         agrees
pool per window, blocks of 32 tokens    ``BaseKVCacheManager::groupLayersByWindowSize``,
                                        ``BlockManager::BlockManager`` (index doc 126178160)
VSWA memory split: **equal share per    ``tensorrt_llm/_torch/pyexecutor/resource_manager.py``        **fixed**
window size** (``TRTLLM_WINDOW_SIZE_    ``KVCacheManager.calculate_max_num_blocks_for_vswa``          (was the
SHARES`` overrides), blocks ``int(mem   (index doc 54765218664)                                      C++ weights
* share / bytesPerToken //                                                                             and ceilDiv)
tokensPerBlock)``
The C++ weights (bytes-per-token x      ``BlockManager::calculateWindowSizeToShare`` (TensorRT        kept as
window) and ceilDiv                     engine backend)                                               option
                                                                                                      ``window_
                                                                                                      split="cpp"``
One window size: all memory,            ``BaseKVCacheManager::calculateMaxNumBlocks``                 agrees
``ceilDiv(int(mem / bpt), 32)``
Windows shrunk when memory cannot       ``KVCacheManager.adjust_window_sizes_for_vswa``               **fixed**
hold one sequence of every window       (index doc 54765218664), called by                            (was not
                                        ``calculate_max_num_blocks_for_vswa`` before the split        modelled)
Out-of-window block detached and        ``WindowBlockManager::detachFrontBlock`` (index doc           agrees
released to the evictor, reusable       126178160; TRT-LLM#6768, #7922)
until evicted
Max batch size: min over windows of     ``KVCacheManager::getMaxCapacityBatchSize`` /                 agrees
``blocks / ceilDiv(min(len, window),    ``calculateMaxBlockRequirementsPerBeam``
32)``
Hybrid Mamba split: ``slope = attn      ``resource_manager.py``                                       agrees
bpt + state // interval``, ``intercept  ``_calculate_max_num_blocks_for_linear_attention`` (index
= max_batch_size * pp * state``;        doc 54765218664)
``max_batch_size * pp + 1`` slots (+
``max_tokens // interval`` snapshots)
Only hybrid-linear families served      ``_util.py`` ``get_kv_cache_manager_cls``,                    agrees
                                        ``config_utils.is_hybrid_linear``
======================================  ===========================================================  ==========

- ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``, ``BaseKVCacheManager::groupLayersByWindowSize``:
  layers are grouped by their ``max_attention_window`` entry (full attention: ``max_seq_len``);
  ``BlockManager::BlockManager`` builds one ``WindowBlockManager`` per window size, and inside it one
  pool per KV-head count (``numLayersPerPool``) sharing the window's block ids.
- ``resource_manager.py``, ``KVCacheManager.calculate_max_num_blocks_for_vswa`` (VSWA on the PyTorch
  backend): "By default, we allocate equal proportion shares of memory for all window sizes";
  ``primary_tokens = memory * share / cache_size_bytes_per_token`` for the window's layers,
  ``primary_blocks = int(primary_tokens // tokens_per_block)``. The split is static: a window's idle
  blocks never serve another window. Option ``window_size_shares`` is ``TRTLLM_WINDOW_SIZE_SHARES``
  (one share per window size, ascending); ``window_split="cpp"`` is the TensorRT engine backend's
  ``BlockManager::calculateWindowSizeToShare`` split (each window's weight ``(its bytes per token /
  all windows' bytes per token) * windowSize``, normalised; ``ceilDiv`` blocks). With one window the
  whole memory goes to it.
- ``kvCacheManager.cpp``, ``KVCacheManager::getMaxCapacityBatchSize`` /
  ``calculateMaxBlockRequirementsPerBeam``: a sequence needs ``ceilDiv(min(seqLen, windowSize),
  tokensPerBlock)`` blocks per window (beam 1, no sink tokens); the max batch size is the smallest
  over windows of ``primaryBlocks / need``.
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

Windows shrunk to the memory (``resource_manager.py``, ``KVCacheManager.adjust_window_sizes_for_vswa``,
called by ``calculate_max_num_blocks_for_vswa`` when the model has several window sizes, before the
split): when one sequence of every window, ``sum over windows of window x its layers' bytes per
token``, does not fit below the pool's bytes, the windows are walked in ascending order, each band
``(previous window, window]`` of tokens charged to every layer whose window reaches it, until the memory
runs out; a window that cannot be filled gets the tokens reached so far, and so does every larger
window (they merge into one window size, then one pool). A shrunk layer attends to its new window
(``max_attention_window_vec`` is rewritten): a full-attention layer becomes a sliding-window layer
here. The split then runs on the adjusted windows (its equal shares over the merged window sizes,
``int`` blocks, even when one size is left). Not modelled: ``kv_cache_config.max_tokens`` (the function
also clamps the accumulated tokens to it) and ``_validate_and_adjust_attention_windows``' later clamp of
a window to the blocks its pool got; ``window_split="cpp"`` (the TensorRT engine backend) is not
adjusted.

Hybrid Mamba / linear-attention models (the V1 route: ``KvCacheConfig.use_kv_cache_manager_v2=False``,
``CppMambaHybridCacheManager``):

- ``tensorrt_llm/_torch/pyexecutor/_util.py``, ``get_kv_cache_manager_cls``: only models
  ``config_utils.is_hybrid_linear`` accepts take the hybrid path -- ``is_nemotron_hybrid`` (a
  ``hybrid_override_pattern``: Nemotron-H), ``is_qwen3_hybrid`` (Qwen3-Next, Qwen3.5: gated
  DeltaNet) and ``is_kimi_linear`` (Kimi K3); :data:`HYBRID_LINEAR_ARCHITECTURES`. Another model with
  Mamba layers (Jamba, Granite-4.0-H, Falcon-H1, MiniMax lightning attention) is refused with one
  error.
- ``kv_cache/mamba_cache_manager/legacy.py``, ``CppMambaHybridCacheManager.__init__``: every Mamba
  layer gets the window ``LinearCacheType.RECURRENT_STATES`` (-1), every other managed layer the
  window ``max_seq_len`` (``kv_cache_config.max_attention_window`` is overwritten: a sliding layer of
  such a model is charged as full attention, and a user cap is refused here); one recurrent block
  holds a layer's ``ssm_bytes + conv_bytes`` (``all_recurrent_states_bytes``); ``states_snapshot_
  interval = mamba_state_config.periodic_snapshot_interval`` if ``enable_block_reuse`` else 0; partial
  reuse is turned off.
- ``resource_manager.py``, ``KVCacheManager._calculate_max_num_blocks_for_linear_attention`` (the
  split): ``slope = attention bytes per token + state_bytes // interval`` (0 without snapshots),
  ``intercept = max_batch_size * pp_size * state_bytes``, ``max_tokens = (budget - intercept) //
  slope``; the attention window gets ``max_tokens // tokens_per_block`` blocks; the recurrent window
  ``max_batch_size * pp_size + 1`` slots (+1: the CUDA-graph padding dummy, never a request's), plus
  ``max_tokens // interval`` snapshot slots when reuse and snapshots are on (plus ``max_draft_len``
  with speculative decoding: not modelled). Here pp_size 1; the padding slot is kept out of the pool.
- ``kv_cache/mamba_cache_manager/common.py``, ``MambaHybridCacheManager.prepare_expect_snapshot_points``
  (the reuse rule): a request's recurrent state is kept at every multiple of
  ``periodic_snapshot_interval`` up to its prompt length (V1 has no additional snapshot offsets);
  ``mamba_state_config.periodic_snapshot_interval`` is off by default (TensorRT-LLM's "KV Cache System" docs,
  "Mamba Snapshot Boundaries"), so without it a hybrid model never reuses a prefix. A hit therefore
  ends at the longest snapshot position whose state is still cached and whose attention blocks are
  (``checkpoint_hit``), each pool evicting by LRU on its own. The interval must be a multiple of
  ``tokens_per_block`` (the C++ side's check).

Not modelled: the V2 manager (``MambaHybridCacheManagerV2``) that newest main selects by default for
hybrid Mamba models (``use_kv_cache_manager_v2="auto"``; pools sized by ``avg_seq_len`` /
``pool_ratio``); ``mamba_ssm_cache_dtype="auto"`` (the state bytes are the zoo spec's, vLLM's dtype
rule); speculative decoding's extra slots. Llama-4's chunked attention and vision-embedding caches
are refused (TRT-LLM has no such window kind in this manager).
"""

from __future__ import annotations

import math

from jenga.manager_base import PagedManager
from jenga.pools.flat import PartitionedPool
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec, SpecError

ENGINE_VERSION = ("TensorRT-LLM main 2026 (PyTorch backend: one WindowBlockManager per window size, "
                  "calculate_max_num_blocks_for_vswa equal static split; tokens_per_block 32)")
TOKENS_PER_BLOCK = 32  # KvCacheConfig.tokens_per_block default (tensorrt_llm/llmapi/llm_args.py)
RECURRENT_STATES = -1  # LinearCacheType.RECURRENT_STATES / LinearAttentionMetadata::kRecurrentStates
# config_utils.is_hybrid_linear: is_nemotron_hybrid (hybrid_override_pattern), is_qwen3_hybrid
# (Qwen3-Next, Qwen3.5), is_kimi_linear -- the HF architectures of those families
HYBRID_LINEAR_ARCHITECTURES = frozenset({
    "NemotronHForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "KimiLinearForCausalLM"})
# (is_qwen3_5 matches the text checkpoints' Qwen3_5[Moe]ForCausalLM; the multimodal checkpoints are taken
# as their text model -- an assumption. Nemotron-H is recognised by its hybrid_override_pattern.)


def mamba_split(attn_bytes_per_token: int, state_bytes: int, capacity_bytes: int, max_batch_size: int,
                snapshot_interval: int = 0, tokens_per_block: int = TOKENS_PER_BLOCK) -> dict:
    """``KVCacheManager._calculate_max_num_blocks_for_linear_attention`` (resource_manager.py), pp_size 1,
    no speculative decoding: the affine model ``bytes(T) = slope * T + intercept`` with ``slope =
    attention bytes per token + state_bytes // interval`` and ``intercept = max_batch_size *
    state_bytes``; ``max_tokens = max((budget - intercept) // slope, 0)``, attention blocks
    ``max_tokens // tokens_per_block``, recurrent slots ``max_batch_size + 1`` (+ ``max_tokens //
    interval`` snapshots when ``snapshot_interval`` > 0, i.e. block reuse with periodic snapshots)."""
    mamba_slope = state_bytes // snapshot_interval if snapshot_interval > 0 else 0
    slope = attn_bytes_per_token + mamba_slope
    intercept = max_batch_size * state_bytes
    max_tokens = max((capacity_bytes - intercept) // slope, 0)
    slots = max_batch_size + 1 + (max_tokens // snapshot_interval if snapshot_interval > 0 else 0)
    return {"slope": slope, "intercept": intercept, "max_tokens": max_tokens,
            "attention_blocks": max_tokens // tokens_per_block, "recurrent_slots": slots}


def window_of(spec, max_seq_len: int) -> int:
    """The ``max_attention_window`` entry of a layer type: its window, or ``max_seq_len`` for full
    attention (a window larger than ``max_seq_len`` is kept as given, as TRT-LLM warns and keeps it)."""
    if isinstance(spec, MambaSpec):
        return RECURRENT_STATES
    if type(spec) is FullAttentionSpec:
        return max_seq_len
    if type(spec) is SlidingWindowSpec:
        return spec.window
    raise SpecError(f"trtllm_pools: layer kind {spec.kind!r} ({spec.name}) has no TensorRT-LLM window-pool "
                    "equivalent here (only full and sliding-window attention are modelled)")


def adjust_window_sizes_for_vswa(windows_bpt, pool_memory_bytes: int) -> dict[int, int]:
    """``KVCacheManager.adjust_window_sizes_for_vswa`` (``tensorrt_llm/_torch/pyexecutor/
    resource_manager.py``; ``kv_cache_config.max_tokens`` unset): each window size of the ``(window,
    bytes per token)`` pairs mapped to the window TensorRT-LLM keeps. Unchanged when ``sum(window x
    bytes per token) < pool_memory_bytes``; otherwise, in ascending window order, the tokens of the band
    ``(previous window, window]`` that the remaining memory buys for every layer still in play (this
    window's and the larger ones'), accumulated; once a window cannot be filled the memory is spent and
    every larger window keeps the same accumulated tokens."""
    bpt: dict[int, int] = {}
    for w, b in windows_bpt:
        bpt[w] = bpt.get(w, 0) + b
    wins = sorted(bpt)
    if sum(w * bpt[w] for w in wins) < pool_memory_bytes:
        return {w: w for w in wins}
    remaining, in_play = pool_memory_bytes, sum(bpt.values())
    accum = prev = 0
    out = {}
    for w in wins:
        if remaining > 0 and in_play > 0:
            tokens = min(remaining // in_play, w - prev)
            remaining -= tokens * in_play
            accum += tokens
            if accum < w:   # this window cannot be filled: the larger ones get the same tokens
                remaining = 0
        out[w] = accum
        in_play -= bpt[w]
        prev = w
    return out


def split(windows_bpt, capacity_bytes: int, tokens_per_block: int = TOKENS_PER_BLOCK, window_split: str = "pytorch",
          window_size_shares=None, vswa: bool | None = None) -> tuple[dict, dict]:
    """``(share, blocks)`` per window size from ``(window, bytes per token)`` pairs, one per layer type.

    One window size (no VSWA): the whole memory, ``ceilDiv(int(memory / bytesPerToken),
    tokensPerBlock)`` blocks (C++ ``BaseKVCacheManager::calculateMaxNumBlocks``, which the PyTorch
    backend still calls for one window). Several (VSWA):

    - ``window_split="pytorch"`` (the default backend): ``KVCacheManager.calculate_max_num_blocks_for_vswa``
      (``tensorrt_llm/_torch/pyexecutor/resource_manager.py``) gives every window size an *equal* share
      unless ``window_size_shares`` (``TRTLLM_WINDOW_SIZE_SHARES``: one share per window size, ascending,
      summing to 1) says otherwise, and ``int(memory * share / bytesPerToken // tokensPerBlock)`` blocks;
    - ``window_split="cpp"`` (the TensorRT engine backend): ``BlockManager::calculateWindowSizeToShare``
      (weight = bytes-per-token fraction x window size, normalised) and ``calculateMaxNumBlocks``'s
      ``ceilDiv(int(memory * share / bytesPerToken), tokensPerBlock)``.

    ``vswa``: the model's configured windows were several (TensorRT-LLM's ``is_vswa``, decided before
    :func:`adjust_window_sizes_for_vswa` may merge them into one): the VSWA split even for one window
    size left. Default: several window sizes in ``windows_bpt``."""
    if window_split not in ("pytorch", "cpp"):
        raise SpecError(f"window_split must be 'pytorch' or 'cpp', got {window_split!r}")
    bpt: dict[int, int] = {}
    for w, b in windows_bpt:
        bpt[w] = bpt.get(w, 0) + b
    wins = sorted(bpt)
    if vswa is None:
        vswa = len(wins) > 1
    if not vswa:
        w = wins[0]
        return {w: 1.0}, {w: -(-int(capacity_bytes / bpt[w]) // tokens_per_block)}
    if window_split == "cpp":
        if window_size_shares is not None:
            raise SpecError("window_size_shares (TRTLLM_WINDOW_SIZE_SHARES) is read by the PyTorch backend only; "
                            "drop it or use window_split='pytorch'")
        total = sum(bpt.values())
        contrib = {w: bpt[w] / total * w for w in wins}
        csum = sum(contrib.values())
        share = {w: c / csum for w, c in contrib.items()}
        return share, {w: -(-int(capacity_bytes * share[w] / bpt[w]) // tokens_per_block) for w in wins}
    if window_size_shares is None:
        shares = [1.0 / len(wins)] * len(wins)
    else:
        shares = [float(x) for x in window_size_shares]
        if len(shares) != len(wins) or sum(shares) != 1.0 or min(shares) <= 0:
            raise SpecError(f"window_size_shares must give one positive share per window size {wins} summing to "
                            f"1.0 (TRTLLM_WINDOW_SIZE_SHARES), got {window_size_shares!r}")
    share = dict(zip(wins, shares))
    return share, {w: int(capacity_bytes * share[w] / bpt[w] // tokens_per_block) for w in wins}


def blocks_per_window(specs, capacity_bytes: int, max_seq_len: int, tokens_per_block: int = TOKENS_PER_BLOCK,
                      window_split: str = "pytorch", window_size_shares=None) -> dict[int, int]:
    """Primary blocks per window size of ``specs`` (see :func:`split`), keyed by the windows
    :func:`adjust_window_sizes_for_vswa` leaves (PyTorch backend, several window sizes)."""
    pairs = [(window_of(s, max_seq_len), s.bytes_per_token) for s in specs]
    vswa = len({w for w, _ in pairs}) > 1
    if vswa and window_split == "pytorch":
        adjusted = adjust_window_sizes_for_vswa(pairs, capacity_bytes)
        pairs = [(adjusted[w], b) for w, b in pairs]
    return split(pairs, capacity_bytes, tokens_per_block, window_split, window_size_shares, vswa=vswa)[1]


class TrtllmPools(PagedManager):
    """One static pool per window size (see the module docstring). Options: ``max_seq_len`` (the full
    layers' window, which also weighs the split; default 32768 -- harness.whatif passes the cell's
    ``max_model_len``) and ``max_attention_window`` (one int: cap every layer's window at it, as
    ``KvCacheConfig.max_attention_window=[w]`` does, turning full layers into ``w``-windows)."""

    system_name = "trtllm_pools"
    engine_version = ENGINE_VERSION
    option_names = ("max_seq_len", "max_attention_window", "max_batch_size", "periodic_snapshot_interval",
                    "architecture", "window_split", "window_size_shares")

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = TOKENS_PER_BLOCK,
                 enable_prefix_cache: bool = False, **options):
        specs = list(specs)
        self.hybrid_linear = any(isinstance(s, MambaSpec) for s in specs)
        if self.hybrid_linear:
            specs = self._hybrid_specs(specs, **options)
        cap_w = options.get("max_attention_window")
        if cap_w is not None and (not isinstance(cap_w, int) or isinstance(cap_w, bool) or cap_w <= 0):
            raise SpecError(f"max_attention_window must be a positive integer or null, got {cap_w!r}")
        if cap_w is not None:
            # a capped layer is a sliding-window layer to TRT-LLM: its out-of-window blocks detach
            specs = [SlidingWindowSpec(s.name, s.num_layers, s.bytes_per_token_per_layer, s.num_compute_layers,
                                       window=min(cap_w, getattr(s, "window", cap_w)))
                     if type(s) in (FullAttentionSpec, SlidingWindowSpec) else s for s in specs]
        self.vswa = False
        self.window_adjustments: dict[int, int] = {}
        if not self.hybrid_linear:
            specs = self._adjusted_specs(specs, capacity_bytes, **options)
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)

    def _adjusted_specs(self, specs, capacity_bytes: int, **options) -> list:
        """``adjust_window_sizes_for_vswa`` before the split (PyTorch backend, several window sizes):
        a layer whose window shrinks attends to the shrunk window -- a sliding-window layer here."""
        msl = options.get("max_seq_len", 32768)
        if not isinstance(msl, int) or isinstance(msl, bool) or msl <= 0:
            raise SpecError(f"max_seq_len must be a positive integer, got {msl!r}")
        wins = [window_of(s, msl) for s in specs]
        self.vswa = len(set(wins)) > 1
        if not self.vswa or options.get("window_split", "pytorch") != "pytorch":
            return specs
        adjusted = adjust_window_sizes_for_vswa([(w, s.bytes_per_token) for w, s in zip(wins, specs)], capacity_bytes)
        self.window_adjustments = {w: a for w, a in adjusted.items() if a != w}
        if not self.window_adjustments:
            return specs
        if min(adjusted.values()) <= 0:
            raise SpecError(f"capacity_bytes ({capacity_bytes}) buys no token of the smallest window under "
                            f"TensorRT-LLM's adjust_window_sizes_for_vswa ({adjusted})")
        return [SlidingWindowSpec(s.name, s.num_layers, s.bytes_per_token_per_layer, s.num_compute_layers,
                                  window=adjusted[w]) if w in self.window_adjustments else s
                for w, s in zip(wins, specs)]

    @staticmethod
    def _hybrid_specs(specs, **options) -> list:
        """CppMambaHybridCacheManager's layer windows: Mamba -> kRecurrentStates, every other layer
        -> max_seq_len (a sliding layer is charged as full attention); refuses what the V1 route does
        not run (see the module docstring)."""
        arch = options.get("architecture")
        if arch is not None and arch not in HYBRID_LINEAR_ARCHITECTURES:
            raise SpecError(f"trtllm_pools: {arch} has Mamba / linear-attention layers but is not a hybrid-linear "
                            "model to TensorRT-LLM (config_utils.is_hybrid_linear: Nemotron-H, Qwen3-Next / "
                            "Qwen3.5, Kimi-Linear only), so no KV cache manager of it holds their states -- use "
                            "vllm_hma, sglang_pools or sglang_unified for this model")
        if options.get("max_attention_window") is not None:
            raise SpecError("trtllm_pools: max_attention_window is overwritten for hybrid Mamba models "
                            "(CppMambaHybridCacheManager: Mamba layers -> kRecurrentStates, the others -> "
                            "max_seq_len); drop the option")
        out = []
        for s in specs:
            if isinstance(s, MambaSpec) or type(s) is FullAttentionSpec:
                out.append(s)
            elif type(s) is SlidingWindowSpec:
                out.append(FullAttentionSpec(s.name, s.num_layers, s.bytes_per_token_per_layer, s.num_compute_layers))
            else:
                raise SpecError(f"trtllm_pools: layer kind {s.kind!r} ({s.name}) has no place in TensorRT-LLM's "
                                "hybrid Mamba cache manager (full attention and recurrent states only)")
        return out

    def make_pool(self, **options):
        msl = options.get("max_seq_len", 32768)
        if not isinstance(msl, int) or isinstance(msl, bool) or msl <= 0:
            raise SpecError(f"max_seq_len must be a positive integer, got {msl!r}")
        self.max_seq_len = msl
        if self.hybrid_linear:
            return self._make_hybrid_pool(**options)
        wins = [window_of(s, msl) for s in self.specs]  # capped windows are SlidingWindowSpecs already
        self.windows = wins
        tpb = self.tokens_per_page
        self.share, self.blocks = split([(w, s.bytes_per_token) for w, s in zip(wins, self.specs)],
                                        self.capacity_bytes, tpb, options.get("window_split", "pytorch"),
                                        options.get("window_size_shares"), vswa=self.vswa)
        bpt: dict[int, int] = {}
        for w, s in zip(wins, self.specs):
            bpt[w] = bpt.get(w, 0) + s.bytes_per_token
        share = self.share
        # ceilDiv (one window; the cpp split) may overshoot by one block per window; the pool keeps
        # what fits in the bytes.
        fit = {w: min(n, int(self.capacity_bytes * share[w]) // (tpb * bpt[w])) for w, n in self.blocks.items()}
        if any(n <= 0 for n in fit.values()):
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) leaves a window pool empty under "
                            f"TensorRT-LLM's split {self.blocks}")
        self.pool_blocks = fit
        shares = [fit[w] * st.page_bytes for w, st in zip(wins, self.types)]
        return PartitionedPool([st.page_bytes for st in self.types], shares, self.capacity_bytes,
                               self.enable_prefix_cache)


    # -- hybrid Mamba (CppMambaHybridCacheManager) ----------------------------------------------------
    def _make_hybrid_pool(self, **options):
        mbs = options.get("max_batch_size", 256)
        if not isinstance(mbs, int) or isinstance(mbs, bool) or mbs <= 0:
            raise SpecError(f"max_batch_size must be a positive integer, got {mbs!r}")
        psi = options.get("periodic_snapshot_interval")
        psi = 0 if psi is None else psi
        tpb = self.tokens_per_page
        if not isinstance(psi, int) or isinstance(psi, bool) or psi < 0 or psi % tpb:
            raise SpecError(f"periodic_snapshot_interval must be null, 0 or a positive multiple of tokens_per_block "
                            f"({tpb}), got {psi!r}")
        # states_snapshot_interval: the periodic interval only with block reuse on
        self.snapshot_interval = psi if self.enable_prefix_cache else 0
        self.max_batch_size = mbs
        attn_bpt = sum(s.bytes_per_token for s in self.specs if not isinstance(s, MambaSpec))
        state = sum(s.state_bytes for s in self.specs if isinstance(s, MambaSpec))
        if attn_bpt == 0:
            raise SpecError("trtllm_pools: a hybrid Mamba model needs a full-attention layer "
                            "(BlockManager requires a full-attention window beside kRecurrentStates)")
        sp = mamba_split(attn_bpt, state, self.capacity_bytes, mbs, self.snapshot_interval, tpb)
        self.mamba = sp
        self.windows = [RECURRENT_STATES if isinstance(s, MambaSpec) else self.max_seq_len for s in self.specs]
        nblk = sp["attention_blocks"]
        attn_bytes = nblk * tpb * attn_bpt
        # the slots TRT-LLM asks for, less the CUDA-graph padding slot (its bytes lie outside the
        # intercept: TRT-LLM's pool overshoots the budget by one state), within what the bytes hold
        fit = (self.capacity_bytes - attn_bytes) // state
        slots = min(sp["recurrent_slots"] - 1, fit)
        self.blocks = {self.max_seq_len: nblk, RECURRENT_STATES: sp["recurrent_slots"]}
        self.share = {self.max_seq_len: attn_bytes / self.capacity_bytes,
                      RECURRENT_STATES: sp["recurrent_slots"] * state / self.capacity_bytes}
        self.pool_blocks = {self.max_seq_len: nblk, RECURRENT_STATES: slots}
        if nblk <= 0 or slots <= 0:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) leaves a pool empty under TensorRT-LLM's hybrid "
                            f"split (max_batch_size {mbs} live states of {state} bytes take {sp['intercept']} bytes "
                            f"first): {self.blocks}; lower max_batch_size")
        shares = [(slots if isinstance(s, MambaSpec) else nblk) * st.page_bytes for s, st in zip(self.specs, self.types)]
        return PartitionedPool([st.page_bytes for st in self.types], shares, self.capacity_bytes,
                               self.enable_prefix_cache)

    def checkpoint_positions(self, rs, t, prev, T):
        """``prepare_expect_snapshot_points``: every multiple of the interval up to the prompt length."""
        N = getattr(self, "snapshot_interval", 0)
        if not N:
            return ()
        return range((prev // N + 1) * N, min(T, rs.prompt_len) + 1, N)

    def checkpoint_hit(self, t, hasher, L):
        """A hit ends on a cached snapshot (a multiple of the interval); none without snapshots."""
        N = getattr(self, "snapshot_interval", 0)
        if not N or self.types[t].policy.pages_per_state != 1:
            return 0
        return self.longest_cached_multiple(t, hasher, L, N)


def reported_capacity(mm: TrtllmPools, max_model_len: int) -> dict:
    """TensorRT-LLM's start-up numbers: primary blocks per window, the full window's tokens (its
    blocks x tokens_per_block; the largest window's when no layer is full) and
    ``getMaxCapacityBatchSize`` at ``max_model_len`` (input + output = max_model_len, beam 1)."""
    tpb = mm.tokens_per_page
    if mm.hybrid_linear:
        # live states cap the batch at max_batch_size (the scheduler's limit); attention blocks as usual
        nblk = mm.blocks[mm.max_seq_len]
        per = math.ceil(min(max_model_len, mm.max_seq_len) / tpb)
        return {"blocks_per_window": dict(mm.blocks), "window_share": {w: round(x, 6) for w, x in mm.share.items()},
                "kv_capacity_tokens": nblk * tpb, "max_concurrency": min(nblk / per, mm.max_batch_size),
                "max_batch_size": int(min(nblk // per, mm.max_batch_size)),
                "mamba_split": dict(mm.mamba), "snapshot_interval": mm.snapshot_interval}
    conc = min(n / math.ceil(min(max_model_len, w) / tpb) for w, n in mm.blocks.items())
    top = max(mm.blocks)
    return {"blocks_per_window": dict(mm.blocks), "window_share": {w: round(s, 6) for w, s in mm.share.items()},
            "kv_capacity_tokens": mm.blocks[top] * tpb, "max_concurrency": conc,
            "max_batch_size": int(min(n // math.ceil(min(max_model_len, w) / tpb) for w, n in mm.blocks.items()))}
