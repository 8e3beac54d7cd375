"""A Marconi-style rival for Jenga's Mamba prefix caching (Pan et al., "Marconi: Prefix Caching for
the Era of Hybrid LLMs", MLSys'25; the idea only, no code taken).

Jenga checkpoints a request's Mamba state every ``checkpoint_interval`` prompt tokens (512 by
default, 1024 in the artifact's Jamba run) and keeps the checkpoints in LRU order. A hit can only
land on a multiple of the interval, and a long prompt leaves one state-sized page per interval.

Marconi's two changes, on top of the same LCM pool and attention prefix cache:

- **admission**: a state is checkpointed only where it is likely to be reused -- at the request's
  *branch point* (the end of the longest prefix already in the cache, i.e. where its path leaves
  the radix tree of cached prefixes: another request shares exactly that prefix) and at its *last
  prompt token* (rounded down to the hash block: the next turn of a conversation starts there). A
  hit can land on any checkpointed position, not only on multiples of an interval;
- **FLOP-aware eviction**: a checkpoint's eviction key is its recency plus ``alpha`` times its
  FLOP efficiency (prefill FLOPs a hit saves per byte the entry holds), normalised by the largest
  efficiency seen, so long prefixes (which save quadratic attention work for the same state bytes)
  outlive short ones of the same age. Marconi normalises recency over the live entries at eviction
  time; here the recency span is the allocator clock at admission (a static key, as the evictor's
  sorted LRU needs).
"""

from __future__ import annotations

from collections.abc import Callable

from sortedcontainers import SortedList

from jenga.jenga_manager import JengaManager
from jenga.policies import FullPolicy

PrefixFlops = Callable[[int], float]


def prefix_flops(specs, matmul_params: float, attn_flops_per_pair: float) -> PrefixFlops:
    """Prefill FLOPs a hit of ``L`` tokens saves: the linear layers (2 · ``matmul_params`` per
    token) plus causal attention over the prefix (``attn_flops_per_pair`` per query-key pair and
    layer) in every full-attention layer of ``specs`` (Mamba layers are linear)."""
    attn_layers = sum((s.num_compute_layers or s.num_layers) for s in specs if s.kind == "full")

    def flops(L: int) -> float:
        return 2.0 * matmul_params * L + attn_flops_per_pair * attn_layers * L * (L + 1) / 2
    return flops


class MarconiManager(JengaManager):
    """Jenga's LCM pool with Marconi's Mamba-state admission and FLOP-aware eviction, built on the
    manager's public checkpoint hooks (``on_new_request``, ``checkpoint_positions``,
    ``on_checkpoint_saved``, ``checkpoint_hit``, ``checkpoint_eviction_key``; jenga/prefix.py).

    Options: ``flop_alpha`` (0: plain LRU over the admitted checkpoints) and ``prefix_flops``
    (:func:`prefix_flops`; None: LRU). ``admitted`` counts the checkpoints taken."""

    system_name = "marconi"
    option_names = ("request_aware", "flop_alpha", "prefix_flops")
    # hold_last_checkpoints stays JengaManager's: the study runs Marconi's admission and eviction in
    # Jenga's fork, whose LinearAttentionManager keeps a running request's latest state blocks
    # whatever decided to write them (with at most two checkpoints per request, all of them).

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16, enable_prefix_cache: bool = True,
                 flop_alpha: float = 1.0, prefix_flops: PrefixFlops | None = None, **options):
        if flop_alpha < 0:
            raise ValueError(f"flop_alpha must be >= 0, got {flop_alpha!r}")
        super().__init__(specs, capacity_bytes, tokens_per_page, enable_prefix_cache, **options)
        self.flop_alpha = float(flop_alpha)
        self.prefix_flops = prefix_flops
        self._points: dict[object, list[int]] = {}
        self._positions = SortedList()             # every checkpoint position ever admitted
        self._eff_max = 0.0
        self._full = next((t for t, st in enumerate(self.types) if isinstance(st.policy, FullPolicy)), None)
        self._kv_per_token = sum(st.data_bytes_per_token for st in self.types if not st.policy.state_based)
        self.admitted = 0

    # -- admission -----------------------------------------------------------------------------------
    def admission_points(self, request) -> list[int]:
        """Positions whose state Marconi checkpoints for this request: its branch point (end of
        its longest cached attention prefix, when inside the prompt) and its last prompt token."""
        hasher = self._hasher(request)
        n, B = len(request.prompt_token_ids), self.hash_block
        pts = set()
        if self._full is not None:
            st = self.types[self._full]
            cached = self._cached_prefix_pages(self._full, hasher, (n - 1) // st.tokens_per_page)
            branch = cached * st.tokens_per_page
            branch -= branch % B
            if 0 < branch < n:
                pts.add(branch)
        if n >= B:
            pts.add(n - n % B)
        return sorted(pts)

    def on_new_request(self, request) -> None:
        if self.enable_prefix_cache and request.request_id not in self._points:
            self._points[request.request_id] = self.admission_points(request)

    def allocate(self, request, num_new_tokens: int) -> bool:
        # The points are decided at admission: a refused admission forgets them (it changes
        # nothing), and the retry decides them again from the cache as it is then.
        ok = super().allocate(request, num_new_tokens)
        if not ok and request.request_id not in self.reqs:
            self._points.pop(request.request_id, None)
        return ok

    def free(self, request) -> None:
        super().free(request)
        self._points.pop(request.request_id, None)

    def checkpoint_positions(self, rs, t: int, prev: int, T: int):
        # A generator: the index is checked right before each save (a save may evict an entry).
        hi = min(T, rs.prompt_len)
        idx = self.index[t]
        for b in self._points.get(rs.rid, ()):
            if prev < b <= hi and rs.hasher.hash_at(b) not in idx:  # else: checkpointed by another request
                yield b

    def on_checkpoint_saved(self, t: int, b: int) -> None:
        if b not in self._positions:
            self._positions.add(b)
        self.admitted += 1

    def checkpoint_hit(self, t: int, hasher, L: int) -> int:
        # Any checkpointed position is a valid hit, not only multiples of an interval.
        idx = self.index[t]
        for i in range(self._positions.bisect_right(L) - 1, -1, -1):
            b = self._positions[i]
            if b % self.align == 0 and hasher.hash_at(b) in idx:
                return b
        return 0

    # -- FLOP-aware eviction ---------------------------------------------------------------------------
    def _efficiency(self, L: int) -> float:
        state = sum(st.state_bytes for st in self.types if st.policy.state_based)
        return self.prefix_flops(L) / (state + self._kv_per_token * L)

    def checkpoint_eviction_key(self, L: int) -> int:
        """Eviction timestamp of a checkpoint at ``L``: now + alpha · now · efficiency / max efficiency."""
        if self.prefix_flops is None or self.flop_alpha == 0:
            return self.now
        eff = self._efficiency(L)
        self._eff_max = max(self._eff_max, eff)
        return self.now + int(self.flop_alpha * self.now * eff / self._eff_max)
