"""Per-layer-type policies: which pages a type holds, which bytes it still reads, and its prefix hooks.

A policy is the *policy* half of the allocator (the pool in ``pools/lcm.py`` is the mechanism). For one
request it answers, from two numbers -- ``prev`` (tokens computed before this step) and ``T``
(tokens allocated once this step's tokens are added) -- :

- ``held_intervals``: the half-open ranges of *logical pages* the type must hold (token types index
  pages by token block; image types give every image its own run of pages; Mamba has one state);
- ``needed_bytes``: the exact bytes some layer of the type will still read (no page rounding);
- the paper's three prefix-cache hooks: ``update_last_access`` (timestamp given to released pages,
  same clock for every type -> balanced eviction), ``set_prefix_length`` (tie-breaker, same value
  for the same token in every type -> aligned eviction; one random value per image), and
  ``get_possible_prefix`` (every prefix length valid for this type, given which pages are cached).

Held intervals only ever move forward (their lower ends and upper ends never decrease), which is
what lets the manager free and allocate incrementally in amortised O(1) per page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jenga.spec import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    LayerTypeSpec,
    MambaSpec,
    SlidingWindowSpec,
    SpecError,
    TokenDropSpec,
    VisionEmbeddingSpec,
)

Interval = tuple[int, int]
# Timestamp of pages released while their request still runs (out of window, dropped, consumed):
# below every real timestamp, so the evictor drops them first (the AE uses -200 for the same).
STALE_TS = -1


@dataclass(frozen=True)
class ImageInfo:
    """One image of a request as the allocator sees it.

    ``c0``/``c1``: the token positions whose computation consumes the image embeddings (for
    decoder-only VLMs the image's own positions; for cross-attention models the placeholder
    position only). ``priority`` is the image's random prefix length (set_prefix_length hook)."""

    image_id: int
    num_tokens: int
    c0: int
    c1: int
    priority: int


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Policy:
    """Base policy: a token-based type that keeps every token (full attention)."""

    image_based = False
    state_based = False
    # True when a prefix hit needs this type's pages (vision embeddings can be re-encoded).
    constrains_prefix = True

    def __init__(self, spec: LayerTypeSpec, bytes_per_token: int | None = None):
        self.spec = spec
        # Real bytes one token occupies in this storage (a merged uniform type sums several types).
        self.bytes_per_token = spec.bytes_per_token if bytes_per_token is None else bytes_per_token

    # -- which tokens / pages --------------------------------------------------------------------
    def needed_lo(self, prev: int) -> int:
        """First token position still read once ``prev`` tokens are computed."""
        return 0

    def held_intervals(self, rs, prev: int, T: int, tpp: int) -> list[Interval]:
        if T <= 0:
            return []
        return [(self.needed_lo(prev) // tpp, cdiv(T, tpp))]

    def needed_bytes(self, rs, prev: int, T: int) -> int:
        return max(0, T - self.needed_lo(prev)) * self.bytes_per_token if T > 0 else 0

    def tokens_in(self, rs, a: int, b: int, T: int, tpp: int) -> int:
        """Tokens of data in logical pages ``[a, b)`` once ``T`` tokens are allocated."""
        return max(0, min(b * tpp, T) - a * tpp)

    def required_pages(self, L: int, tpp: int) -> list[Interval]:
        """Logical pages that must be cached for a hit of length ``L`` (``L`` multiple of tpp)."""
        return [(self.needed_lo(L) // tpp, L // tpp)] if L > 0 else []

    # -- the three hooks ----------------------------------------------------------------------------
    # Timestamp of the pages this type releases early (out of window): STALE_TS, evicted before any
    # other cached page (the paper's hook; the AE uses -200), or None for ``now`` like the rest --
    # the manager option ``stale_pages_first=False`` (a what-if knob: long-document QA needs the
    # window at the end of a shared document, which sits mid-prompt and is released early).
    stale_ts: int | None = STALE_TS

    def update_last_access(self, now: int, in_use: bool) -> int:
        """Timestamp for a page the request releases: ``now`` for pages the type read up to the end
        (balanced across types), ``STALE_TS`` for pages released early (out of window)."""
        return now if in_use or self.stale_ts is None else self.stale_ts

    def set_prefix_length(self, rs, page: int, tpp: int) -> int:
        """Eviction tie-breaker: the prefix length the page ends at (highest evicted first)."""
        return (page + 1) * tpp

    def get_possible_prefix(self, is_cached: Callable[[int], bool], upper: int, tpp: int) -> list[int]:
        """Every prefix length ``L <= upper`` (multiple of ``tpp``) valid for this type, given
        ``is_cached(page)``. The manager uses the faster :meth:`longest_valid` on prefix sums."""
        out = []
        for L in range(0, upper + 1, tpp):
            if all(is_cached(j) for a, b in self.required_pages(L, tpp) for j in range(a, b)):
                out.append(L)
        return out

    def longest_valid(self, count: Callable[[int, int], int], upper: int, align: int, tpp: int) -> int:
        """Largest valid ``L <= upper`` (multiple of ``align``); ``count(a, b)`` = cached pages in
        ``[a, b)``. ``L = 0`` is always valid."""
        L = upper - upper % align
        while L > 0:
            if all(count(a, b) == b - a for a, b in self.required_pages(L, tpp)):
                return L
            L -= align
        return 0


class WindowPolicy(Policy):
    """A type whose hit of length ``L`` needs one run of pages ``[a(L), L // tpp)`` with ``a``
    never decreasing as ``L`` grows (a sliding window, a local chunk)."""

    # The required_pages the fast longest_valid was written for (a subclass that redefines it
    # gets the base class's scan).
    _required_pages_impl = None

    def _runs_nonempty(self, tpp: int, align: int) -> bool:
        """True when every candidate length (a positive multiple of ``align``) needs at least one
        page, so a candidate whose run ends on a missing page is invalid. Not for a local chunk (a
        length on a chunk boundary needs nothing)."""
        return False

    def longest_valid(self, count, upper, align, tpp):
        # The base class's downward scan, skipping the lengths a missing page rules out: when page
        # m of [a(L), L // tpp) is missing, every L' with m < L' // tpp has it in its run too
        # (a(L') <= a(L) <= m), so the next candidate is the largest multiple of ``align`` whose
        # run ends at or before m. The same answer in O(misses x log window) count calls instead
        # of one required_pages call per multiple of ``align`` (a 90k-token prompt is ~5,600).
        if type(self).required_pages is not type(self)._required_pages_impl:
            return super().longest_valid(count, upper, align, tpp)
        L = upper - upper % align
        nonempty = self._runs_nonempty(tpp, align)
        while L > 0:
            ((a, b),) = self.required_pages(L, tpp)
            if count(a, b) == b - a:
                return L
            if nonempty and count(b - 1, b) == 0:
                # The run's last page is missing. When every candidate's run is nonempty, so is
                # every candidate's whose run ends inside the stretch of missing pages below b
                # (its last page is one of them): the next candidate ends at or before the
                # stretch's first page s, found by galloping down and bisecting -- one step
                # over a long uncached stretch (a released window's pages, evicted first) instead
                # of one per page.
                d = 1
                while b - 2 * d >= 0 and count(b - 2 * d, b) == 0:
                    d *= 2
                lo, hi = max(0, b - 2 * d), b - d
                while lo < hi:
                    mid = (lo + hi) // 2
                    if count(mid, b) == 0:
                        hi = mid
                    else:
                        lo = mid + 1
                L = ((lo + 1) * tpp - 1) // align * align
                continue
            # The smallest s with [s, b) all cached (page s - 1 is the last missing one): galloped
            # from b, since the missing page is usually near the run's end (then one count call).
            good, d = b, 1
            while b - d > a and count(b - d, b) == d:
                good, d = b - d, 2 * d
            lo, hi = max(a, b - d) + 1, good
            while lo < hi:
                mid = (lo + hi) // 2
                if count(mid, b) == b - mid:
                    hi = mid
                else:
                    lo = mid + 1
            L = (lo * tpp - 1) // align * align
        return 0


class FullPolicy(Policy):
    """Full attention: every token, for the whole request; any fully cached prefix is a hit."""

    def longest_valid(self, count, upper, align, tpp):
        # Cached pages form a prefix-closed set for this type: binary search on count(0, b) == b.
        lo, hi = 0, upper // tpp
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(0, mid) == mid:
                lo = mid
            else:
                hi = mid - 1
        L = lo * tpp
        return L - L % align


class SlidingPolicy(WindowPolicy):
    """Sliding window W: the next token reads the last W-1 tokens; only those must be cached.

    ``retain_tokens``: tokens kept *held* below the window before pages are released (0 = release
    at exactly W-1). The artifact's forks both keep 192: v0 ``vllm/core/block_v3/custom_block.py``
    ``SlidingWindowManager.free_skipped_blocks`` frees only below ``computed // block_size -
    max_block_sliding_window - 12`` (12 blocks of 16, "EVAL_EVAL"), v1
    ``vllm/v1/core/specialized_manager.py`` ``SlidingWindowManager`` uses ``sliding_window + 192``
    for ``remove_skipped_blocks``. Hits are still validated against the real window
    (``required_pages``), and ``needed_bytes`` stays the real need, so the retained tokens count as
    unneeded memory. Why it matters: a request that decodes ``n <= retain`` tokens still holds the
    window that ends at its prompt, so a sibling that shares the prompt can hit all of it.

    ``hit_extra_tokens``: tokens a hit must find cached below the window (0 = the real window).
    The v1 fork validated hits against the *widened* window from commit 014d69f ("hardcode sw",
    2025-04-12: ``sliding_window_contiguous_blocks = cdiv(self.sliding_window - 1, block_size)``
    with ``self.sliding_window = W + 192``) until e71d61b ("update sw", 2025-08-16), which went
    back to ``cdiv(W - 1, block_size)`` -- after the paper's numbers were committed
    (``logs/figure14.csv``, 2025-07-28). With retention = extra the retained tokens never make a
    hit that freeing at the window would not (a sibling needs the ``n`` decoded tokens' worth of
    pages below the request's window too); docs/fidelity/gemma3.md."""

    def __init__(self, spec: LayerTypeSpec, bytes_per_token: int | None = None, retain_tokens: int = 0,
                 hit_extra_tokens: int = 0):
        super().__init__(spec, bytes_per_token)
        for key, value in (("sliding_retention_tokens", retain_tokens), ("sliding_hit_extra_tokens", hit_extra_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"{key} must be an integer >= 0, got {value!r}")
        self.retain_tokens = retain_tokens
        self.hit_extra_tokens = hit_extra_tokens

    def required_pages(self, L: int, tpp: int) -> list[Interval]:
        # The hit's last ``W - 1 + hit_extra`` tokens, whole pages (the fork's contiguous blocks).
        return [(max(0, self.needed_lo(L) - self.hit_extra_tokens) // tpp, L // tpp)] if L > 0 else []

    _required_pages_impl = required_pages

    def _runs_nonempty(self, tpp: int, align: int) -> bool:
        # L = e * tpp > 0 needs pages from (L - (W - 1) - hit_extra) // tpp <= e - 1 when
        # W - 1 + hit_extra >= 1 (SlidingWindowSpec.needed_token_range: the last W - 1 tokens).
        return (type(self.spec).needed_token_range is SlidingWindowSpec.needed_token_range
                and type(self).needed_lo is SlidingPolicy.needed_lo
                and align % tpp == 0 and self.spec.window - 1 + self.hit_extra_tokens >= 1)

    def needed_lo(self, prev: int) -> int:
        return self.spec.needed_token_range(prev)[0]

    def held_intervals(self, rs, prev: int, T: int, tpp: int) -> list[Interval]:
        if T <= 0:
            return []
        # Retention only keeps pages the request computed or pinned: a request admitted with a
        # hit of ``rs.start`` tokens holds nothing below the pages that hit validated (the fork's
        # ``find_longest_cache_hit`` returns the whole contiguous run, W - 1 + extra tokens, and
        # ``remove_skipped_blocks`` then frees only below the widened window).
        start = getattr(rs, "start", 0)
        floor = max(0, self.needed_lo(start) - self.hit_extra_tokens) if start > 0 else 0
        return [(max(floor, self.needed_lo(prev) - self.retain_tokens) // tpp, cdiv(T, tpp))]


class ChunkedPolicy(WindowPolicy):
    """Chunked local attention: the next token reads its own chunk only."""

    _required_pages_impl = Policy.required_pages

    def needed_lo(self, prev: int) -> int:
        return self.spec.needed_token_range(prev)[0]


class TokenDropPolicy(Policy):
    """PyramidKV-style budget: the ``sink`` first tokens plus the most recent ones; the middle is
    dropped (and its pages freed) as the context grows."""

    def _recent_start(self, prev: int) -> int:
        s: TokenDropSpec = self.spec
        if prev <= 0:
            return 0
        return max(s.sink, prev - (s.kept_tokens(prev) - s.sink))

    def held_intervals(self, rs, prev, T, tpp):
        if T <= 0:
            return []
        sink_end = cdiv(min(self.spec.sink, T), tpp)
        rs_page = self._recent_start(prev) // tpp
        hi = cdiv(T, tpp)
        if rs_page <= sink_end:
            return [(0, hi)]
        return [(0, sink_end), (rs_page, hi)] if sink_end > 0 else [(rs_page, hi)]

    def needed_bytes(self, rs, prev, T):
        if T <= 0:
            return 0
        start = self._recent_start(prev)
        sink = min(self.spec.sink, T)
        return (sink + max(0, T - max(start, sink))) * self.bytes_per_token

    def required_pages(self, L, tpp):
        if L <= 0:
            return []
        sink_end = cdiv(min(self.spec.sink, L), tpp)
        start = self._recent_start(L) // tpp
        return [(0, L // tpp)] if start <= sink_end else [(0, sink_end), (start, L // tpp)]


class ImagePolicy(Policy):
    """Per-image pages (cross-attention KV, vision embeddings), cached by ``image_id``.

    Logical pages: image ``i`` owns ``[base_i, base_i + ceil(n_i / tpp))`` (``rs.image_bases``)."""

    image_based = True

    def set_prefix_length(self, rs, page, tpp):
        return rs.image_of_page(self, tpp, page).priority

    def update_last_access(self, now, in_use):
        return now  # a consumed image may serve the next request with the same image

    def tokens_in(self, rs, a, b, T, tpp):
        total = 0
        for im, base in rs.images_with_base(self, tpp):
            lo, hi = max(a, base), min(b, base + cdiv(im.num_tokens, tpp))
            if lo < hi:
                total += min((hi - base) * tpp, im.num_tokens) - (lo - base) * tpp
        return total

    def required_pages(self, L, tpp):  # image policies answer through image_bound instead
        return []


class CrossPolicy(ImagePolicy):
    """Cross-attention: KV of every image token, kept for the whole request, made at the first
    step (the encoder runs on all images). A hit of length L needs every image placed before L."""

    def held_intervals(self, rs, prev, T, tpp):
        if T <= 0:
            return []
        return [(base, base + cdiv(im.num_tokens, tpp)) for im, base in rs.images_with_base(self, tpp)]

    def needed_bytes(self, rs, prev, T):
        return rs.num_image_tokens * self.bytes_per_token if T > 0 else 0


class VisionEmbeddingPolicy(ImagePolicy):
    """Vision-encoder outputs: made when prefill reaches the image, freed as prefill consumes them.
    Never constrains a prefix hit (the encoder can run again)."""

    constrains_prefix = False

    def held_intervals(self, rs, prev, T, tpp):
        out = []
        for im, base in rs.images_with_base(self, tpp):
            if T > im.c0 and prev < im.c1:
                consumed = 0 if im.c1 - im.c0 < im.num_tokens else max(0, prev - im.c0)
                a = base + consumed // tpp
                b = base + cdiv(im.num_tokens, tpp)
                if a < b:
                    out.append((a, b))
        return out

    def needed_bytes(self, rs, prev, T):
        total = 0
        for im in rs.images:
            if T > im.c0 and prev < im.c1:
                in_prompt = im.c1 - im.c0 >= im.num_tokens
                total += im.num_tokens - (max(0, prev - im.c0) if in_prompt else 0)
        return total * self.bytes_per_token


class MambaPolicy(Policy):
    """Mamba / linear attention: one state per request (``pages_per_state`` pool pages, 1 under
    the LCM allocator). Prefix hits only at checkpoints every ``checkpoint_interval`` tokens."""

    state_based = True

    def __init__(self, spec: MambaSpec, pages_per_state: int = 1):
        super().__init__(spec, bytes_per_token=0)
        self.pages_per_state = pages_per_state

    def held_intervals(self, rs, prev, T, tpp):
        return [(0, self.pages_per_state)] if T > 0 else []

    def needed_bytes(self, rs, prev, T):
        return self.spec.state_bytes if T > 0 else 0

    def tokens_in(self, rs, a, b, T, tpp):
        return 0  # state bytes are accounted by the manager (held_state_bytes)

    def set_prefix_length(self, rs, page, tpp):
        return page  # checkpoint position (the manager passes it)

    def required_pages(self, L, tpp):
        return []


POLICY_FOR_KIND: dict[type, type[Policy]] = {
    FullAttentionSpec: FullPolicy,
    SlidingWindowSpec: SlidingPolicy,
    ChunkedLocalSpec: ChunkedPolicy,
    TokenDropSpec: TokenDropPolicy,
    CrossAttentionSpec: CrossPolicy,
    VisionEmbeddingSpec: VisionEmbeddingPolicy,
    MambaSpec: MambaPolicy,
}


def policy_for(spec: LayerTypeSpec, **kw) -> Policy:
    """The policy of a spec's layer type (subclasses of a spec use their parent's policy)."""
    for cls in type(spec).__mro__:
        if cls in POLICY_FOR_KIND:
            return POLICY_FOR_KIND[cls](spec, **kw)
    raise TypeError(f"no policy for spec type {type(spec).__name__}")
