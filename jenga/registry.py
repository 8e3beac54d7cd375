"""System names -> manager classes, and ``make_manager`` (docs/CONTRACTS.md §1)."""

from __future__ import annotations

from functools import partial

from jenga.baselines import HybridGroups, MaxPage, Oracle, StaticPartition, UniformPaged, VllmCurrent
from jenga.interface import MemoryManager
from jenga.manager import JengaManager

SYSTEMS = {
    "jenga": JengaManager,
    "jenga_no_request_aware": partial(JengaManager, request_aware=False),
    "vllm": UniformPaged,
    "max_page": MaxPage,
    "hybrid_groups": HybridGroups,
    "vllm_current": VllmCurrent,
    "static_partition": StaticPartition,
    "oracle": Oracle,
}
SYSTEM_NAMES: tuple[str, ...] = tuple(SYSTEMS)


def make_manager(system: str, specs, capacity_bytes: int, **kw) -> MemoryManager:
    """Build the manager of ``system`` (one of :data:`SYSTEM_NAMES`) over ``specs``.

    ``kw``: ``tokens_per_page``, ``enable_prefix_cache`` and the system's options."""
    try:
        cls = SYSTEMS[system]
    except (KeyError, TypeError):
        raise ValueError(f"unknown system {system!r}; valid names: {list(SYSTEM_NAMES)}") from None
    return cls(list(specs), capacity_bytes, **kw)
