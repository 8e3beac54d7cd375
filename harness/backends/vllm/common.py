"""What both vLLM backends (``vllm_sched``: vLLM's scheduler without a model; ``vllm``: the real
engine) share: which allocator a system is in vLLM — read live from ``jenga.registry``
(:attr:`~jenga.registry.SystemInfo.vllm_hybrid`, :attr:`~jenga.registry.SystemInfo.vllm_plugin`) —
its name in the record, and the check of ``backend.options``."""

from __future__ import annotations

from jenga.registry import REGISTRY, vllm_systems

JENGA_ALLOCATOR = "jenga_lcm (jenga_vllm plugin: jenga/ LCM pool under vLLM's per-type managers)"


def hybrid_for_system(system: str, backend: str) -> bool:
    """Whether the hybrid manager runs for ``system``; other systems give a clear error."""
    systems = vllm_systems()
    if system not in systems:
        raise ValueError(f"system={system!r} cannot run on backend={backend}: vLLM has no such allocator; "
                         f"allowed systems: {sorted(systems)} (use backend=sim for the others)")
    return systems[system]


def runs_plugin(system: str) -> bool:
    """Whether ``system`` runs the jenga_vllm plugin on a vLLM backend."""
    info = REGISTRY.get(system)
    return bool(info and info.vllm_plugin)


def allocator_name(hybrid: bool, jenga: bool = False) -> str:
    if jenga:
        return JENGA_ALLOCATOR
    return "vllm_hybrid_kv_cache_manager" if hybrid else "vllm_kv_cache_manager(hybrid off)"


def check_options(options: dict, allowed: set[str], backend: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"backend.options {unknown} unknown for backend={backend}; allowed: {sorted(allowed)}")
