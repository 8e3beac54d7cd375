"""``sglang_pools``: SGLang's separate KV pools for hybrid models, as a what-if system.

Engine followed: **SGLang** ``srt`` main (2026), read from the public code index at the commits named
below, with its server-args defaults ``swa_full_tokens_ratio = 0.8``, ``mamba_full_memory_ratio =
0.9``, ``mamba_scheduler_strategy = "auto"`` (resolved to ``"no_buffer"``), ``page_size = 1``.

Source check (behaviour modelled | engine file and function, commit | agrees?):

=====================================  ============================================================  =========
Mamba pool: ``slots = int(rest * r /   ``srt/model_executor/model_runner_kv_cache_mixin.py``          agrees
(1 + r) // state bytes per request)``  ``handle_max_mamba_cache`` (001ccef0)
Attention gets the exact remainder,    same function: returns ``rest - slots * mamba_cache_per_req``  **fixed**
``rest - slots * state``                                                                                  (was
                                                                                                          rest/(1+r))
State bytes per request: conv in       ``srt/configs/mamba_utils.py`` ``mamba2_state_dtype`` /         **fixed**
bfloat16, recurrent state in float32   ``BaseLinearStateParams.mamba_cache_per_req`` (02e208de);       (was the
unless the checkpoint's config sets    ``srt/environ.py`` ``SGLANG_MAMBA_CONV_DTYPE = "bfloat16"``,    zoo's vLLM
``mamba_ssm_dtype``                    ``SGLANG_MAMBA_SSM_DTYPE = None``                               dtype)
Full tokens ``int(rest) // cell``,     ``profile_max_num_token`` (cell = full layers only for a      agrees
page-aligned                           Mamba model) and ``init_memory`` (001ccef0)
SWA/full split ``F = int(T * cell /    ``set_num_tokens_hybrid_swa`` (001ccef0): ``T = int(rest) //    **fixed**
(F_l + r S_l))``, ``S = int(F r)``,    cell`` first (whole tokens of both kinds), then the ratio       (rounding:
both page-aligned                      equations                                                      one floor
                                                                                                          more)
Running requests capped at             ``init_memory``: ``max_num_reqs = min(max(int(T / context_len  **fixed**
``mamba_slots // 3`` (no_buffer)       * 512), 2048), 4096)``, then ``min(.., max_mamba_cache_size //  (was every
                                       MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)`` with ratio 3    slot)
                                       (+2 only with ``extra_buffer``) (001ccef0)
``auto`` strategy = ``no_buffer``      ``srt/server_args.py`` ``__post_init__`` (index doc 271536807)  agrees
Pools static after start-up, one       ``HybridLinearKVPool`` / ``SWAKVPool`` built once in            agrees
LRU per pool                           ``init_memory``
SWA hit: no tombstone on the path, or  ``srt/mem_cache/swa_radix_cache.py``                           agrees
>= window live tokens since the last   ``SWARadixCache._match_prefix_helper``
tombstone                              (``match_len_since_tombstone``; index doc 41984379)
Out-of-window SWA KV freed in decode   same file ``dec_swa_lock_only``; ``maybe_evict_swa``           agrees
Full-pool eviction of a leaf also      ``SWARadixCache.evict`` phase 1 (full LRU leaves: full + SWA   **fixed**
frees its SWA KV                       freed, node deleted; index doc 55250093538)                    (was left
                                                                                                      cached)
An SWA-pool eviction of a leaf also    ``SWARadixCache.evict`` phase 2 (a leaf: full + SWA freed;     differs,
frees its full KV; of an inner node    an inner node: SWA freed, tombstoned); phase 1's               not fixed
only SWA (tombstone)                   ``_iteratively_delete_tombstone_leaf``                         (see below)
Mamba hit only where a state is        ``srt/mem_cache/mamba_radix_cache.py`` (no_buffer: one state   agrees
cached (end of what was inserted)      per inserted request)                                          (prompt
                                                                                                      end only)
=====================================  ============================================================  =========

Full-pool eviction (``SWARadixCache.evict`` phase 1, index doc 55250093538): SGLang frees the
evicted leaf's KV in both pools at once (``token_to_kv_pool_allocator.free(x.value)``, SWA included
unless the node is a tombstone) and deletes the node. Here each pool has its own LRU, so a full page
evicted takes the cached SWA page of the same prefix position with it (:meth:`SglangPools._on_evict`);
without that the SWA page stayed cached, unable to give a hit (its full KV was gone), until the SWA
pool's own LRU reached it -- hits were the same, but the SWA pool under pressure evicted pages that
could still hit in its place. An SWA page a running request holds is left to it.

Not fixed: SGLang's SWA-pool eviction (phase 2) frees a *leaf*'s full KV too and deletes the node,
and phase 1 then deletes tombstoned parents that became leaves (``_iteratively_delete_tombstone_leaf``);
here an SWA eviction frees only the SWA page and the full page stays cached until the full pool's
LRU takes it (it can still serve a shorter prefix's hit, which a deleted leaf could not).

Sizing in words: of the memory left for caches, ``rest * r / (1 + r)`` (``r =
mamba_full_memory_ratio``) buys whole Mamba states; the attention pools get what the states leave.
Full tokens ``F`` and sliding tokens ``S = ratio * F`` solve ``F * full_bytes_per_token + S *
swa_bytes_per_token = attention bytes`` (from a whole number of all-layer tokens), both rounded down
to the page size. The split is fixed at start-up: idle SWA slots cannot serve full-attention tokens
and vice versa, and the Mamba pool holds running requests' states plus the radix cache's, with at
most a third of the slots running (no_buffer).

SGLang sizes its states with its own dtypes, not vLLM's: ``mamba_state_elems`` (conv, recurrent
elements of one layer, from the model's shapes; ``harness.whatif`` passes them) and
``mamba_ssm_dtype_bytes`` (4 = float32, SGLang's default; 2 for a checkpoint whose config sets
``mamba_ssm_dtype`` to a 16-bit type) replace the spec's bytes. Without ``mamba_state_elems`` the
spec's bytes are used as they are.

Prefix caching: ``SWARadixCache`` frees (tombstones) a request's sliding-window KV as it leaves the
window and matches a prefix only where the last ``window`` tokens' SWA KV is still present; each pool
evicts by LRU on its own. ``MambaRadixCache`` under ``no_buffer`` keeps one state per cached
request, at the end of what it inserted (modelled: at the end of the prompt; SGLang's
``cache_finished_req`` also covers the generated tokens, which a next chat turn re-sends -- a
difference that only under-counts Mamba hits here). ``extra_buffer`` (states every
``mamba_track_interval`` tokens) is not modelled. The unified arena (``--enable-unified-memory``) is
``sglang_unified`` (``jenga/baselines/sglang_unified.py``).
"""

