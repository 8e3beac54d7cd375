"""The paged memory manager every page-based system shares (Jenga and the paged baselines).

A system is this manager plus three choices: the *storage types* (which pages it keeps for which
layers: one per layer type for Jenga, one merged type for PagedAttention, equal-layer groups for
today's vLLM), the *pool* (LCM two-level, flat, partitioned or exact; ``jenga/pools/``) and the *accounting
specs* (the model's real layer types, which define the bytes some layer will still read). The
facade methods, prefix caching (``prefix.py``) and the usage breakdown are written once.

Extension: a new system subclasses :class:`PagedManager` and overrides its public hooks
(``storage_types``, ``accounted_specs``, ``make_pool``). Systems inside ``jenga/`` that change a rule
of the allocation or the prefix cache itself also override the *protected hooks* in
:data:`PROTECTED_HOOKS` — each listed with its contract; ``tests/test_jenga_hooks.py`` checks that
no class in ``jenga/`` overrides any other underscored method of the manager, and that code outside
``jenga/`` overrides none. The fast paths of the manager (issue 20) test whether a hook is the
default and fall back to the general code when a system overrides it.

Costs: ``allocate`` touches a page only when the request crosses a page boundary or a window edge
(amortised O(1) per page, one ``held_intervals`` call per type); ``usage`` is O(#types) from
counters kept incrementally (each request's needed/held bytes are refreshed when it allocates).
"""

from __future__ import annotations

import functools
import math
import weakref
from itertools import chain, compress, repeat
from operator import itemgetter, mul

from jenga.interface import MemoryManager, MemoryUsage, RequestView
from jenga.journal import Journal
from jenga.policies import (
    ChunkedPolicy,
    CrossPolicy,
    FullPolicy,
    ImagePolicy,
    MambaPolicy,
    Policy,
    SlidingPolicy,
    TokenDropPolicy,
    cdiv,
    policy_for,
)
from jenga.pools import PagePool
from jenga.prefix import PrefixCacheMixin
from jenga.reqstate import ReqState, StorageType, diff_intervals, image_infos
from jenga.spec import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    LayerTypeSpec,
    SlidingWindowSpec,
    SpecError,
    TokenDropSpec,
    page_geometry,
)

_first, _second = itemgetter(0), itemgetter(1)

# The protected hooks: underscored methods a system inside jenga/ may override, with the contract
# each override must keep (the baselines that use them: oracle.py, current.py, vllm_hma.py, sglang.py).
PROTECTED_HOOKS: dict[str, str] = {
    "_fits": "(rs, prev, T, demand, hits) -> bool: can the pool hold ``demand`` pages per type for this "
             "allocation (after the hit's pages are pinned); no state change",
    "_sure_fit": "(rs, demand, owner) -> bool: a sound bound -- True only if the allocation cannot fail, "
                 "so the undo journal may be skipped",
    "_journal_attrs": "tuple of manager attributes the undo journal saves and restores on a failed allocate",
    "_pin": "(t, sid, data, undo) -> None: take a reference on cached page ``sid`` of type ``t`` for a hit, "
            "logging the reverse into ``undo``",
    "_unref": "(t, sid, ts, plen, key, data) -> None: drop a request's reference on page ``sid``; the last "
              "reference hands the page to the cache (or frees it)",
    "_page_key": "(rs, t, j, computed) -> hash key or None: the prefix-cache key page ``j`` of type ``t`` is "
                 "registered under once computed; None keeps it out of the cache",
    "_cacheable": "(rs, t, j) -> bool: may page ``j`` of type ``t`` stay in the cache when released; asked "
                  "once per page as it is registered (computed), so an override may also note the page (sglang.py "
                  "records its parent key) but must change neither the pool nor the index",
    "_cacheable_run": "None (default), or (rs, t, pages, lo, hi, hs, k) -> None for an override whose "
                      "``_cacheable`` always returns True: what it notes for the held pages ``lo .. hi-1`` (keys "
                      "``hs[(j + 1) * k - 1]``), at once, so registration keeps its unrolled path (sglang.py)",
    "_release_pages": "(rs, t, js, stale) -> None: release pages ``js`` of type ``t`` (``stale``: out of "
                      "the window, evicted first)",
    "_snapshot_mamba": "(rs, prev, T) -> None: take the Mamba checkpoints due between ``prev`` and ``T`` "
                       "computed tokens",
    "_pin_mamba_checkpoints": "(rs, L) -> None: keep the checkpoints a hit of ``L`` tokens needs",
    "_release_transients": "(rs) -> None: free a request's transient (in-flight Mamba checkpoint) pages "
                           "(with ``hold_last_checkpoints`` n, the n latest per type stay held in ``rs.held_ckpts``)",
    "_on_evict_many": "(pages) -> None: :meth:`_on_evict` of every ``(t, sid)`` of a pool's batch, in order; "
                      "an override must leave the state those calls would (sglang.py unrolls its own)",
    "_on_evict": "(t, sid) -> None: the pool evicted cached page ``sid`` of type ``t`` (it is out of the "
                 "pool's cache already): drop its index entry; an override may also take other cached pages "
                 "out of the cache (``pool.from_cached`` + ``pool.free``) and must drop their entries too",
}


@functools.cache
def _cacheable_run_of(cls: type):
    """``cls._cacheable_run`` when the class that defines it also defines the ``_cacheable`` in
    force (a subclass that overrides ``_cacheable`` does not inherit its parent's batch form), else
    None; once per class."""
    def owner(name: str) -> type | None:
        return next((c for c in cls.__mro__ if name in c.__dict__), None)

    note = cls._cacheable_run
    return note if note is not None and owner("_cacheable_run") is owner("_cacheable") else None


def _weak_hook(owner, name: str):
    """``owner.<name>`` as a callable that holds ``owner`` weakly (looked up at each call, so a
    subclass's override is the one called)."""
    ref = weakref.ref(owner)

    def hook(*args):
        return getattr(ref(), name)(*args)

    return hook


