"""D4 as an option of the prefix cache (``keep_block_copies``, jenga/prefix.py): every copy of a block
stays under its hash, as in every vLLM v1 block pool (the artifact's v1 fork:
``vllm/v1/core/block_pool.py`` ``BlockPool.cached_block_hash_to_block: dict[hash, dict[block_id,
block]]``, ``_maybe_evict_cached_block`` drops one copy), and not in the v0 forks (one block per
hash: ``prefix_caching_block.py`` ``promote_to_immutable_block``). The systems the artifact ran on
its v1 fork take it on the v1 cells; ``hybrid_groups`` (a v1-only manager) always; ``vllm_current``
and ``jenga_current`` have it built in (tests/test_jenga_current.py)."""

from __future__ import annotations

import pytest
from conftest import req
from current_fakes import ARTICLE, FULL, run_prompt, sibling_hit_demand, two_copies_cached_bytes

from harness.backends.sim.engine import system_options
from harness.config import compose_cell
from jenga import FullAttentionSpec, SlidingWindowSpec, SpecError, make_manager
from jenga.testing import check_invariants

# The systems that take the option (the artifact's systems on its v1 fork, and hybrid_groups).
OPTION = ("vllm", "max_page", "static_partition", "jenga", "hybrid_groups", "oracle")


def _mm(system: str, copies: bool, pages: int = 64, specs=FULL):
    return make_manager(system, specs, pages * 8, tokens_per_page=1, enable_prefix_cache=True,
                        keep_block_copies=copies)


def _concurrent_copies_then_evict(system: str, copies: bool) -> tuple[int, object]:
    """a and b are admitted in the same step and both compute the article (neither can hit what the
    other has not finished): a's pages own the hashes, b's are copies. a finishes and its 21 pages
    are cached; on a 64-page pool with 22 free, a 43-page filler evicts all 21 of them -- one copy
    of every block. b still runs. Returns c's hit and the manager."""
    m = _mm(system, copies)
    a, b = req("a", ARTICLE + [5]), req("b", ARTICLE + [7])
    assert m.lookup_prefix(a) == 0 and m.lookup_prefix(b) == 0
    assert m.allocate(a, 21) and m.allocate(b, 21)
    m.free(a)
    check_invariants(m)
    assert m.allocate(req("f", list(range(500, 543))), 43)
    check_invariants(m)
    return m.lookup_prefix(req("c", ARTICLE + [8])), m


@pytest.mark.parametrize("system", OPTION)
def test_concurrent_copy_survives_the_eviction_of_the_other(system):
    """D4 on: c hits the whole article through b's copy. Off (negative control, v0's one block per
    hash): b's copy was never indexed, so the prefix went with a's evicted pages."""
    hit_on, m = _concurrent_copies_then_evict(system, True)
    assert hit_on == 20
    # the hit is b's live pages, not a's evicted ones
    m.free(req("f", []))   # room for c's one new page
    c = req("c", ARTICLE + [8])
    assert m.lookup_prefix(c) == 20 and m.allocate(c, 1)
    b_pages = m.reqs["b"].pages[0]
    assert [m.reqs["c"].pages[0][j] for j in range(20)] == [b_pages[j] for j in range(20)]
    check_invariants(m)
    hit_off, _ = _concurrent_copies_then_evict(system, False)
    assert hit_off == 0


@pytest.mark.parametrize("system", OPTION)
def test_a_live_copy_keeps_the_prefix_after_the_owner_is_evicted(system):
    """tests/test_jenga_current.py's case on the v1 systems: a's pages evicted tail first (18 of
    21), b's copy keeps the whole article findable; off, only pages 0-2 are."""
    for copies, expect in ((True, 20), (False, 3)):
        m = _mm(system, copies)
        run_prompt(m, req("a", ARTICLE + [5]))
        assert m.allocate(req("b", ARTICLE + [7]), 21)   # no lookup: b recomputes a's pages
        m.free(req("a", []))
        assert m.allocate(req("f", list(range(500, 540))), 40)
        check_invariants(m)
        assert m.lookup_prefix(req("c", ARTICLE + [8])) == expect, (system, copies)


