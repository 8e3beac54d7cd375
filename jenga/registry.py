"""The one list of systems: name -> manager factory and the metadata every part reads, and
``make_manager`` (docs/CONTRACTS.md §1).

``harness.config`` (valid ``system=`` values, the study variants' needs), ``harness.backends.cost.model``
(which systems ran on the artifact's uniform block manager), the vLLM backends (hybrid manager
on/off and the plugin: :attr:`SystemInfo.vllm_hybrid`, :attr:`SystemInfo.vllm_plugin`) and
``harness.backends.sim.variants`` (options from the cost model, keyed by these names) all read
:data:`REGISTRY`, live. Adding a system: one entry here and a ``harness/conf/system/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from jenga.baselines import HybridGroups, MaxPage, Oracle, StaticPartition, UniformPaged, VllmCurrent
from jenga.baselines.jenga_current import JengaCurrent
from jenga.baselines.keep_embeddings import KeepEmbeddingManager
from jenga.baselines.marconi import MarconiManager
from jenga.baselines.per_model_split import PerModelSplit
from jenga.baselines.sglang import SglangPools
from jenga.baselines.sglang_unified import SglangUnified
from jenga.baselines.trtllm import TrtllmPools
from jenga.baselines.vllm_hma import VllmHma, VllmHmaOff
from jenga.interface import MemoryManager
from jenga.jenga_manager import JengaManager


@dataclass(frozen=True)
class SystemInfo:
    """One system. ``cell``: an ordinary cell system (``system=`` of ``harness.run``, fuzzed on every
    spec mix); False for a study-only variant that needs particular specs or a study's workload
    (spec-decode pairs, VLM embeddings, Mamba prefix caching). ``uniform_block_table``: one block
    table per sequence (vLLM's PagedAttention), as opposed to one per layer type/group.
    ``full_prompt_admission``: the scheduler's default for vLLM 0.32's full-prompt admission gate
    (``scheduler_reserve_full_isl``) -- on for the systems that model today's vLLM, off for the
    engines the artifact ran; ``engine.full_prompt_admission`` overrides it. ``vllm_hybrid``: what the
    system is on the vLLM backends (``vllm_sched``, ``vllm``) — True: vLLM's hybrid KV cache manager
    on, False: off, None: vLLM has no such allocator (sim only). ``vllm_plugin``: on those backends
    the allocator is the jenga_vllm plugin (jenga/'s LCM pool inside vLLM)."""

    factory: Callable[..., MemoryManager]
    cell: bool = True
    uniform_block_table: bool = False
    full_prompt_admission: bool = False
    vllm_hybrid: bool | None = None
    vllm_plugin: bool = False


REGISTRY: dict[str, SystemInfo] = {
    "jenga": SystemInfo(JengaManager, vllm_hybrid=True, vllm_plugin=True),
    "jenga_no_request_aware": SystemInfo(partial(JengaManager, request_aware=False)),
    "vllm": SystemInfo(UniformPaged, uniform_block_table=True, vllm_hybrid=False),
    "max_page": SystemInfo(MaxPage),
    "hybrid_groups": SystemInfo(HybridGroups, vllm_hybrid=True),
    "vllm_current": SystemInfo(VllmCurrent, full_prompt_admission=True, vllm_hybrid=True),
    # Jenga's LCM pool under vLLM 0.32's rules: the simulator arm of the jenga_vllm plugin (crosscheck)
    "jenga_current": SystemInfo(JengaCurrent, full_prompt_admission=True, vllm_hybrid=True, vllm_plugin=True),
    "static_partition": SystemInfo(StaticPartition),
    "oracle": SystemInfo(Oracle),
    # study-only variants: ``system=`` values on backend=sim with what they model (per_model_split:
    # engine.draft_model; marconi: a Mamba model; harness.config._check_variants)
    # vLLM's spec decode: one block table serves both models (the same block count in each cache).
    "per_model_split": SystemInfo(PerModelSplit, cell=False, uniform_block_table=True),
    "keep_embeddings": SystemInfo(KeepEmbeddingManager, cell=False),
    "marconi": SystemInfo(MarconiManager, cell=False),
    # issue 22's what-if rules (harness.whatif): today's engines with their knobs, engine version in
    # each class (jenga/baselines/vllm_hma.py)
    "vllm_hma": SystemInfo(VllmHma, cell=False, full_prompt_admission=True, vllm_hybrid=True),
    "vllm_hma_off": SystemInfo(VllmHmaOff, cell=False, uniform_block_table=True, full_prompt_admission=True,
                               vllm_hybrid=False),
    "sglang_pools": SystemInfo(SglangPools, cell=False),
    "sglang_unified": SystemInfo(SglangUnified, cell=False),
    "trtllm_pools": SystemInfo(TrtllmPools, cell=False),
}
# The cell systems (what the fuzz, the property tests and ``system=`` range over).
SYSTEMS = {name: info.factory for name, info in REGISTRY.items() if info.cell}
SYSTEM_NAMES: tuple[str, ...] = tuple(SYSTEMS)
STUDY_SYSTEM_NAMES: tuple[str, ...] = tuple(name for name, info in REGISTRY.items() if not info.cell)
ALL_SYSTEM_NAMES: tuple[str, ...] = tuple(REGISTRY)


def uniform_block_table_systems() -> frozenset[str]:
    """Names of the systems that keep one block table per sequence."""
    return frozenset(name for name, info in REGISTRY.items() if info.uniform_block_table)


def full_prompt_admission_systems() -> frozenset[str]:
    """Names of the systems whose scheduler admits a request only if its whole prompt fits."""
    return frozenset(name for name, info in REGISTRY.items() if info.full_prompt_admission)


def vllm_systems() -> dict[str, bool]:
    """``{system: hybrid manager on}`` of the systems the vLLM backends can run (read live)."""
    return {name: info.vllm_hybrid for name, info in REGISTRY.items() if info.vllm_hybrid is not None}


def all_system_names() -> tuple[str, ...]:
    """Every registry name, read live (a system registered after import is valid at once)."""
    return tuple(REGISTRY)


def check_system_names(names, what: str) -> None:
    """Raise one clear error when ``names`` (a list or mapping another part keys by system) holds a
    name the registry does not know."""
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        raise ValueError(f"{what}: unknown system(s) {unknown}; registry names: {list(ALL_SYSTEM_NAMES)}")


def make_manager(system: str, specs, capacity_bytes: int, **kw) -> MemoryManager:
    """Build the manager of ``system`` (one of :data:`ALL_SYSTEM_NAMES`) over ``specs``.

    ``kw``: ``tokens_per_page``, ``enable_prefix_cache`` and the system's options."""
    try:
        info = REGISTRY[system]
    except (KeyError, TypeError):
        raise ValueError(f"unknown system {system!r}; valid names: {list(ALL_SYSTEM_NAMES)}") from None
    return info.factory(list(specs), capacity_bytes, **kw)
