"""The systems Jenga is judged against, behind the same facade (``jenga.interface.MemoryManager``).

- :class:`UniformPaged` -- PagedAttention as in vLLM v0.6.3: one page size, every layer keeps every
  token (text and image) for the request's lifetime, whole-prefix LRU cache.
- :class:`MaxPage` -- per-type freeing, every type's page padded to the largest small page.
- :class:`HybridGroups` -- today's vLLM hybrid KV cache manager: equal-layer-count groups, one page
  byte size (block size scaled or page padded), one shared pool and LRU queue; no LCM.
- :class:`VllmCurrent` -- vLLM 0.32's hybrid manager: HybridGroups plus reachable-only sliding-window
  caching and shared-prefix junction pinning (today's vLLM, as its own system).
- :class:`~jenga.baselines.jenga_current.JengaCurrent` -- Jenga's LCM pool under vLLM 0.32's rules
  (what the jenga_vllm plugin runs: no retention past the window, D2, D3).
- :class:`StaticPartition` -- a fixed pool per type, sized at start (the artifact's shares).
- :class:`Oracle` -- byte-granular, keeps exactly what some layer will still read (waste 0).
"""

from jenga.baselines.current import VllmCurrent
from jenga.baselines.groups import HybridGroups, MaxPage
from jenga.baselines.oracle import Oracle
from jenga.baselines.static import StaticPartition
from jenga.baselines.uniform import UniformPaged

__all__ = ["HybridGroups", "MaxPage", "Oracle", "StaticPartition", "UniformPaged", "VllmCurrent"]