# Policies whose held pages PagedManager._quiet_until bounds ahead: held_intervals ending with
# [start(prev) // tpp, cdiv(T, tpp)), start never decreasing in prev, and what comes before it fixed
# (full attention: one interval from 0; a sliding window or a local chunk: one interval; a token-drop
# budget: the sink's pages, then the recent tokens', once the sink is computed) -- each with the
# spec method its start is computed from, for the spec classes it was written for (None: none);
# cross-attention KV is fixed once the request runs (its images), a Mamba state's pages too (its
# checkpoints are written inside the prompt only, with the default checkpoint rule).
_QUIET_SPANS = {FullPolicy: None,
                SlidingPolicy: ("needed_token_range", SlidingWindowSpec.needed_token_range),
                ChunkedPolicy: ("needed_token_range", ChunkedLocalSpec.needed_token_range),
                TokenDropPolicy: ("kept_tokens", TokenDropSpec.kept_tokens)}


def _held_head(iv: list) -> tuple:
    """Held intervals of a step but the last one's end (which follows the tokens allocated)."""
    return iv[:-1], iv[-1][0]


class PagedManager(PrefixCacheMixin, MemoryManager):
    """Facade implementation over a page pool; subclasses supply storage types and the pool."""

    system_name = "paged"
    option_names: tuple[str, ...] = ()
    # D4: keep every copy of a block under its hash (vLLM v1's block pool; jenga/prefix.py). The
    # default when the system's options do not set ``keep_block_copies`` (systems that accept it
    # list it in ``option_names``; the v1 cells turn it on through harness/conf/system/*.yaml).
    keep_block_copies: bool = False

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16,
                 enable_prefix_cache: bool = False, **options):
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            raise SpecError(f"unknown option(s) {unknown} for system {self.system_name!r}; "
                            f"allowed: {list(self.option_names)}")
        self.specs = tuple(specs)
        self.geometry = page_geometry(self.specs, tokens_per_page)  # validates specs and tokens_per_page
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool) or capacity_bytes <= 0:
            raise SpecError(f"capacity_bytes must be a positive integer, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self.tokens_per_page = tokens_per_page
        self.enable_prefix_cache = bool(enable_prefix_cache)
        self.images_in_prompt = not any(isinstance(s, CrossAttentionSpec) for s in self.specs)
        # Systems that accept it (option_names) may hold sliding-window pages past the window
        # (SlidingPolicy.retain_tokens); the SlidingPolicy validates the value.
        self.sliding_retention = options.get("sliding_retention_tokens", 0)
        self.sliding_hit_extra = options.get("sliding_hit_extra_tokens", 0)
        self.keep_block_copies = bool(options.get("keep_block_copies", self.keep_block_copies))
        self.types: list[StorageType] = self.storage_types(**options)
        # Systems that accept it (option_names): out-of-window pages keep their release time as
        # their eviction timestamp instead of going first (Policy.stale_ts).
        if not options.get("stale_pages_first", True):
            for st in self.types:
                st.policy.stale_ts = None
        self.acct = [policy_for(s) for s in self.accounted_specs()]
        self._full_bpt = sum(p.bytes_per_token for p in self.acct if type(p) is FullPolicy)
        self._acct_other = [p for p in self.acct if type(p) is not FullPolicy]
        self.pool: PagePool = self.make_pool(**options)
        # The pool calls back through a weak reference: the manager owns the pool, not the other
        # way round. A bound method would make manager and pool a reference cycle, and every page
        # record of a finished cell (~800k objects on Llama-4) would then wait for the cyclic
        # collector to walk them all instead of going with the manager (issue 20).
        self.pool.on_evict = _weak_hook(self, "_on_evict")
        if hasattr(self.pool, "on_evict_many"):
            self.pool.on_evict_many = _weak_hook(self, "_on_evict_many")
        n = len(self.types)
        self.ref: list[dict[int, int]] = [{} for _ in range(n)]
        self.page_key: list[dict[int, object]] = [{} for _ in range(n)]
        self.index: list[dict[object, int]] = [{} for _ in range(n)]
        # keep_block_copies (D4): live or cached pages holding the content of a key's owner, per
        # type: key -> copies in insertion order, and copy -> key (jenga/prefix.py).
        self.copies: list[dict[object, tuple[int, ...]]] = [{} for _ in range(n)]
        self.copy_key: list[dict[int, object]] = [{} for _ in range(n)]
        self.reqs: dict[object, ReqState] = {}
        self.pending: dict[object, tuple] = {}
        # Evictions so far, and the count each pending lookup saw (prefix._hit_at_admission).
        self._evictions = 0
        self._lookup_stamp: dict[object, int] = {}
        # Index entries given to another page so far (an eviction aside), and per type the pages
        # the last prefix search found (prefix._cached_prefix_pages, read by _plan_hits).
        self._owner_changes = 0
        self._found: dict[int, tuple] = {}
        self.now = 0
        self.tot_needed = 0
        self.tot_held = 0
        self.dup_bytes = 0  # held data bytes counted twice (pages shared by running requests)
        # Per type: page -> its one data size, for pages more than one running request holds.
        self.shared_data: list[dict[int, int]] = [{} for _ in range(n)]
        self.extra_counts = {"hit_lost_tokens": 0, "retry_tight": 0}
        self.checkpoints_saved = 0  # Mamba state pages checkpointed (prefix.PrefixCacheMixin._save_checkpoint)
        self._j: Journal | None = None  # undo log of an allocation that may fail
        # Requests holding one-step pages (see begin_step), in the order they took them: a dict, not a
        # set -- begin_step stamps each one's pages in this order, and a set of request ids (strings)
        # iterates in an order that changes with each process's hash seed (PYTHONHASHSEED).
        self._transient_owners: dict = {}
        # (type, tokens per page) of the token types (neither image nor state pages).
        self._token_tpp = [(t, s.tokens_per_page) for t, s in enumerate(self.types)
                           if not (s.policy.image_based or s.policy.state_based)]
        token_tpps = [tpp for _, tpp in self._token_tpp]
        self.hash_block = math.gcd(*token_tpps) if token_tpps else tokens_per_page
        # Per type, for the hot accounting loop: (policy, tokens/page, data bytes/token, kind, state).
        self._tinfo = [(st.policy, st.tokens_per_page, st.data_bytes_per_token,
                        2 if st.policy.state_based else 1 if st.policy.image_based else 0, st.state_bytes)
                       for st in self.types]
        self.align = math.lcm(*token_tpps) if token_tpps else 1
        # Per type: may _release_pages take the unrolled path (_release_run)? Token pages whose
        # policy and manager keep the default key, prefix-length and release hooks.
        cls = type(self)
        plain = (cls._page_key is PrefixCacheMixin._page_key and cls._unref is PrefixCacheMixin._unref
                 and cls._cache_copy is PrefixCacheMixin._cache_copy and cls._undup is PrefixCacheMixin._undup)
        # Per type: is _page_data the default token-page one (tokens in the page x data bytes)?
        self._plain_data = [cls._page_data is PrefixCacheMixin._page_data
                            and not (st.policy.image_based or st.policy.state_based)
                            and type(st.policy).tokens_in is Policy.tokens_in for st in self.types]
        self._plain_release = [plain and not (st.policy.image_based or st.policy.state_based)
                               and type(st.policy).set_prefix_length is Policy.set_prefix_length
                               for st in self.types]
        self._image_types = {t for t, st in enumerate(self.types) if st.policy.image_based}
        # Per type: may image pages be released by _release_image_run (default image hooks)?
        self._plain_image_release = [plain and st.policy.image_based and isinstance(st.policy, ImagePolicy)
                                     and type(st.policy).set_prefix_length is ImagePolicy.set_prefix_length
                                     for st in self.types]

    # -- extension hooks (public: a new system subclasses and overrides these) -----------------------
    # ``storage_types`` (which pages are kept for which layers), ``accounted_specs`` (the layer types
    # whose reads define "needed" bytes) and ``make_pool`` (the PagePool the pages come from) are
    # called once, in this order, from ``__init__``; ``options`` are the system's ``option_names``.
    # Mamba checkpoint policy hooks: ``on_new_request``, ``checkpoint_positions``, ``on_checkpoint_saved``,
    # ``checkpoint_hit``, ``checkpoint_eviction_key`` (prefix.py). ``checkpoints_saved`` counts the
    # Mamba checkpoints taken (a study reads it; nothing patches).
    def storage_types(self, **options) -> list[StorageType]:
        """One storage type per layer type, small page exactly the spec's (Jenga)."""
        return [StorageType(s.name, policy_for(s, **self._policy_options(s)), self.tokens_per_page,
                            s.small_page_bytes(self.tokens_per_page), s.bytes_per_token,
                            getattr(s, "state_bytes", 0)) for s in self.specs]

    def _policy_options(self, spec: LayerTypeSpec) -> dict:
        return ({"retain_tokens": self.sliding_retention, "hit_extra_tokens": self.sliding_hit_extra}
                if isinstance(spec, SlidingWindowSpec) else {})

    def accounted_specs(self) -> list[LayerTypeSpec]:
        return list(self.specs)

    def make_pool(self, **options) -> PagePool:
        """The page pool over ``self.types`` (a :class:`jenga.pools.PagePool`: ``pools/lcm.py``, ``pools/flat.py``, ``pools/exact.py``)."""
        raise TypeError(f"{type(self).__name__} must define make_pool")

    def _fits(self, rs: ReqState, prev: int, T: int, demand: dict[int, int], hits) -> bool:
        """Whether the request can grow to ``T`` tokens: ``demand`` new pages per type besides the
        cached ``hits`` it pins. Paged systems ask the pool; the oracle counts exact bytes."""
        return not demand or self.pool.can_fit(demand)

    # -- steps --------------------------------------------------------------------------------------
    def begin_step(self) -> None:
        """The engine starts a new step: what the last step computed is usable by every request.
        Mamba checkpoints written last step (and hit checkpoints pinned for it) leave their
        request's one-step hold and join the cache now, whether or not their request runs in
        this step. vLLM v0 marks every scheduled request's blocks computed at the end of
        scheduling ("the batch will have been computed before the next scheduling invocation":
        ``vllm/core/scheduler.py`` ``Scheduler.schedule`` -> ``mark_blocks_as_computed``, in both
        the baseline and the Jenga fork, whose Mamba checkpoints are immutable blocks of the
        ``LinearAttentionManager``'s group allocator, ``custom_block.py``). Without this hook a
        checkpoint joins at its owner's next ``allocate`` (the fallback for callers that never
        announce steps), which under v0's prefill-first scheduling is after every waiting
        prefill, so siblings never hit it."""
        if not self._transient_owners:
            return
        for rid in self._transient_owners:
            rs = self.reqs.get(rid)
            if rs is not None and rs.transients:
                self.now += 1
                self._release_transients(rs)
                self._account(rs)
        self._transient_owners.clear()

    # -- allocate -----------------------------------------------------------------------------------
    def num_computed_tokens(self, request: RequestView) -> int:
        rs = self.reqs.get(request.request_id)
        return 0 if rs is None else rs.T

    # -- undo log: a failed allocate changes nothing (jenga/journal.py says why a log) ---------------
    # True when an allocation that takes no new page cannot fail (pages are the only limit; the
    # oracle counts bytes and says False).
    fits_without_pages = True
    _journal_attrs: tuple[str, ...] = ("now", "dup_bytes", "tot_needed", "tot_held")

    def _sure_fit(self, rs: ReqState | None, demand: dict[int, int], owner: object) -> bool:
        """True when this allocation cannot fail, so it needs no undo log: no new page, or the
        pool has them without evicting. (Released pages and pinned hits never take room.)"""
        return not demand or self.pool.sure_fit(demand, owner)

    def _pool_verdict(self, demand: dict[int, int], pinned, owner: object, exact: bool,
                      released=None) -> bool | None:
        """The pool's answer for an allocation ``_sure_fit`` was unsure of: True when it cannot fail
        (so it needs no undo log), False when it must fail (a new request's admission, ``exact``,
        nothing released first; or a running request's step, ``released`` given and counted: a
        flat pool's count is exact, other pools say it through ``cannot_fit``), None when only
        trying tells. ``pinned``: the cached
        pages its hit pins first, ``{t: [sid, ...]}`` (``jenga.evictor.pins_by_type``); ``released``: a callable giving the used pages
        it releases first that no other request holds (asked only if the rest is not enough).
        Asked only of systems whose fit is the pool's (the oracle counts bytes and keeps its log)."""
        if not demand or not self.fits_without_pages or type(self)._fits is not PagedManager._fits:
            return None
        pool = self.pool
        fits_exactly = getattr(pool, "fits_exactly", None)
        if fits_exactly is not None:  # flat pools: exact, so a doomed admission returns at once
            ok = fits_exactly(demand, pinned)
            if not ok and released is not None:
                # A running request's step, once its out-of-window pages are let go: exact both
                # ways too (Gemma-3 on a full pool: each such step had run page by page under the
                # log, and a doomed one was tried and undone).
                return fits_exactly(demand, pinned, released())
            return ok if (ok or exact) else None
        bound = getattr(pool, "sure_fit_evicting", None)
        if bound is None:
            return None
        if bound(demand, owner, pinned):
            return True
        let_go = released() if released is not None else None
        if let_go is not None and bound(demand, owner, pinned, let_go):
            return True
        # A doomed admission -- or a running request's doomed step, its released pages counted --
        # returns at once, as with the flat pools: trying it under the undo log changes nothing
        # either (a Gemma-3 cell retried ~30 of them, each pinning or taking and rolling back
        # thousands of pages).
        cannot_fit = getattr(pool, "cannot_fit", None)
        if cannot_fit is not None and (exact or let_go is not None) and cannot_fit(demand, pinned, let_go or ()):
            return False
        return None

    def _sole_held(self, rs: ReqState, plans) -> list[tuple[int, int]]:
        """The pages this step's allocation releases before taking new ones (out of window) that
        no other request holds, as ``(t, sid)``."""
        out = []
        for t, plan in enumerate(plans):
            if plan is not None and plan[2]:
                pages, ref = rs.pages[t], self.ref[t]
                out += [(t, pages[j]) for j in plan[2] if ref.get(pages[j]) == 1]
        return out

    def _begin(self, rs: ReqState | None) -> Journal:
        j = Journal()
        for name in self._journal_attrs:
            j.attr(self, name)
        j.contents(self.extra_counts)
        if rs is not None:
            for name in ("prev", "T", "contrib", "transients", "held_ckpts"):
                j.attr(rs, name)
            j.contents(rs.held)
        self.pool.begin(j)
        self._j = j
        return j

    def _end(self, j: Journal | None, ok: bool) -> bool:
        if j is not None:
            self._j = None
            self.pool.begin(None)
            if not ok:
                j.undo()
        elif not ok:
            raise AssertionError(f"{self.system_name}: allocation failed where the pool promised room "
                                 "(_sure_fit is wrong)")
        return ok

    def allocate(self, request: RequestView, num_new_tokens: int) -> bool:
        n = num_new_tokens  # an exact int passes the first test alone (the hot path)
        if (type(n) is not int and (not isinstance(n, int) or isinstance(n, bool))) or n < 0:
            raise SpecError(f"num_new_tokens must be an integer >= 0, got {num_new_tokens!r}")
        rs = self.reqs.get(request.request_id)
        if rs is None:
            return self._allocate_new(request, num_new_tokens)
        if num_new_tokens == 0:
            return True
        prev, T = rs.T, rs.T + num_new_tokens
        if T <= rs.quiet and not rs.transients:
            # The common decode step below, known to apply up to ``rs.quiet`` tokens when the
            # request last allocated (_quiet_until): no type's held pages change, no page fills,
            # so only the clock, the counts and the accounting move.
            self.now += 1
            rs.prev, rs.T = prev, T
            # _account for a step that moves no held interval: each token type's last interval
            # ends at or past T, so its held data grows by the new tokens; the rest of what is
            # held stays; what is needed is counted again.
            needed = T * self._full_bpt
            for p in self._acct_other:
                needed += p.needed_bytes(rs, prev, T)
            old_needed, old_held = rs.contrib
            grow = num_new_tokens * self._quiet_bpt
            self.tot_needed += needed - old_needed
            self.tot_held += grow
            rs.contrib = (needed, old_held + grow)
            return True
        plans, demand = None, {}
        held = rs.held
        for t, (pol, tpp, *_) in enumerate(self._tinfo):
            old = held[t]
            new_iv = pol.held_intervals(rs, prev, T, tpp)
            if new_iv == old:
                continue
            if plans is None:
                plans = [None] * len(held)
            gone, fresh = diff_intervals(old, new_iv)
            plans[t] = (new_iv, fresh, gone)
            if fresh:
                demand[t] = len(fresh)
        if plans is None and not rs.transients and self.fits_without_pages:
            # The common decode step: no page to take or release, so nothing can fail (the same
            # steps as below, minus the ones with nothing to do).
            self.now += 1
            rs.prev, rs.T = prev, T
            if self.enable_prefix_cache:
                self._register_computed(rs)
                self._snapshot_mamba(rs, prev, T)
            self._account(rs)
            rs.quiet = self._quiet_until(rs)
            return True
        if plans is None:
            plans = [None] * len(held)
        verdict = self._sure_fit(rs, demand, rs.rid) or self._pool_verdict(
            demand, (), rs.rid, False, lambda: self._sole_held(rs, plans))
        if verdict is False and not rs.transients:
            # The pool knows it cannot fit, counting the pages released first (its Mamba
            # checkpoints too would add room): trying under the undo log would change nothing.
            return False
        j = None if verdict is True else self._begin(rs)
        self.now += 1
        # Tokens allocated so far are computed now: last step's transient pages join the cache and
        # pages no layer reads any more are released (stale).
        if rs.transients:
            self._release_transients(rs)
        for t, plan in enumerate(plans):
            if plan is not None and plan[2]:
                self._release_pages(rs, t, plan[2], stale=True)
        rs.prev = prev
        if not self._fits(rs, prev, T, demand, {}) or (demand and not self._alloc_pages(rs, plans, {}, T)):
            return self._end(j, False)
        self._end(j, True)
        cache = self.enable_prefix_cache
        for t, plan in enumerate(plans):
            if plan is not None:
                rs.held[t] = plan[0]
        rs.T = T
        if cache:
            self._register_computed(rs)
            self._snapshot_mamba(rs, prev, T)
        self._account(rs)
        rs.quiet = self._quiet_until(rs)
        return True

    _quiet_ok: bool | None = None
    _quiet_bpt = 0

    def _quiet_allowed(self) -> bool:
        """Whether this manager's common decode step may be taken ahead (allocate): the default
        registration, Mamba and accounting hooks, every type's policy one _quiet_until bounds (a
        Mamba type only where checkpoints follow the default rule, none past the prompt, or the
        cache is off), allocations that take no page never fail. Decided once, on first use
        (subclasses set their types in __init__)."""
        cls, spans = type(self), _QUIET_SPANS
        ok = (self.fits_without_pages and cls._register_computed is PagedManager._register_computed
              and cls._snapshot_mamba is PrefixCacheMixin._snapshot_mamba
              and cls._account is PagedManager._account)
        # Held data bytes one more token adds (every token type's last held interval ends at or
        # past it; cross-attention pages hold their images, Mamba its state, whatever the step).
        self._quiet_bpt = sum(bpt for _, _, bpt, kind, _ in self._tinfo if kind == 0)
        default_checkpoints = (not self.enable_prefix_cache
                               or cls.checkpoint_positions is PrefixCacheMixin.checkpoint_positions)
        for st in self.types:
            kind = type(st.policy)
            if kind is MambaPolicy:
                ok = ok and default_checkpoints
            elif kind is not CrossPolicy and (kind not in spans or (
                    spans[kind] is not None and getattr(type(st.policy.spec), spans[kind][0]) is not spans[kind][1])):
                ok = False
        self._quiet_ok = ok
        return ok

    def _quiet_until(self, rs: ReqState) -> int:
        """The most tokens a later ``allocate`` of this request may reach and still be the common
        decode step -- every type's held pages as they are now, for any tokens computed between
        now and then, and no token page filled (nothing to register) -- or ``rs.T`` when the
        next step may differ. Exact for the policies of _quiet_allowed: the last held interval's
        end moves only past ``cdiv(T, tpp) * tpp`` tokens, its start only where ``start(prev) //
        tpp`` changes, found by bisection (it never decreases), and the intervals before it (a
        token-drop budget's sink) stay once the sink is computed."""
        T0 = rs.T
        ok = self._quiet_ok
        if ok is None:
            ok = self._quiet_allowed()
        if not ok or T0 <= 0:
            return T0
        q = T0 + (1 << 40)
        if self.enable_prefix_cache:
            reg = rs.reg
            for t, tpp in self._token_tpp:
                q = min(q, (reg[t] + 1) * tpp - 1)  # the step filling page reg[t] registers it
        for (pol, tpp, *_), held in zip(self._tinfo, rs.held):
            kind = type(pol)
            if kind is CrossPolicy or kind is MambaPolicy:
                if held != pol.held_intervals(rs, T0, T0 + 1, tpp):
                    return T0
                if kind is MambaPolicy and self.enable_prefix_cache and T0 < rs.prompt_len:
                    return T0  # a checkpoint of the prompt may be written on the way
                continue
            end = cdiv(T0, tpp)
            if T0 == end * tpp or not held or held[-1][1] != end or (len(held) != 1 and kind is not TokenDropPolicy):
                return T0  # the next token needs a page (or the held pages change already)
            q = min(q, end * tpp)
            if kind is FullPolicy:
                continue  # held from page 0 always
            if kind is TokenDropPolicy and T0 < pol.spec.sink:
                return T0  # the sink's pages still follow the tokens allocated
            s0 = _held_head(pol.held_intervals(rs, T0, T0 + 1, tpp))
            if s0 != _held_head(held):
                return T0
            if _held_head(pol.held_intervals(rs, q - 1, q, tpp)) != s0:
                lo, hi = T0, q - 1  # head(lo) == s0 != head(hi): the first change is in (lo, hi]
                while hi - lo > 1:
                    mid = (lo + hi) >> 1
                    if _held_head(pol.held_intervals(rs, mid, mid + 1, tpp)) == s0:
                        lo = mid
                    else:
                        hi = mid
                q = hi  # tokens computed stay below hi, so tokens allocated reach it at most
        return q

    def _allocate_new(self, request: RequestView, n: int) -> bool:
        self.on_new_request(request)
        rid = request.request_id
        hit, hasher = self.pending.get(rid, (0, None))
        if hasher is None and self.enable_prefix_cache:
            hasher = self._hasher(request)
        rs = ReqState(rid, len(request.prompt_token_ids), image_infos(request, self.images_in_prompt),
                      len(self.types), hasher)
        prev = self._hit_at_admission(rid, hasher, rs.images, hit) if hit else 0
        rs.start = prev
        T = hit + n
        plans, demand = [], {}
        for t, st in enumerate(self.types):
            new_iv = st.policy.held_intervals(rs, prev, T, st.tokens_per_page)
            fresh = list(chain.from_iterable(range(a, b) for a, b in new_iv))
            plans.append((new_iv, fresh))
            if fresh:
                demand[t] = len(fresh)
        hits = self._plan_hits(rs, plans, prev) if self.enable_prefix_cache else {}
        for t, js in hits.items():
            demand[t] -= len(js)
        demand = {t: c for t, c in demand.items() if c > 0}
        j = None
        if not self._sure_fit(None, demand, rid):
            pinned = {t: list(map(_second, js)) for t, js in hits.items()}
            verdict = self._pool_verdict(demand, pinned, rid, True)
            if verdict is False:
                # Must fail: the same answer as trying under the undo log (which changes nothing).
                return False
            if verdict is None:
                j = self._begin(None)
        self.now += 1
        self.extra_counts["hit_lost_tokens"] += hit - prev
        if not self._fits(rs, prev, T, demand, hits) or not self._alloc_pages(rs, plans, hits, T):
            return self._end(j, False)
        self._end(j, True)
        for t, (new_iv, _) in enumerate(plans):
            rs.held[t] = new_iv
        for t, js in hits.items():
            # The hit's pages are a prefix of the fresh ones and each is keyed already (it was
            # found in the index): registration starts after them, not with a pass over them.
            rs.reg[t] = max(rs.reg[t], js[-1][0] + 1)
        rs.prev, rs.T = prev, T
        self.reqs[rid] = rs
        self.pending.pop(rid, None)
        if self.enable_prefix_cache:
            if prev:
                self._pin_mamba_checkpoints(rs, prev)
            self._register_computed(rs)
            self._snapshot_mamba(rs, prev, T)
        self._account(rs)
        rs.quiet = self._quiet_until(rs)
        return True

    def _alloc_pages(self, rs: ReqState, plans, hits, T: int) -> bool:
        """Pin the hit pages, then take the fresh ones; on failure undo and retry once preferring
        existing small pages over new large pages ("tight"); on a second failure undo and give up.
        (Cached pages evicted on the way stay evicted.)"""
        for tight in (False, True):
            pins: list = []
            done: list = []
            if self._try_alloc(rs, plans, hits, T, tight, pins, done):
                return True
            self._rollback(rs, hits, pins, done)
            self.extra_counts["retry_tight"] += not tight
        return False

    def _try_alloc(self, rs, plans, hits, T, tight, pins, done) -> bool:
        plain_pin = self._j is None and type(self)._pin is PrefixCacheMixin._pin
        uncache_many = getattr(self.pool, "uncache_many", None)
        for t, js in hits.items():
            shared = self.shared_data[t]
            pages, ref, from_cached = rs.pages[t], self.ref[t], self.pool.from_cached
            plain_data, tpp, bpt = self._plain_data[t], self.types[t].tokens_per_page, self.types[t].data_bytes_per_token
            unpinned = []  # cached pages this hit takes, pinned in one batch below
            sids = list(map(_second, js)) if plain_pin else None
            refs = list(map(ref.get, sids)) if plain_pin else None
            if plain_pin and not any(refs):
                # A hit on cached pages none of which a running request holds.
                unpinned = sids
                ref.update(dict.fromkeys(unpinned, 1))
                pages.update(js)
                js = ()
            elif plain_pin and plain_data and all(refs) and (js[-1][0] + 1) * tpp <= T:
                # A hit on pages running requests hold, every one full (tpp tokens of data; a
                # hit's pages ascend, _plan_hits): the per-page branch below for all of them at
                # once, logged as one entry (_rollback).
                data = list(map(shared.setdefault, sids, repeat(tpp * bpt)))
                self.dup_bytes += sum(data)
                pins.append((t, sids, None, data))
                ref.update(zip(sids, [r + 1 for r in refs]))
                pages.update(js)
                js = ()
            for j, sid in js:
                r = ref.get(sid) if plain_pin else None
                if r == 0 or (plain_pin and r is None):
                    # _pin of a cached page, unrolled (a hit pins thousands): its data size only
                    # matters for a page shared with a running request.
                    unpinned.append(sid)
                    ref[sid] = 1
                elif plain_pin and plain_data:
                    # _pin of a page a running request holds, unrolled (_page_data of a token page).
                    data = shared.setdefault(sid, max(0, min((j + 1) * tpp, T) - j * tpp) * bpt)
                    self.dup_bytes += data
                    pins.append((t, sid, None, data))
                    ref[sid] = r + 1
                else:
                    self._pin(t, sid, self._page_data(rs, t, j, T), pins)
                pages[j] = sid
            if unpinned:
                keys = (uncache_many(t, unpinned) if uncache_many is not None
                        else [from_cached(t, sid) for sid in unpinned])
                pins.append((t, unpinned, keys, 0))
        alloc_many, jr = self.pool.alloc_many, self._j
        for t, plan in enumerate(plans):
            if plan is None or not plan[1]:
                continue
            pages, ref = rs.pages[t], self.ref[t]
            js = plan[1]
            if not pages.keys().isdisjoint(js):
                js = [j for j in js if j not in pages]  # hits are pinned already
            sids = alloc_many(t, rs.rid, len(js), tight)
            if jr is None:
                ref.update(dict.fromkeys(sids, 1))
                pages.update(zip(js, sids))
            else:
                for j, sid in zip(js, sids):
                    jr.item(ref, sid)
                    ref[sid] = 1
                    pages[j] = sid
            done.append((t, js, sids))  # one entry per type: the pages are zip(js, sids)
            if len(sids) < len(js):
                return False
        if self.enable_prefix_cache and self._image_types:
            for t, js, sids in done:
                if t in self._image_types:
                    for j, sid in zip(js, sids):
                        self._register(t, sid, self._page_key(rs, t, j, T))
        return True

    def _rollback(self, rs, hits, pins, done) -> None:
        """Undo a failed attempt: fresh pages back to the pool, hit pages back to the cache."""
        for t, js, sids in done:
            ref, pages, free = self.ref[t], rs.pages[t], self.pool.free
            for j, sid in zip(js, sids):
                del ref[sid]
                del pages[j]
                free(t, sid)
        for t, sid, key, _ in reversed(pins):
            # A batch of pins (_try_alloc's C-level branches) is undone last page first, each as
            # its own entry would be.
            if type(sid) is list:
                undo = zip(reversed(sid), repeat(None) if key is None else reversed(key))
            else:
                undo = ((sid, key),)
            ref = self.ref[t]
            for s, k in undo:
                if k is None:
                    ref[s] -= 1
                    self._undup(t, s, ref[s])
                else:
                    del ref[s]
                    self.pool.to_cached(t, s, *k)
        for t, js in hits.items():
            for j, _ in js:
                rs.pages[t].pop(j, None)

    def _register_computed(self, rs: ReqState) -> None:
        """Put the request's newly full token pages in the cache index as soon as they are allocated
        (their K/V is written this step), so later requests share them -- as vLLM v1 does."""
        computed, reg = rs.T, rs.reg
        for t, tpp in self._token_tpp:
            if reg[t] < computed // tpp:
                break
        else:
            return  # no token page became full (most decode steps): nothing to register
        cls = type(self)
        note = _cacheable_run_of(cls)
        plain = (self._j is None and cls._register is PrefixCacheMixin._register
                 and (cls._cacheable is PagedManager._cacheable or note is not None)
                 and cls._register_copy is PrefixCacheMixin._register_copy)
        for t, tpp in self._token_tpp:
            pages = rs.pages[t]
            end = computed // tpp
            if rs.reg[t] < end:
                # The chain is extended once and read by index (hash_at((j + 1) * tpp), unrolled).
                hs, k = rs.hasher.chain(end * tpp), tpp // rs.hasher.block
                nh = len(hs)
                if plain:
                    # Pages past the known keys (hi .. end-1) would be asked nothing either: no key.
                    hi = min(end, nh // k)
                    if note is not None:
                        note(self, rs, t, pages, rs.reg[t], hi, hs, k)
                    self._register_run(t, pages, rs.reg[t], hi, hs, k)
                    rs.reg[t] = max(rs.reg[t], end)
                    continue
                for j in range(rs.reg[t], end):
                    sid = pages.get(j)
                    if sid is not None and self._cacheable(rs, t, j):
                        i = (j + 1) * k - 1
                        self._register(t, sid, hs[i] if i < nh else None)
            rs.reg[t] = max(rs.reg[t], end)

    def _register_run(self, t: int, pages: dict[int, int], lo: int, hi: int, hs: list, k: int) -> None:
        """_register of pages ``lo .. hi-1`` (held ones, keys known: ``hs[(j + 1) * k - 1]``),
        unrolled for the default hooks (nothing is logged after _end). Pages already keyed are
        skipped and the rest, when none of their keys is indexed yet (the common case: a chunk of
        new pages), enter the index in one C-level pass each way; otherwise page by page."""
        if lo >= hi:
            return
        page_key, index = self.page_key[t], self.index[t]
        sids = list(map(pages.get, range(lo, hi)))
        keys = hs[(lo + 1) * k - 1:hi * k:k]
        if None in sids or not page_key.keys().isdisjoint(sids):
            keep = [s is not None and s not in page_key for s in sids]
            sids, keys = list(compress(sids, keep)), list(compress(keys, keep))
        # Each key enters the index unless it is there (a page not keyed yet owns no key): when
        # every one entered, the run is registered; else the entered ones are taken out again and
        # the run goes page by page (a key indexed already, or twice in the run).
        owners = list(map(index.setdefault, keys, sids))
        if owners == sids:
            page_key.update(zip(sids, keys))
            return
        for key, sid, owner in zip(keys, sids, owners):
            if owner == sid:
                del index[key]
        ref, copies = self.ref[t], self.keep_block_copies
        for sid, key in zip(sids, keys):
            owner = index.get(key)
            if owner is None:
                index[key] = sid
                page_key[sid] = key
            elif copies:
                self._register_copy(t, sid, key)
            elif owner != sid and not ref.get(owner, 0):
                index[key] = sid
                page_key[sid] = key
                self._owner_changes += 1

    def _cacheable(self, rs: ReqState, t: int, j: int) -> bool:
        """Whether logical page j of type t may enter the cache index (every page here; today's
        vLLM caches sliding-window pages only where a later hit can reach them)."""
        return True

    # An override of _cacheable that always says yes and only notes pages may give its batch form
    # here (PROTECTED_HOOKS); None sends registration page by page through _cacheable.
    _cacheable_run = None

    def _release_pages(self, rs: ReqState, t: int, js, stale: bool) -> None:
        st = self.types[t]
        pol, tpp, pages = st.policy, st.tokens_per_page, rs.pages[t]
        ts = pol.update_last_access(self.now, not stale)
        cache = self.enable_prefix_cache
        if self._j is not None:
            self._j.contents(pages)  # its order is the order pages are released on free
        elif self._plain_release[t]:
            self._release_run(rs, t, js, ts, tpp)
            return
        elif self._plain_image_release[t]:
            self._release_image_run(rs, t, js, ts, tpp)
            return
        for j in js:
            sid = pages.pop(j)
            key = self._page_key(rs, t, j, rs.T) if cache else None
            self._unref(t, sid, ts, pol.set_prefix_length(rs, j, tpp), key, self._page_data(rs, t, j, rs.T))

    def _release_run(self, rs: ReqState, t: int, js, ts: int, tpp: int, images: dict | None = None) -> None:
        """:meth:`_release_pages` for a run of pages when nothing is logged and the manager and
        policy keep the default hooks (``_page_key``, ``_unref``, ``set_prefix_length``): the same
        steps, unrolled -- for token pages the key read from the hash chain by index and the
        prefix length the page's end; for image pages (``images``: logical page -> (its image's
        eviction priority, key ``(image_id, page within the image)``)) those -- so a finished
        150k-token request releasing ~10k pages per layer type costs one pass, not five calls
        per page (issue 20). Cached and freed pages go to the pool in two batches: its state does
        not depend on how the two interleave (LcmPagePool.cache_many)."""
        pages, ref, page_key, index = rs.pages[t], self.ref[t], self.page_key[t], self.index[t]
        cache, copies = self.enable_prefix_cache, self.keep_block_copies
        copy_key = self.copy_key[t]
        if len(js) == len(pages) and js == list(pages):
            # Every page, in the map's order (a finished request's): the values at once.
            sids = list(pages.values())
            pages.clear()
        else:
            sids = list(map(pages.pop, js))
        if images is None and not (copies and not copy_key.keys().isdisjoint(sids)):
            self._release_token_run(rs, t, js, sids, ts, tpp)
            return
        shared = self.shared_data[t]
        T = rs.T
        hs, k = (rs.hasher.chain(T), tpp // rs.hasher.block) if cache and images is None else ((), 1)
        nh = len(hs)
        cached_sids, cached_plens, freed = [], [], []
        dup = 0
        for j, sid in zip(js, sids):
            if images is None:
                plen = (j + 1) * tpp
            else:
                plen, image_key = images[j]
            if copies and sid in copy_key and self._cache_copy(t, sid, ts, plen):
                continue
            r = ref[sid] - 1
            if r > 0:
                ref[sid] = r
                # _undup, unrolled: the page's one data size leaves the double count.
                dup += shared[sid]
                if r == 1:
                    del shared[sid]
                continue
            del ref[sid]
            if cache:
                key = page_key.get(sid)
                if key is None:
                    if images is not None:
                        key = image_key
                    elif plen <= T:
                        i = (j + 1) * k - 1
                        key = hs[i] if i < nh else None
                if key is not None and index.setdefault(key, sid) == sid:
                    page_key[sid] = key
                    cached_sids.append(sid)
                    cached_plens.append(plen)
                    continue
            page_key.pop(sid, None)
            freed.append(sid)
        self.dup_bytes -= dup
        self._hand_to_pool(t, cached_sids, ts, cached_plens, freed)

    def _release_token_run(self, rs: ReqState, t: int, js, sids: list[int], ts: int, tpp: int) -> None:
        """:meth:`_release_run`'s loop for token pages none of which is a remembered copy, as a
        few passes over the run that each do one thing (C-level ``map`` passes, the index asked
        only about pages not registered yet) instead of one branchy Python step per page: the
        same contents of every dict, so the same state (a finished request releases ~10k pages
        per type; issue 20)."""
        ref, page_key, index, shared = self.ref[t], self.page_key[t], self.index[t], self.shared_data[t]
        # Every page's reference count, taken out in the same pass (nothing iterates ``ref``, so
        # the shared pages' counts may come back at its end).
        refs = list(map(ref.pop, sids))
        if refs.count(1) != len(refs):
            # Pages other running requests hold too keep one reference less (_undup, unrolled:
            # the page's one data size leaves the double count); the rest are released below.
            dup, sole_js, sole = 0, [], []
            for j, sid, r in zip(js, sids, refs):
                if r == 1:
                    sole_js.append(j)
                    sole.append(sid)
                    continue
                ref[sid] = r - 1
                dup += shared[sid]
                if r == 2:
                    del shared[sid]
            self.dup_bytes -= dup
            js, sids = sole_js, sole
        if not self.enable_prefix_cache:
            for s in sids:
                page_key.pop(s, None)
            self._hand_to_pool(t, (), ts, (), sids)
            return
        # A registered page owns its key while held (a key changes owner only while its owner is
        # unheld; jenga.testing.check_invariants), so it goes to the cache under it: only the pages
        # not registered yet are asked of the index.
        keys = list(map(page_key.get, sids))
        gone = []  # run positions of pages freed, not cached
        if None in keys:
            # Their key read from the hash chain by index (None past the computed tokens or the
            # known ones); each goes to the cache if it takes its key (index.setdefault, in run
            # order), else it is freed.
            T, hs, k = rs.T, rs.hasher.chain(rs.T), tpp // rs.hasher.block
            nh, i = len(hs), -1
            for _ in range(keys.count(None)):
                i = keys.index(None, i + 1)
                j, sid = js[i], sids[i]
                if (j + 1) * tpp <= T and (j + 1) * k - 1 < nh:
                    key = hs[(j + 1) * k - 1]
                    if index.setdefault(key, sid) == sid:
                        page_key[sid] = key
                        continue
                gone.append(i)
        if gone:
            owned = [True] * len(sids)
            for i in gone:
                owned[i] = False
            cached, cached_js = list(compress(sids, owned)), list(compress(js, owned))
            freed = [sids[i] for i in gone]
        else:
            cached, cached_js, freed = sids, js, []
        self._hand_to_pool(t, cached, ts, [(j + 1) * tpp for j in cached_js], freed)

    def _hand_to_pool(self, t: int, cached_sids, ts: int, cached_plens, freed) -> None:
        """Released pages to the pool: the cached ones in one batch, then the freed ones (its
        state does not depend on how the two interleave: LcmPagePool.cache_many)."""
        pool = self.pool
        if cached_sids:
            cache_many = getattr(pool, "cache_many", None)
            if cache_many is not None:
                cache_many(t, cached_sids, ts, cached_plens)
            else:
                for sid, plen in zip(cached_sids, cached_plens):
                    pool.to_cached(t, sid, ts, plen)
        if freed:
            pfree = pool.free
            for sid in freed:
                pfree(t, sid)

    def _release_image_run(self, rs: ReqState, t: int, js, ts: int, tpp: int) -> None:
        """:meth:`_release_run` for image pages (cross-attention KV, vision embeddings): each page's
        key and eviction priority (its image's, ``ImagePolicy.set_prefix_length``) read from one
        map of the request's images instead of a search per page (a 6,404-token image is 400
        pages per cross-attention type)."""
        info = {}
        for im, base in rs.images_with_base(self.types[t].policy, tpp):
            for local in range(-(-im.num_tokens // tpp)):
                info[base + local] = (im.priority, (im.image_id, local))
        self._release_run(rs, t, js, ts, tpp, info)

    # -- free and usage -----------------------------------------------------------------------------
    def free(self, request: RequestView) -> None:
        rid = request.request_id
        self.pending.pop(rid, None)
        self._lookup_stamp.pop(rid, None)
        rs = self.reqs.pop(rid, None)
        if rs is None:
            return
        self.now += 1
        self._release_transients(rs)
        if rs.held_ckpts:
            self._release_held_checkpoints(rs)
        for t in range(len(self.types)):
            self._release_pages(rs, t, list(rs.pages[t]), stale=False)
        self.pool.release_owner(rid)
        self.tot_needed -= rs.contrib[0]
        self.tot_held -= rs.contrib[1]

    def _account(self, rs: ReqState) -> None:
        """Refresh the request's (needed, held data) bytes and the running totals."""
        prev, T = rs.prev, rs.T
        held = 0
        for (pol, tpp, bpt, kind, state), iv in zip(self._tinfo, rs.held):
            if not iv:
                continue
            if kind == 0:  # token pages: [a, b) holds the allocated tokens inside it
                for a, b in iv:
                    hi = b * tpp
                    held += (min(T, hi) - a * tpp) * bpt
            elif kind == 1:
                # Image pages hold whole images, whatever T is (ImagePolicy.tokens_in): computed
                # once per held-interval list (a new list whenever the held pages change).
                memo = rs.image_held.get(pol)
                if memo is None or memo[0] is not iv:
                    memo = (iv, sum(pol.tokens_in(rs, a, b, T, tpp) for a, b in iv) * bpt)
                    if type(pol).tokens_in is ImagePolicy.tokens_in:
                        rs.image_held[pol] = memo
                held += memo[1]
            else:
                held += state
        for x in rs.transients:
            held += x[4]
        for x in rs.held_ckpts:
            held += x[4]
        # Full attention reads every token: T * bytes/token, summed once for all such types.
        needed = T * self._full_bpt if T > 0 else 0
        for p in self._acct_other:
            needed += p.needed_bytes(rs, prev, T)
        old_needed, old_held = rs.contrib
        self.tot_needed += needed - old_needed
        self.tot_held += held - old_held
        rs.contrib = (needed, held)

    def usage(self) -> MemoryUsage:
        pool = self.pool
        used, cached = pool.used, pool.cached
        # Read once per simulated step: C-level passes over the per-type page sizes.
        page_bytes = [st.page_bytes for st in self.types]
        per_type = list(map(mul, used, page_bytes))
        alloc = sum(per_type)
        cached_b = sum(map(mul, cached, page_bytes))
        held = self.tot_held - self.dup_bytes
        needed = max(0, min(self.tot_needed - self.dup_bytes, held))
        free = self.capacity_bytes - alloc - cached_b
        return MemoryUsage(
            capacity_bytes=self.capacity_bytes, needed_bytes=needed, unneeded_bytes=held - needed,
            fragmentation_bytes=alloc - held, cached_bytes=cached_b, free_bytes=free,
            free_stranded_bytes=min(free, pool.stranded_bytes()),
            large_pages_total=pool.num_large, large_pages_used=pool.large_pages_used,
            path_counts={**pool.path_counts, **self.extra_counts},
            per_type_allocated_bytes=dict(zip([st.name for st in self.types], per_type)),
        )