@pytest.mark.parametrize("system", ("vllm", "max_page", "static_partition", "jenga", "hybrid_groups"))
def test_the_oldest_copy_is_found_first(system):
    """a's pages are cached when b recomputes the article: with D4 the lookup finds a's cached
    block first (``get_cached_block``: the first block under the hash), so c's hit takes 20 blocks
    out of the free queue (20 + 1 new page in the full-prompt gate's count); off, the key went to
    b's live copy and the hit costs 1 page."""
    for copies, pages in ((True, 21), (False, 1)):
        assert sibling_hit_demand(_mm(system, copies)) == pages * 8, (system, copies)


@pytest.mark.parametrize("system", ("vllm", "max_page", "static_partition", "jenga", "hybrid_groups"))
def test_a_freed_copy_stays_cached_behind_the_owner(system):
    """Both copies join the cache when a and b finish (vLLM's free queue keeps b's hashes). A filler
    that takes the free pages and then evicts exactly a's 21 pages (LRU: a finished first) leaves
    b's copy: c hits 20; 3 pages more evict b's tail (20, 19, 18): 18. Off (negative control): b's
    article pages were never indexed, so they are freed, not cached (only its own tail page is);
    evicting a's 21 loses the prefix."""
    for copies, cached in ((True, 42), (False, 22)):
        for extra, expect in (((0, 20), (3, 18)) if copies else ((0, 0),)):
            m = _mm(system, copies, pages=48)
            assert two_copies_cached_bytes(m) == cached * 8, (system, copies)
            n = 48 - cached + 21 + extra      # the free pages, then a's 21, then `extra` more
            assert m.allocate(req("f", list(range(500, 500 + n))), n)
            check_invariants(m)
            assert m.lookup_prefix(req("c", ARTICLE + [8])) == expect, (system, copies, extra)


def test_sliding_window_copies_on_the_lcm_pool():
    """A full + sliding model on Jenga's pool: the concurrent case holds for both types (the hit
    needs both), and the undo log keeps a failed allocation from changing the copies."""
    specs = [FullAttentionSpec("full", 1, 8), SlidingWindowSpec("sw", 1, 8, window=4)]
    for copies, expect in ((True, 20), (False, 0)):
        m = _mm("jenga", copies, pages=128, specs=specs)
        a, b = req("a", ARTICLE + [5]), req("b", ARTICLE + [7])
        assert m.allocate(a, 21) and m.allocate(b, 21)
        m.free(a)
        # 128 pages: b holds 21 + 21 (one prefill chunk), a's 21 + 21 are cached, 44 free: a
        # 43-token filler (86 pages) takes the free ones and evicts exactly a's 42.
        assert m.usage().cached_bytes == 42 * 8
        assert m.allocate(req("f", list(range(500, 543))), 43)
        check_invariants(m)
        assert m.lookup_prefix(req("c", ARTICLE + [8])) == expect, copies


def test_option_only_where_the_source_has_it():
    """vllm_current / jenga_current have D4 built in (not an option); systems outside vLLM v1 reject it."""
    for system in ("vllm_current", "jenga_current"):
        assert make_manager(system, FULL, 64 * 8, tokens_per_page=1).keep_block_copies
        with pytest.raises(SpecError, match="keep_block_copies"):
            make_manager(system, FULL, 64 * 8, tokens_per_page=1, keep_block_copies=False)
    for system in OPTION:
        assert not make_manager(system, FULL, 64 * 8, tokens_per_page=1).keep_block_copies


@pytest.mark.parametrize("system, v0, v1", [
    ("vllm", None, True), ("max_page", None, True), ("static_partition", None, True), ("jenga", None, True),
    ("jenga_no_request_aware", None, True), ("keep_embeddings", None, True), ("oracle", None, True),
    ("hybrid_groups", True, True),   # vLLM v1's hybrid manager, whatever the cell's engine
    ("vllm_current", None, None), ("jenga_current", None, None),
])
def test_the_v1_cells_turn_it_on(system, v0, v1):
    """The option travels like sliding_hit_extra_tokens: ``system.options_by_engine.v1``."""
    for version, expect in (("v0", v0), ("v1", v1)):
        cfg = compose_cell([f"system={system}", f"engine.engine_version={version}"])
        assert system_options(cfg.system, cfg.engine).get("keep_block_copies") == expect, version
