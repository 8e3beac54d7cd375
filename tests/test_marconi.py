"""Marconi-style Mamba prefix caching: admission only at branch points and the last prompt token,
hits at any checkpointed position, FLOP-aware eviction keys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jenga
from harness.workloads.request import Request
from jenga.baselines.marconi import MarconiManager
from jenga.spec import FullAttentionSpec, MambaSpec

SPECS = (FullAttentionSpec("full", 1, 64),
         MambaSpec("mamba", 2, 4096, state_bytes_per_layer=4096, conv_bytes_per_layer=1024, checkpoint_interval=32))
CAP = 1 << 24


def _req(rid: str, tokens) -> Request:
    return Request(rid, 0.0, np.asarray(tokens, dtype=np.int32), 4)


A = _req("A", range(100))                                   # 100 tokens
B = _req("B", list(range(64)) + [5000 + i for i in range(16)])  # shares A's first 64 tokens, 80 long
C = _req("C", list(range(64)) + [9000 + i for i in range(40)])  # shares the same 64, then its own


def _serve(mm, req) -> int:
    """Admit a request as the scheduler does (lookup, allocate the rest), then finish it."""
    hit = mm.lookup_prefix(req)
    assert mm.allocate(req, len(req.prompt_token_ids) - hit)
    req.output_token_ids.append(1)
    assert mm.allocate(req, 1)
    mm.free(req)
    return hit


def _fresh(*reqs):
    return [Request(r.request_id, 0.0, r.prompt_token_ids, 4) for r in reqs]


def test_admits_only_at_branch_points_and_last_token():
    a, b, c = _fresh(A, B, C)
    mm = MarconiManager(SPECS, CAP, 16, True)
    assert mm.admission_points(a) == [96]           # nothing cached: only the last (block-aligned) token
    assert _serve(mm, a) == 0 and mm.admitted == 1
    assert mm.admission_points(b) == [64, 80]       # branch at A's shared 64 tokens, and B's end
    assert _serve(mm, b) == 0                       # no state at 64 yet: no hit
    assert mm.admitted == 3
    assert _serve(mm, c) == 64                      # C reuses the branch-point checkpoint


def test_jenga_interval_checkpoints_every_interval():
    a, b, c = _fresh(A, B, C)
    mm = jenga.make_manager("jenga", SPECS, CAP, enable_prefix_cache=True)
    assert _serve(mm, a) == 0
    assert _serve(mm, b) == 64                      # a multiple of 32 inside the shared prefix
    assert _serve(mm, c) == 64
    # A alone left checkpoints at 32, 64, 96: three states against Marconi's one.
    a2 = _fresh(A)[0]
    mm2 = jenga.make_manager("jenga", SPECS, CAP, enable_prefix_cache=True)
    _serve(mm2, a2)
    assert mm2.usage().cached_bytes // mm2.types[1].page_bytes == 3


def test_hit_at_unaligned_last_token_checkpoint():
    a, a_again = _fresh(A, A)
    a_again.request_id = "A2"
    mm = MarconiManager(SPECS, CAP, 16, True)
    _serve(mm, a)
    assert _serve(mm, a_again) == 96                # not a multiple of the 32-token interval


def test_flop_aware_key_prefers_long_prefixes():
    mm = MarconiManager(SPECS, CAP, 16, True, flop_alpha=1.0, prefix_flops=lambda L: float(L * L + 100 * L))
    mm.now = 1000
    keys = [mm.checkpoint_eviction_key(L) for L in (16, 64, 256, 1024)]
    assert keys == sorted(keys) and keys[0] >= 1000 and keys[-1] <= 2000
    lru = MarconiManager(SPECS, CAP, 16, True, flop_alpha=0.0, prefix_flops=lambda L: float(L))
    lru.now = 1000
    assert lru.checkpoint_eviction_key(1024) == 1000


def test_bad_alpha():
    with pytest.raises(ValueError, match="flop_alpha"):
        MarconiManager(SPECS, CAP, 16, True, flop_alpha=-1.0)


@pytest.mark.parametrize("alpha,first_evicted", [(1.0, 64), (0.0, 80)])
def test_flop_aware_eviction_order(alpha, first_evicted):
    # B leaves checkpoints at 64 (branch) and 80 (last token), released together. LRU alone breaks
    # the tie by evicting the longest prefix first (aligned); FLOP-aware keeps the longer, costlier one.
    a, b = _fresh(A, B)
    mm = MarconiManager(SPECS, CAP, 16, True, flop_alpha=alpha, prefix_flops=lambda L: float(L * L))
    _serve(mm, a)
    _serve(mm, b)
    t = 1
    h = mm._hasher(b)
    sid = {pos: mm.index[t][h.hash_at(pos)] for pos in (64, 80)}
    ev = mm.pool.evictor
    ts = {pos: ev.timestamp(t, s) for pos, s in sid.items()}
    assert (ts[80] > ts[64]) == (alpha > 0)
    order = sorted(sid, key=lambda pos: ev.key_of(t, sid[pos]))
    assert order[0] == first_evicted


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 120), st.integers(1, 90)), min_size=1, max_size=8))
def test_checkpoints_only_at_branch_points_or_last_token(reqs):
    """Random requests = (shared stem id, shared length, own suffix length): every checkpoint Marconi
    admits sits at the request's last block-aligned prompt token or where its cached prefix ends."""
    mm = MarconiManager(SPECS, CAP, 16, True)
    seen = []
    for i, (stem, shared, own) in enumerate(reqs):
        toks = [stem * 1000 + j for j in range(shared)] + [10**6 + 1000 * i + j for j in range(own)]
        r = _req(f"r{i}", toks)
        pts = mm.admission_points(r)
        n = len(toks)
        assert len(pts) <= 2 and all(p % 16 == 0 and 0 < p <= n for p in pts)
        assert n < 16 or n - n % 16 in pts                       # the last token, block-aligned
        branch = [p for p in pts if p != n - n % 16]
        if branch:  # a branch point never extends past what another request shared
            assert any(toks[:branch[0]] == prev[:branch[0]] for prev in seen)
        before = mm.admitted
        _serve(mm, r)
        assert mm.admitted - before <= len(pts)
        seen.append(toks)
