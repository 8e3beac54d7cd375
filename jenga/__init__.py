"""jenga: the two-level LCM KV-cache allocator with per-layer-type prefix caching, and baselines.

Imports nothing from ``harness``.
"""

from jenga.interface import ImageSpan, MemoryManager, MemoryUsage, RequestView
from jenga.registry import SYSTEM_NAMES, make_manager
from jenga.spec import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    LayerTypeSpec,
    MambaSpec,
    PageGeometry,
    SlidingWindowSpec,
    SpecError,
    TokenDropSpec,
    VisionEmbeddingSpec,
    page_geometry,
)

__all__ = [
    "SYSTEM_NAMES",
    "ChunkedLocalSpec",
    "CrossAttentionSpec",
    "FullAttentionSpec",
    "ImageSpan",
    "LayerTypeSpec",
    "MambaSpec",
    "MemoryManager",
    "MemoryUsage",
    "PageGeometry",
    "RequestView",
    "SlidingWindowSpec",
    "SpecError",
    "TokenDropSpec",
    "VisionEmbeddingSpec",
    "make_manager",
    "page_geometry",
]
