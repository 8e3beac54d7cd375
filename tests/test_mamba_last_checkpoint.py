"""Jenga keeps a running request's latest Mamba checkpoint (the paper's Mamba update_last_access:
"only the last cached token"; the AE's LinearAttentionManager keeps the last blocks of the state
table while the request runs). Without it every checkpoint joined the cache one step after it
was written, with that step's timestamp, and was evicted while the attention pages of the same
prefix stayed held by their running owner: a sibling then found the whole attention prefix but
no state at its end (Qwen3.5-35B-A3B, long documents: hit rate 0.045, 43 preemptions; 0.733 and
none with the hold).
"""

from __future__ import annotations

import pytest
from conftest import req

import jenga
from jenga.spec import FullAttentionSpec, MambaSpec
from jenga.testing import check_invariants

# Full page 2 layers x 64 B x 16 tokens = 2048 B; Mamba state 4 x (4096 + 512) = 18432 B: a large
# page is one state or 9 attention pages.
SPECS = [FullAttentionSpec("full", num_layers=2, bytes_per_token_per_layer=64),
         MambaSpec("mamba", num_layers=4, bytes_per_token_per_layer=4096, state_bytes_per_layer=4096,
                   conv_bytes_per_layer=512, checkpoint_interval=64)]
LARGE = 18432


def _running_owner(system: str):
    """``a`` (190 tokens: checkpoints at 64 and 128 of a 150-token shared prefix) keeps running;
    then ``c``, an unrelated prompt, takes every large page but the ones ``a`` holds."""
    mm = jenga.make_manager(system, SPECS, 8 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    shared = list(range(150))
    a = req("a", shared + list(range(1000, 1040)))
    b = req("b", shared + list(range(2000, 2040)))
    c = req("c", list(range(5000, 5432)))            # 27 attention pages (3 large) + its state
    assert mm.allocate(a, 190)                        # step 1: a's prefill writes both checkpoints
    mm.begin_step()                                   # step 2: they are computed
    assert mm.lookup_prefix(c) == 0 and mm.allocate(c, 432)
    check_invariants(mm)
    return mm, a, b


def test_running_owner_keeps_its_latest_checkpoint():
    mm, a, b = _running_owner("jenga")
    # a's attention pages up to 150 are held (a runs); its checkpoint at 128 must still be there
    assert mm.lookup_prefix(b) == 128
    mm.free(req("c", list(range(5000, 5432))))        # room for b's own state
    assert mm.allocate(b, 190 - 128)
    check_invariants(mm)
    mm.begin_step()                                   # b's pinned hit is now b's latest checkpoint
    assert [x[3] for x in mm.reqs["b"].last_ckpt.values()] == [128]
    mm.free(a)                                        # shared with b: a lets go, b still holds it
    check_invariants(mm)
    mm.free(b)
    check_invariants(mm)


def test_held_checkpoint_joins_the_cache_when_its_owner_finishes():
    mm, a, b = _running_owner("jenga")
    mm.free(a)
    assert mm.reqs.get("a") is None
    assert mm.lookup_prefix(b) == 128                 # cached, no longer held
    check_invariants(mm)


def test_a_newer_checkpoint_releases_the_older_one():
    mm = jenga.make_manager("jenga", SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 100)                        # checkpoint at 64
    mm.begin_step()
    assert [x[3] for x in mm.reqs["a"].last_ckpt.values()] == [64]
    assert mm.allocate(a, 100)                        # checkpoints at 128, 192
    mm.begin_step()
    assert [x[3] for x in mm.reqs["a"].last_ckpt.values()] == [192]
    check_invariants(mm)
    assert mm.pool.used[1] == 2 and mm.pool.cached[1] == 2  # live state + 192 held; 64, 128 cached


@pytest.mark.parametrize("system", ["jenga_current", "marconi"])
def test_systems_with_their_own_state_rules_hold_nothing(system):
    mm = jenga.make_manager(system, SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 200)
    mm.begin_step()
    assert mm.reqs["a"].last_ckpt == {}
