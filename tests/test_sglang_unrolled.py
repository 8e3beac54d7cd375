"""The SGLang rules' unrolled paths (issue 20) equal the per-page methods they unroll: with 1-token
pages a long prompt registers ~100k radix nodes and its eviction walks as many, so
``SglangPools._cacheable_run`` (parent links of a registered run at once) and
``SglangPools._evict_nodes`` (phase 1, phase 2 and the tombstone walk in one loop) replace
``_cacheable`` and ``_on_evict`` -> ``_free_node`` / ``_is_leaf`` / ``_delete_tombstone_leaves``
when nothing is logged. Two managers, one with the unrolled paths and one without, are driven in
lockstep by the same random stream under memory pressure; their whole state (pools, free lists,
index, radix links, counters) must be equal after every operation."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jenga.baselines.sglang import SglangPools
from jenga.baselines.sglang_unified import SglangUnified
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from jenga.testing import StubRequest, check_invariants, state_fingerprint

MIXES = {
    "full+swa": [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=5)],
    # two full and two SWA types: the loops over several types of a kind
    "2full+2swa": [FullAttentionSpec("f1", 1, 64), FullAttentionSpec("f2", 2, 32),
                   SlidingWindowSpec("w4", 1, 32, window=4), SlidingWindowSpec("w9", 2, 64, window=9)],
    "full+swa+mamba": [FullAttentionSpec("full", 1, 64), SlidingWindowSpec("swa", 2, 64, window=6),
                       MambaSpec("mamba", 1, 1, state_bytes_per_layer=500, conv_bytes_per_layer=50,
                                 checkpoint_interval=8)],
}


def _capacity(specs, tokens: int, states: int = 12) -> int:
    """Bytes for ``tokens`` tokens of every token-based layer and ``states`` Mamba states: prompts
    of up to ~130 tokens then evict all the time."""
    per_token = sum(s.bytes_per_token for s in specs if s.token_based)
    return per_token * tokens + states * sum(s.state_bytes for s in specs if isinstance(s, MambaSpec))


def _pair(system: str, specs, capacity: int, unrolled: bool = True, **switches):
    """The system as registered, and its per-page twin (no _cacheable_run, no _evict_nodes)."""
    base = {"sglang_pools": SglangPools, "sglang_unified": SglangUnified}[system]
    per_page = type("PerPage", (base,), {"_cacheable_run": None, "unrolled": False})
    fast = type("Fast", (base,), {"unrolled": unrolled, **switches})
    make = {"tokens_per_page": 1, "enable_prefix_cache": True}
    return fast(specs, capacity, **make), per_page(specs, capacity, **make)


def _fp(mm):
    # The two classes differ by name only; the state below them must not.
    return state_fingerprint(mm)[1]


def _lockstep(a, b, seed: int, ops: int = 120) -> int:
    """Drive ``a`` and ``b`` with one random stream (prompts sharing three prefixes, growth, frees,
    engine steps); assert equal answers and equal state after every operation. Returns how many
    pages ``a`` evicted."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 50) for _ in range(rng.randrange(20, 90))] for _ in range(3)]
    running: list[StubRequest] = []
    for i in range(ops):
        x = rng.random()
        if running and x < 0.25:
            r = running.pop(rng.randrange(len(running)))
            a.free(r)
            b.free(r)
        elif running and x < 0.6:
            r = rng.choice(running)
            n = rng.randrange(1, 12)
            ok = a.allocate(r, n)
            assert ok == b.allocate(r, n), f"op {i}: allocate answers differ"
            if not ok:
                a.free(r)
                b.free(r)
                running.remove(r)
        else:
            tokens = rng.choice(prefixes)[:rng.randrange(10, 90)] + [rng.randrange(50, 99) for _ in
                                                                   range(rng.randrange(1, 40))]
            r = StubRequest(f"r{i}", np.asarray(tokens, dtype=np.int32))
            hit = a.lookup_prefix(r)
            assert hit == b.lookup_prefix(r), f"op {i}: hits differ"
            ok = a.allocate(r, len(tokens) - hit)
            assert ok == b.allocate(r, len(tokens) - hit), f"op {i}: admissions differ"
            if ok:
                running.append(r)
            else:
                a.free(r)
                b.free(r)
        a.begin_step()
        b.begin_step()
        assert _fp(a) == _fp(b), f"op {i}: state differs"
        check_invariants(a)
    for r in running:
        a.free(r)
        b.free(r)
    assert _fp(a) == _fp(b)
    return a._evictions


@pytest.mark.parametrize("system", ["sglang_pools", "sglang_unified"])
@pytest.mark.parametrize("mix", [m if m == "full+swa" else pytest.param(m, marks=pytest.mark.slow)
                                 for m in sorted(MIXES)])  # one mix in the fast suite, all in CI
def test_unrolled_paths_equal_the_per_page_methods(system, mix):
    specs = MIXES[mix]
    evicted = 0
    for seed in range(3):
        a, b = _pair(system, specs, _capacity(specs, 150 + 60 * seed))
        evicted += _lockstep(a, b, seed)
    assert evicted > 300  # the streams do evict (else the comparison says nothing)


def test_negative_control_a_changed_unrolled_path_is_caught():
    """The unrolled side without phase 2's leaf deletion against the full per-page rules: the
    lockstep check must see the difference (the streams reach phase 2)."""
    specs = MIXES["full+swa"]
    caught = 0
    for seed in range(3):
        a, b = _pair("sglang_pools", specs, _capacity(specs, 150), phase2_frees_leaves=False)
        try:
            _lockstep(a, b, seed)
        except AssertionError:
            caught += 1
    assert caught > 0


def test_a_subclass_overriding_cacheable_loses_the_batch_form():
    """Registration takes ``_cacheable_run`` only from the class that defines the ``_cacheable`` in
    force: a subclass with its own ``_cacheable`` is asked page by page."""
    from jenga.manager_base import PagedManager, _cacheable_run_of

    class OwnRule(SglangPools):
        def _cacheable(self, rs, t, j):
            return True

    assert _cacheable_run_of(SglangPools) is SglangPools._cacheable_run
    assert _cacheable_run_of(SglangUnified) is SglangPools._cacheable_run
    assert _cacheable_run_of(OwnRule) is None and _cacheable_run_of(PagedManager) is None
