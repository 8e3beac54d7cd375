"""JengaCurrent: Jenga's LCM allocator under today's vLLM (0.32) prefix-caching rules.

The like-for-like simulator arm of the jenga_vllm plugin (``backend=vllm_sched system=jenga``):
the plugin puts ``jenga/``'s two-level LCM pool (request-aware placement, large-page LRU eviction,
prefix-subset evictor) under vLLM 0.32's own per-type managers, which keep deciding hits and
freeing. So this system is :class:`~jenga.jenga_manager.JengaManager`'s pool and page-layer
storage types with :class:`~jenga.baselines.current.TodaysVllmRules`:

- sliding-window pages are freed at the real window (no 192-token retention: vLLM 0.32's
  ``SlidingWindowManager.remove_skipped_blocks``), and hits are checked against the real window
  (``SlidingWindowManager.find_longest_cache_hit``);
- only reachable sliding-window blocks are hashed (D3), the shared-prefix junction is pinned
  (D2) and every copy of a block stays under its hash, the oldest found first (D4; vLLM's
  ``BlockHashToBlockMap``), as in :class:`~jenga.baselines.current.VllmCurrent`;
- freed blocks join the cache in release order (the plugin's ``JengaGroupPool.free_blocks``
  stamps each ``free_blocks`` call with a fresh clock tick).

``system=jenga`` stays the artifact's Jenga (its forks' retention and widened hit check); this one
exists so that ``make crosscheck`` compares the plugin with a simulator arm under the same rules.
The full-prompt admission gate (D1) is the scheduler's, on by default for this system as for
``vllm_current`` (``jenga.registry.SystemInfo.full_prompt_admission``).
"""

from __future__ import annotations

from jenga.baselines.current import TodaysVllmRules
from jenga.jenga_manager import JengaManager


class JengaCurrent(TodaysVllmRules, JengaManager):
    """Jenga's LCM pool + vLLM 0.32's prefix-caching rules (D2, D3, D4), no retention."""

    system_name = "jenga_current"
    # No sliding_retention_tokens / sliding_hit_extra_tokens: vLLM 0.32 frees and checks hits at
    # the real window; request_aware stays Jenga's (the plugin's LcmPagePool(request_aware=True)).
    option_names = ("request_aware",)
    # Mamba states follow vLLM 0.32's MambaManager (as in vllm_current), not Jenga's checkpoint hold.
    hold_last_checkpoints = 0
