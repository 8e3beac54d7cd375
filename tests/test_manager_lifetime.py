"""A dropped manager is freed by reference counting, not left for the cyclic collector.

The simulator runs each cell with the collector off and turns it back on only after the cell's
manager is gone (``harness.backends.sim.engine.run_cell``). That is only cheap when the manager,
its pool and their page records form no reference cycle: otherwise every record of a finished
long-context cell (~800k objects) waits for a collection that walks them all (issue 20). The pool
calls the manager's eviction hooks through a weak reference for this reason."""

from __future__ import annotations

import gc
import random
import weakref

import pytest

import jenga
from jenga.fuzz import MIXES, admit_or_free, make_stream_manager


def _drive(m, rng: random.Random, mix: str) -> None:
    """Admit, grow and free requests with shared prefixes on a small pool: hits, evictions and
    failed allocations all happen."""
    for r in admit_or_free(m, rng, mix, 40, 0.4):
        m.free(r)


def _dropped_alive(system: str, mix: str, seed: int, strong_hook: bool = False) -> bool:
    """Whether the manager outlives its last reference with the collector off."""
    rng = random.Random(seed)
    was_on = gc.isenabled()
    gc.disable()
    try:
        m, *_ = make_stream_manager(rng, system, mix)
        if strong_hook:
            m.pool.on_evict = m._on_evict  # the old wiring: pool -> manager -> pool
        _drive(m, rng, mix)
        ref = weakref.ref(m)
        del m
        alive = ref() is not None
    finally:
        gc.collect()
        if was_on:
            gc.enable()
    return alive


@pytest.mark.parametrize("system", jenga.SYSTEM_NAMES)
def test_dropped_manager_is_freed_without_the_collector(system):
    for k, mix in enumerate(sorted(MIXES)):
        assert not _dropped_alive(system, mix, seed=100 + k), f"{system} / {mix}: manager kept alive by a cycle"


def test_a_strong_hook_is_caught():
    """Negative control: a pool holding the manager's bound method keeps it alive."""
    assert _dropped_alive("jenga", min(MIXES), seed=7, strong_hook=True)


def test_weak_hook_calls_the_override():
    """The hook looks the method up at each call: a subclass's (or an instance's) override runs."""
    m, *_ = make_stream_manager(random.Random(3), "jenga", min(MIXES))
    seen = []
    m._on_evict = lambda t, sid: seen.append((t, sid))
    m.pool.on_evict(0, 5)
    assert seen == [(0, 5)]