from __future__ import annotations

import dataclasses

from jenga.manager_base import PagedManager
from jenga.pools.flat import PartitionedPool
from jenga.spec import FullAttentionSpec, MambaSpec, SpecError

ENGINE_VERSION = ("SGLang srt main 2026 (model_runner_kv_cache_mixin 001ccef0; server_args defaults: "
                  "swa_full_tokens_ratio 0.8, mamba_full_memory_ratio 0.9, no_buffer, page_size 1)")
CONV_DTYPE_BYTES = 2       # srt/environ.py SGLANG_MAMBA_CONV_DTYPE "bfloat16"
SSM_DTYPE_BYTES = 4        # srt/configs/mamba_utils.py mamba2_state_dtype: float32 by default
SLOTS_PER_RUNNING_REQUEST = 3  # model_runner_kv_cache_mixin MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (no_buffer)


def sglang_state_specs(specs, state_elems=None, ssm_dtype_bytes: int = SSM_DTYPE_BYTES) -> list:
    """``specs`` with each Mamba type's state sized as SGLang sizes it: ``state_elems = (conv,
    recurrent)`` elements of one layer, the conv part in bfloat16 and the recurrent part in
    ``ssm_dtype_bytes`` (``BaseLinearStateParams.mamba_cache_per_req``). ``None``: unchanged."""
    if state_elems is None:
        return list(specs)
    conv_el, ssm_el = (int(x) for x in state_elems)
    if conv_el < 0 or ssm_el <= 0:
        raise SpecError(f"mamba_state_elems must be (conv >= 0, recurrent > 0) elements, got {state_elems!r}")
    if ssm_dtype_bytes not in (2, 4):
        raise SpecError(f"mamba_ssm_dtype_bytes must be 2 or 4 (SGLang's float16/bfloat16 or float32), "
                        f"got {ssm_dtype_bytes!r}")
    conv = conv_el * CONV_DTYPE_BYTES
    total = conv + ssm_el * ssm_dtype_bytes
    return [dataclasses.replace(s, bytes_per_token_per_layer=total, state_bytes_per_layer=total,
                                conv_bytes_per_layer=conv) if isinstance(s, MambaSpec) else s for s in specs]


