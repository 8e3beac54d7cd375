"""Exact cases from the paper (arXiv v1 §3.2, §4.1, §5.1-5.2) and bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import req

import jenga
from jenga import (
    CrossAttentionSpec,
    FullAttentionSpec,
    ImageSpan,
    MambaSpec,
    SlidingWindowSpec,
    SpecError,
    make_manager,
    page_geometry,
)
from jenga.policies import SlidingPolicy
from jenga.testing import check_invariants


def test_paper_toy_geometry_and_layout():
    """Two cross-attention and three self-attention layers of 128 B/token (paper Fig. 6)."""
    specs = [CrossAttentionSpec("image", 2, 128), FullAttentionSpec("text", 3, 128)]
    geo = page_geometry(specs, tokens_per_page=1)
    assert geo.small_page_bytes == {"image": 256, "text": 384}
    assert geo.large_page_bytes == 768
    m = make_manager("jenga", specs, 768 * 4, tokens_per_page=1)
    assert m.pool.ratio == [3, 2]
    r = req("r", [1, 2, 3], [ImageSpan(7, 4, 0)])
    assert m.allocate(r, 3)
    # 4 image pages of 256 B (2 large pages: 3 + 1) and 3 text pages of 384 B (2 large pages).
    assert m.usage().per_type_allocated_bytes == {"image": 4 * 256, "text": 3 * 384}
    assert m.usage().large_pages_used == 4
    assert m.usage().waste_fraction == 0.0
    check_invariants(m)


LLAMA_VISION = [FullAttentionSpec("self", 32, 4096), CrossAttentionSpec("cross", 8, 4096)]


@pytest.mark.parametrize("tpp", [1, 16])
def test_llama32_vision_uniform_waste_is_79_6_percent(tpp):
    """MMMU-pro average request: 43 text + 6193 image tokens; PagedAttention stores (T+I)(32+8)E."""
    r = req("mmmu", np.arange(43), [ImageSpan(1, 6193, 0)])
    u = make_manager("vllm", LLAMA_VISION, 2 * 10**9, tokens_per_page=tpp)
    o = make_manager("oracle", LLAMA_VISION, 2 * 10**9, tokens_per_page=tpp)
    j = make_manager("jenga", LLAMA_VISION, 2 * 10**9, tokens_per_page=tpp)
    for m in (u, o, j):
        assert m.allocate(r, 43)
    ideal = (43 * 32 + 6193 * 8) * 4096
    assert o.usage().allocated_bytes == o.usage().needed_bytes == ideal
    assert u.usage().needed_bytes == ideal == j.usage().needed_bytes
    # Waste measured against the ideal: 1 - ideal / uniform (page rounding included for tpp > 1).
    uniform_alloc = u.usage().allocated_bytes
    assert uniform_alloc == (-(-43 // tpp) + -(-6193 // tpp)) * tpp * 40 * 4096
    if tpp == 1:
        assert round(1 - ideal / uniform_alloc, 4) == 0.7959
        assert j.usage().allocated_bytes == ideal
    assert round(u.usage().waste_fraction, 3) == (0.796 if tpp == 1 else round(1 - ideal / uniform_alloc, 3))
    assert j.usage().waste_fraction < 0.01


def _waste_at_full_context(specs, max_len, tpp):
    managers = {s: make_manager(s, specs, 32 * 10**9, tokens_per_page=tpp) for s in ("vllm", "jenga", "oracle")}
    r = req("long", np.zeros(max_len - 1))
    r.output_token_ids.append(1)
    for m in managers.values():
        assert m.allocate(r, max_len - 1) and m.allocate(r, 1)  # prefill, then the last decode step
        m.usage().check()
    return {s: m.usage().waste_fraction for s, m in managers.items()}


def test_gemma2_upper_bound_25_percent():
    """Half the layers slide over 4096 tokens; at the 8k maximum, uniform paging wastes 25 %."""
    kv = 8 * 256 * 2 * 2
    specs = [FullAttentionSpec("full", 21, kv), SlidingWindowSpec("sliding", 21, kv, window=4096)]
    w = _waste_at_full_context(specs, 8192, tpp=1)
    assert w["vllm"] == pytest.approx(0.25, abs=1e-12)
    assert w["jenga"] == 0.0 and w["oracle"] == 0.0


def test_ministral_upper_bound_56_25_percent():
    """Three quarters of the layers slide over 32k tokens; at 128k, uniform paging wastes 56.25 %."""
    kv = 8 * 128 * 2 * 2
    specs = [FullAttentionSpec("full", 9, kv), SlidingWindowSpec("sliding", 27, kv, window=32768)]
    w = _waste_at_full_context(specs, 131072, tpp=16)
    assert w["vllm"] == pytest.approx(0.5625, abs=1e-12)
    assert w["oracle"] == 0.0
    assert w["jenga"] < 1e-3  # one partly needed page at the window edge


def test_sliding_window_possible_prefixes_paper_example():
    """Paper §5.1-5.2, window 2, request ABCDEFGHIJ, one token per page. With the sliding-window
    pages of D (position 3, kept by Req1 [ABCD]->[EF] and Req2 [ABCDG]->[H], which share ABCD) and
    of I and J cached, and A-C, E-H gone, the valid sliding-window prefixes are exactly
    (the empty prefix,) ABCD, ABCDEFGHI and ABCDEFGHIJ: prefix L needs only the window-1 = 1 token
    before L."""
    pol = SlidingPolicy(SlidingWindowSpec("sw", 1, 2, window=2))
    cached = {3, 8, 9}  # D, I, J
    valid = pol.get_possible_prefix(lambda j: j in cached, upper=10, tpp=1)
    word = "ABCDEFGHIJ"
    assert [word[:L] for L in valid] == ["", "ABCD", "ABCDEFGHI", "ABCDEFGHIJ"]
    prefix = np.cumsum([0] + [1 if j in cached else 0 for j in range(10)])
    count = lambda a, b: prefix[b] - prefix[a]
    assert pol.longest_valid(count, 10, 1, 1) == 10
    assert pol.longest_valid(count, 8, 1, 1) == 4


def test_sliding_window_hit_through_manager():
    """The same rule end to end: Req1 ABCD->EF, Req2 ABCDG->H leave ABCDE cached for both types."""
    specs = [FullAttentionSpec("full", 1, 8), SlidingWindowSpec("sw", 1, 8, window=2)]
    m = make_manager("jenga", specs, 8 * 64, tokens_per_page=1, enable_prefix_cache=True)
    A, B, C, D, E, F, G, H, I, J = range(10)
    r1 = req("r1", [A, B, C, D])
    assert m.lookup_prefix(r1) == 0 and m.allocate(r1, 4)
    r1.output_token_ids.append(E)
    assert m.allocate(r1, 1)       # decode E: sliding layer frees A, B, C (stale, cached)
    assert m.usage().per_type_allocated_bytes == {"full": 5 * 8, "sw": 2 * 8}
    r1.output_token_ids.append(F)
    m.free(r1)
    r2 = req("r2", [A, B, C, D, G])
    assert m.lookup_prefix(r2) == 4  # ABCD: full needs A-D, sliding needs D
    assert m.allocate(r2, 1)
    m.free(r2)
    r3 = req("r3", [A, B, C, D, E, F, G, H, I, J])
    assert m.lookup_prefix(r3) == 5  # ABCDE computed by Req1
    check_invariants(m)


def test_unknown_system_lists_valid_names():
    with pytest.raises(ValueError) as e:
        make_manager("paged_attention", LLAMA_VISION, 10**9)
    for name in jenga.SYSTEM_NAMES:
        assert name in str(e.value)


@pytest.mark.parametrize("bad, field_name", [
    (lambda: FullAttentionSpec("f", 2, 0), "bytes_per_token_per_layer"),
    (lambda: FullAttentionSpec("f", 0, 64), "num_layers"),
    (lambda: SlidingWindowSpec("s", 1, 64, window=0), "window"),
    (lambda: MambaSpec("m", 1, 1, state_bytes_per_layer=0), "state_bytes_per_layer"),
    (lambda: make_manager("jenga", LLAMA_VISION, 100), "capacity_bytes"),
    (lambda: make_manager("vllm", LLAMA_VISION, 0), "capacity_bytes"),
    (lambda: make_manager("static_partition", LLAMA_VISION, 16 * 4096 * 40), "capacity_bytes"),
    (lambda: make_manager("jenga", LLAMA_VISION, 10**9, tokens_per_page=0), "tokens_per_page"),
    (lambda: make_manager("jenga", LLAMA_VISION, 10**9, bogus=1), "bogus"),
])
def test_bad_input_names_the_field(bad, field_name):
    with pytest.raises(SpecError, match=field_name):
        bad()


@pytest.mark.parametrize("system", jenga.SYSTEM_NAMES)
def test_request_larger_than_capacity_fails_cleanly(system):
    specs = [FullAttentionSpec("full", 1, 64), SlidingWindowSpec("sw", 1, 32, window=4)]
    m = make_manager(system, specs, 64 * 16 * 8, tokens_per_page=16)
    small, big = req("s", np.arange(20)), req("b", np.arange(100_000))
    assert m.allocate(small, 20)
    before = m.usage()
    assert not m.allocate(big, 100_000)
    after = m.usage()
    assert after.allocated_bytes == before.allocated_bytes and m.num_computed_tokens(big) == 0
    with pytest.raises(SpecError, match="num_new_tokens"):
        m.allocate(small, -1)
    assert m.num_computed_tokens(small) == 20
    m.free(big)  # freeing a request that holds nothing is a no-op
    m.free(small)
    assert m.usage().allocated_bytes == 0


def test_sliding_window_example_reached_through_eviction():
    """The same three valid prefixes, produced by the manager: request X [ABCDEFGHI] -> [J K]
    releases A..H from the window early (stale, evicted first); Req2 [ABCDG] -> [H] hits ABCD and
    refreshes D; memory pressure then evicts exactly the seven stale pages A B C E F G H. For the
    request ABCDEFGHIJ..., the sliding-window type's valid prefixes are ABCD, ABCDEFGHI and
    ABCDEFGHIJ; full attention has all ten tokens, so the hit is ABCDEFGHIJ."""
    specs = [FullAttentionSpec("full", 1, 8), SlidingWindowSpec("sw", 1, 8, window=2)]
    m = make_manager("jenga", specs, 8 * 23, tokens_per_page=1, enable_prefix_cache=True)
    A, B, C, D, E, F, G, H, I, J, K = range(11)
    x = req("x", [A, B, C, D, E, F, G, H, I])
    assert m.allocate(x, 9)
    x.output_token_ids.append(J)
    assert m.allocate(x, 1)
    x.output_token_ids.append(K)
    m.free(x)
    r2 = req("r2", [A, B, C, D, G])
    assert m.lookup_prefix(r2) == 4 and m.allocate(r2, 1)
    m.free(r2)
    z = req("z", [100, 101, 102, 103])
    assert m.allocate(z, 4)
    assert m.usage().path_counts["evict_large"] == 7
    q = req("q", [A, B, C, D, E, F, G, H, I, J, 50])
    hasher = m._hasher(q)
    sw = [st.name for st in m.types].index("sw")
    valid = m.types[sw].policy.get_possible_prefix(lambda j: hasher.hash_at(j + 1) in m.index[sw], 10, 1)
    assert ["ABCDEFGHIJ"[:L] for L in valid] == ["", "ABCD", "ABCDEFGHI", "ABCDEFGHIJ"]
    assert m.lookup_prefix(q) == 10
    check_invariants(m)
