"""The small fixture tests/test_vllm_current.py and tests/test_jenga_current.py share: one full and
one sliding layer, 8 bytes per token each, 1 token per page, window 4 (both small pages are 8 bytes,
so the LCM large page is one small page, page counts are exact, and a sliding hit at L needs pages
L-3 .. L-1), a 20-token shared article, a manager over it (or over the full layer alone) and a request run through it.

Test modules import it as ``from current_fakes import ...`` (pytest puts tests/ on the path, as for
``sim_fakes`` and ``conftest``)."""

from __future__ import annotations

from jenga import FullAttentionSpec, SlidingWindowSpec, make_manager

SPECS = [FullAttentionSpec("full", 1, 8), SlidingWindowSpec("sw", 1, 8, window=4)]
FULL = [FullAttentionSpec("full", 1, 8)]  # the full layer alone
ARTICLE = list(range(1, 21))   # 20 shared tokens


def manager(system: str, pages: int = 400, **kw):
    """``system``'s manager over :data:`SPECS` with ``pages`` 8-byte pages, prefix caching on."""
    return make_manager(system, SPECS, pages * 8, tokens_per_page=1, enable_prefix_cache=True, **kw)


def full_manager(system: str, pages: int = 64):
    """``system``'s manager over :data:`FULL` with ``pages`` 8-byte pages, prefix caching on.
    ``hybrid_groups`` (the tests' negative control) gets ``keep_block_copies`` off: one owner per
    key, the v0 forks' rule (the cells run it with the option on: tests/test_block_copies.py)."""
    kw = {"keep_block_copies": False} if system == "hybrid_groups" else {}
    return make_manager(system, FULL, pages * 8, tokens_per_page=1, enable_prefix_cache=True, **kw)


def run_prompt(m, r, decode: int = 0) -> int:
    """Look up ``r``'s prefix, allocate the rest of its prompt, decode ``decode`` tokens; the hit."""
    hit = m.lookup_prefix(r)
    assert m.allocate(r, r.prompt_len - hit)
    for i in range(decode):
        r.output_token_ids.append(9000 + i)
        assert m.allocate(r, 1)
    return hit


def sibling_hit_demand(m) -> int:
    """a's article pages are cached, b recomputes the article, c hits 20 tokens of it: the bytes the
    full-prompt gate counts for c's first step (the ``get_one_block`` scenario); checks invariants."""
    from conftest import req

    from jenga.baselines.current import full_sequence_demand
    from jenga.testing import check_invariants

    a = req("a", ARTICLE + [5])
    run_prompt(m, a)
    m.free(a)
    assert m.allocate(req("b", ARTICLE + [7]), 21)
    c = req("c", ARTICLE + [8])
    hit = m.lookup_prefix(c)
    assert hit == 20
    demand = full_sequence_demand(m, c, hit, 21, 8)
    assert m.allocate(c, 1)
    check_invariants(m)
    return demand


def two_copies_cached_bytes(m) -> int:
    """a runs the article, b recomputes it, both are freed: the bytes the cache then holds."""
    from conftest import req

    from jenga.testing import check_invariants

    a = req("a", ARTICLE + [5])
    run_prompt(m, a)
    b = req("b", ARTICLE + [7])
    assert m.allocate(b, 21)
    m.free(a)
    m.free(b)
    check_invariants(m)
    return m.usage().cached_bytes
