"""Jenga's LCM allocator under today's vLLM rules (``jenga_current``, jenga/baselines/jenga_current.py)
and the block-copy rule both ``vllm_current`` and ``jenga_current`` follow (vLLM's
``BlockHashToBlockMap``: every copy stays under its hash, the oldest is found first)."""

from __future__ import annotations

import pytest
from conftest import req
from current_fakes import (
    ARTICLE,
    SPECS,
    full_manager,
    manager,
    run_prompt,
    sibling_hit_demand,
    two_copies_cached_bytes,
)
from sim_fakes import tiny_engine, tiny_profile

import jenga
from harness.backends.sim.engine import scheduler_config
from harness.config import compose_cell
from jenga import make_manager
from jenga.pools.lcm import LcmPagePool
from jenga.registry import REGISTRY, full_prompt_admission_systems
from jenga.testing import check_invariants

TODAY = ("vllm_current", "jenga_current")


def test_registered_everywhere():
    """One registry: a cell system, a Hydra system config, the gate on by default like vllm_current."""
    assert "jenga_current" in jenga.SYSTEM_NAMES and REGISTRY["jenga_current"].cell
    # today's vLLM in every form that runs its scheduler: these two and issue 22's vllm_hma rules
    assert full_prompt_admission_systems() == frozenset({*TODAY, "vllm_hma", "vllm_hma_off"})
    cfg = compose_cell(["system=jenga_current", "model=gemma3_12b", "dataset=arxiv_qa"])
    assert cfg.system.name == "jenga_current" and dict(cfg.system.options) == {"request_aware": True}
    engine = tiny_engine(engine_version="v1", enable_chunked_prefill=True)
    for system in (*TODAY, "jenga", "vllm"):
        assert scheduler_config(engine, tiny_profile(), system).full_prompt_admission == (system in TODAY)
    m = make_manager("jenga_current", SPECS, 64 * 8, tokens_per_page=1, request_aware=True)
    assert isinstance(m.pool, LcmPagePool) and m.request_aware
    with pytest.raises(jenga.SpecError, match="sliding_retention_tokens"):
        make_manager("jenga_current", SPECS, 64 * 8, tokens_per_page=1, sliding_retention_tokens=192)


def test_frees_at_the_real_window_unlike_the_artifacts_jenga():
    """A 30-token prompt then one decode step: with window 4 the next token reads tokens 27-30, so
    jenga_current holds 31 full + 4 sliding pages = 280 bytes. Negative control: the artifact's
    Jenga (``system=jenga`` keeps ``sliding_retention_tokens`` past the window; 8 here) holds
    8 more sliding pages, 344 bytes."""
    def held(system, **kw):
        m = manager(system, **kw)
        r = req("a", list(range(100, 130)))
        run_prompt(m, r, decode=1)
        check_invariants(m)
        return m.usage().allocated_bytes
    assert held("jenga_current") == (31 + 4) * 8
    assert held("jenga", sliding_retention_tokens=8) == (31 + 4 + 8) * 8
    assert held("vllm_current") == held("jenga_current")  # same rules, pages of the same size


def test_todays_caching_rules_on_the_lcm_pool():
    """D3 + D2 as in vllm_current: q1 (23 prompt tokens, 2 decoded) caches only the 3 sliding pages
    before its replay boundary 22; q2 misses the sliding layer at the article's end (hit 0,
    junction 20) and caches its sliding pages 17-19 while computing, so q3 hits all 20 tokens.
    Negative control: the artifact's Jenga caches every sliding page, so q2 already hits 20."""
    m = manager("jenga_current")
    run_prompt(m, req("q1", ARTICLE + [100, 101, 102]), decode=2)
    m.free(req("q1", []))
    sw = next(t for t, st in enumerate(m.types) if st.name == "sw")
    assert len(m.index[sw]) == 3
    q2 = req("q2", ARTICLE + [200, 201, 202])
    assert run_prompt(m, q2) == 0 and m.junction["q2"] == 20
    m.free(q2)
    assert run_prompt(m, req("q3", ARTICLE + [300, 301, 302])) == 20
    check_invariants(m)

    art = manager("jenga")
    run_prompt(art, req("q1", ARTICLE + [100, 101, 102]), decode=2)
    art.free(req("q1", []))
    assert run_prompt(art, req("q2", ARTICLE + [200, 201, 202])) == 20


@pytest.mark.parametrize("system", TODAY)
def test_a_live_copy_keeps_the_prefix_after_the_owner_is_evicted(system):
    """a holds the article (owner); b computes it again without a lookup (its pages are copies).
    a finishes, its 21 cached pages are the only evictable ones, and a 40-page filler on a 64-page
    pool evicts 18 of them, tail first (pages 20..3). vLLM keeps b's blocks under the same hashes
    (BlockHashToBlockMap), so c still hits all 20 tokens. Negative control: hybrid_groups without
    keep_block_copies (one owner per key; a copy made while the owner ran is not indexed) finds
    only pages 0-2."""
    for name, expect in ((system, 20), ("hybrid_groups", 3)):
        m = full_manager(name)
        a = req("a", ARTICLE + [5])
        run_prompt(m, a)
        b = req("b", ARTICLE + [7])
        assert m.allocate(b, 21)           # no lookup: b recomputes a's pages
        m.free(a)
        assert m.allocate(req("f", list(range(500, 540))), 40)
        check_invariants(m)
        assert m.lookup_prefix(req("c", ARTICLE + [8])) == expect, name


@pytest.mark.parametrize("system", TODAY)
def test_the_oldest_copy_is_found_first(system):
    """a's pages are cached when b recomputes the article: vLLM looks up the first block under a
    hash (``get_one_block``), a's cached one, so a sibling's 20-token hit takes 20 blocks out of the
    free queue and the full-prompt gate counts them (20 + 1 new page = 168 bytes). Negative
    control: hybrid_groups without keep_block_copies hands the key to b's live copy, so the same
    hit costs 1 page (8 bytes)."""
    for name, pages in ((system, 21), ("hybrid_groups", 1)):
        assert sibling_hit_demand(full_manager(name)) == pages * 8, name


@pytest.mark.parametrize("system", TODAY)
def test_a_freed_copy_stays_cached_behind_the_owner(system):
    """b's copies are released while a's owner pages are cached: they join the cache too (vLLM's
    free queue keeps their hashes), and once a's pages are evicted c hits through them."""
    m = full_manager(system, pages=48)
    assert two_copies_cached_bytes(m) == 42 * 8  # both copies of the article (+ each request's tail)
    # 48 pages, 42 cached, 6 free: a 30-page filler evicts 24 LRU pages -- all of a's (freed first)
    # and b's 3 tail-most pages (20, 19, 18); b's pages 0-17 keep the prefix.
    assert m.allocate(req("f", list(range(500, 530))), 30)
    check_invariants(m)
    assert m.lookup_prefix(req("c", ARTICLE + [8])) == 18


def test_crosscheck_arms_are_like_for_like():
    """Every crosscheck arm pairs a simulator system with the vllm_sched system running the same
    allocator: jenga_current with the jenga_vllm plugin, never the artifact's Jenga."""
    from jenga.registry import vllm_systems

    SYSTEM_HYBRID = vllm_systems()
    from harness.tools.crosscheck import ARMS
    assert {sim for sim, _, _ in ARMS} <= set(jenga.SYSTEM_NAMES)
    assert {sched for _, sched, _ in ARMS} <= set(SYSTEM_HYBRID)
    assert ("jenga_current", "jenga", "jenga plugin") in ARMS
    assert "jenga" not in {sim for sim, _, _ in ARMS}
