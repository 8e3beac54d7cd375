"""VllmCurrent: today's vLLM hybrid KV cache manager (vLLM 0.32), as its own system.

:class:`HybridGroups` is the April-2025 manager the paper compared against. vLLM 0.32 keeps its
grouping and page sizes but changes what a sliding-window group puts in the prefix cache (run with
``prefix_cache_retention_interval=0``, what ``vllm serve`` uses; results/crosscheck/CROSSCHECK.md):

- **Reachable blocks only (D3).** A sliding-window group hashes (caches) only the blocks a later
  hit can start from: the ``need = cdiv(window - 1, block)`` blocks that end at the request's replay
  boundary (``prompt - 1``, aligned) and at its shared-prefix junction (below). Every other block
  is freed *unhashed* when it leaves the window or the request ends -- including when the request
  is preempted, so a preempted request misses in its sliding-window groups on re-admission.
  Source: ``vllm/v1/core/single_type_kv_cache_manager.py`` ``SlidingWindowManager.reachable_block_mask``
  (via ``cache_blocks`` → ``BlockPool.cache_full_blocks(block_mask=...)``).
- **Shared-prefix junction (D2).** When a request's lookup finds full attention hitting further
  than the sliding-window groups, the longest single-group hit is the junction
  (``KVCacheManager.get_computed_blocks`` → ``shared_prefix_boundary``); the request hashes its
  sliding-window blocks at the junction while computing them, so the *next* request with that
  prefix hits all of it.
- Blocks go back to one free queue in the order they are freed (``BlockPool.free_blocks``): a
  block released early (out of window) is not evicted before older free blocks, unlike Jenga's
  artifact (stale timestamp) that :class:`HybridGroups` follows.
- **Every copy of a block stays under its hash (D4).** vLLM never de-duplicates
  (``BlockHashToBlockMap``): a lookup finds the oldest copy, and evicting one copy leaves the
  others findable. The rule is the prefix cache's ``keep_block_copies`` (jenga/prefix.py): every
  vLLM v1 block pool has it, the artifact's v1 fork included, so the v1 cells turn it on for the
  artifact's systems too (harness/conf/system/*.yaml); :class:`TodaysVllmRules` always has it on.

The rules are a mixin, :class:`TodaysVllmRules`, over any paged manager: :class:`VllmCurrent` puts
them on vLLM's grouped flat pool (:class:`HybridGroups`), ``jenga_current``
(jenga/baselines/jenga_current.py) on Jenga's LCM pool -- what the jenga_vllm plugin runs.

The full-prompt admission gate (D1, ``scheduler_reserve_full_isl``) is the scheduler's
(``harness/backends/sim/scheduler.py``, ``SchedulerConfig.full_prompt_admission``) and
:func:`full_sequence_demand` below sizes it.
"""

from __future__ import annotations

from jenga.baselines.groups import HybridGroups
from jenga.policies import FullPolicy, SlidingPolicy, cdiv
from jenga.reqstate import ReqState


