"""The oracle's prefix cache (exact cases), the oracle as a capacity bound over random streams, and
the request-aware regression: at ratio 1 (every type has the same small page) request-aware
placement must change nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_jenga_props import MIXES, Req, make_req, op, run_stream

import jenga
from jenga import FullAttentionSpec, SlidingWindowSpec, TokenDropSpec, make_manager

FULL = [FullAttentionSpec("full", 2, 64)]  # 128 bytes per token


def _req(rid, tokens):
    toks = np.asarray(tokens, dtype=np.int32)
    return Req(rid, toks, (), [], len(toks), 1)


def test_oracle_hits_a_shared_prefix_and_caches_exact_bytes():
    o = make_manager("oracle", FULL, 100_000, tokens_per_page=16, enable_prefix_cache=True)
    a = _req("a", list(range(40)))
    assert o.lookup_prefix(a) == 0
    assert o.allocate(a, 40)
    u = o.usage()
    assert (u.needed_bytes, u.cached_bytes, u.fragmentation_bytes) == (40 * 128, 0, 0)
    o.free(a)
    u = o.usage()
    # Two full 16-token blocks stay cached, exact bytes; the 8-token tail block is not a full block.
    assert (u.needed_bytes, u.cached_bytes, u.free_bytes) == (0, 32 * 128, 100_000 - 32 * 128)
    b = _req("b", list(range(35)) + [999] * 5)  # shares 35 tokens with a: two full blocks
    assert o.lookup_prefix(b) == 32
    assert o.allocate(b, 8)
    assert o.num_computed_tokens(b) == 40
    u = o.usage()
    assert (u.needed_bytes, u.cached_bytes) == (40 * 128, 0)
    u.check()


def test_oracle_evicts_cached_bytes_only_when_needed_oldest_first():
    cap = 64 * 128  # room for 64 tokens
    o = make_manager("oracle", FULL, cap, tokens_per_page=16, enable_prefix_cache=True)
    a, b = _req("a", range(32)), _req("b", range(100, 132))
    for r in (a, b):
        assert o.allocate(r, 32)
        o.free(r)
    assert o.usage().cached_bytes == 64 * 128  # the whole capacity is cache, nothing evicted yet
    c = _req("c", range(200, 216))
    assert o.allocate(c, 16)  # needs 16 tokens: exactly one block of a (the oldest) goes
    assert o.usage().cached_bytes == 48 * 128 and o.usage().free_bytes == 0
    # a's longest (last) block went first (aligned), so a's first block still hits.
    assert o.lookup_prefix(_req("a2", list(range(32)) + [7])) == 16
    assert o.lookup_prefix(_req("b2", list(range(100, 132)) + [7])) == 32
    assert not o.allocate(_req("d", range(300, 380)), 80)  # more than capacity: refused, nothing evicted
    assert o.usage().cached_bytes == 48 * 128


def test_oracle_sliding_window_hit_needs_only_the_window():
    specs = [SlidingWindowSpec("swa", 1, 64, window=8)]
    o = make_manager("oracle", specs, 10**6, tokens_per_page=4, enable_prefix_cache=True)
    a = _req("a", range(40))
    assert o.allocate(a, 40)
    o.free(a)
    # Evict the pages the window before token 32 does not read (those ending at 4..24).
    ev = o.pool.evictor
    keep = {k for k in ev.in_order() if -ev.key_of(*k)[1] > 24}
    o.pool.evict_until(sum(o.pool.data[k] for k in keep), keep)
    assert o.usage().cached_bytes == 16 * 64  # pages ending at 28..40 (16 tokens)
    hit = o.lookup_prefix(_req("b", list(range(33)) + [5]))
    assert hit == 32  # only tokens 24..32 (the window) must be cached


@settings(max_examples=30, deadline=None)
@given(mix=st.sampled_from(sorted(MIXES)), tpp=st.sampled_from([1, 2, 4]), cap_pages=st.integers(2, 30),
       ops=st.lists(op, min_size=1, max_size=40))
def test_oracle_accepts_whatever_jenga_accepts(mix, tpp, cap_pages, ops):
    """Same capacity, cache off: replaying onto the oracle the allocations Jenga granted (and its
    frees) never fails, and the oracle never occupies more bytes than Jenga allocates."""
    specs = MIXES[mix]
    geo = jenga.page_geometry(specs, tpp)
    cap = geo.large_page_bytes * max(cap_pages, len(specs))
    j = make_manager("jenga", specs, cap, tokens_per_page=tpp)
    o = make_manager("oracle", specs, cap, tokens_per_page=tpp)
    running: list = []
    for i, x in enumerate(ops):
        if x[0] == "new":
            _, base, shared, suffix, out_len, image_id, image_len, chunk = x
            r = make_req(i, mix, base, shared, suffix, out_len, image_id, image_len)
            n = r.target if chunk is None else min(chunk, r.target)
            if j.allocate(r, n):
                assert o.allocate(r, n)
                running.append(r)
            else:
                j.free(r)
        elif running:
            r = running[x[1] % len(running)]
            done = j.num_computed_tokens(r)
            if x[0] == "free" or done >= r.target + r.out_len:
                j.free(r)
                o.free(r)
                running.remove(r)
                continue
            n = min(4, r.target + r.out_len - done)
            if j.allocate(r, n):
                assert o.allocate(r, n)
            else:
                j.free(r)
                o.free(r)
                running.remove(r)
        assert o.usage().needed_bytes <= j.usage().allocated_bytes
        assert o.usage().needed_bytes == j.usage().needed_bytes


RATIO_ONE = {"full+drop": [FullAttentionSpec("full", 2, 64), TokenDropSpec("drop", 2, 64, keep_ratio=0.5,
                                                                                min_tokens=4, sink=2)]}


@settings(max_examples=60, deadline=None)
@given(tpp=st.sampled_from([1, 4]), cache=st.booleans(), cap_pages=st.integers(2, 10),
       ops=st.lists(op, min_size=5, max_size=60))
def test_request_aware_is_a_no_op_when_every_small_page_is_the_large_page(tpp, cache, cap_pages, ops):
    """Regression (ablation anomaly on PyramidKV-70B): with one small-page size the large page is one
    small page, so request-aware placement has nothing to choose; Jenga and Jenga without it must
    take the same paths and end with the same usage. (Small pools with the cache on used to differ:
    out of free large pages, the variant without request-awareness evicted its own type's LRU
    small page, Jenga the LRU large page of any type.)"""
    MIXES.update(RATIO_ONE)
    try:
        assert jenga.page_geometry(RATIO_ONE["full+drop"], tpp).large_page_bytes == 2 * 64 * tpp
        a = run_stream("jenga", "full+drop", tpp, cache, cap_pages, ops).usage()
        b = run_stream("jenga_no_request_aware", "full+drop", tpp, cache, cap_pages, ops).usage()
    finally:
        del MIXES["full+drop"]
    assert a.path_counts == b.path_counts and a.path_counts["request_hit"] == 0
    assert (a.cached_bytes, a.free_bytes) == (b.cached_bytes, b.free_bytes)
