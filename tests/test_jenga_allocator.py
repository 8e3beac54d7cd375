"""Exact behaviour of the two-level pool, the evictor, the per-type policies and the baselines."""

from __future__ import annotations

import numpy as np
import pytest
from test_jenga_exact import req

from jenga import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    ImageSpan,
    MambaSpec,
    SlidingWindowSpec,
    TokenDropSpec,
    VisionEmbeddingSpec,
    make_manager,
)
from jenga.evictor import PrefixSubsetEvictor
from jenga.pools.lcm import LcmPagePool
from jenga.testing import check_invariants

CROSS, TEXT = 0, 1  # the paper's toy: small pages 256 (3 per large page) and 384 (2 per large page)


def toy_pool(n_large: int, request_aware: bool = True, cache: bool = False) -> LcmPagePool:
    return LcmPagePool([256, 384], 768 * n_large, request_aware=request_aware, enable_cache=cache)


def test_request_aware_paths():
    p = toy_pool(3)
    a1 = p.alloc(TEXT, "A")
    a2 = p.alloc(TEXT, "A")
    assert a1 // 2 == a2 // 2  # A's second page fills A's large page
    b1 = p.alloc(TEXT, "B")
    assert b1 // 2 != a1 // 2  # B takes a new large page rather than a page near A's
    p.free(TEXT, a2)
    p.alloc(CROSS, "C")  # last free large page
    assert p.alloc(TEXT, "D") == a2  # no large page left: D steals A's free small page
    b2 = p.alloc(TEXT, "D")          # ... and then B's
    assert b2 // 2 == b1 // 2
    assert p.path_counts == {"request_hit": 1, "new_large": 3, "evict_large": 0, "steal": 2,
                             "any_free_small": 0, "evict_small": 0}
    assert p.alloc(TEXT, "D") is None and p.alloc(CROSS, "C") is not None  # C's large page has 2 more
    for t, sid in [(TEXT, a1), (TEXT, a2)]:
        p.free(t, sid)
    assert len(p.free_large) == 1 and p.lp_type[a1 // 2] == -1  # both small pages free -> large page free
    p.free(TEXT, b1)
    assert len(p.free_large) == 1  # B's large page still holds D's page
    p.free(TEXT, b2)
    assert len(p.free_large) == 2


def test_without_request_awareness_a_free_small_page_comes_first():
    p = toy_pool(3, request_aware=False)
    a1 = p.alloc(TEXT, "A")
    b1 = p.alloc(TEXT, "B")
    assert b1 // 2 == a1 // 2  # shares A's large page
    assert p.path_counts["any_free_small"] == 1 and p.path_counts["new_large"] == 1


def test_without_request_awareness_cache_is_evicted_only_when_memory_is_full():
    """Ablation fidelity: the variant without request-awareness must not evict cached pages while
    an empty large page is left (it used to evict a cached small page first)."""
    p = toy_pool(3, request_aware=False, cache=True)
    evicted = []
    p.on_evict = lambda t, sid: evicted.append((t, sid))
    a1, a2 = p.alloc(TEXT, "A"), p.alloc(TEXT, "A")  # one full text large page
    p.to_cached(TEXT, a1, ts=1, plen=1)
    p.to_cached(TEXT, a2, ts=1, plen=2)
    b = p.alloc(TEXT, "B")                        # an empty large page, not a cached small page
    assert evicted == [] and b // 2 != a1 // 2 and p.path_counts["new_large"] == 2
    assert p.alloc(TEXT, "B") // 2 == b // 2      # a free small page of the type comes first
    p.alloc(CROSS, "C")                           # the last empty large page
    p.alloc(TEXT, "D")                            # full: evict the evictable large page (LRU)
    assert sorted(evicted) == sorted([(TEXT, a1), (TEXT, a2)]) and p.path_counts["evict_large"] == 1


def test_five_step_allocation_with_cache():
    p = toy_pool(3, cache=True)
    evicted = []
    p.on_evict = lambda t, sid: evicted.append((t, sid))
    old = p.alloc(TEXT, "A")                       # large page 0, one free text slot beside it
    p.to_cached(TEXT, old, ts=1, plen=1)           # A finished: its page is cached
    assert len(p.large_lru) == 1                   # every small page cached or empty: evictable
    b = p.alloc(TEXT, "B")                         # (2) an empty large page, not the cached one's
    assert b // 2 != old // 2
    c = p.alloc(CROSS, "C")                        # (2) the last empty large page
    assert p.alloc(TEXT, "B") // 2 == b // 2       # (1) B's own large page
    e = p.alloc(CROSS, "E")                        # (3) evict the evictable large page (LRU)
    assert evicted == [(TEXT, old)] and e // 3 == old // 2
    f = p.alloc(CROSS, "F")                        # (4) an empty small page of another request
    assert p.path_counts["steal"] == 1 and f // 3 in (c // 3, e // 3)
    while p.nfree_slots[CROSS]:
        p.alloc(CROSS, "F")                        # use up every empty cross page
    p.to_cached(CROSS, c, ts=2, plen=5)
    p.to_cached(CROSS, e, ts=3, plen=1)
    assert p.alloc(CROSS, "H") == c                # (5) evict a cached small page, oldest first
    assert evicted[-1] == (CROSS, c)
    assert p.path_counts["evict_large"] == 1 and p.path_counts["evict_small"] == 1


def test_evictor_is_lru_then_longest_prefix_first():
    ev = PrefixSubsetEvictor(2)
    ev.add(0, 10, ts=5, plen=16)
    ev.add(0, 11, ts=5, plen=32)
    ev.add(0, 12, ts=4, plen=8)
    ev.add(1, 20, ts=5, plen=32)
    assert ev.peek_lru(0) == (0, 12)  # least recently used first
    ev.remove(0, 12)
    assert ev.peek_lru(0) == (0, 11)  # equal timestamps: the longest prefix goes first (aligned)
    shared = PrefixSubsetEvictor(2, per_type=False)
    shared.add(0, 1, ts=3, plen=4)
    shared.add(1, 2, ts=2, plen=4)
    assert shared.peek_lru() == (1, 2) and shared.peek_lru(0) == (0, 1)


def test_aligned_eviction_keeps_a_prefix():
    specs = [FullAttentionSpec("full", 1, 64)]
    m = make_manager("jenga", specs, 64 * 10, tokens_per_page=1, enable_prefix_cache=True)
    r = req("a", np.arange(8))
    assert m.allocate(r, 8)
    m.free(r)
    other = req("b", np.arange(100, 105))
    assert m.lookup_prefix(other) == 0 and m.allocate(other, 5)  # needs 3 of the 8 cached pages
    assert m.usage().path_counts["evict_small"] + m.usage().path_counts["evict_large"] == 3
    assert m.lookup_prefix(req("c", np.arange(9))) == 5  # the last three tokens went first
    check_invariants(m)


def test_sliding_window_pages_released_early_are_evicted_first():
    """Balanced eviction: pages that fell out of the window (stale) go before in-window ones."""
    specs = [FullAttentionSpec("full", 1, 64), SlidingWindowSpec("sw", 1, 64, window=3)]
    m = make_manager("jenga", specs, 64 * 40, tokens_per_page=1, enable_prefix_cache=True)
    r = req("a", np.arange(10))
    assert m.allocate(r, 6)
    assert m.allocate(r, 4)  # prev=6: the window keeps tokens 4, 5 -> pages 0..3 released, stale
    assert m.usage().per_type_allocated_bytes == {"full": 640, "sw": 6 * 64}
    m.free(r)
    ev = m.pool.evictor
    stale = [sid for sid in range(40) if ev.contains(1, sid) and ev.timestamp(1, sid) < 0]
    assert len(stale) == 4
    assert m.pool.evictor.peek_lru(1)[1] in stale


def test_mamba_checkpoints_give_hits_at_interval_boundaries():
    specs = [FullAttentionSpec("full", 1, 64),
             MambaSpec("mamba", 2, 1, state_bytes_per_layer=96, checkpoint_interval=4)]
    m = make_manager("jenga", specs, 64 * 96, tokens_per_page=2, enable_prefix_cache=True)
    a = req("a", np.arange(10))
    assert m.allocate(a, 10)
    assert m.usage().per_type_allocated_bytes["mamba"] == 3 * 192  # running state + checkpoints 4, 8
    m.free(a)
    assert m.lookup_prefix(req("b", np.r_[np.arange(9), 99])) == 8
    assert m.lookup_prefix(req("c", np.r_[np.arange(6), 99, 99, 99])) == 4  # full hit 6, state at 4
    d = req("d", np.r_[np.arange(9), 99])
    assert m.lookup_prefix(d) == 8 and m.allocate(d, 2)
    assert m.num_computed_tokens(d) == 10
    check_invariants(m)


def test_token_drop_frees_the_middle():
    spec = TokenDropSpec("drop", 1, 10, keep_ratio=0.5, min_tokens=4, sink=2)
    m = make_manager("jenga", [FullAttentionSpec("full", 1, 10), spec], 10**6, tokens_per_page=1)
    u = make_manager("vllm", [FullAttentionSpec("full", 1, 10), spec], 10**6, tokens_per_page=1)
    r = req("a", np.arange(20))
    r.output_token_ids.append(5)
    for mm in (m, u):
        assert mm.allocate(r, 20) and mm.allocate(r, 1)
    # context 20 keeps 10 tokens: 2 sink + 8 recent (12..19), plus the new token 20
    assert m.usage().per_type_allocated_bytes["drop"] == 11 * 10
    assert m.usage().needed_bytes == u.usage().needed_bytes == (21 + 11) * 10
    assert u.usage().allocated_bytes == 21 * 20


def test_vision_embeddings_freed_as_prefill_consumes_them():
    specs = [FullAttentionSpec("full", 1, 64), VisionEmbeddingSpec("vision", 1, 96)]
    m = make_manager("jenga", specs, 10**6, tokens_per_page=1)
    r = req("a", np.arange(10), [ImageSpan(3, 6, 2)])
    seen = []
    for n in (4, 4, 2):
        assert m.allocate(r, n)
        seen.append(m.usage().per_type_allocated_bytes["vision"] // 96)
    assert seen == [6, 4, 0]


def test_chunked_local_keeps_the_current_chunk():
    specs = [FullAttentionSpec("full", 1, 8), ChunkedLocalSpec("local", 1, 8, chunk=8)]
    m = make_manager("jenga", specs, 10**6, tokens_per_page=2)
    r = req("a", np.arange(20))
    assert m.allocate(r, 20) and m.allocate(r, 1)
    assert m.usage().per_type_allocated_bytes == {"full": 11 * 16, "local": 3 * 16}  # tokens 16..20


def test_hybrid_groups_equal_layers_and_one_page_size():
    kv = 4096
    m = make_manager("hybrid_groups", [FullAttentionSpec("self", 32, kv), CrossAttentionSpec("cross", 8, kv)],
                     10**9, tokens_per_page=16)
    assert m.group_size == 8 and len(m.types) == 5
    assert {st.page_bytes for st in m.types} == {8 * kv * 16}
    odd = make_manager("hybrid_groups", [FullAttentionSpec("full", 5, kv), SlidingWindowSpec("sw", 7, kv)],
                       10**9, tokens_per_page=1)
    assert odd.group_size == 7  # max < 1.5 x min: the larger count, full gets 2 padding layers
    r = req("a", np.arange(10))
    assert odd.allocate(r, 10)
    u = odd.usage()
    assert u.fragmentation_bytes == 10 * 2 * kv and u.needed_bytes == 10 * 12 * kv
    jamba = make_manager("hybrid_groups", [FullAttentionSpec("attn", 4, kv),
                                           MambaSpec("mamba", 28, 1, state_bytes_per_layer=300_000)],
                         10**10, tokens_per_page=16)
    attn = [st for st in jamba.types if st.name.startswith("attn")]
    assert jamba.group_size == 4 and len(jamba.types) == 8
    assert attn[0].tokens_per_page == 16 * 5  # block raised until 4 x 4096 x block >= 4 x 300000
    assert jamba.page_bytes == 4 * kv * 16 * 5
    llava = make_manager("hybrid_groups", [FullAttentionSpec("full", 28, kv), VisionEmbeddingSpec("vision", 1, 7168)],
                         10**9, tokens_per_page=16)
    assert [st.name for st in llava.types] == ["full/g0"]  # encoder outputs live outside the KV pool


def test_static_partition_shares_and_stranded_memory():
    kv = 64
    specs = [FullAttentionSpec("full", 1, kv), SlidingWindowSpec("sw", 1, kv, window=4)]
    m = make_manager("static_partition", specs, 64 * 30, tokens_per_page=1)
    assert m.shares == [20, 10]  # proportional to page size, halved for the sliding window
    r = req("a", np.arange(25))
    assert not m.allocate(r, 25)  # the full-attention partition holds only 20 pages
    u = m.usage()
    assert u.free_stranded_bytes == u.free_bytes == 64 * 30


def test_uniform_paged_mamba_state_takes_whole_pages():
    specs = [FullAttentionSpec("attn", 1, 64), MambaSpec("mamba", 1, 1, state_bytes_per_layer=1000)]
    m = make_manager("vllm", specs, 10**6, tokens_per_page=4)
    assert m.allocate(req("a", np.arange(5)), 5)
    u = m.usage()
    assert u.per_type_allocated_bytes == {"uniform": 2 * 256, "mamba": 4 * 256}
    assert u.needed_bytes == 5 * 64 + 1000


@pytest.mark.parametrize("system", ["jenga", "jenga_no_request_aware"])
def test_usage_reports_occupancy_and_paths(system):
    m = make_manager(system, [CrossAttentionSpec("image", 2, 128), FullAttentionSpec("text", 3, 128)],
                     768 * 8, tokens_per_page=1)
    assert m.allocate(req("a", [1, 2, 3], [ImageSpan(1, 4, 0)]), 3)
    u = m.usage()
    assert u.large_pages_total == 8 and u.large_pages_used == 4 and u.large_page_occupancy == 0.5
    assert sum(u.path_counts[k] for k in ("request_hit", "new_large", "steal", "any_free_small")) == 7
    assert u.free_stranded_bytes == 2 * 256 + 384  # free small pages inside used large pages


def test_cross_attention_pages_are_cached_per_image():
    """Images are cached by image_id: a new request with other text reuses the image's KV, and
    all pages of one image share one random priority (evicted together)."""
    specs = [FullAttentionSpec("text", 1, 64), CrossAttentionSpec("cross", 1, 64)]
    m = make_manager("jenga", specs, 64 * 64, tokens_per_page=1, enable_prefix_cache=True)
    a = req("a", np.arange(5), [ImageSpan(7, 4, 0), ImageSpan(8, 4, 1)])
    assert m.allocate(a, 5)
    m.free(a)
    order = []
    ev = m.pool.evictor
    keys = sorted((ev.key_of(1, sid), m.page_key[1][sid][0]) for sid in m.page_key[1])
    order = [image for _, image in keys]
    assert sorted(order) == [7] * 4 + [8] * 4 and order in ([7] * 4 + [8] * 4, [8] * 4 + [7] * 4)
    b = req("b", np.arange(100, 103), [ImageSpan(8, 4, 0)])
    assert m.lookup_prefix(b) == 0 and m.allocate(b, 3)
    assert m.pool.cached[1] == 4 and m.pool.used[1] == 4  # image 8 served from the cache
    check_invariants(m)


def test_an_uncached_image_bounds_the_hit_at_a_page_boundary():
    """A hit stops at an image whose cross-attention KV is not cached -- at its first token, rounded
    down to a whole page: with 2 tokens per page and the image at token 3, the text pages of
    [0, 4) cached, the hit is 2 tokens, not 3 (token 2's page would be allocated fresh and never
    written). With the image cached the hit takes the text prefix the prompt allows (4)."""
    specs = [FullAttentionSpec("text", 1, 64), CrossAttentionSpec("cross", 1, 64)]
    m = make_manager("jenga", specs, 64 * 64, tokens_per_page=2, enable_prefix_cache=True)
    a = req("a", np.arange(6), [ImageSpan(1, 4, 3)])
    assert m.allocate(a, 6)
    m.free(a)
    b = req("b", np.r_[np.arange(4), 99], [ImageSpan(1, 4, 3)])
    assert m.lookup_prefix(b) == 4  # the image is cached: text pages [0, 2) and [2, 4)
    # The image's pages leave the index as an eviction takes them (the manager's own hook; the
    # text pages stay cached).
    m._on_evict_many([(1, sid) for sid in list(m.index[1].values())])
    c = req("c", np.r_[np.arange(4), 98], [ImageSpan(1, 4, 3)])
    assert m.lookup_prefix(c) == 2


def test_prompt_hashes_extend_with_output_tokens():
    specs = [FullAttentionSpec("full", 1, 64)]
    m = make_manager("jenga", specs, 64 * 64, tokens_per_page=2, enable_prefix_cache=True)
    a = req("a", np.arange(5))
    assert m.allocate(a, 5)
    for tok in (50, 51, 52):
        a.output_token_ids.append(tok)
        assert m.allocate(a, 1)
    m.free(a)  # tokens 0..7 computed: four full pages, including outputs 50, 51 (and 52 alone)
    follow_up = req("b", np.r_[np.arange(5), 50, 51, 52, 60])
    assert m.lookup_prefix(follow_up) == 8
    other = req("c", np.r_[np.arange(5), 50, 99, 52, 60])
    assert m.lookup_prefix(other) == 6  # pages [0,1] [2,3] [4,50] match; [99,52] does not