class TodaysVllmRules:
    """vLLM 0.32's prefix-caching rules for sliding windows, over any paged manager: reachable-only
    sliding-window caching (D3), shared-prefix junction pinning (D2), one free queue in release
    order, every copy of a block kept under its hash (D4), no retention past the window. Mixed in
    *before* the manager class (it extends the manager's lookup / freeing / caching through
    ``super()``), so the rules are written once for
    vLLM's grouped flat pool (:class:`VllmCurrent`) and for Jenga's LCM pool (:class:`JengaCurrent`)."""

    # D4 is vLLM v1's block pool (jenga/prefix.py, keep_block_copies): always on here, not an option.
    keep_block_copies = True

    def __init__(self, specs, capacity_bytes: int, **kw):
        self.junction: dict[object, int] = {}
        super().__init__(specs, capacity_bytes, **kw)

    # -- D2: the junction is found at lookup ---------------------------------------------------------
    def lookup_prefix(self, request) -> int:
        L = super().lookup_prefix(request)
        rid = request.request_id
        if not self.enable_prefix_cache or rid in self.reqs:
            return L
        _, hasher = self.pending[rid]
        upper = len(request.prompt_token_ids) - 1
        full = upper
        for t, st in enumerate(self.types):
            if isinstance(st.policy, FullPolicy):
                full = min(full, self._cached_prefix_pages(t, hasher, upper // st.tokens_per_page)
                           * st.tokens_per_page)
        full -= full % self.align
        if full > L and any(isinstance(st.policy, SlidingPolicy) for st in self.types):
            self.junction[rid] = full
        else:
            self.junction.pop(rid, None)
        return L

    def free(self, request) -> None:
        super().free(request)
        # A preempted request is looked up again on re-admission (new junction, if any).
        self.junction.pop(request.request_id, None)

    # -- D3: only reachable sliding-window blocks are hashed ------------------------------------------
    def _reachable(self, rs: ReqState, t: int, j: int) -> bool:
        pol = self.types[t].policy
        if not isinstance(pol, SlidingPolicy):
            return True
        tpp = self.types[t].tokens_per_page
        need = cdiv(pol.spec.window - 1, tpp)
        for b in (rs.prompt_len - 1, self.junction.get(rs.rid, 0)):
            if b > 0:
                end = (b - b % self.align) // tpp
                if end - need <= j < end:
                    return True
        return False

    def _page_key(self, rs: ReqState, t: int, j: int, computed: int):
        key = super()._page_key(rs, t, j, computed)
        return key if key is None or self._reachable(rs, t, j) else None

    def _cacheable(self, rs: ReqState, t: int, j: int) -> bool:
        return self._reachable(rs, t, j)

    def _release_pages(self, rs: ReqState, t: int, js, stale: bool) -> None:
        # One free queue in release order: out-of-window blocks are not evicted first.
        super()._release_pages(rs, t, js, stale=False)

class VllmCurrent(TodaysVllmRules, HybridGroups):
    """vLLM 0.32's hybrid manager: :class:`HybridGroups` + reachable-only sliding-window caching
    (D3) + shared-prefix junction pinning (D2)."""

    system_name = "vllm_current"
    option_names = ()  # vLLM 0.32 frees at the window (extra_retained_tokens only for spec decode)


def full_sequence_demand(mm, request, hit: int, num_tokens: int, in_flight_tokens: int) -> int:
    """Bytes vLLM 0.32's admission gate needs free (free + evictable) before it admits a waiting
    request whose whole sequence is ``num_tokens`` tokens and whose prefix hit is ``hit`` tokens
    (``KVCacheManager.allocate_slots(full_sequence_must_fit=True)`` →
    ``get_num_blocks_to_allocate(apply_admission_cap=True)``), per storage type:

    - blocks the sequence needs, ``cdiv(num_tokens, block)``; a sliding window is capped at
      ``max_admission_blocks_per_request = cdiv(min(window - 1 + in_flight, num_tokens), block) + 1``
      (``SlidingWindowSpec`` in ``vllm/v1/kv_cache_interface.py``), its peak during chunked prefill;
    - minus the blocks it already has through the hit (or skips below the hit's window);
    - plus the hit blocks inside the window that sit in the free queue (touching them takes them
      out of it); hit blocks another running request holds cost nothing.

    ``mm`` is a paged manager (``jenga.manager_base.PagedManager``) with the prefix index. Image and state
    types count their pages at full length (vLLM keeps no cross-attention here; Mamba: one state).
    A manager with a ``max_model_len`` (vllm_hma) counts at most that many tokens (``allocate_slots``:
    ``full_num_tokens = min(request.num_tokens, self.max_model_len)``)."""
    mml = getattr(mm, "max_model_len", None)
    if mml is not None:
        num_tokens = min(num_tokens, mml)
    total = 0
    hasher = mm.pending.get(request.request_id, (0, None))[1] if mm.enable_prefix_cache else None
    for t, st in enumerate(mm.types):
        pol, tpp = st.policy, st.tokens_per_page
        if pol.state_based:
            total += pol.pages_per_state * st.page_bytes
            continue
        if pol.image_based:
            continue
        required = cdiv(num_tokens, tpp)
        skipped = 0
        if isinstance(pol, SlidingPolicy):
            cap = cdiv(min(pol.spec.window - 1 + in_flight_tokens, num_tokens), tpp) + 1
            required = min(required, cap)
            skipped = pol.needed_lo(hit) // tpp
        hit_pages = hit // tpp
        evictable = 0
        if hit_pages and hasher is not None:
            idx, ref = mm.index[t], mm.ref[t]
            for j in range(skipped, hit_pages):
                sid = idx.get(hasher.hash_at((j + 1) * tpp))
                if sid is not None and ref.get(sid, 0) == 0:
                    evictable += 1
        total += (max(0, required - max(skipped, hit_pages)) + evictable) * st.page_bytes
    return total
