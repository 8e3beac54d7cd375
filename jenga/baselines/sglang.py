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
An SWA-pool eviction of a leaf also    ``SWARadixCache.evict`` phase 2 (SWA LRU over every            **fixed**,
frees its full KV; of an inner node    non-tombstone node, ``get_lru_no_lock``: ``len(children) >     page level
(or a leaf a request holds) only its   0`` -> ``free_swa`` + ``_tombstone_internal_node``;            (was SWA
SWA KV (tombstone)                     ``full_lock_ref > 0`` -> tombstone; else ``free`` (full +       only; see
                                       SWA) + ``_delete_leaf``)                                       below)
A tombstone that becomes a leaf is     ``_iteratively_delete_tombstone_leaf`` (after a leaf's         **fixed**
deleted (its full KV freed), up the    deletion in both phases; stops at a held node or the root)     (was kept)
path
Mamba hit only where a state is        ``srt/mem_cache/mamba_radix_cache.py`` (no_buffer: one state   agrees
cached (end of what was inserted)      per inserted request)                                          (prompt
                                                                                                      end only)
=====================================  ============================================================  =========

Eviction (``swa_radix_cache.py`` ``SWARadixCache.evict``, index doc 55250093538), modelled at page
level in :meth:`SglangPools._on_evict`: a cached page's *node* is its key, its parent the key one page
shorter (recorded as pages are registered), a *leaf* a key no cached or held full page extends, a
*tombstone* a key with no SWA page in the index. Phase 1 (full pool short): SGLang frees the evicted
leaf's KV in both pools at once and deletes the node; here each pool has its own LRU, so a full page
evicted takes the cached SWA page of its key with it. Phase 2 (SWA pool short): SGLang's SWA LRU
holds every non-tombstone node; a victim with children only loses its SWA KV (``free_swa``,
``_tombstone_internal_node``), as does a leaf whose full KV a request holds; any other leaf is
deleted, full KV too. Here an SWA page evicted whose key is a leaf (and whose full page no request
holds) takes its cached full page with it; an inner one leaves its full page cached, and hits past
it still need ``window`` live SWA tokens after it (``match_len_since_tombstone``; the window rule
above). After a deletion in either phase, ``_iteratively_delete_tombstone_leaf`` deletes the parent
while it is an unheld tombstone with no child left, freeing its full KV, and so on up. An SWA page
a running request holds is never freed by these rules. Before: an evicted full page left its SWA
page cached (no hit possible without its full KV) and an evicted SWA leaf left its full page cached
(no hit possible either: a hit ending there needs that page's SWA KV).

Not fixed (page level vs SGLang's nodes): SGLang evicts whole radix nodes -- runs of tokens whose
boundaries come from the insert and match history (``_insert_helper``'s new node per inserted
suffix, ``_split_node`` at every partial match) -- so deleting a leaf node frees all of its tokens'
full KV at once, and its eviction loop overshoots the tokens asked for; here pages go one at a time
as the SWA LRU reaches them, so more stays cached and a shorter prefix of what SGLang deleted can
still hit. And SGLang's SWA LRU makes a node's parents less recently used than it
(``reset_node_and_parents_mru``, ``_insert_helper`` touching root to leaf: "this allows swa to evict
nodes closer to root first"), so among nodes used together it tombstones the root side first; our
per-type LRU breaks a timestamp tie by the longest prefix first, so among pages released together
the SWA pool evicts the tail (a leaf: full freed too) before the path's start (which SGLang would
tombstone, keeping the full path's hit while its last window lives). The first needs node
boundaries kept per key, which a page-level manager does not have; the second a root-first tie-break
for the SWA types, a change of every SWA eviction's order left for its own measurement. Nor does
SGLang keep two copies of a node: ``_insert_helper`` frees a request's duplicate KV at insert (or, on
a tombstoned node, the node's old full KV, adopting the request's); here the live copy takes the key
and the old cached page stays, unreachable, until the LRU evicts it (``jenga/prefix.py``
``_register``) -- 10,748 of the 13,910 full evictions of ``sglang_unified`` on Gemma-4-31B sessions
(the what-if summary); freeing it at once would need a ``_register`` hook (measured outside the
rules: that row's hits 0.614 -> 0.529, results/whatif/README.md). Cost: the
parent links are one dict entry per full page key (pruned on ``free`` once they outnumber the
indexed keys twice), and recording them in ``_cacheable`` sends these two systems' registrations
through the manager's per-page path, not its unrolled one (other systems are untouched).

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
evicts by its own LRU, with the cross-pool consequences above. ``MambaRadixCache`` under ``no_buffer`` keeps one state per cached
request, at the end of what it inserted (modelled: at the end of the prompt; SGLang's
``cache_finished_req`` also covers the generated tokens, which a next chat turn re-sends -- a
difference that only under-counts Mamba hits here). ``extra_buffer`` (states every
``mamba_track_interval`` tokens) is not modelled. The unified arena (``--enable-unified-memory``) is
``sglang_unified`` (``jenga/baselines/sglang_unified.py``).
"""

from __future__ import annotations

import dataclasses
from itertools import compress

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


# Per class: whether SglangPools' unrolled eviction stands for its methods (SglangPools._unrolled_here).
_UNROLLED_CLASSES: dict[type, bool] = {}


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
        # The radix tree, at page level (_on_evict): the full types whose pages are its nodes'
        # full KV, and the parent key of each key registered in the first of them (None: the root).
        self._full_types = [t for t, s in enumerate(self.specs) if type(s) is FullAttentionSpec]
        self._tree_type = self._full_types[0] if self._swa_types else -1
        self._node_types = self._full_types + self._swa_types   # the types a radix node's KV spans
        self._parent: dict = {}
        self._kids: dict = {}

    # Switches for negative controls in tests (SGLang does both).
    phase2_frees_leaves = True      # SWARadixCache.evict phase 2: an SWA-evicted leaf loses its full KV
    phase2_tombstone_walk = True    # _iteratively_delete_tombstone_leaf after a leaf's deletion
    # The unrolled eviction (_evict_nodes) when nothing is logged, and the unified arena's evicting
    # allocation without a call per page (UnifiedArenaPool._alloc_evicting); off, page by page
    # through the methods they unroll (tests compare the two).
    unrolled = True

    def free(self, request) -> None:
        super().free(request)
        if self._tree_type >= 0:
            self._maybe_compact_tree()

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

    # -- SWARadixCache.evict: the radix tree's two eviction phases at page level -------------------
    # A page's *node* is its key (the hash of the prefix it ends); its parent the key one page
    # shorter. A cached full page is a *leaf* when no page of a full type (cached or held: the
    # index holds both) extends its prefix; an SWA-less key (no SWA type has it in its index) is a
    # *tombstone*. Parent links are recorded as pages are registered (``_cacheable``), as a pure
    # function of the key, so an undone allocation needs no journal for them.
    def _cacheable(self, rs, t, j):
        """Every page may be cached (the default); for the first full type also records the page's
        parent key (``SWARadixCache`` nodes hang off their prefix: ``TreeNode.parent``)."""
        if t == self._tree_type:
            tpp = self.types[t].tokens_per_page
            key = rs.hasher.hash_at((j + 1) * tpp)
            if key is not None and key not in self._parent:
                parent = rs.hasher.hash_at(j * tpp) if j else None
                self._parent[key] = parent
                self._kids.setdefault(parent, []).append(key)
        return True

    def _cacheable_run(self, rs, t, pages, lo, hi, hs, k) -> None:
        """:meth:`_cacheable` of the held pages ``lo .. hi-1`` at once (keys ``hs[(j + 1) * k - 1]``,
        each one's parent the key one page shorter): the same links, recorded in the same order. A
        1-token page makes a long prompt ~100k registrations per type (issue 20)."""
        if t != self._tree_type or lo >= hi:
            return
        keys = hs[(lo + 1) * k - 1:hi * k:k]
        parents = [hs[lo * k - 1] if lo else None, *keys[:-1]]
        held = list(map(pages.__contains__, range(lo, hi)))
        if not all(held):
            keys, parents = list(compress(keys, held)), list(compress(parents, held))
        if not keys:
            return
        parent_of, kids = self._parent, self._kids
        n0 = len(parent_of)
        if parent_of.keys().isdisjoint(keys):
            parent_of.update(zip(keys, parents))
            if len(parent_of) - n0 == len(keys) and kids.keys().isdisjoint(parents[1:]) \
                    and parents[0] not in keys:
                # Every key new and once (so the parents after the first are distinct keys with
                # no children yet): one list per parent.
                kids.setdefault(parents[0], []).append(keys[0])
                kids.update(zip(parents[1:], map(list, zip(keys[1:]))))
                return
            for key in keys:  # undone (every one was new), then key by key
                parent_of.pop(key, None)
        for key, parent in zip(keys, parents):
            if key not in parent_of:
                parent_of[key] = parent
                kids.setdefault(parent, []).append(key)

    def _is_leaf(self, key) -> bool:
        """No full page, cached or held, extends ``key``'s prefix (``len(node.children) == 0``)."""
        kids = self._kids.get(key)
        if kids:
            for f in self._full_types:  # a loop, not all(<genexpr>): asked once per evicted page
                if not self.index[f].keys().isdisjoint(kids):
                    return False
        return True

    def _in_pool_cache(self, t: int, sid: int) -> bool:
        """Page ``sid`` is still in its pool's cache (a batch eviction takes pages out of the pool
        before the manager hears of them one by one)."""
        pools = getattr(self.pool, "pools", None)
        ev = pools[t].evictor if pools is not None else self.pool.evictor
        return ev is not None and ev.contains(t, sid)

    def _free_node(self, key) -> bool:
        """Free the node of ``key``: every full type's cached, unheld page and every SWA type's
        cached, unheld page of that key leave the pools and the index. True when no full page of
        the key is left (a held one stays: ``full_lock_ref > 0``)."""
        for t in self._node_types:
            sid = self.index[t].get(key)
            if sid is not None and not self.ref[t].get(sid, 0) and self._in_pool_cache(t, sid):
                self.pool.from_cached(t, sid)
                self.pool.free(t, sid)
                super()._on_evict(t, sid)
        return not any(key in self.index[f] for f in self._full_types)

    def _delete_tombstone_leaves(self, key) -> None:
        """``_iteratively_delete_tombstone_leaf``: after ``key``'s node is gone, delete its parent
        while that is a tombstone (no SWA page indexed), unheld and now a leaf, and so on up (a
        loop, not a recursion: a long prompt's tombstoned chain is thousands of pages)."""
        if not self.phase2_tombstone_walk:
            return
        parent = self._parent.get(key)
        swa_index = [self.index[u] for u in self._swa_types]
        while parent is not None and self._is_leaf(parent):
            for idx in swa_index:
                if parent in idx:
                    return  # not a tombstone
            if not self._free_node(parent):
                return
            parent = self._parent.get(parent)

    def _on_evict_many(self, pages) -> None:
        """:meth:`_on_evict` of every ``(t, sid)`` in order (a partition evicting a batch)."""
        if self._j is None and self._unrolled_here():
            self._evict_nodes(pages)
            return
        for t, sid in pages:
            self._on_evict(t, sid)

    def _unrolled_here(self) -> bool:
        """Whether :meth:`_evict_nodes` is this manager's eviction: switched on, no block copies,
        and none of the methods it unrolls overridden (a subclass's override is called instead)."""
        cls = type(self)
        ok = _UNROLLED_CLASSES.get(cls)
        if ok is None:
            ok = all(getattr(cls, name) is getattr(SglangPools, name) for name in
                     ("_on_evict", "_free_node", "_is_leaf", "_in_pool_cache", "_delete_tombstone_leaves"))
            _UNROLLED_CLASSES[cls] = ok
        return ok and self.unrolled and not self.keep_block_copies

    def _evict_context(self) -> tuple:
        """What :meth:`_evict_nodes` reads besides the tree's links, built once (the index dicts and
        the pools never change identity): the node types, the full and SWA types as sets, their
        indexes' key views, per SWA type the other SWA types' (index, ref) pairs, and per node
        type the pool that holds its pages (the partition, for PartitionedPool) with its
        ``contains`` test."""
        ctx = self.__dict__.get("_evict_ctx")
        if ctx is None:
            index, ref, swa = self.index, self.ref, self._swa_types
            pools = getattr(self.pool, "pools", None)
            ops = {}
            for u in self._node_types:
                p = pools[u] if pools is not None else self.pool
                ev = p.evictor
                ops[u] = (ev.contains if ev is not None else (lambda t, sid: False), p)
            full_idx, swa_idx = [index[f] for f in self._full_types], [index[u] for u in swa]
            # Key views are live. A model has one full and one SWA type as a rule: their one view.
            full_keys, swa_keys = [i.keys() for i in full_idx], [i.keys() for i in swa_idx]
            fk = full_keys[0] if len(full_keys) == 1 else None
            sk = swa_keys[0] if len(swa_keys) == 1 else None
            # Per SWA type, the other SWA types' (index, ref) pairs: phase 2 asks whether one of
            # them holds the node's page (an evicted page's own key has just left its index).
            others = {t: [(index[u], ref[u]) for u in swa if u != t] for t in swa}
            ctx = (self._node_types, set(self._full_types), set(swa), full_keys, swa_keys, fk, sk, others, ops)
            self._evict_ctx = ctx
        return ctx

    def _evict_nodes(self, pages) -> None:
        """:meth:`_on_evict` of every ``(t, sid)`` in order with nothing logged and no block copies:
        the same steps (:meth:`_free_node`, :meth:`_is_leaf`, :meth:`_delete_tombstone_leaves` and
        the base hook's index drop for every page they free), unrolled into one loop over local
        names, so the same dict and pool operations in the same order. With 1-token pages a long
        prompt's eviction is ~100k of these per pool (issue 20)."""
        page_key, index, ref, swa = self.page_key, self.index, self.ref, self._swa_types
        node_types, full_set, swa_set, full_keys, swa_keys, fk, sk, others_held, ops = self._evict_context()
        phase2, walk = self.phase2_frees_leaves, self.phase2_tombstone_walk
        parent_of, kids_of = self._parent, self._kids
        # The pages a node's freeing takes out of their pools, per type in order, handed over at
        # the end (drop_cached_many: from_cached + free each): nothing below reads those pools'
        # state but ``contains``, asked only of a page the index still names -- and a freed page
        # leaves the index at once -- so deferring changes no answer and no final state.
        drops: dict[int, list[int]] = {}
        n_ev = 0
        for t, sid in pages:
            # PrefixCacheMixin._on_evict: the page's key leaves; its index entry if it owned it.
            n_ev += 1
            key = page_key[t].pop(sid, None)
            if key is None:
                continue
            idx = index[t]
            if idx.get(key) != sid:
                continue
            del idx[key]
            if not swa:
                continue
            if t not in full_set:
                if t not in swa_set or not phase2:
                    continue
                # Phase 2: another SWA type's page of the node held (swa_lock_ref > 0), or not a leaf.
                # (This type's own entry for the key was just deleted: only the others can hold one.)
                held = others_held[t]
                if held and any(r.get(i.get(key), 0) for i, r in held):
                    continue
                kids = kids_of.get(key)
                if kids and not (fk.isdisjoint(kids) if fk is not None else
                                 all(k.isdisjoint(kids) for k in full_keys)):
                    continue
            node = key
            while True:
                # _free_node(node): each node type's cached, unheld page of the key leaves the pool
                # and the index.
                for u in node_types:
                    s2 = index[u].get(node)
                    if s2 is not None and not ref[u].get(s2, 0) and ops[u][0](u, s2):
                        if u in drops:
                            drops[u].append(s2)
                        else:
                            drops[u] = [s2]
                        n_ev += 1
                        k2 = page_key[u].pop(s2, None)
                        if k2 is not None and index[u].get(k2) == s2:
                            del index[u][k2]
                if not walk or (node in fk if fk is not None else any(node in k for k in full_keys)):
                    break  # a full page of the node is left (held), or no walk
                # _delete_tombstone_leaves: up while the parent is an unheld tombstone leaf.
                node = parent_of.get(node)
                if node is None:
                    break
                kids = kids_of.get(node)
                if kids and not (fk.isdisjoint(kids) if fk is not None else
                                 all(k.isdisjoint(kids) for k in full_keys)):
                    break
                if node in sk if sk is not None else any(node in k for k in swa_keys):
                    break
        for u, sids in drops.items():
            ops[u][1].drop_cached_many(u, sids)
        self._evictions += n_ev

    def _on_evict(self, t: int, sid: int) -> None:
        """``swa_radix_cache.py`` ``SWARadixCache.evict``, at page level:

        - phase 1 (a full-attention page evicted by the full LRU): the node's KV is freed in the
          full *and* the SWA pool -- the cached SWA page of the same key leaves the SWA pool -- and
          ``_iteratively_delete_tombstone_leaf`` then deletes the parent when it is a tombstone,
          unheld and now a leaf (freeing its full KV), and so on up;
        - phase 2 (an SWA page evicted by the SWA LRU): a *leaf* (no child, no full holder) is
          deleted -- its full page is freed too, then the same walk up the tombstoned parents; an
          *inner* page (or one whose full page a request holds: the ``full_lock_ref > 0`` branch)
          only loses its SWA KV and becomes a tombstone, its full page stays cached.
        Only a page that owned its key's index entry counts (an old copy is no node). Without a
        journal or block copies: :meth:`_evict_nodes`, the same steps unrolled."""
        if self._j is None and self._unrolled_here():
            self._evict_nodes(((t, sid),))
            return
        key = self.page_key[t].get(sid)
        owned = key is not None and self.index[t].get(key) == sid
        super()._on_evict(t, sid)
        if not owned or not self._swa_types:
            return
        if t in self._full_types:
            if self._free_node(key):
                self._delete_tombstone_leaves(key)
        elif t in self._swa_types and self.phase2_frees_leaves:
            if any(self.ref[u].get(self.index[u].get(key), 0) for u in self._swa_types):
                return  # another SWA type's page of the node is held (swa_lock_ref > 0)
            if self._is_leaf(key) and self._free_node(key):
                self._delete_tombstone_leaves(key)

    def _maybe_compact_tree(self) -> None:
        """Forget parent links of keys that are neither indexed nor held by a running request (they
        re-enter only through a registration, which records them again); amortised O(1)."""
        if self._j is not None or len(self._parent) <= 2 * len(self.index[self._tree_type]) + 4096:
            return
        t = self._tree_type
        keep = set(self.index[t])
        tpp = self.types[t].tokens_per_page
        for rs in self.reqs.values():
            if rs.hasher is not None and rs.reg[t]:
                k = tpp // rs.hasher.block
                keep.update(rs.hasher.chain(rs.reg[t] * tpp)[k - 1::k])
        self._parent = {c: p for c, p in self._parent.items() if c in keep}
        self._kids = {}
        for c, p in self._parent.items():
            self._kids.setdefault(p, []).append(c)

    # -- MambaRadixCache (no_buffer): one state at the end of the cached prompt -------------------
    def checkpoint_positions(self, rs, t, prev, T):
        # The radix tree keys whole pages (page_size, 1 by default): a prompt end inside a page
        # has no node to hang the state on, so nothing is cached there.
        L = rs.prompt_len
        return (L,) if prev < L <= T and L % self.hash_block == 0 else ()

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
