"""Oracle: byte-granular memory that keeps exactly what some layer will still read.

No pages, no rounding, nothing kept that no layer reads: the bytes charged to running requests are
their needed bytes (the policies' ``needed_bytes``), so its waste is zero by construction; it is the
physical limit the paged systems are measured against. A request fits while every running
request's needed bytes, plus the prefix cache, stay within capacity.

With ``enable_prefix_cache`` it also caches, byte-exact, with the *same* per-type validity rules as
Jenga (full attention: any cached prefix; sliding window: the window before the prefix end; Mamba:
checkpoints; cross-attention / vision: whole images): it is a :class:`~jenga.manager_base.PagedManager`
whose pool (:class:`ExactPool`) never runs out of page *names* -- a page id only names a cache entry
or a request's block, it costs nothing by itself -- and whose feasibility check (``_fits``) counts
exact bytes instead of pages. Cached content costs its exact data bytes and is evicted only when
the bytes are needed, least recently used first in one queue balanced across types and aligned by
prefix length (the prefix-subset evictor's order). Blocks are ``tokens_per_page`` tokens for the
cache index (the paged systems' hash granularity; a token-granular index would at most add
``tokens_per_page - 1`` hit tokens per request); bytes are never rounded.
"""

from __future__ import annotations

from jenga.interface import MemoryUsage
from jenga.manager_base import PagedManager
from jenga.policies import CrossPolicy, FullPolicy, MambaPolicy
from jenga.pools.exact import ExactPool
from jenga.reqstate import ReqState


class Oracle(PagedManager):
    """The physical limit: allocated = needed, byte for byte; cache kept in exact bytes."""

    system_name = "oracle"
    # Jenga's own sliding-window policy (retention past the window, widened hit check) on exact
    # bytes: without them the oracle frees at the window and loses the prefix hits Jenga keeps, so
    # it would not bound Jenga under prefix caching (ablation, Ministral: 0.59x vs Jenga's 1.05x).
    option_names = ("sliding_retention_tokens", "sliding_hit_extra_tokens", "keep_block_copies")

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16,
                 enable_prefix_cache: bool = False, **options):
        self.transient_bytes = 0  # Mamba checkpoints held for one step (cache content in the making)
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)

    # Every allocation of the oracle can fail (bytes, not pages): always keep the undo log.
    _journal_attrs = (*PagedManager._journal_attrs, "transient_bytes")

    fits_without_pages = False

    def _sure_fit(self, rs, demand, owner) -> bool:
        return False

    def _whole_page_reader(self, t: int) -> bool:
        """True when every reader of a page of type ``t`` reads all of it for as long as it holds it
        (full and cross attention, Mamba states): such a page shared by ``k`` running requests is
        counted once, its data subtracted ``k - 1`` times (``dup_bytes``). Types whose readers read
        only part of a page that shrinks as they advance (sliding window, chunked local, token drop,
        vision embeddings) are counted once per reader: the union of the readers' parts would need
        every reader's window per page, and subtracting the whole page under-counted, so freeing one
        reader made the running bytes *grow* past the capacity (issue 12: token drop, KV sharing).
        Per reader is never below the union, so the bound stays a bound."""
        return isinstance(self.types[t].policy, (FullPolicy, CrossPolicy, MambaPolicy))

    def _pin(self, t: int, sid: int, data: int, undo: list) -> None:
        super()._pin(t, sid, data if self._whole_page_reader(t) else 0, undo)

    def make_pool(self, **options) -> ExactPool:
        return ExactPool([st.page_bytes for st in self.types], self.capacity_bytes, self.enable_prefix_cache)

    def _running(self) -> int:
        """Bytes running requests occupy: their needed bytes, shared pages once, plus checkpoints."""
        return max(0, self.tot_needed - self.dup_bytes) + self.transient_bytes

    def _fits(self, rs: ReqState, prev: int, T: int, demand: dict[int, int], hits) -> bool:
        new_needed = sum(p.needed_bytes(rs, prev, T) for p in self.acct)
        keep, shared, pinned = set(), 0, 0
        for t, js in hits.items():
            for j, sid in js:
                if self.ref[t].get(sid, 0):
                    if self._whole_page_reader(t):  # already stored once for its other reader
                        shared += self._page_data(rs, t, j, T)
                else:
                    keep.add((t, sid))
                    pinned += self.pool.data[(t, sid)]  # leaves the cache, counted in new_needed
        running = self._running() - rs.contrib[0] + new_needed - shared
        if running > self.capacity_bytes:
            return False
        self.pool.evict_until(self.capacity_bytes - running + pinned, keep)
        return True

    def allocate(self, request, num_new_tokens: int) -> bool:
        ok = super().allocate(request, num_new_tokens)
        self._trim()
        return ok

    def free(self, request) -> None:
        super().free(request)
        self._trim()

    def _trim(self) -> None:
        """Pages a request releases join the cache with their whole data (a window's edge page held
        more than the layers read): evict until running + cached fit again."""
        self.pool.evict_until(self.capacity_bytes - self._running())

    def _unref(self, t: int, sid: int, ts: int, plen: int, key, data: int) -> None:
        if self.ref[t][sid] == 1:
            self.pool.set_data((t, sid), data)  # what the page costs if it stays cached
        super()._unref(t, sid, ts, plen, key, data)

    # Mamba checkpoints are real copies of the state: count them while a request holds them.
    def _snapshot_mamba(self, rs: ReqState, prev: int, T: int) -> None:
        # The manager accounts the request's new tokens after the snapshots; count them first, or
        # the checkpoints fill room the request itself is about to take (issue 12: free bytes < 0).
        self._account(rs)
        n0 = len(rs.transients)
        super()._snapshot_mamba(rs, prev, T)
        # Best effort, as in the paged managers: keep only the snapshots that fit next to the
        # running requests (the cache can make room).
        while len(rs.transients) > n0 and self._running() + sum(x[4] for x in rs.transients[n0:]) > self.capacity_bytes:
            t, sid, *_ = rs.transients.pop()
            del self.ref[t][sid]
            self.pool.free(t, sid)
        self.transient_bytes += sum(x[4] for x in rs.transients[n0:])

    def _pin_mamba_checkpoints(self, rs: ReqState, L: int) -> None:
        n0 = len(rs.transients)
        super()._pin_mamba_checkpoints(rs, L)
        self.transient_bytes += sum(x[4] for x in rs.transients[n0:])

    def _release_transients(self, rs: ReqState) -> None:
        self.transient_bytes -= sum(x[4] for x in rs.transients)
        super()._release_transients(rs)

    def usage(self):

        running, cached = self._running(), self.pool.cached_bytes
        return MemoryUsage(self.capacity_bytes, running, 0, 0, cached, self.capacity_bytes - running - cached,
                           path_counts={**self.pool.path_counts, **self.extra_counts},
                           per_type_allocated_bytes={})
