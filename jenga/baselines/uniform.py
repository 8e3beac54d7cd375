"""UniformPaged: PagedAttention (vLLM v0.6.3) over a heterogeneous model.

One storage type holds every token-based layer (full, sliding, chunked, token-drop, cross) for every
token of the request -- text tokens and, for cross-attention models, image tokens too: the paper's
``(T + I) * (32 + 8) * E`` -- for the request's whole lifetime (the full-attention policy never
frees). Mamba states take ``ceil(state / page)`` pages. Vision embeddings live outside the KV pool
in vLLM v0 (activation memory), so they are neither stored nor counted here.
"""

from __future__ import annotations

from jenga.manager_base import PagedManager
from jenga.policies import CrossPolicy, FullPolicy, MambaPolicy, cdiv
from jenga.pools.flat import FlatPagePool
from jenga.reqstate import StorageType
from jenga.spec import FullAttentionSpec, MambaSpec, SpecError, VisionEmbeddingSpec


class UniformPaged(PagedManager):
    """vLLM v0.6.3 PagedAttention: one page size, no per-type freeing."""

    system_name = "vllm"
    # keep_block_copies (D4, jenga/prefix.py): the v1 cells' baseline (--disable-hybrid-allocator) is
    # the v1 fork's KVCacheManager over vLLM v1's BlockPool (kv_cache_manager.py), which keeps every
    # copy of a block under its hash; v0's PrefixCachingBlockAllocator keeps one per hash.
    option_names = ("keep_block_copies",)

    def accounted_specs(self):
        return [s for s in self.specs if not isinstance(s, VisionEmbeddingSpec)]

    def storage_types(self, **_):
        tpp = self.tokens_per_page
        token_specs = [s for s in self.specs if s.token_based and not isinstance(s, VisionEmbeddingSpec)]
        mamba = [s for s in self.specs if isinstance(s, MambaSpec)]
        bpt = sum(s.bytes_per_token for s in token_specs)
        page = tpp * bpt if bpt else max(s.state_bytes for s in mamba)
        self.page_bytes = page
        out = []
        if bpt:
            merged = FullAttentionSpec("uniform", 1, bpt)
            out.append(StorageType("uniform", FullPolicy(merged), tpp, page, bpt))
            if not self.images_in_prompt:
                out.append(StorageType("uniform/image", CrossPolicy(merged), tpp, page, bpt))
        for s in mamba:
            out.append(StorageType(s.name, MambaPolicy(s, pages_per_state=cdiv(s.state_bytes, page)), tpp,
                                   page, 0, s.state_bytes))
        return out

    def make_pool(self, **_):
        pool = FlatPagePool(len(self.types), self.page_bytes, self.capacity_bytes, self.enable_prefix_cache)
        if pool.num_pages == 0:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) must hold at least one page "
                            f"({self.page_bytes} bytes)")
        return pool
