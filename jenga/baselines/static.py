"""StaticPartition: a fixed pool per layer type, sized once at start.

Shares follow the artifact's ``init_allocator``: large pages are split between types in proportion
to the small-page size for full-attention and cross-attention types, and to half of it for types
that free memory as they go (sliding window, chunked local, token drop, vision embeddings, Mamba).
A type's idle pages cannot serve another type (reported as ``free_stranded_bytes``).
"""

from __future__ import annotations

from jenga.manager_base import PagedManager
from jenga.pools.flat import PartitionedPool
from jenga.spec import SpecError

HALF_SHARE_KINDS = frozenset({"sliding", "chunked", "token_drop", "vision_embedding", "mamba"})


class StaticPartition(PagedManager):
    """Per-type pools fixed at start; within a pool, one page size and its own LRU."""

    system_name = "static_partition"
    # The artifact's static partition runs in Jenga's forks, with their sliding-window retention;
    # in the v1 fork each partition is a vLLM v1 BlockPool (static_partition_manager.py
    # StaticPartitionKVCacheManager.block_pools), hence keep_block_copies (D4) on v1 cells.
    option_names = ("sliding_retention_tokens", "sliding_hit_extra_tokens", "keep_block_copies")

    def make_pool(self, **_):
        lp = self.geometry.large_page_bytes
        num_large = self.capacity_bytes // lp
        nt = len(self.types)
        if num_large < nt:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) must hold at least one large page "
                            f"({lp} bytes) per layer type ({nt} types) for a static partition")
        w = [st.page_bytes * (0.5 if s.kind in HALF_SHARE_KINDS else 1.0) for st, s in zip(self.types, self.specs)]
        share = [max(1, int(num_large * x / sum(w))) for x in w]
        while sum(share) > num_large:  # rounding up to one page each may overshoot: trim the largest
            share[share.index(max(share))] -= 1
        self.shares = share
        return PartitionedPool([st.page_bytes for st in self.types], [n * lp for n in share],
                               self.capacity_bytes, self.enable_prefix_cache)
