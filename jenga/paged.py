"""The paged memory manager every page-based system shares (Jenga and the paged baselines).

A system is this manager plus three choices: the *storage types* (which pages it keeps for which
layers: one per layer type for Jenga, one merged type for PagedAttention, equal-layer groups for
today's vLLM), the *pool* (LCM two-level, flat, or partitioned; ``pages.py``) and the *accounting
specs* (the model's real layer types, which define the bytes some layer will still read). The
facade methods, prefix caching and the usage breakdown are written once, here.

Costs: ``allocate`` touches a page only when the request crosses a page boundary or a window edge
(amortised O(1) per page); ``usage`` is O(#types) from counters kept incrementally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jenga.hashing import BlockHasher
from jenga.interface import MemoryManager, MemoryUsage, RequestView
from jenga.pages import FlatPagePool, LcmPagePool, PartitionedPool
from jenga.policies import ImageInfo, Policy, cdiv, policy_for
from jenga.spec import CrossAttentionSpec, LayerTypeSpec, SpecError, page_geometry

Pool = LcmPagePool | FlatPagePool | PartitionedPool


@dataclass(frozen=True)
class StorageType:
    """What one page table stores: ``policy`` decides which logical pages are held; a page holds
    ``tokens_per_page`` tokens of ``data_bytes_per_token`` real bytes (or one state of
    ``state_bytes``) and takes ``page_bytes`` of the pool (more when padded)."""

    name: str
    policy: Policy
    tokens_per_page: int
    page_bytes: int
    data_bytes_per_token: int = 0
    state_bytes: int = 0


def image_infos(request: RequestView, images_in_prompt: bool) -> list[ImageInfo]:
    """The allocator's view of a request's images, with a deterministic random priority each
    (the set_prefix_length hook of image types: whole images are evicted together)."""
    out = []
    for im in request.images:
        prio = (hash((im.image_id, 0x9E3779B9)) & 0xFFFFF) + 1
        c1 = im.offset + im.num_tokens if images_in_prompt else im.offset + 1
        out.append(ImageInfo(im.image_id, im.num_tokens, im.offset, c1, prio))
    return out


class ReqState:
    """Everything the manager keeps about one request that holds memory."""

    __slots__ = (
        "T",
        "_bases",
        "contrib",
        "hasher",
        "held",
        "images",
        "num_image_tokens",
        "pages",
        "prev",
        "prompt_len",
        "reg",
        "rid",
        "transients",
    )

    def __init__(self, rid, prompt_len, images, ntypes, hasher):
        self.rid = rid
        self.prompt_len = prompt_len
        self.images = images
        self.num_image_tokens = sum(im.num_tokens for im in images)
        self.prev = 0
        self.T = 0
        self.pages: list[dict[int, int]] = [{} for _ in range(ntypes)]
        self.held: list[list[tuple[int, int]]] = [[] for _ in range(ntypes)]
        self.reg = [0] * ntypes
        self.transients: list[tuple] = []  # (t, sid, key, plen, data_bytes)
        self.hasher = hasher
        self.contrib = (0, 0)  # (needed bytes, held data bytes)
        self._bases: dict[int, list] = {}

    def images_with_base(self, policy, tpp: int) -> list:
        out = self._bases.get(tpp)
        if out is None:
            out, base = [], 0
            for im in self.images:
                out.append((im, base))
                base += cdiv(im.num_tokens, tpp)
            self._bases[tpp] = out
        return out

    def image_of_page(self, policy, tpp: int, page: int) -> ImageInfo:
        return self.image_and_local(tpp, page)[0]

    def image_and_local(self, tpp: int, page: int) -> tuple[ImageInfo, int]:
        for im, base in self.images_with_base(None, tpp):
            if base <= page < base + cdiv(im.num_tokens, tpp):
                return im, page - base
        raise KeyError(page)


def _subtract(new: list[tuple[int, int]], old: list[tuple[int, int]]):
    """Pages in the intervals ``new`` and not in ``old``."""
    for a, b in new:
        pieces = [(a, b)]
        for c, d in old:
            nxt = []
            for x, y in pieces:
                if d <= x or c >= y:
                    nxt.append((x, y))
                else:
                    if x < c:
                        nxt.append((x, c))
                    if d < y:
                        nxt.append((d, y))
            pieces = nxt
        for x, y in pieces:
            yield from range(x, y)


class PagedManager(MemoryManager):
    """Facade implementation over a page pool; subclasses supply storage types and the pool."""

    system_name = "paged"
    option_names: tuple[str, ...] = ()

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16,
                 enable_prefix_cache: bool = False, **options):
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            raise SpecError(f"unknown option(s) {unknown} for system {self.system_name!r}; "
                            f"allowed: {list(self.option_names)}")
        self.specs = tuple(specs)
        geo = page_geometry(self.specs, tokens_per_page)  # validates specs and tokens_per_page
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool) or capacity_bytes <= 0:
            raise SpecError(f"capacity_bytes must be a positive integer, got {capacity_bytes!r}")
        self.geometry = geo
        self.capacity_bytes = capacity_bytes
        self.tokens_per_page = tokens_per_page
        self.enable_prefix_cache = bool(enable_prefix_cache)
        self.images_in_prompt = not any(isinstance(s, CrossAttentionSpec) for s in self.specs)
        self.types: list[StorageType] = self._storage_types(**options)
        self.acct: list[Policy] = [policy_for(s) for s in self._accounted_specs()]
        self.pool: Pool = self._make_pool(**options)
        self.pool.on_evict = self._on_evict
        n = len(self.types)
        self.ref: list[dict[int, int]] = [{} for _ in range(n)]
        self.page_key: list[dict[int, object]] = [{} for _ in range(n)]
        self.index: list[dict[object, int]] = [{} for _ in range(n)]
        self.reqs: dict[object, ReqState] = {}
        self.pending: dict[object, tuple[int, BlockHasher]] = {}
        self.now = 0
        self.tot_needed = 0
        self.tot_held = 0
        self.dup_bytes = 0  # held data bytes counted twice (pages shared by running requests)
        self.shared_data: dict[tuple[int, int], int] = {}
        self.extra_counts = {"hit_lost_tokens": 0, "retry_tight": 0}
        token_tpps = [s.tokens_per_page for s in self.types if not s.policy.image_based
                      and not s.policy.state_based]
        self.hash_block = math.gcd(*token_tpps) if token_tpps else tokens_per_page
        self.align = math.lcm(*token_tpps) if token_tpps else 1

    # -- hooks for subclasses -----------------------------------------------------------------------
    def _storage_types(self, **options) -> list[StorageType]:
        """One storage type per layer type, small page exactly the spec's (Jenga)."""
        out = []
        for s in self.specs:
            pb = s.small_page_bytes(self.tokens_per_page)
            out.append(StorageType(s.name, policy_for(s), self.tokens_per_page, pb, s.bytes_per_token,
                                   getattr(s, "state_bytes", 0)))
        return out

    def _accounted_specs(self) -> list[LayerTypeSpec]:
        return list(self.specs)

    def _make_pool(self, **options) -> Pool:
        raise TypeError(f"{type(self).__name__} must define _make_pool")

    # -- prefix lookup ------------------------------------------------------------------------------
    def _hasher(self, request) -> BlockHasher:
        return BlockHasher(request.prompt_token_ids, request.output_token_ids, request.images, self.hash_block,
                           self.images_in_prompt)

    def lookup_prefix(self, request: RequestView) -> int:
        if not self.enable_prefix_cache or request.request_id in self.reqs:
            return 0
        hasher = self._hasher(request)
        images = image_infos(request, self.images_in_prompt)
        L = self._longest_hit(hasher, images, len(request.prompt_token_ids) - 1)
        self.pending[request.request_id] = (L, hasher)
        return L

    def _cached_flags(self, t: int, hasher: BlockHasher, npages: int, stop_at_miss: bool) -> list[int]:
        st, idx = self.types[t], self.index[t]
        flags = []
        for j in range(npages):
            h = hasher.hash_at((j + 1) * st.tokens_per_page)
            ok = h is not None and h in idx
            if not ok and stop_at_miss:
                break
            flags.append(1 if ok else 0)
        return flags

    def _longest_hit(self, hasher: BlockHasher, images: list[ImageInfo], upper: int) -> int:
        """The longest prefix valid for every type: each type's ``get_possible_prefix`` answered as
        "largest valid length <= L", iterated to a fixed point (each step only lowers L)."""
        if upper <= 0:
            return 0
        upper -= upper % self.align
        fns = []
        for t, st in enumerate(self.types):
            pol = st.policy
            if not pol.constrains_prefix:
                continue
            if pol.image_based:
                bound = upper
                for im in images:
                    if im.c0 < bound and not self._image_cached(t, im):
                        bound = im.c0
                fns.append(lambda L, b=bound: min(L, b))
            elif pol.state_based:
                fns.append(lambda L, t=t: self._mamba_valid(t, hasher, L))
            else:
                full = type(pol).__name__ == "FullPolicy"
                flags = self._cached_flags(t, hasher, upper // st.tokens_per_page, stop_at_miss=full)
                if full:
                    upper = min(upper, len(flags) * st.tokens_per_page)
                    upper -= upper % self.align
                    continue
                prefix = [0]
                for f in flags:
                    prefix.append(prefix[-1] + f)
                count = (lambda a, b, p=prefix: p[min(b, len(p) - 1)] - p[min(a, len(p) - 1)])
                fns.append(lambda L, pol=pol, c=count, tpp=st.tokens_per_page:
                           pol.longest_valid(c, L, self.align, tpp))
        L = upper
        while True:
            L0 = L
            for fn in fns:
                L = fn(L)
            if L == L0:
                return L

    def _image_cached(self, t: int, im: ImageInfo) -> bool:
        tpp = self.types[t].tokens_per_page
        idx = self.index[t]
        return all((im.image_id, j) in idx for j in range(cdiv(im.num_tokens, tpp)))

    def _mamba_checkpoint(self, t: int, b: int) -> bool:
        N = self.types[t].policy.spec.checkpoint_interval
        return b > 0 and b % N == 0 and b % self.hash_block == 0

    def _mamba_valid(self, t: int, hasher: BlockHasher, L: int) -> int:
        st = self.types[t]
        if st.policy.pages_per_state != 1:
            return 0
        N = st.policy.spec.checkpoint_interval
        step = math.lcm(N, self.hash_block)
        b = L - L % step
        while b > 0:
            if hasher.hash_at(b) in self.index[t]:
                return b
            b -= step
        return 0

    # -- page references ----------------------------------------------------------------------------
    def _on_evict(self, t: int, sid: int) -> None:
        key = self.page_key[t].pop(sid, None)
        if key is not None and self.index[t].get(key) == sid:
            del self.index[t][key]

    def _pin(self, t: int, sid: int, data: int, undo: list) -> None:
        r = self.ref[t].get(sid, 0)
        if r == 0:
            undo.append((t, sid, self.pool.from_cached(t, sid), data))
        else:
            # One data size per shared page, whoever pins or releases it (keeps dup_bytes exact).
            data = self.shared_data.setdefault((t, sid), data)
            self.dup_bytes += data
            undo.append((t, sid, None, data))
        self.ref[t][sid] = r + 1

    def _unref(self, t: int, sid: int, ts: int, plen: int, key, data: int) -> None:
        r = self.ref[t][sid] - 1
        if r > 0:
            self.ref[t][sid] = r
            self._undup(t, sid, r)
            return
        del self.ref[t][sid]
        if self.enable_prefix_cache:
            known = self.page_key[t].get(sid)
            key = known if known is not None else key
            if key is not None:
                owner = self.index[t].setdefault(key, sid)
                if owner == sid:
                    self.page_key[t][sid] = key
                    self.pool.to_cached(t, sid, ts, plen)
                    return
        self.page_key[t].pop(sid, None)
        self.pool.free(t, sid)

    def _undup(self, t: int, sid: int, remaining: int) -> None:
        data = self.shared_data[(t, sid)]
        self.dup_bytes -= data
        if remaining == 1:
            del self.shared_data[(t, sid)]

    def _register(self, t: int, sid: int, key) -> None:
        if key is not None and sid not in self.page_key[t] and key not in self.index[t]:
            self.index[t][key] = sid
            self.page_key[t][sid] = key

    def _page_key(self, rs: ReqState, t: int, j: int, computed: int):
        """Cache key of logical page j once ``computed`` tokens are computed, None if not full."""
        st = self.types[t]
        if st.policy.image_based:
            im, local = rs.image_and_local(st.tokens_per_page, j)
            return (im.image_id, local)
        if st.policy.state_based:
            return None
        end = (j + 1) * st.tokens_per_page
        return rs.hasher.hash_at(end) if end <= computed else None

    def _page_data(self, rs: ReqState, t: int, j: int, T: int) -> int:
        st = self.types[t]
        if st.policy.state_based:
            return st.state_bytes
        return st.policy.tokens_in(rs, j, j + 1, T, st.tokens_per_page) * st.data_bytes_per_token

    # -- the facade ---------------------------------------------------------------------------------
    def num_computed_tokens(self, request: RequestView) -> int:
        rs = self.reqs.get(request.request_id)
        return 0 if rs is None else rs.T

    def allocate(self, request: RequestView, num_new_tokens: int) -> bool:
        if not isinstance(num_new_tokens, int) or isinstance(num_new_tokens, bool) or num_new_tokens < 0:
            raise SpecError(f"num_new_tokens must be an integer >= 0, got {num_new_tokens!r}")
        rid = request.request_id
        rs = self.reqs.get(rid)
        self.now += 1
        if rs is None:
            hit, hasher = self.pending.get(rid, (0, None))
            hasher = hasher or (self._hasher(request) if self.enable_prefix_cache else None)
            rs = ReqState(rid, len(request.prompt_token_ids), image_infos(request, self.images_in_prompt),
                          len(self.types), hasher)
            if hit:
                valid = self._longest_hit(hasher, rs.images, hit)
                self.extra_counts["hit_lost_tokens"] += hit - valid
                rs.prev = valid
            rs.T = hit
            return self._grow(rs, rs.prev, hit + num_new_tokens, new=True)
        if num_new_tokens == 0:
            return True
        self._settle(rs)
        return self._grow(rs, rs.T, rs.T + num_new_tokens, new=False)

    def _settle(self, rs: ReqState) -> None:
        """Start of a step: tokens allocated so far are computed. Release the transient pages of
        the last step, register newly full pages in the prefix cache, and free (or demote to the
        cache, stale) the pages no layer reads any more."""
        computed = rs.T
        self._release_transients(rs)
        for t, st in enumerate(self.types):
            pol, tpp, pages = st.policy, st.tokens_per_page, rs.pages[t]
            if self.enable_prefix_cache and not pol.image_based and not pol.state_based:
                for j in range(rs.reg[t], computed // tpp):
                    sid = pages.get(j)
                    if sid is not None:
                        self._register(t, sid, rs.hasher.hash_at((j + 1) * tpp))
                rs.reg[t] = max(rs.reg[t], computed // tpp)
            new = pol.held_intervals(rs, computed, rs.T, tpp)
            if new != rs.held[t]:
                for j in _subtract(rs.held[t], new):
                    sid = pages.pop(j)
                    key = self._page_key(rs, t, j, computed) if self.enable_prefix_cache else None
                    self._unref(t, sid, pol.update_last_access(self.now, False),
                                pol.set_prefix_length(rs, j, tpp), key, self._page_data(rs, t, j, rs.T))
                rs.held[t] = new
        rs.prev = computed
        self._account(rs)

    def _grow(self, rs: ReqState, prev: int, T: int, new: bool) -> bool:
        plans = []
        demand: dict[int, int] = {}
        for t, st in enumerate(self.types):
            new_iv = st.policy.held_intervals(rs, prev, T, st.tokens_per_page)
            fresh = list(_subtract(new_iv, rs.held[t])) if new_iv != rs.held[t] else []
            plans.append((new_iv, fresh))
            if fresh:
                demand[t] = len(fresh)
        if not new and not demand:
            for t, (new_iv, _) in enumerate(plans):
                rs.held[t] = new_iv
            rs.T = T
            self._account(rs)
            return True
        hits = self._plan_hits(rs, plans, prev) if new and self.enable_prefix_cache else {}
        for t, js in hits.items():
            demand[t] -= len(js)
        if not self.pool.can_fit({t: n for t, n in demand.items() if n > 0}):
            return False
        for tight in (False, True):
            undo_pins: list = []
            fresh_done: list = []
            if self._try_grow(rs, plans, hits, T, tight, undo_pins, fresh_done):
                break
            self._rollback(rs, hits, undo_pins, fresh_done)
            if tight:
                return False
            self.extra_counts["retry_tight"] += 1
        for t, (new_iv, _) in enumerate(plans):
            rs.held[t] = new_iv
        rs.prev, rs.T = prev, T
        if new:
            self.reqs[rs.rid] = rs
            self.pending.pop(rs.rid, None)
            if prev and self.enable_prefix_cache:
                self._pin_mamba_checkpoints(rs, prev)
        if self.enable_prefix_cache:
            self._snapshot_mamba(rs, prev, T)
        self._account(rs)
        return True

    def _plan_hits(self, rs: ReqState, plans, L: int) -> dict[int, list[tuple[int, int]]]:
        """Cached pages a new request reuses: token pages inside its valid hit, whole images."""
        out: dict[int, list[tuple[int, int]]] = {}
        for t, st in enumerate(self.types):
            fresh, idx, pol, tpp = plans[t][1], self.index[t], st.policy, st.tokens_per_page
            got = []
            if pol.image_based:
                for im, base in rs.images_with_base(pol, tpp):
                    if self._image_cached(t, im):
                        n = cdiv(im.num_tokens, tpp)
                        got += [(j, idx[(im.image_id, j - base)]) for j in fresh if base <= j < base + n]
            elif not pol.state_based:
                for j in fresh:
                    if (j + 1) * tpp > L:
                        break
                    got.append((j, idx[rs.hasher.hash_at((j + 1) * tpp)]))
            if got:
                out[t] = got
        return out

    def _try_grow(self, rs, plans, hits, T, tight, undo_pins, fresh_done) -> bool:
        for t, js in hits.items():
            for j, sid in js:
                self._pin(t, sid, self._page_data(rs, t, j, T), undo_pins)
                rs.pages[t][j] = sid
        for t, (_, fresh) in enumerate(plans):
            pages = rs.pages[t]
            for j in fresh:
                if j in pages:
                    continue
                sid = self.pool.alloc(t, rs.rid, tight)
                if sid is None:
                    return False
                self.ref[t][sid] = 1
                pages[j] = sid
                fresh_done.append((t, j, sid))
        for t, j, sid in fresh_done:
            if self.enable_prefix_cache and self.types[t].policy.image_based:
                self._register(t, sid, self._page_key(rs, t, j, T))
        return True

    def _rollback(self, rs, hits, undo_pins, fresh_done) -> None:
        """Undo a failed attempt: fresh pages back to the pool, hit pages back to the cache."""
        for t, j, sid in fresh_done:
            del self.ref[t][sid]
            del rs.pages[t][j]
            self.pool.free(t, sid)
        for t, sid, key, data in reversed(undo_pins):
            if key is None:
                self.ref[t][sid] -= 1
                self._undup(t, sid, self.ref[t][sid])
            else:
                del self.ref[t][sid]
                self.pool.to_cached(t, sid, *key)
        for t, js in hits.items():
            for j, _ in js:
                rs.pages[t].pop(j, None)

    # -- Mamba checkpoints --------------------------------------------------------------------------
    def _pin_mamba_checkpoints(self, rs: ReqState, L: int) -> None:
        """A hit at L copies the checkpointed state: pin the checkpoint for this step (touching it)."""
        for t, st in enumerate(self.types):
            if st.policy.state_based and st.policy.pages_per_state == 1:
                sid = self.index[t].get(rs.hasher.hash_at(L))
                if sid is not None:
                    self._pin(t, sid, st.state_bytes, [])
                    rs.transients.append((t, sid, rs.hasher.hash_at(L), L, st.state_bytes))

    def _snapshot_mamba(self, rs: ReqState, prev: int, T: int) -> None:
        """Best effort: one state page per checkpoint boundary of the prompt crossed this step;
        it joins the cache at the next step (never makes the allocation fail)."""
        for t, st in enumerate(self.types):
            if not st.policy.state_based or st.policy.pages_per_state != 1:
                continue
            N = math.lcm(st.policy.spec.checkpoint_interval, self.hash_block)
            for b in range((prev // N + 1) * N, min(T, rs.prompt_len) + 1, N):
                if not self.pool.can_fit({t: 1}):
                    return
                sid = self.pool.alloc(t, rs.rid)
                if sid is None:
                    return
                self.ref[t][sid] = 1
                rs.transients.append((t, sid, None, b, st.state_bytes))

    def _release_transients(self, rs: ReqState) -> None:
        for t, sid, key, plen, data in rs.transients:
            key = key if key is not None else rs.hasher.hash_at(plen)
            self._unref(t, sid, self.now, plen, key, data)
        rs.transients = []

    # -- free and usage -----------------------------------------------------------------------------
    def free(self, request: RequestView) -> None:
        rid = request.request_id
        self.pending.pop(rid, None)
        rs = self.reqs.pop(rid, None)
        if rs is None:
            return
        self.now += 1
        self._release_transients(rs)
        for t, st in enumerate(self.types):
            pol, tpp = st.policy, st.tokens_per_page
            ts = pol.update_last_access(self.now, True)
            for j, sid in rs.pages[t].items():
                key = self._page_key(rs, t, j, rs.T) if self.enable_prefix_cache else None
                self._unref(t, sid, ts, pol.set_prefix_length(rs, j, tpp), key,
                            self._page_data(rs, t, j, rs.T))
        self.pool.release_owner(rid)
        self.tot_needed -= rs.contrib[0]
        self.tot_held -= rs.contrib[1]

    def _needed_of(self, rs: ReqState) -> int:
        return sum(p.needed_bytes(rs, rs.prev, rs.T) for p in self.acct)

    def _account(self, rs: ReqState) -> None:
        held = 0
        for t, st in enumerate(self.types):
            if st.policy.state_based:
                held += st.state_bytes if rs.held[t] else 0
            else:
                tpp = st.tokens_per_page
                held += sum(st.policy.tokens_in(rs, a, b, rs.T, tpp) for a, b in rs.held[t]) \
                    * st.data_bytes_per_token
        held += sum(x[4] for x in rs.transients)
        needed = self._needed_of(rs)
        self.tot_needed += needed - rs.contrib[0]
        self.tot_held += held - rs.contrib[1]
        rs.contrib = (needed, held)

    def usage(self) -> MemoryUsage:
        pool = self.pool
        used, cached = pool.used, pool.cached
        alloc = sum(n * st.page_bytes for n, st in zip(used, self.types))
        cached_b = sum(n * st.page_bytes for n, st in zip(cached, self.types))
        held = self.tot_held - self.dup_bytes
        needed = max(0, min(self.tot_needed - self.dup_bytes, held))
        free = self.capacity_bytes - alloc - cached_b
        return MemoryUsage(
            capacity_bytes=self.capacity_bytes, needed_bytes=needed, unneeded_bytes=held - needed,
            fragmentation_bytes=alloc - held, cached_bytes=cached_b, free_bytes=free,
            free_stranded_bytes=min(free, pool.stranded_bytes()),
            large_pages_total=pool.num_large, large_pages_used=pool.large_pages_used,
            path_counts={**pool.path_counts, **self.extra_counts},
            per_type_allocated_bytes={st.name: n * st.page_bytes for n, st in zip(used, self.types)},
        )
