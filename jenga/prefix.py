"""Prefix caching for the paged managers: content-hashed pages, per-type hit search, references.

Every storage type has its own cache index (key -> page): token pages are keyed by the chained hash
of the prefix they end, image pages by ``(image_id, page within the image)``, Mamba checkpoints by
the hash of the prefix they summarise. A hit is the longest prefix valid for every type: each
type's ``get_possible_prefix`` is asked for its largest valid length not above the current
candidate, until no type lowers it (a fixed point). Pages of running requests are registered as
soon as they are full and computed, so concurrent requests share them (reference counts).

Two rules for a page whose content another page already holds under the same key (a request that
recomputed a prefix it could not hit), chosen per manager by ``keep_block_copies``:

- off (the vLLM v0 forks): one page per key. v0 de-duplicates: a newly full block whose hash is
  already cached is dropped for the cached one (``vllm/core/block/prefix_caching_block.py``
  ``PrefixCachingBlockAllocator.promote_to_immutable_block``, ``_cached_blocks: Dict[PrefixHash,
  BlockId]``, in vllm-v0-baseline and vllm-v0-jenga). We keep the live copy instead and hand it
  the key when the owner is cached (:meth:`PrefixCacheMixin._register`).
- on (D4, every vLLM v1 block pool): every copy stays under its hash, the oldest found first
  (:meth:`PrefixCacheMixin._register_copy`, ``_unref``, ``_on_evict``; sources there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from itertools import accumulate, compress, islice, repeat
from operator import eq, itemgetter

from jenga.hashing import BlockHasher
from jenga.interface import RequestView
from jenga.policies import FullPolicy, ImageInfo, cdiv
from jenga.reqstate import ReqState, image_infos

_first, _second, _plen = itemgetter(0), itemgetter(1), itemgetter(3)


def cached_page_count(contains, hasher: BlockHasher, tpp: int, npages: int) -> Callable[[int, int], int]:
    """``count(a, b)``: how many of pages ``a .. b-1`` (of ``npages``; clamped to ``0 .. npages``)
    of one type a prompt has in the cache index -- the ``count`` a policy's ``longest_valid`` asks
    for. Each page is looked up once, when a query first reaches it, over the one contiguous span
    queried so far: a window type's search reads only the pages near the candidate lengths (a
    local chunk is 512 pages, the prompt ~10k), not every page of the prompt. Pages whose tokens
    are not known yet count as not cached. A query inside the span is two list reads (a sliding
    window's search asks thousands)."""
    # The chain as page_hashes extends it; page j's key is chain[(j + 1) * k - 1].
    chain, k, n = hasher.page_chain(tpp, npages)
    # The span is pages lo .. hi-1; cum[i]: cached pages among hi-1, hi-2, ..., hi-i. The search
    # moves down from the longest candidate, so the span grows at the list's end.
    lo = hi = 0
    cum = [0]

    def grow(a: int, b: int) -> None:
        nonlocal lo, hi, cum
        if lo == hi:
            lo = hi = b
        if a < lo:
            # Pages lo-1 down to a, or further: at least as many as the span holds already (a
            # search that walks down asks page by page; geometric steps keep that to a few grows
            # and at most twice the pages it asks for), and at least 64.
            a = max(0, min(a, lo - max(64, hi - lo)))
            stop = a * k - 1
            cum += islice(accumulate(map(contains, chain[lo * k - 1:stop if stop >= 0 else None:-k]),
                                     initial=cum[-1]), 1, None)
            lo = a
        if b > hi:
            # Pages b-1 down to hi (a query above the first one: not the search's order, so rare).
            top = list(accumulate(map(contains, chain[b * k - 1:(hi + 1) * k - 2:-k]), initial=0))
            cum = top + [c + top[-1] for c in cum[1:]]
            hi = b

    def count(a: int, b: int) -> int:
        if lo <= a <= b <= hi:
            return cum[hi - a] - cum[hi - b]
        a, b = min(max(a, 0), n), min(max(b, 0), n)
        if a == b:
            return 0
        # a > b: minus count(b, a), without count naming itself (a closure that refers to itself
        # is a reference cycle, one per admission left for the cyclic collector).
        lo_ab, hi_ab = min(a, b), max(a, b)
        grow(lo_ab, hi_ab)
        return (cum[hi - lo_ab] - cum[hi - hi_ab]) * (1 if a < b else -1)

    return count


class PrefixCacheMixin:
    """Lookup, pinning and release of cached pages (mixed into :class:`jenga.manager_base.PagedManager`)."""

    def _hasher(self, request) -> BlockHasher:
        return BlockHasher(request.prompt_token_ids, request.output_token_ids, request.images, self.hash_block,
                           self.images_in_prompt)

    def lookup_prefix(self, request: RequestView) -> int:
        if not self.enable_prefix_cache or request.request_id in self.reqs:
            return 0
        # A request waiting for memory is looked up every step: hash its prompt once.
        _, hasher = self.pending.get(request.request_id, (0, None))
        if hasher is None or hasher._out is not request.output_token_ids:
            hasher = self._hasher(request)
        images = image_infos(request, self.images_in_prompt)
        L = self._longest_hit(hasher, images, len(request.prompt_token_ids) - 1)
        self.pending[request.request_id] = (L, hasher)
        self._lookup_stamp[request.request_id] = self._evictions
        return L

    def _hit_at_admission(self, rid, hasher: BlockHasher, images: list[ImageInfo], hit: int) -> int:
        """The hit a request is admitted with: the longest prefix still valid up to the ``hit`` its
        lookup found. Only an eviction removes a cache entry, so when none happened since that
        lookup the answer is ``hit`` itself (the lookup's fixed point stays one: entries added since
        only make more lengths valid, and none above ``hit`` is asked for) and the search is not
        run again. A system with its own checkpoint rule always searches again."""
        stamp = self._lookup_stamp.pop(rid, None)
        if stamp == self._evictions and type(self).checkpoint_hit is PrefixCacheMixin.checkpoint_hit:
            return hit
        return self._longest_hit(hasher, images, hit)

    def _cached_prefix_pages(self, t: int, hasher: BlockHasher, npages: int) -> int:
        """How many of pages ``0 .. npages-1`` of type ``t``, from the first, end in a prefix the
        cache index holds (up to the first miss): galloping chunks of the page hashes, each looked
        up at C speed (``map`` of the index's ``get``) -- a 150k-token prompt is ~10k pages per
        type. The pages found are kept for _plan_hits (``_found``): the admission that follows
        the search pins them without looking each up again, unless the index changed since."""
        get = self.index[t].get
        chain, k, npages = hasher.page_chain(self.types[t].tokens_per_page, npages)
        n, step, found = 0, 64, []
        while n < npages:
            sids = list(map(get, chain[(n + 1) * k - 1:min(n + step, npages) * k:k]))
            miss = None in sids
            if miss:
                del sids[sids.index(None):]
            found += sids
            n += len(sids)
            if miss:
                break
            # Chunks double up to 512 pages: the chunk holding the first miss is looked up whole,
            # so a larger one would look up thousands of pages past it (a prompt's own suffix).
            step = min(2 * step, 512)
        self._found[t] = (hasher, self._evictions, self._owner_changes, found)
        return n

    def _longest_hit(self, hasher: BlockHasher, images: list[ImageInfo], upper: int) -> int:
        """The longest prefix valid for every type: each type's ``get_possible_prefix`` answered as
        "largest valid length <= L", iterated to a fixed point (each step only lowers L)."""
        if upper <= 0:
            return 0
        upper -= upper % self.align
        fns = []
        # Full-attention types first: their cached pages form a prefix, and the bound they set
        # caps every other type's answer (each only lowers L), so the other types read flags up
        # to that bound only -- the pages the hit can use, not the whole prompt.
        order = sorted(range(len(self.types)), key=lambda t: not isinstance(self.types[t].policy, FullPolicy))
        for t in order:
            st = self.types[t]
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
                fns.append(lambda L, t=t: self.checkpoint_hit(t, hasher, L))
            else:
                if isinstance(pol, FullPolicy):
                    upper = min(upper, self._cached_prefix_pages(t, hasher, upper // st.tokens_per_page)
                                * st.tokens_per_page)
                    upper -= upper % self.align
                    continue
                count = cached_page_count(self.index[t].__contains__, hasher, st.tokens_per_page,
                                        upper // st.tokens_per_page)
                fns.append(lambda L, pol=pol, c=count, tpp=st.tokens_per_page:
                           pol.longest_valid(c, L, self.align, tpp))
        L = upper
        align = self.align
        while True:
            L0 = L
            for fn in fns:
                # Every answer a whole number of pages of every token type: an uncached image
                # bounds the hit at its first token, which need not end a page (a hit ending
                # inside a page would count tokens whose page is allocated fresh, never written).
                L = fn(L)
                L -= L % align
            if L == L0:
                return L

    def _image_cached(self, t: int, im: ImageInfo) -> bool:
        tpp = self.types[t].tokens_per_page
        idx = self.index[t]
        return all((im.image_id, j) in idx for j in range(cdiv(im.num_tokens, tpp)))

    # -- Mamba checkpoint policy hooks (public: a rival policy, e.g. baselines/marconi.py, overrides
    # them; the defaults are Jenga's fixed interval and LRU) ------------------------------------------
    def on_new_request(self, request: RequestView) -> None:
        """Called once per request, at its first ``allocate``, before anything is taken or cached."""

    def checkpoint_positions(self, rs: ReqState, t: int, prev: int, T: int) -> Iterable[int]:
        """Prompt positions in ``(prev, min(T, prompt_len)]`` whose state of Mamba type ``t`` is
        checkpointed this step, in order (iterated lazily: each one is saved before the next is
        asked for). Default: every multiple of ``lcm(checkpoint_interval, hash block)``."""
        N = math.lcm(self.types[t].policy.spec.checkpoint_interval, self.hash_block)
        return range((prev // N + 1) * N, min(T, rs.prompt_len) + 1, N)

    def on_checkpoint_saved(self, t: int, b: int) -> None:
        """Called after the state of type ``t`` at position ``b`` was checkpointed."""

    def checkpoint_eviction_key(self, plen: int) -> int:
        """Eviction timestamp of a checkpoint at ``plen`` when it joins the cache. Default: now (LRU)."""
        return self.now

    def checkpoint_hit(self, t: int, hasher: BlockHasher, L: int) -> int:
        """The longest checkpointed position ``<= L`` of Mamba type ``t`` in the cache (0: none).
        Default: multiples of ``lcm(checkpoint_interval, hash block)``."""
        st = self.types[t]
        if st.policy.pages_per_state != 1:
            return 0
        N = st.policy.spec.checkpoint_interval
        return self.longest_cached_multiple(t, hasher, L, math.lcm(N, self.hash_block))

    def longest_cached_multiple(self, t: int, hasher, L: int, step: int) -> int:
        """The largest multiple of ``step`` at most ``L`` whose prefix hash type ``t`` has cached
        (a Mamba checkpoint), or 0: the search every checkpoint rule shares."""
        b = L - L % step
        while b > 0:
            if hasher.hash_at(b) in self.index[t]:
                return b
            b -= step
        return 0

    # -- page references ----------------------------------------------------------------------------
    def _on_evict(self, t: int, sid: int) -> None:
        self._evictions += 1  # never undone: a stamp for _hit_at_admission, not state
        j = self._j
        if j is not None:
            j.item(self.page_key[t], sid)
        key = self.page_key[t].pop(sid, None)
        if key is not None and self.index[t].get(key) == sid:
            if j is not None:
                j.item(self.index[t], key)
            del self.index[t][key]
        if self.keep_block_copies:
            self._evict_copy(t, sid, key)

    def _on_evict_many(self, pages: list[tuple[int, int]]) -> None:
        """:meth:`_on_evict` of every ``(t, sid)`` in order (a pool evicting a batch)."""
        if self._j is not None or type(self)._on_evict is not PrefixCacheMixin._on_evict:
            for t, sid in pages:
                self._on_evict(t, sid)
            return
        self._evictions += len(pages)
        page_key, index, copies = self.page_key, self.index, self.keep_block_copies
        copy_key, copies_of = self.copy_key, self.copies
        # Per type (a type's keys, index and copies are its own): a flat pool's shared queue hands
        # the types' pages interleaved (aligned eviction), so one pass per type, not one per
        # stretch of a type.
        types = set(map(_first, pages))
        for t in types:
            sids = list(map(_second, pages)) if len(types) == 1 else [s for u, s in pages if u == t]
            pk, idx = page_key[t], index[t]
            # The keys popped in one C-level pass (page_key and the index are lookups: the order
            # of their entries is not state, jenga.testing._LOOKUP_ONLY).
            keys = list(map(pk.pop, sids, repeat(None)))
            if copies and not (copy_key[t].keys().isdisjoint(sids) and copies_of[t].keys().isdisjoint(keys)):
                # A page that is a remembered copy, or whose key has copies: its keys put back,
                # then page by page in eviction order (an evicted owner hands its key to a copy,
                # which may be next).
                pk.update([(sid, key) for sid, key in zip(sids, keys) if key is not None])
                for sid in sids:
                    key = pk.pop(sid, None)
                    if key is not None and idx.get(key) == sid:
                        del idx[key]
                    if sid in copy_key[t] or (key is not None and key not in idx and key in copies_of[t]):
                        self._evict_copy(t, sid, key)
                continue
            # No copy involved: the index entries the evicted pages own deleted in a plain loop
            # (map of a dict's __delitem__ is a slot wrapper, slower than the loop). Which entries
            # go does not depend on the order (a key has one owner), nor what the dicts hold after.
            owners = list(map(idx.get, keys))
            if owners != sids:
                keys = list(compress(keys, map(eq, owners, sids)))
            for key in keys:
                del idx[key]

    def _pin(self, t: int, sid: int, data: int, undo: list) -> None:
        r = self.ref[t].get(sid, 0)
        if self._j is not None:
            self._j.item(self.ref[t], sid)
            self._j.item(self.shared_data[t], sid)
        if r == 0:
            undo.append((t, sid, self.pool.from_cached(t, sid), data))
        else:
            # One data size per shared page, whoever pins or releases it (keeps dup_bytes exact).
            data = self.shared_data[t].setdefault(sid, data)
            self.dup_bytes += data
            undo.append((t, sid, None, data))
        self.ref[t][sid] = r + 1

    def _unref(self, t: int, sid: int, ts: int, plen: int, key, data: int) -> None:
        if self.keep_block_copies and self._cache_copy(t, sid, ts, plen):
            return
        r = self.ref[t][sid] - 1
        j = self._j
        if j is not None:
            j.item(self.ref[t], sid)
            j.item(self.page_key[t], sid)
        if r > 0:
            self.ref[t][sid] = r
            self._undup(t, sid, r)
            return
        del self.ref[t][sid]
        if self.enable_prefix_cache:
            known = self.page_key[t].get(sid)
            key = known if known is not None else key
            if key is not None:
                if j is not None:
                    j.item(self.index[t], key)
                owner = self.index[t].setdefault(key, sid)
                if owner == sid:
                    self.page_key[t][sid] = key
                    self.pool.to_cached(t, sid, ts, plen)
                    return
        self.page_key[t].pop(sid, None)
        self.pool.free(t, sid)

    def _undup(self, t: int, sid: int, remaining: int) -> None:
        shared = self.shared_data[t]
        if self._j is not None:
            self._j.item(shared, sid)
        data = shared[sid]
        self.dup_bytes -= data
        if remaining == 1:
            del shared[sid]

    def _register(self, t: int, sid: int, key) -> None:
        if key is None or sid in self.page_key[t]:
            return
        owner = self.index[t].get(key)
        if self.keep_block_copies and owner is not None and not self.types[t].policy.image_based:
            self._register_copy(t, sid, key)
            return
        # A request that recomputed a cached prefix (it could not hit: another type missed) holds a
        # live copy of a cached page. The live copy takes the key, so evicting the cached copy does
        # not lose a prefix some running request still holds: vLLM v0 dedups the new block onto the
        # cached one (PrefixCachingBlockAllocator.promote_to_immutable_block), v1 keeps both under
        # the hash (BlockPool.cache_full_blocks; modelled by keep_block_copies, below). The old copy
        # stays cached, unreachable, until evicted (_on_evict only drops an index entry its page owns).
        if owner is None or (owner != sid and self.ref[t].get(owner, 0) == 0):
            if self._j is not None:
                self._j.item(self.index[t], key)
                self._j.item(self.page_key[t], sid)
            self._owner_changes += owner is not None
            self.index[t][key] = sid
            self.page_key[t][sid] = key

    # -- D4: every copy of a block stays under its hash, the oldest found first (keep_block_copies) --
    # vLLM v1 never de-duplicates: ``BlockPool.cache_full_blocks`` inserts a newly full block under
    # its hash even when another block already has it ("NOTE: We currently don't de-duplicate the
    # blocks in the cache"). The map keeps a dict of blocks per hash in insertion order -- the
    # artifact's v1 fork: ``vllm/v1/core/block_pool.py`` ``BlockPool.cached_block_hash_to_block:
    # dict[BlockHashType, dict[int, KVCacheBlock]]`` (and ``StaticLRUBlockPool``), vLLM 0.32:
    # ``BlockHashToBlockMap``. A lookup takes the first one left (``get_cached_block`` /
    # ``get_one_block``), and evicting one copy (``BlockPool._maybe_evict_cached_block``: ``del
    # cached_block_hash_to_block[hash][block_id]``) leaves the others findable. A freed copy keeps
    # its hash in the free queue like any other block (``BlockPool.free_blocks``).
    # Our index has one owner per key; without this rule ``_register`` hands the key to a live copy
    # when the owner is cached, which vLLM v1 does not do: a sibling's hit then touches the old
    # cached blocks (they leave the free queue and count against admission), not the live copy
    # (Gemma-3: a 87,168-token hit cost vLLM 0.32 2,085 free blocks, the simulator none). And a copy
    # made while the owner was live registered nothing, so once the owner was evicted the prefix
    # was lost although a running request still held it (Ministral ``[no_full_isl]``: a sibling
    # missed a 72,960-token hit vLLM found; results/crosscheck/CROSSCHECK.md, D4). Here every other
    # copy is remembered in insertion order; when the owner is evicted the oldest copy takes the key.
    def _register_copy(self, t: int, sid: int, key) -> None:
        """A live page with the content of ``key``'s owner: remembered behind it, not indexed."""
        self._log_copies(t)
        self.copies[t][key] = self.copies[t].get(key, ()) + (sid,)
        self.copy_key[t][sid] = key

    def _log_copies(self, t: int) -> None:
        if self._j is not None:
            self._j.contents(self.copies[t])
            self._j.contents(self.copy_key[t])

    def _drop_copy(self, t: int, sid: int) -> None:
        self._log_copies(t)
        key = self.copy_key[t].pop(sid)
        rest = tuple(c for c in self.copies[t][key] if c != sid)
        if rest:
            self.copies[t][key] = rest
        else:
            del self.copies[t][key]

    def _cache_copy(self, t: int, sid: int, ts: int, plen: int) -> bool:
        """The last holder of a copy lets go. True when the copy joined the cache under its key
        behind a still-present owner (not reachable until the owner is evicted); otherwise the copy
        is forgotten and the caller caches or frees the page as usual (the owner is gone: it
        becomes the owner)."""
        k = self.copy_key[t].get(sid)
        if k is None or self.ref[t][sid] != 1 or sid in self.page_key[t]:
            return False
        if self.index[t].get(k) is None:
            self._drop_copy(t, sid)
            return False
        j = self._j
        if j is not None:
            j.item(self.ref[t], sid)
            j.item(self.page_key[t], sid)
        del self.ref[t][sid]
        self.page_key[t][sid] = k
        self.pool.to_cached(t, sid, ts, plen)
        return True

    def _evict_copy(self, t: int, sid: int, key) -> None:
        """After ``_on_evict`` dropped page ``sid`` (and its index entry if it owned ``key``): a
        cached copy is forgotten; an evicted owner hands the key to its oldest copy."""
        if sid in self.copy_key[t]:  # a cached copy is reused
            self._drop_copy(t, sid)
            return
        if key is None or key in self.index[t] or key not in self.copies[t]:
            return
        c = self.copies[t][key][0]
        self._drop_copy(t, c)
        if self._j is not None:
            self._j.item(self.index[t], key)
            self._j.item(self.page_key[t], c)
        self.index[t][key] = c
        self.page_key[t][c] = key

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
            elif not pol.state_based and fresh and (fresh[0] + 1) * tpp <= L:
                hs, k = rs.hasher.chain(L), tpp // rs.hasher.block
                if len(plans[t][0]) == 1:
                    # One held interval: ``fresh`` is consecutive pages, and the hit takes those
                    # that end inside it -- their hashes one slice of the chain, their pages one
                    # C-level map over the index, or the pages this request's prefix search
                    # found (_cached_prefix_pages) when no index entry was dropped or given to
                    # another page since (entries added since change none of them).
                    js = fresh[:max(0, min(len(fresh), L // tpp - fresh[0]))]
                    memo = self._found.get(t)
                    if (memo is not None and memo[0] is rs.hasher and memo[1] == self._evictions
                            and memo[2] == self._owner_changes and len(memo[3]) >= js[-1] + 1):
                        got = list(zip(js, memo[3][js[0]:js[-1] + 1]))
                    else:
                        hk = hs[(js[0] + 1) * k - 1:(js[-1] + 1) * k:k]
                        got = list(zip(js, map(idx.__getitem__, hk)))
                else:
                    for j in fresh:
                        if (j + 1) * tpp > L:
                            break
                        got.append((j, idx[hs[(j + 1) * k - 1]]))
            if got:
                out[t] = got
        return out

    # -- Mamba checkpoints --------------------------------------------------------------------------
    def _pin_mamba_checkpoints(self, rs: ReqState, L: int) -> None:
        """A hit at L copies the checkpointed state: pin the checkpoint for this step (touching it)."""
        for t, st in enumerate(self.types):
            if st.policy.state_based and st.policy.pages_per_state == 1:
                sid = self.index[t].get(rs.hasher.hash_at(L))
                if sid is not None:
                    self._pin(t, sid, st.state_bytes, [])
                    rs.transients.append((t, sid, rs.hasher.hash_at(L), L, st.state_bytes))
                    self._transient_owners[rs.rid] = None

    def _snapshot_mamba(self, rs: ReqState, prev: int, T: int) -> None:
        """Best effort: one state page per checkpoint boundary of the prompt crossed this step;
        it joins the cache at the next step (never makes the allocation fail)."""
        for t, st in enumerate(self.types):
            if not st.policy.state_based or st.policy.pages_per_state != 1:
                continue
            for b in self.checkpoint_positions(rs, t, prev, T):
                if not self._save_checkpoint(rs, t, st, b):
                    return
                self.on_checkpoint_saved(t, b)

    def _save_checkpoint(self, rs: ReqState, t: int, st, b: int) -> bool:
        """Take one state page of type ``t`` for the checkpoint at position ``b`` (held for one step,
        then cached). False when memory is short: checkpoints are best effort."""
        if not self.pool.can_fit({t: 1}):
            return False
        sid = self.pool.alloc(t, rs.rid)
        if sid is None:
            return False
        self.ref[t][sid] = 1
        rs.transients.append((t, sid, None, b, st.state_bytes))
        self._transient_owners[rs.rid] = None
        self.checkpoints_saved += 1
        return True

    # How many of its latest checkpoints per Mamba type a running request keeps (the systems whose
    # rule it is set it: JengaManager 2). The AE's LinearAttentionManager (vllm-v0-jenga
    # vllm/core/block_v3/custom_block.py) gives a request one state block per full chunk of its
    # prompt plus the decode state, and ``free_skipped_blocks`` frees all but the last 3 blocks of
    # that table while it runs -- the decode state and the two latest checkpoints (the latest may
    # end past a sibling's shared prefix: a hit stops a token short of the prompt) -- stamping the
    # freed ones' last access -200 so they are evicted first; the rest join the cache when the
    # request is freed. The paper's Mamba ``update_last_access`` likewise refreshes "only the last
    # cached token" (§5.3). Without the hold every checkpoint joined the cache one step after it was
    # written and was evicted while the attention pages of the same prefix stayed held by their
    # running owner: a sibling found the whole attention prefix but no state at its end
    # (Qwen3.5-35B-A3B long documents: 737 of 739 checkpoints evicted, most in the step they joined
    # the cache; hit rate 0.045 with 43 preemptions). Held checkpoints stay in the index, so
    # siblings hit them while their owner runs.
    hold_last_checkpoints: int = 0

    def _release_transients(self, rs: ReqState) -> None:
        n = self.hold_last_checkpoints
        if not n:
            for t, sid, key, plen, data in rs.transients:
                key = key if key is not None else rs.hasher.hash_at(plen)
                self._unref(t, sid, self.checkpoint_eviction_key(plen), plen, key, data)
            rs.transients = []
            return
        # Per type, the n latest of the held and the new checkpoints (written or hit) stay held; the
        # others are released as skipped blocks: stale, evicted first (the type's stale_ts; with
        # stale_pages_first off, the usual checkpoint key).
        by_type: dict[int, list] = {}
        for x in rs.held_ckpts + tuple(rs.transients):
            by_type.setdefault(x[0], []).append(x)
        held = []
        for t, xs in by_type.items():
            xs.sort(key=_plen)
            stale = self.types[t].policy.stale_ts
            for _, sid, key, plen, data in xs[:-n]:
                key = key if key is not None else rs.hasher.hash_at(plen)
                self._unref(t, sid, self.checkpoint_eviction_key(plen) if stale is None else stale, plen, key, data)
            for x in xs[-n:]:
                if x[2] is None:  # written by this request: indexed now, so siblings hit it
                    x = (*x[:2], rs.hasher.hash_at(x[3]), *x[3:])
                    self._register(t, x[1], x[2])
                held.append(x)
        rs.transients = []
        rs.held_ckpts = tuple(held)

    def _release_held_checkpoints(self, rs: ReqState) -> None:
        """The request is freed: its held checkpoints join the cache with its other pages."""
        for t, sid, key, plen, data in rs.held_ckpts:
            self._unref(t, sid, self.checkpoint_eviction_key(plen), plen, key, data)
        rs.held_ckpts = ()
