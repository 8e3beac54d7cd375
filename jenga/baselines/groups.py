"""Baselines with per-type freeing but one page size: MaxPage and HybridGroups (today's vLLM)."""

from __future__ import annotations

import math

from jenga.manager_base import PagedManager
from jenga.policies import MambaPolicy, policy_for
from jenga.pools.flat import FlatPagePool
from jenga.reqstate import StorageType
from jenga.spec import SpecError, VisionEmbeddingSpec


class _OnePageSize(PagedManager):
    """Shared flat pool of ``self.page_bytes`` pages and one LRU queue of cached pages."""

    def make_pool(self, **_):
        pool = FlatPagePool(len(self.types), self.page_bytes, self.capacity_bytes, self.enable_prefix_cache)
        if pool.num_pages == 0:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) must hold at least one page "
                            f"({self.page_bytes} bytes)")
        return pool


class MaxPage(_OnePageSize):
    """Every type's small page padded to the largest one (the artifact's dummy-layer max page)."""

    system_name = "max_page"
    # The artifact's max page runs in Jenga's forks, with their sliding-window retention; in the v1
    # fork it is HybridKVCacheManager over vLLM v1's BlockPool (kv_cache_utils.py
    # _get_kv_cache_config_max_page), hence keep_block_copies (D4) on v1 cells.
    option_names = ("sliding_retention_tokens", "sliding_hit_extra_tokens", "keep_block_copies")

    def storage_types(self, **_):
        self.page_bytes = self.geometry.max_small_page_bytes
        return [StorageType(st.name, st.policy, st.tokens_per_page, self.page_bytes,
                            st.data_bytes_per_token, st.state_bytes)
                for st in super().storage_types()]


class HybridGroups(_OnePageSize):
    """vLLM's hybrid KV cache manager (see vllm_notes.md, ``get_kv_cache_groups``).

    Each layer type's layers are dealt into groups of ``G`` layer slots (``G`` = the smallest type's
    layer count, or the largest when max < 1.5 x min); a group short of ``G`` real layers is padded.
    Attention block sizes are raised until the attention page is at least the Mamba page; then
    every group's page is made the largest page's size: tokens per block scaled by the ratio when
    it divides, the page padded otherwise (and for Mamba). Vision embeddings are not in the KV
    pool (vLLM's encoder cache holds them), so they are neither stored nor counted."""

    system_name = "hybrid_groups"
    # Upstream frees at exactly the window (retention 0, the default); the option lets the ablation
    # give it the artifact's 192 tokens to separate retention from the LCM allocator.
    # keep_block_copies (D4): the hybrid manager exists only in vLLM v1, over its BlockPool, which
    # keeps every copy of a block under its hash; harness/conf/system/hybrid_groups.yaml turns it on.
    option_names = ("sliding_retention_tokens", "sliding_hit_extra_tokens", "keep_block_copies")

    def _stored_specs(self):
        # vLLM keeps encoder outputs in its encoder cache, outside the KV pool (as vLLM v0 did).
        return [s for s in self.specs if not isinstance(s, VisionEmbeddingSpec)]

    def accounted_specs(self):
        return self._stored_specs()

    def storage_types(self, **_):
        tpp = self.tokens_per_page
        stored = self._stored_specs()
        if not stored:
            raise SpecError("hybrid_groups needs at least one KV cache layer type besides vision embeddings")
        counts = [s.num_layers for s in stored]
        G = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
        groups = []  # (spec, index, real layers)
        for s in stored:
            ng = -(-s.num_layers // G)
            for i in range(ng):
                groups.append((s, i, len(range(i, s.num_layers, ng))))
        mamba_page = max((G * s.state_bytes_per_layer for s, _, _ in groups if not s.token_based), default=0)
        attn = [s for s, _, _ in groups if s.token_based]
        block = tpp
        if mamba_page and attn:
            widest = max(G * s.bytes_per_token_per_layer for s in attn)
            block = tpp * max(1, -(-mamba_page // (widest * tpp)))
        pages = {id(g): (G * g[0].bytes_per_token_per_layer * block if g[0].token_based else mamba_page)
                 for g in groups}
        P = max(pages.values())
        self.page_bytes = P
        self.group_size = G
        out = []
        for g in groups:
            s, i, real = g
            name = f"{s.name}/g{i}"
            if not s.token_based:
                out.append(StorageType(name, MambaPolicy(s), tpp, P, 0, real * s.state_bytes_per_layer))
                continue
            p = pages[id(g)]
            t = block * (P // p) if P % p == 0 else block
            bpt = real * s.bytes_per_token_per_layer
            out.append(StorageType(name, policy_for(s, bytes_per_token=bpt, **self._policy_options(s)), t, P, bpt))
        return out

    @property
    def groups_meta(self) -> list[dict]:
        """Resolved groups (name, tokens per block, page bytes) for records."""
        return [{"name": st.name, "tokens_per_page": st.tokens_per_page, "page_bytes": st.page_bytes}
                for st in self.types]

    def _check_math(self) -> None:  # pragma: no cover - documentation of the invariant
        assert all(st.page_bytes == self.page_bytes for st in self.types)
        assert math.gcd(*(st.tokens_per_page for st in self.types)) >= 1
