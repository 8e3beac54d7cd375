"""Per-layer-type cache specs.

A *layer type* is a set of layers that keep the same tokens for a request and so can share one
small page per ``tokens_per_page`` tokens: every full-attention layer of a model is one type, every
sliding-window layer with window W another, the cross-attention layers a third, and so on. A spec
says how many bytes one small page of the type holds and which tokens the type still needs; the
allocator (``pools/lcm.py``) and the prefix-cache policies (``policies.py``) read nothing else.

Small-page size of a token-based type = ``tokens_per_page * bytes_per_token_per_layer * num_layers``
(the page-layer layout: one small page carries every layer of the type for those tokens).
A state-based type (Mamba) stores one state per request, so its small page is the whole state of
all its layers, independent of ``tokens_per_page``.

Names are free-form but unique within a pool; multi-model pools (speculative decoding) prefix them
with the model, e.g. ``"draft/full"`` and ``"target/full"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar


class SpecError(ValueError):
    """A cache spec (or an allocator argument) is invalid. The message names the field."""


def _require_positive(owner: str, name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{owner}.{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class LayerTypeSpec:
    """Base class: one layer type of one model.

    ``num_layers`` counts the layers that *store* a cache. Layers that share another layer's KV
    (cross-layer KV sharing) are not counted here; ``num_compute_layers`` counts every layer that
    reads the cache, for the step-time model.
    """

    name: str
    num_layers: int
    bytes_per_token_per_layer: int
    num_compute_layers: int | None = None
    kind: ClassVar[str] = "base"
    # True for types whose pages hold token KV (pages indexed by token block); False for states.
    token_based: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError(f"{type(self).__name__}.name must be a non-empty string")
        _require_positive(type(self).__name__, "num_layers", self.num_layers)
        _require_positive(type(self).__name__, "bytes_per_token_per_layer", self.bytes_per_token_per_layer)
        if self.num_compute_layers is not None and self.num_compute_layers < self.num_layers:
            raise SpecError(
                f"{type(self).__name__}.num_compute_layers ({self.num_compute_layers}) must be >= "
                f"num_layers ({self.num_layers})"
            )

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token occupies across all storing layers of this type."""
        return self.bytes_per_token_per_layer * self.num_layers

    def small_page_bytes(self, tokens_per_page: int) -> int:
        """Bytes of one small page of this type."""
        _require_positive("allocator", "tokens_per_page", tokens_per_page)
        return tokens_per_page * self.bytes_per_token

    def needed_token_range(self, num_tokens: int) -> tuple[int, int]:
        """Half-open range ``[lo, hi)`` of token positions this type still reads once a request has
        ``num_tokens`` tokens computed (before the next token is produced). Full attention: all."""
        return (0, num_tokens)


@dataclass(frozen=True)
class FullAttentionSpec(LayerTypeSpec):
    """Self-attention over the whole context."""

    kind: ClassVar[str] = "full"


@dataclass(frozen=True)
class SlidingWindowSpec(LayerTypeSpec):
    """Self-attention over the last ``window`` tokens (Gemma-2/3, Ministral, character.ai)."""

    window: int = 4096
    kind: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.window, int) or self.window < 1:
            raise SpecError(f"SlidingWindowSpec.window must be an integer >= 1, got {self.window!r}")

    def needed_token_range(self, num_tokens: int) -> tuple[int, int]:
        # The next token (position num_tokens) attends to positions num_tokens-window+1 .. num_tokens,
        # so the cache must keep the last window-1 computed tokens (vLLM keeps window-1 as well).
        return (max(0, num_tokens - (self.window - 1)), num_tokens)


