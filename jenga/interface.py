"""The allocator facade every system implements, and the small request view it needs.

A scheduler sees only :class:`MemoryManager`; Jenga and every baseline differ behind it. ``jenga``
never imports the harness: the harness's ``Request`` satisfies :class:`RequestView` structurally.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from jenga.spec import LayerTypeSpec


@dataclass(frozen=True)
class ImageSpan:
    """One image of a request.

    ``image_id`` identifies the image content (equal ids = same image, for prefix caching);
    ``num_tokens`` is its number of image/encoder tokens; ``offset`` is the position in the request's
    token sequence where the image is consumed: for decoder-only VLMs (LLaVA-style) the image tokens
    occupy ``[offset, offset + num_tokens)`` of the prompt; for cross-attention models
    (Llama-3.2-Vision) the image tokens live only in cross-attention and ``offset`` is where the
    image placeholder sits.
    """

    image_id: int
    num_tokens: int
    offset: int = 0


@runtime_checkable
class RequestView(Protocol):
    """What the allocator reads from a request."""

    @property
    def request_id(self) -> str: ...

    @property
    def prompt_token_ids(self) -> Sequence[int]: ...

    @property
    def output_token_ids(self) -> Sequence[int]:
        """Tokens generated so far (needed to hash output blocks for prefix caching)."""
        ...

    @property
    def images(self) -> Sequence[ImageSpan]: ...


@dataclass
class MemoryUsage:
    """A snapshot of the KV pool, in bytes. The five byte fields sum to ``capacity_bytes``.

    - ``needed_bytes``: allocated to running requests and holding tokens/states some layer will
      still read (exact bytes, no page rounding).
    - ``unneeded_bytes``: allocated to running requests but holding tokens no layer will read again
      (out-of-window tokens a uniform allocator cannot free, consumed vision embeddings, ...).
    - ``fragmentation_bytes``: allocated to running requests but holding nothing: the unfilled
      tail of partly filled pages, padding of a page up to a larger page size.
    - ``cached_bytes``: pages that hold prefix-cache content and no running request uses
      (evictable on demand).
    - ``free_bytes``: everything else (including free small pages inside partly used large pages
      and free pages a static partition reserves for one type; see ``free_stranded_bytes``).
    """

    capacity_bytes: int
    needed_bytes: int
    unneeded_bytes: int
    fragmentation_bytes: int
    cached_bytes: int
    free_bytes: int
    # Part of free_bytes that only some types/requests can use (free small pages in partly used
    # large pages; a static partition's idle share).
    free_stranded_bytes: int = 0
    large_pages_total: int = 0
    large_pages_used: int = 0  # large pages with at least one used or cached small page
    # How often each allocation path was taken by successful allocations, cumulative (e.g.
    # "request_hit", "new_large", "steal", "evict_large", "evict_small", "any_free_small"); a failed
    # allocate changes nothing, its counts included.
    path_counts: dict[str, int] = field(default_factory=dict)
    per_type_allocated_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by running requests."""
        return self.needed_bytes + self.unneeded_bytes + self.fragmentation_bytes

    @property
    def waste_fraction(self) -> float:
        """(allocated - needed) / allocated; 0 when nothing is allocated."""
        alloc = self.allocated_bytes
        return 0.0 if alloc == 0 else (alloc - self.needed_bytes) / alloc

    @property
    def large_page_occupancy(self) -> float:
        return 0.0 if self.large_pages_total == 0 else self.large_pages_used / self.large_pages_total

    def check(self) -> None:
        """Raise AssertionError if the accounting does not add up (used by tests)."""
        parts = (self.needed_bytes, self.unneeded_bytes, self.fragmentation_bytes,
                 self.cached_bytes, self.free_bytes)
        assert all(p >= 0 for p in parts), f"negative usage component: {self}"
        assert sum(parts) == self.capacity_bytes, f"usage does not sum to capacity: {self}"
        assert 0 <= self.free_stranded_bytes <= self.free_bytes, f"stranded > free: {self}"


class MemoryManager(abc.ABC):
    """The one facade a scheduler calls.

    Lifecycle of a request: ``lookup_prefix`` (optional, when prefix caching is on) → one or more
    ``allocate`` calls (prefill chunks, then one token per decode step) → ``free``. A preempted
    request is ``free``d and later starts over with ``lookup_prefix``.

    Constructor (every implementation): ``(specs, capacity_bytes, tokens_per_page=16,
    enable_prefix_cache=False, **system_options)``. Too little capacity for one page of every type,
    or bad specs, raise :class:`jenga.spec.SpecError` naming the field.
    """

    specs: tuple[LayerTypeSpec, ...]
    capacity_bytes: int
    tokens_per_page: int
    enable_prefix_cache: bool

    @abc.abstractmethod
    def lookup_prefix(self, request: RequestView) -> int:
        """Number of prompt tokens servable from cache for a request that holds no memory yet:
        the longest prefix valid for every layer type. The hit is pinned by the next successful
        ``allocate`` of this request (not before: a failed allocate pins nothing). Returns 0 when
        caching is off. Never returns the whole prompt (at least one token must be computed)."""

    @abc.abstractmethod
    def allocate(self, request: RequestView, num_new_tokens: int) -> bool:
        """Make room for ``num_new_tokens`` more tokens of the request (after its pinned hit and
        earlier allocations), or return False and change nothing. Also frees what no layer needs
        any more (out-of-window tokens, consumed vision embeddings)."""

    @abc.abstractmethod
    def free(self, request: RequestView) -> None:
        """Release everything the request holds; with prefix caching on, full pages of computed
        tokens stay cached (evictable) instead of being freed. Freeing a request that holds nothing
        (already freed, or never allocated) is a defined no-op; it only drops a pending hit."""

    @abc.abstractmethod
    def usage(self) -> MemoryUsage:
        """Current snapshot (cheap: called every scheduler step)."""

    @abc.abstractmethod
    def num_computed_tokens(self, request: RequestView) -> int:
        """Tokens of the request this manager has allocated (pinned hit + allocations); 0 if none."""

    def begin_step(self) -> None:
        """Optional: the engine announces a new scheduler step, so what the last step computed
        (Mamba checkpoints) becomes usable by every request. A caller that never calls it gets
        the older behaviour (one-step pages join the cache at their request's next ``allocate``)."""

    def max_tokens_one_request(self, request: RequestView) -> int | None:  # pragma: no cover - optional
        """Optional upper bound used by schedulers to reject requests that can never fit."""
        return None
