"""Jenga keeps a running request's two latest Mamba checkpoints per type, as the AE's
LinearAttentionManager does (``free_skipped_blocks`` frees all but the last 3 blocks of a request's
state table -- the decode state and the two latest checkpoints -- stamping the freed ones to be
evicted first). Without it every checkpoint joined the cache one step after it was written, with
that step's timestamp, and was evicted while the attention pages of the same prefix stayed held by
their running owner: a sibling then found the whole attention prefix but no state at its end
(Qwen3.5-35B-A3B, long documents: hit rate 0.045, 43 preemptions).
"""

from __future__ import annotations

from conftest import req

import jenga
from jenga.policies import STALE_TS
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


def _held(mm, rid):
    return [x[3] for x in mm.reqs[rid].held_ckpts]


def test_running_owner_keeps_its_latest_checkpoints():
    mm, a, b = _running_owner("jenga")
    assert _held(mm, "a") == [64, 128]
    # a's attention pages up to 150 are held (a runs); its checkpoint at 128 must still be there
    assert mm.lookup_prefix(b) == 128
    mm.free(req("c", list(range(5000, 5432))))        # room for b's own state
    assert mm.allocate(b, 190 - 128)
    check_invariants(mm)
    mm.begin_step()                                   # b's pinned hit is now b's latest checkpoint
    assert _held(mm, "b") == [128]
    mm.free(a)                                        # shared with b: a lets go, b still holds it
    check_invariants(mm)
    mm.free(b)
    check_invariants(mm)


def test_without_the_hold_the_sibling_loses_the_state():
    """The negative control: jenga_current releases every checkpoint after one step, and the
    unrelated prompt's pages evict them while ``a``'s attention pages stay held."""
    mm, _a, b = _running_owner("jenga_current")
    assert mm.reqs["a"].held_ckpts == ()
    assert mm.lookup_prefix(b) < 128


def test_held_checkpoints_join_the_cache_when_their_owner_finishes():
    mm, a, b = _running_owner("jenga")
    mm.free(a)
    assert mm.reqs.get("a") is None
    assert mm.lookup_prefix(b) == 128                 # cached, no longer held
    check_invariants(mm)


def test_a_newer_checkpoint_releases_the_oldest_held_one_stale():
    mm = jenga.make_manager("jenga", SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 100)                        # checkpoint at 64
    mm.begin_step()
    assert _held(mm, "a") == [64]
    assert mm.allocate(a, 100)                        # checkpoints at 128, 192
    mm.begin_step()
    assert _held(mm, "a") == [128, 192]
    check_invariants(mm)
    assert mm.pool.used[1] == 3 and mm.pool.cached[1] == 1  # live state + 128, 192 held; 64 cached
    t = 1
    sid = mm.index[t][mm.reqs["a"].hasher.hash_at(64)]
    assert mm.pool.evictor.timestamp(t, sid) == STALE_TS    # a skipped block: evicted first


def test_stale_pages_first_off_gives_skipped_checkpoints_their_release_time():
    mm = jenga.make_manager("jenga", SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True,
                            stale_pages_first=False)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 200)                        # checkpoints at 64, 128, 192
    mm.begin_step()
    sid = mm.index[1][mm.reqs["a"].hasher.hash_at(64)]
    assert mm.pool.evictor.timestamp(1, sid) > STALE_TS


def test_vllm_state_rules_hold_nothing():
    mm = jenga.make_manager("jenga_current", SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 200)
    mm.begin_step()
    assert mm.reqs["a"].held_ckpts == ()


def test_marconi_in_jengas_fork_holds_its_checkpoints():
    """Marconi's admission (branch point and last prompt token) runs in Jenga's fork, whose state
    manager keeps a running request's latest state blocks: both its checkpoints stay held."""
    mm = jenga.make_manager("marconi", SPECS, 16 * LARGE, tokens_per_page=16, enable_prefix_cache=True)
    a = req("a", list(range(300)))
    assert mm.allocate(a, 300)
    mm.begin_step()
    assert _held(mm, "a") == [288]                   # the last prompt token's block (no branch: nothing cached)
    check_invariants(mm)
