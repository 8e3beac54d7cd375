"""``LcmPagePool.cannot_fit`` is a sound upper bound: whenever it says a demand cannot fit, no
allocation order can place it, even evicting every cached page (the jenga_vllm plugin refuses such a
reservation at once instead of trying and undoing it). And it is not vacuous: it does fire."""

from __future__ import annotations

import copy

from hypothesis import event, given, settings
from hypothesis import strategies as st

from jenga.evictor import pins_by_type
from jenga.pools.lcm import LcmPagePool

PAGE_SETS = [[2, 3], [4, 6, 8], [5], [3, 4, 12]]


def _attempt(pool: LcmPagePool, demand: dict[int, int], owner: object) -> bool:
    """Place ``demand`` on a copy of the pool in both allocation orders; True if either fits."""
    for tight in (False, True):
        p = copy.deepcopy(pool)
        if all(p.alloc(t, owner, tight) is not None for t, n in demand.items() for _ in range(n)):
            return True
    return False


@st.composite
def pool_states(draw):
    pool, demand, _held = draw(pool_states_held())
    return pool, demand


@st.composite
def pool_states_held(draw):
    """A pool after random operations, a demand, and the pages still held, ``(t, sid)``."""
    page_bytes = draw(st.sampled_from(PAGE_SETS))
    pool = LcmPagePool(page_bytes, draw(st.integers(1, 10)) * __import__("math").lcm(*page_bytes),
                       request_aware=draw(st.booleans()), enable_cache=True)
    held: list[tuple[int, int]] = []
    for i, (op, t, owner) in enumerate(draw(st.lists(
            st.tuples(st.sampled_from(["alloc", "alloc", "free", "cache"]),
                      st.integers(0, len(page_bytes) - 1), st.integers(0, 3)), max_size=40))):
        if op == "alloc":
            sid = pool.alloc(t, owner)
            if sid is not None:
                held.append((t, sid))
        elif held:
            t, sid = held.pop(draw(st.integers(0, len(held) - 1)))
            if op == "free":
                pool.free(t, sid)
            else:
                pool.to_cached(t, sid, i, 1 + i % 3)
    demand = draw(st.dictionaries(st.integers(0, len(page_bytes) - 1), st.integers(1, 12), min_size=1))
    return pool, demand, held


@settings(max_examples=200, deadline=None)
@given(state=pool_states())
def test_cannot_fit_is_never_wrong(state):
    pool, demand = state
    event(f"cannot_fit={pool.cannot_fit(demand)} fits={_attempt(pool, demand, 'new')}")
    if pool.cannot_fit(demand):
        assert not _attempt(pool, demand, "new"), (pool.page_bytes, demand)


def test_cannot_fit_fires_and_leaves_room_for_a_fit():
    """Negative control: it refuses what exceeds the pool and not what fills it exactly."""
    pool = LcmPagePool([2, 3], 4 * 6, enable_cache=True)        # 4 large pages of 6 bytes
    assert pool.cannot_fit({0: 13}) and not pool.cannot_fit({0: 12})
    assert pool.cannot_fit({0: 6, 1: 5}) and not pool.cannot_fit({0: 6, 1: 4})   # bytes: 12+15 > 24
    sids = [pool.alloc(1, "a") for _ in range(2)]                                  # one large page of type 1
    pool.to_cached(1, sids[0], 0, 1)
    assert not pool.cannot_fit({0: 9})          # 3 free large + the type-1 page once its cached slot goes
    pool.free(1, sids[1])
    assert not pool.cannot_fit({0: 12}) and pool.cannot_fit({0: 13})


@settings(max_examples=200, deadline=None)
@given(state=pool_states(), data=st.data())
def test_cannot_fit_with_pinned_hits_is_never_wrong(state, data):
    """With ``pinned`` (a hit's cached pages, taken before the allocation) the bound stays sound:
    the allocation it refuses fails on a copy of the pool whose pinned pages were hit first."""
    pool, demand = state
    cached = sorted((t, sid) for t in range(len(pool.page_bytes)) for sid in range(pool.num_large * pool.ratio[t])
                    if pool.is_cached(t, sid))
    pinned = data.draw(st.lists(st.sampled_from(cached), unique=True) if cached else st.just([]))
    hit = copy.deepcopy(pool)
    for t, sid in pinned:
        hit.from_cached(t, sid)
    event(f"pinned={bool(pinned)} cannot_fit={pool.cannot_fit(demand, pinned)}")
    assert pool.cannot_fit(demand, pins_by_type(pinned)) == pool.cannot_fit(demand, pinned)  # the manager's form
    if pool.cannot_fit(demand, pinned):
        assert not _attempt(hit, demand, "new"), (pool.page_bytes, demand, pinned)


@settings(max_examples=300, deadline=None)
@given(state=pool_states_held(), data=st.data())
def test_cannot_fit_with_released_pages_is_never_wrong(state, data):
    """With ``released`` (used pages the allocation lets go first: a running request's pages out of
    its window) the bound stays sound: the allocation it refuses fails on a copy of the pool whose
    released pages were freed or cached first (PagedManager.allocate returns such a step at once)."""
    pool, demand, held = state
    released = data.draw(st.lists(st.sampled_from(held), unique=True) if held else st.just([]))
    cache = data.draw(st.lists(st.booleans(), min_size=len(released), max_size=len(released)))
    after = copy.deepcopy(pool)
    for (t, sid), c in zip(released, cache):
        if c:
            after.to_cached(t, sid, 10**6, 1)
        else:
            after.free(t, sid)
    refused = pool.cannot_fit(demand, (), released)
    event(f"released={bool(released)} cannot_fit={refused}")
    # The released pages counted in place is the bound of the pool after they went.
    assert refused == after.cannot_fit(demand)
    if refused:
        assert not _attempt(after, demand, "new"), (pool.page_bytes, demand, released)


def test_released_pages_make_room():
    """Negative control: a step that cannot fit until the pages it lets go are counted."""
    pool = LcmPagePool([2, 3], 2 * 6, enable_cache=False)          # 2 large pages of 6 bytes
    sids = [pool.alloc(0, "a") for _ in range(6)]                  # both large pages, type 0
    assert pool.cannot_fit({1: 2})
    assert pool.cannot_fit({1: 2}, (), [(0, s) for s in sids[:2]])  # 4 bytes: not a large page's 6
    assert not pool.cannot_fit({1: 2}, (), [(0, s) for s in sids[:3]])


def test_pinned_hits_make_cannot_fit_fire():
    """Negative control: a demand the cached pages could serve fits, until a hit pins them."""
    pool = LcmPagePool([2, 3], 2 * 6, enable_cache=True)          # 2 large pages of 6 bytes
    sids = [pool.alloc(0, "a") for _ in range(6)]                  # both large pages, type 0
    for i, sid in enumerate(sids):
        pool.to_cached(0, sid, 1, 16 * (i + 1))
    assert not pool.cannot_fit({1: 4})                             # evicting both pages gives 4
    assert not pool.cannot_fit({1: 2}, [(0, sids[0])])              # one large page still evictable
    assert pool.cannot_fit({1: 4}, [(0, sids[0])])
