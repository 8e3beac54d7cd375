"""Execution backends behind one registry: ``sim`` (the discrete-event simulator, ``sim/``),
``vllm_sched`` (vLLM's real scheduler and KV cache manager, no model) and ``vllm`` (the real
engine, ``vllm/``). Each is a ``run_cell(cfg, profile, requests) -> RunResult`` (contract §4) that
resolves the cell's settings once (:mod:`harness.backends.settings`) and hands them down.

Adding a backend: write its ``run_cell``, add a loader to :data:`REGISTRY` and a
``harness/conf/backend/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable


# Each loader imports its backend only when a cell picks it (the vLLM ones take seconds).
def _sim() -> Callable:
    from harness.backends.sim.engine import run_cell
    return run_cell


def _vllm_sched() -> Callable:
    from harness.backends.vllm.sched import run_cell
    return run_cell


def _vllm() -> Callable:
    from harness.backends.vllm.engine import run_cell
    return run_cell


# name -> loader of that backend's ``run_cell``. The one list of backends (harness.config
# validates ``backend.name`` against it).
REGISTRY: dict[str, Callable[[], Callable]] = {"sim": _sim, "vllm_sched": _vllm_sched, "vllm": _vllm}
BACKEND_NAMES = tuple(REGISTRY)


def run_cell_of(name: str) -> Callable:
    """The ``run_cell`` of backend ``name``; an unknown name is one error listing the valid ones."""
    if name not in REGISTRY:
        raise ValueError(f"backend.name={name!r} is not valid; allowed: {sorted(REGISTRY)}")
    return REGISTRY[name]()
