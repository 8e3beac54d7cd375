"""Mamba checkpoints become hittable at the next engine step, not at their owner's next allocate.

vLLM v0 (both artifact forks) marks every scheduled request's blocks computed at the end of
``Scheduler.schedule``; under v0's prefill-first scheduling the owner of a checkpoint is often
not scheduled in the next step (more prefills wait), yet a sibling admitted then must hit it.
"""

from __future__ import annotations

import pytest
from conftest import req

import jenga
from jenga.spec import FullAttentionSpec, MambaSpec
from jenga.testing import check_invariants

SPECS = [FullAttentionSpec("full", num_layers=2, bytes_per_token_per_layer=64),
         MambaSpec("mamba", num_layers=4, bytes_per_token_per_layer=4096, state_bytes_per_layer=4096,
                   conv_bytes_per_layer=512, checkpoint_interval=64)]


def _pair(system: str):
    mm = jenga.make_manager(system, SPECS, 4 << 20, tokens_per_page=16, enable_prefix_cache=True)
    shared = list(range(150))                     # two checkpoints (64, 128) of a 150-token prefix
    a = req("a", shared + list(range(1000, 1040)))
    b = req("b", shared + list(range(2000, 2040)))
    return mm, a, b


@pytest.mark.parametrize("system", ["jenga", "static_partition", "max_page"])
def test_checkpoint_hit_after_begin_step_even_if_owner_waits(system):
    mm, a, b = _pair(system)
    assert mm.lookup_prefix(a) == 0 and mm.allocate(a, 190)   # step 1: a's prefill writes 2 checkpoints
    mm.begin_step()                                             # step 2: a is not scheduled (prefill first)
    assert mm.lookup_prefix(b) == 128                            # the longest checkpoint <= 150, exactly
    assert mm.allocate(b, 190 - 128)
    check_invariants(mm)


def test_without_step_announcement_checkpoint_waits_for_owner():
    """Negative control: the fallback for callers that never announce steps keeps the checkpoint
    with its owner until the owner's next allocate, so the same sequence finds no hit."""
    mm, a, b = _pair("jenga")
    assert mm.allocate(a, 190)
    assert mm.lookup_prefix(b) == 0
    a.output_token_ids.append(7)
    assert mm.allocate(a, 1)                                    # the owner's next step releases it
    assert mm.lookup_prefix(b) == 128


def test_begin_step_releases_hit_pins_and_accounts_them():
    mm, a, b = _pair("jenga")
    mm.allocate(a, 190)
    mm.begin_step()
    held_before = mm.usage().allocated_bytes
    assert mm.lookup_prefix(b) == 128 and mm.allocate(b, 62)   # pins the checkpoint at 128 this step
    assert mm.reqs["b"].transients
    mm.begin_step()
    assert not mm.reqs["b"].transients and not mm.reqs["a"].transients
    mm.begin_step()                                             # idempotent with nothing held
    check_invariants(mm)
    assert mm.usage().allocated_bytes >= held_before
