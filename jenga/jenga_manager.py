"""JengaManager: the paper's allocator behind the one facade.

Two-level LCM pool (``pools.lcm.LcmPagePool``): one small page per layer type per ``tokens_per_page``
tokens (page-layer layout: the page carries every layer of the type), large pages of the LCM of the
small-page sizes, request-aware placement, per-type freeing through the policies, and per-type
prefix caching with the prefix-subset evictor. ``request_aware=False`` is the ablation
(``"jenga_no_request_aware"``): a free small page anywhere first, then a new large page.
"""

from __future__ import annotations

from jenga.manager_base import PagedManager
from jenga.pools.lcm import LcmPagePool
from jenga.spec import SpecError


class JengaManager(PagedManager):
    """Jenga: LCM two-level allocator with request-aware allocation and per-type prefix caching."""

    system_name = "jenga"
    # keep_block_copies (D4, jenga/prefix.py): the v1 fork's Jenga registers and evicts cached blocks
    # in vLLM v1's BlockPool (hybrid_kv_cache_manager.py HybridKVCacheManager: one BlockPool for
    # every group, cache_full_blocks / get_new_blocks -> _maybe_evict_cached_block); v0: one per hash.
    # stale_pages_first (default True, the paper's update_last_access): False is a what-if knob
    # (jenga/policies.py Policy.stale_ts).
    option_names = ("request_aware", "sliding_retention_tokens", "sliding_hit_extra_tokens",
                    "keep_block_copies", "stale_pages_first")
    # The AE's LinearAttentionManager: a running request keeps its two latest checkpoints (prefix.py).
    hold_last_checkpoints = 2

    def make_pool(self, request_aware: bool = True, **_) -> LcmPagePool:
        pool = LcmPagePool([st.page_bytes for st in self.types], self.capacity_bytes,
                           request_aware=bool(request_aware), enable_cache=self.enable_prefix_cache)
        if pool.num_large == 0:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) must hold at least one large page "
                            f"({pool.large_page_bytes} bytes = LCM of the small pages "
                            f"{dict(self.geometry.small_page_bytes)})")
        self.request_aware = bool(request_aware)
        return pool