@dataclass(frozen=True)
class ChunkedLocalSpec(LayerTypeSpec):
    """Attention inside fixed chunks of ``chunk`` tokens (Llama 4's chunked local attention)."""

    chunk: int = 8192
    kind: ClassVar[str] = "chunked"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.chunk, int) or self.chunk < 1:
            raise SpecError(f"ChunkedLocalSpec.chunk must be an integer >= 1, got {self.chunk!r}")

    def needed_token_range(self, num_tokens: int) -> tuple[int, int]:
        # The next token at position num_tokens attends to its own chunk only.
        return ((num_tokens // self.chunk) * self.chunk, num_tokens)


@dataclass(frozen=True)
class TokenDropSpec(LayerTypeSpec):
    """Layers that keep only a budget of tokens (PyramidKV-style sparse attention).

    Kept tokens for a context of n tokens: ``min(n, max(min_tokens, ceil(keep_ratio * n)))``;
    the kept set is the ``sink`` first tokens plus the most recent ones, so the type frees pages
    from the middle of the context. Layers with different ratios are different types.
    """

    keep_ratio: float = 1.0
    min_tokens: int = 64
    sink: int = 4
    kind: ClassVar[str] = "token_drop"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (0.0 < self.keep_ratio <= 1.0):
            raise SpecError(f"TokenDropSpec.keep_ratio must be in (0, 1], got {self.keep_ratio!r}")
        if self.min_tokens < 1:
            raise SpecError(f"TokenDropSpec.min_tokens must be >= 1, got {self.min_tokens!r}")
        if self.sink < 0:
            raise SpecError(f"TokenDropSpec.sink must be >= 0, got {self.sink!r}")

    def kept_tokens(self, num_tokens: int) -> int:
        return min(num_tokens, max(self.min_tokens, math.ceil(self.keep_ratio * num_tokens)))


@dataclass(frozen=True)
class CrossAttentionSpec(LayerTypeSpec):
    """Cross-attention layers: KV only for the request's image/encoder tokens, kept for the whole
    request (Llama-3.2-Vision). Text tokens take no space here."""

    kind: ClassVar[str] = "cross"


@dataclass(frozen=True)
class VisionEmbeddingSpec(LayerTypeSpec):
    """Vision-encoder output embeddings, one per image token, needed only until prefill has consumed
    that token (then freed). ``num_layers`` is 1; ``bytes_per_token_per_layer`` is hidden x dtype."""

    kind: ClassVar[str] = "vision_embedding"


# Recurrent mixers a MambaSpec may name: Mamba-1 (Jamba), Mamba-2 (Nemotron-H, Granite-4.0-H,
# Falcon-H1), gated DeltaNet (Qwen3-Next, Qwen3.5), lightning / linear attention (MiniMax-M1);
# "" when the spec does not say.
MAMBA_MIXERS = frozenset({"", "mamba1", "mamba2", "gdn", "linear_attention"})


@dataclass(frozen=True)
class MambaSpec(LayerTypeSpec):
    """Mamba / linear-attention layers: a fixed state per request (conv + SSM), not per token.

    ``bytes_per_token_per_layer`` is unused for the page size (kept positive for uniformity: set it
    to the state bytes); ``state_bytes_per_layer`` is the state of one layer. Prefix caching keeps
    checkpoints of the state every ``checkpoint_interval`` tokens (Jenga default 512). ``mixer`` names
    the recurrent layer (one of :data:`MAMBA_MIXERS`; ``""`` unknown): the allocator ignores it, an
    engine rule may not (which kernels can export a state from inside a prefill chunk).
    """

    state_bytes_per_layer: int = 0
    conv_bytes_per_layer: int = 0
    checkpoint_interval: int = 512
    mixer: str = ""
    kind: ClassVar[str] = "mamba"
    token_based: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive("MambaSpec", "state_bytes_per_layer", self.state_bytes_per_layer)
        if self.conv_bytes_per_layer < 0 or self.conv_bytes_per_layer > self.state_bytes_per_layer:
            raise SpecError(
                "MambaSpec.conv_bytes_per_layer must be in [0, state_bytes_per_layer], "
                f"got {self.conv_bytes_per_layer!r}"
            )
        _require_positive("MambaSpec", "checkpoint_interval", self.checkpoint_interval)
        if self.mixer not in MAMBA_MIXERS:
            raise SpecError(f"MambaSpec.mixer must be one of {sorted(MAMBA_MIXERS)}, got {self.mixer!r}")

    @property
    def state_bytes(self) -> int:
        """Bytes of one request's state across all layers of the type."""
        return self.state_bytes_per_layer * self.num_layers

    def small_page_bytes(self, tokens_per_page: int) -> int:
        _require_positive("allocator", "tokens_per_page", tokens_per_page)
        return self.state_bytes

    def needed_token_range(self, num_tokens: int) -> tuple[int, int]:
        return (num_tokens, num_tokens)  # no per-token storage; one state


ALL_SPEC_KINDS: dict[str, type[LayerTypeSpec]] = {
    cls.kind: cls
    for cls in (
        FullAttentionSpec,
        SlidingWindowSpec,
        ChunkedLocalSpec,
        TokenDropSpec,
        CrossAttentionSpec,
        VisionEmbeddingSpec,
        MambaSpec,
    )
}


@dataclass(frozen=True)
class PageGeometry:
    """Small-page sizes of every type and the LCM large page that all of them tile exactly."""

    tokens_per_page: int
    small_page_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def large_page_bytes(self) -> int:
        return math.lcm(*self.small_page_bytes.values())

    def small_pages_per_large(self, name: str) -> int:
        return self.large_page_bytes // self.small_page_bytes[name]

    @property
    def max_small_page_bytes(self) -> int:
        return max(self.small_page_bytes.values())


def page_geometry(specs: list[LayerTypeSpec] | tuple[LayerTypeSpec, ...], tokens_per_page: int = 16) -> PageGeometry:
    """Compute the LCM page geometry of a set of specs; rejects duplicate names and empty lists."""
    if not specs:
        raise SpecError("specs must contain at least one LayerTypeSpec")
    _require_positive("allocator", "tokens_per_page", tokens_per_page)
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"spec names must be unique within a pool; duplicated: {dupes}")
    return PageGeometry(tokens_per_page, {s.name: s.small_page_bytes(tokens_per_page) for s in specs})