def sglang_split(specs, capacity_bytes: int, page_size: int = 1, swa_full_tokens_ratio: float = 0.8,
                 mamba_full_memory_ratio: float = 0.9) -> dict:
    """Tokens (attention pools) and slots (Mamba) SGLang gives each pool out of ``capacity_bytes``
    (see the module docstring's table for the functions followed)."""
    if not 0 < swa_full_tokens_ratio <= 1:
        raise SpecError(f"swa_full_tokens_ratio must be in (0, 1], got {swa_full_tokens_ratio!r}")
    if not mamba_full_memory_ratio > 0:
        raise SpecError(f"mamba_full_memory_ratio must be > 0, got {mamba_full_memory_ratio!r}")
    mamba = [s for s in specs if isinstance(s, MambaSpec)]
    attn = [s for s in specs if s.token_based]
    out: dict = {"full_tokens": 0, "swa_tokens": 0, "mamba_slots": 0}
    rest = capacity_bytes
    if mamba:
        # handle_max_mamba_cache: whole states out of the ratio's share; the rest is the remainder
        r = mamba_full_memory_ratio
        state = sum(s.state_bytes for s in mamba)
        out["mamba_slots"] = int(capacity_bytes * r / (1 + r) // state)
        rest = capacity_bytes - out["mamba_slots"] * state
    full_bpt = sum(s.bytes_per_token for s in attn if type(s) is FullAttentionSpec)
    other_bpt = sum(s.bytes_per_token for s in attn if type(s) is not FullAttentionSpec)
    cell = full_bpt + other_bpt
    if not cell:
        return out
    # profile_max_num_token + init_memory: whole all-layer tokens, page-aligned
    total = int(rest) // cell // page_size * page_size
    if full_bpt and other_bpt:
        # set_num_tokens_hybrid_swa: the ratio equations over those tokens' bytes
        f = int(total * cell / (full_bpt + swa_full_tokens_ratio * other_bpt))
        s = int(f * swa_full_tokens_ratio)
        out["full_tokens"] = f - f % page_size
        out["swa_tokens"] = s - s % page_size
    elif full_bpt:
        out["full_tokens"] = total
    else:
        out["swa_tokens"] = total
    return out


def max_running_requests(split: dict, context_len: int) -> int:
    """``init_memory``'s ``max_num_reqs`` (no ``--max-running-requests``): ``min(max(int(tokens /
    context_len * 512), 2048), 4096)``, and for a Mamba model at most a third of the state slots (the
    other two thirds hold the radix cache's states; no_buffer)."""
    tokens = split["full_tokens"] or split["swa_tokens"]
    n = min(max(int(tokens / context_len * 512), 2048), 4096)
    if split["mamba_slots"]:
        n = min(n, split["mamba_slots"] // SLOTS_PER_RUNNING_REQUEST)
    return n


class SglangPools(PagedManager):
    """Separate, statically sized pools per layer kind (see the module docstring)."""

    system_name = "sglang_pools"
    engine_version = ENGINE_VERSION
    option_names = ("swa_full_tokens_ratio", "mamba_full_memory_ratio", "mamba_state_elems", "mamba_ssm_dtype_bytes")

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16, enable_prefix_cache: bool = False,
                 **options):
        specs = sglang_state_specs(specs, options.get("mamba_state_elems"),
                                   options.get("mamba_ssm_dtype_bytes", SSM_DTYPE_BYTES))
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)
        # The types SGLang keeps in its SWA pool (every token-based kind but full attention) when the
        # model also has full attention (SWARadixCache); _on_evict frees them with a full eviction.
        full = any(type(s) is FullAttentionSpec for s in self.specs)
        self._swa_types = [u for u, s in enumerate(self.specs)
                           if full and s.token_based and type(s) is not FullAttentionSpec]

    @property
    def max_running_requests(self) -> int | None:
        """SGLang's cap on running requests that its memory split sets: a third of the Mamba slots
        (``None`` without Mamba layers: the harness's ``max_num_seqs`` stands)."""
        return self.split["mamba_slots"] // SLOTS_PER_RUNNING_REQUEST if self.split["mamba_slots"] else None

    def make_pool(self, **options):
        split = sglang_split(self.specs, self.capacity_bytes, self.tokens_per_page,
                             options.get("swa_full_tokens_ratio", 0.8), options.get("mamba_full_memory_ratio", 0.9))
        self.split = split
        shares = []
        for st, s in zip(self.types, self.specs):
            if isinstance(s, MambaSpec):
                n = split["mamba_slots"]
            elif type(s) is FullAttentionSpec:
                n = split["full_tokens"] // st.tokens_per_page
            else:
                n = split["swa_tokens"] // st.tokens_per_page
            shares.append(n * st.page_bytes)
        if any(x <= 0 for x in shares):
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) leaves a pool empty under SGLang's split {split}")
        return PartitionedPool([st.page_bytes for st in self.types], shares, self.capacity_bytes,
                               self.enable_prefix_cache)

    # -- SWARadixCache.evict phase 1: a full leaf's eviction frees its SWA KV too ------------------
    def _on_evict(self, t: int, sid: int) -> None:
        """``swa_radix_cache.py`` ``SWARadixCache.evict`` (phase 1): evicting a full-attention leaf
        frees the node's KV in the full *and* the SWA pool. A full page evicted here takes the cached
        SWA page that ends at the same prefix position (the same key) out of the SWA pool."""
        key = self.page_key[t].get(sid)
        super()._on_evict(t, sid)
        if key is None or type(self.specs[t]) is not FullAttentionSpec:
            return
        for u in self._swa_types:
            mirror = self.index[u].get(key)
            if mirror is not None and not self.ref[u].get(mirror, 0):  # cached, no request holds it
                self.pool.from_cached(u, mirror)
                self.pool.free(u, mirror)
                super()._on_evict(u, mirror)


    # -- MambaRadixCache (no_buffer): one state at the end of the cached prompt -------------------
    def checkpoint_positions(self, rs, t, prev, T):
        return (rs.prompt_len,) if prev < rs.prompt_len <= T else ()

    def checkpoint_hit(self, t, hasher, L):
        if self.types[t].policy.pages_per_state != 1:
            return 0
        idx = self.index[t]
        step = self.hash_block
        b = L - L % step
        while b > 0:
            if hasher.hash_at(b) in idx:
                return b
            b -= step
        return 0


def reported_capacity(mm, max_model_len: int) -> dict:
    """SGLang's start-up numbers for ``mm`` (a :class:`SglangPools`): ``max_total_num_tokens`` (the
    full pool; the SWA pool when the model has no full layer), the SWA tokens, Mamba slots and
    ``max_running_requests``, and a max concurrency at ``max_model_len`` taken as the smallest over
    pools of what one such request needs (full: every token; SWA: its window; Mamba: a running slot,
    a third of the pool) -- SGLang logs no such number -- capped at ``max_running_requests``."""
    sp = mm.split
    cap = max_running_requests(sp, max_model_len)
    conc = [cap]
    for s in mm.specs:
        if isinstance(s, MambaSpec):
            conc.append(sp["mamba_slots"] // SLOTS_PER_RUNNING_REQUEST)
        elif type(s) is FullAttentionSpec:
            conc.append(sp["full_tokens"] / max_model_len)
        elif s.token_based:
            conc.append(sp["swa_tokens"] / min(getattr(s, "window", max_model_len), max_model_len))
    c = min(conc)
    return {**sp, "max_concurrency": c, "max_running_requests": cap,
            "kv_capacity_tokens": sp["full_tokens"] or sp["swa_tokens"]}
