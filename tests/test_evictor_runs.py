"""The evictors keep keys in sorted runs under a heap of run heads (issue 20): whatever the mix of
single adds, released runs, hits, evictions and whole-large-page evictions, pages leave in the
order one sorted list of every live key gives -- checked against that list on random operations.
And the skip-ahead hit search of window policies (``WindowPolicy.longest_valid``) against the
base class's one-length-at-a-time scan."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import event, given, settings
from hypothesis import strategies as st

from jenga.evictor import LargePageLRU, PrefixSubsetEvictor
from jenga.policies import ChunkedPolicy, Policy, SlidingPolicy
from jenga.spec import ChunkedLocalSpec, SlidingWindowSpec

OPS = st.lists(st.tuples(st.sampled_from(["add", "run", "remove", "pop", "peek", "pop_cached"]),
                         st.integers(0, 1), st.integers(0, 40), st.integers(1, 12), st.integers(0, 3)),
               max_size=120)


def _reference_order(ref: dict) -> list[tuple[int, int]]:
    return [(t, sid) for (t, sid), _ in sorted(ref.items(), key=lambda kv: (kv[1], kv[0]))]


@settings(max_examples=300, deadline=None)
@given(ops=OPS, per_type=st.booleans())
def test_small_page_evictor_matches_one_sorted_list(ops, per_type):
    ev, ref, ts = PrefixSubsetEvictor(2, per_type=per_type), {}, 0
    for op, t, a, n, jump in ops:
        ts += jump
        if op == "add":
            if (t, a) not in ref:
                ev.add(t, a, ts, a * 16)
                ref[(t, a)] = (ts, -a * 16)
        elif op == "run":
            # A released run: consecutive pages, prefix lengths growing along it.
            sids = [s for s in range(a, a + n) if (t, s) not in ref]
            ev.add_many(t, sids, ts, [16 * (s + 1) for s in sids])
            ref.update({(t, s): (ts, -16 * (s + 1)) for s in sids})
        elif op == "remove" and (t, a) in ref:
            assert ev.remove(t, a) == (ref[(t, a)][0], -ref.pop((t, a))[1])
        elif op == "pop":
            q = t if per_type else None
            want = [k for k in _reference_order(ref) if q is None or k[0] == q][:n]
            if per_type:
                if t == 0:  # pop_lru reads type 0's queue (or the shared one)
                    assert ev.pop_lru(n) == want
                    for k in want:
                        del ref[k]
            else:
                assert ev.pop_lru(n) == _reference_order(ref)[:n]
                for k in _reference_order(ref)[:n]:
                    del ref[k]
        elif op == "peek":
            order = _reference_order(ref)
            if per_type:
                mine = [k for k in order if k[0] == t]
                assert ev.peek_lru(t) == (mine[0] if mine else None)
            else:
                assert ev.peek_lru() == (order[0] if order else None)
        elif op == "pop_cached":
            sids = list(range(a, a + n))
            assert ev.pop_cached(t, sids) == [s for s in sids if (t, s) in ref]
            for s in sids:
                ref.pop((t, s), None)
        assert len(ev) == len(ref)
        assert ev.state_view() == sorted((k[0], k[1], t0, s0) for (t0, s0), k in ref.items())


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_large_page_lru_matches_one_sorted_list(ops):
    lru, ref, ts = LargePageLRU(64), {}, 0
    for op, _, a, n, jump in ops:
        ts += jump
        if op == "add":
            lru.set(a, (ts, -a))
            ref[a] = lru.code((ts, -a), a)
        elif op == "run":
            lps = [lp for lp in range(a, a + n) if lp not in ref]
            keys = lru.codes(ts, [16 * (lp + 1) for lp in lps], lps)
            lru.add_new_many(lps, keys)
            ref.update(zip(lps, keys))
        elif op == "remove":
            lru.discard(a)
            ref.pop(a, None)
        elif op == "pop":
            want = sorted(ref, key=ref.get)[:n]
            assert lru.pop_lru(n) == want
            for lp in want:
                del ref[lp]
        elif op == "peek":
            assert lru.peek_lru() == (min(ref, key=ref.get) if ref else None)
        assert len(lru) == len(ref) and lru.state_view() == sorted(ref.values())


def test_types_released_together_interleave_by_prefix_length():
    """Exact order: two types' runs at one timestamp leave longest prefix first, type by type at
    each length (aligned eviction); an older run goes before both, and a hit page is skipped."""
    ev = PrefixSubsetEvictor(2, per_type=False)
    ev.add_many(0, [0, 1, 2], 7, [16, 32, 48])
    ev.add_many(1, [5, 6, 7], 7, [16, 32, 48])
    ev.add_many(0, [9], 3, [16])
    ev.remove(1, 6)
    assert ev.pop_lru(10) == [(0, 9), (0, 2), (1, 7), (0, 1), (0, 0), (1, 5)]
    # Negative control: without the shared timestamp the runs do not interleave.
    ev = PrefixSubsetEvictor(2, per_type=False)
    ev.add_many(0, [0, 1, 2], 7, [16, 32, 48])
    ev.add_many(1, [5, 6, 7], 8, [16, 32, 48])
    assert ev.pop_lru(10) == [(0, 2), (0, 1), (0, 0), (1, 7), (1, 6), (1, 5)]


POLICIES = st.one_of(
    st.builds(lambda w, x: SlidingPolicy(SlidingWindowSpec("sw", 1, 8, window=w), hit_extra_tokens=x),
              st.integers(1, 200), st.sampled_from([0, 5, 64])),
    st.builds(lambda c: ChunkedPolicy(ChunkedLocalSpec("c", 1, 8, chunk=c)), st.sampled_from([8, 16, 64, 96])))


@settings(max_examples=500, deadline=None)
@given(pol=POLICIES, tpp=st.sampled_from([1, 2, 4, 16]), mult=st.integers(1, 3),
       flags=st.lists(st.booleans(), max_size=150), extra=st.integers(0, 40))
def test_window_longest_valid_equals_the_scan(pol, tpp, mult, flags, extra):
    prefix = list(accumulate(flags, initial=0))

    def count(a, b):
        return prefix[min(b, len(prefix) - 1)] - prefix[min(a, len(prefix) - 1)]

    upper = len(flags) * tpp + extra
    assert pol.longest_valid(count, upper, tpp * mult, tpp) == Policy.longest_valid(pol, count, upper, tpp * mult, tpp)


@settings(max_examples=500, deadline=None)
@given(pol=POLICIES, tpp=st.sampled_from([1, 2, 4, 16]), mult=st.integers(1, 3),
       runs=st.lists(st.tuples(st.booleans(), st.integers(1, 60)), max_size=8), extra=st.integers(0, 40))
def test_window_longest_valid_equals_the_scan_over_long_stretches(pol, tpp, mult, runs, extra):
    """The same, with cached and missing pages in long stretches (a released window's pages,
    evicted first, leave hundreds missing in a row): the stretch skip lands where the scan does."""
    flags = [f for f, n in runs for _ in range(n)]
    prefix = list(accumulate(flags, initial=0))

    def count(a, b):
        return prefix[min(b, len(prefix) - 1)] - prefix[min(a, len(prefix) - 1)]

    upper = len(flags) * tpp + extra
    assert pol.longest_valid(count, upper, tpp * mult, tpp) == Policy.longest_valid(pol, count, upper, tpp * mult, tpp)


def test_window_longest_valid_skips_a_missing_stretch_at_once():
    """A sliding window over 2,000 pages of which only the first 10 are cached: the skip needs
    O(log) count calls over the missing stretch, not one round per page (the scan's ~2,000); a
    window of one token (no page needed: every length valid) takes no skip."""
    flags = [True] * 10 + [False] * 1990
    prefix = list(accumulate(flags, initial=0))
    calls = []

    def count(a, b):
        calls.append((a, b))
        return prefix[min(b, len(prefix) - 1)] - prefix[min(a, len(prefix) - 1)]

    pol = SlidingPolicy(SlidingWindowSpec("sw", 1, 8, window=4 * 16))
    assert pol.longest_valid(count, 2000 * 16, 16, 16) == 10 * 16
    assert len(calls) < 60
    one = SlidingPolicy(SlidingWindowSpec("sw", 1, 8, window=1))
    assert not one._runs_nonempty(16, 16)
    assert one.longest_valid(count, 2000 * 16, 16, 16) == 2000 * 16
    assert not ChunkedPolicy(ChunkedLocalSpec("c", 1, 8, chunk=64))._runs_nonempty(16, 16)


def test_window_longest_valid_skips_and_falls_back():
    """Exact value (window of 4 pages, page 7 missing: the longest hit ends at page 7), and a
    subclass whose required_pages is not one run gets the base scan (the skip would be wrong)."""
    pol = SlidingPolicy(SlidingWindowSpec("sw", 1, 8, window=4 * 16 + 1))
    flags = [True] * 7 + [False] + [True] * 3
    prefix = list(accumulate(flags, initial=0))

    def count(a, b):
        return prefix[min(b, len(prefix) - 1)] - prefix[min(a, len(prefix) - 1)]

    assert pol.longest_valid(count, 11 * 16, 16, 16) == 7 * 16

    class TwoRuns(SlidingPolicy):
        def required_pages(self, L, tpp):  # a sink page as well: not one run
            return [(0, 1), *super().required_pages(L, tpp)]

    odd = TwoRuns(SlidingWindowSpec("sw", 1, 8, window=2 * 16 + 1))
    flags = [False] + [True] * 10
    prefix = list(accumulate(flags, initial=0))
    assert odd.longest_valid(count, 11 * 16, 16, 16) == Policy.longest_valid(odd, count, 11 * 16, 16, 16) == 0


@settings(max_examples=100, deadline=None)
@given(cached=st.sets(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=60),
       pinned=st.sets(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=60), per_type=st.booleans())
def test_count_cached_counts_the_pinned_pages_in_the_cache(cached, pinned, per_type):
    """``count_cached`` (the flat pools' exact admission test) equals a count page by page; pins
    of pages that are not cached count nothing (the negative control: disjoint sets give 0)."""
    ev = PrefixSubsetEvictor(3, per_type=per_type)
    for i, (t, sid) in enumerate(sorted(cached)):
        ev.add(t, sid, i, 16)
    pins = sorted(pinned)
    assert ev.count_cached(pins) == sum(ev.contains(t, s) for t, s in pins) == len(cached & pinned)
    assert ev.count_cached([p for p in pins if p not in cached]) == 0


def _enter_twice(ev, take_out, *page) -> None:
    """Take ``page`` out under an undo log and undo it: its key is back while its old entry is
    still in a run, so the runs hold it twice, both live."""
    from jenga.journal import Journal

    ev._j = j = Journal()
    take_out(*page)
    ev._j = None
    j.undo()


TWICE = {"sizes": st.lists(st.integers(1, 30), min_size=1, max_size=6),
         "undone": st.lists(st.integers(0, 200), max_size=20),
         "asks": st.lists(st.integers(1, 60), min_size=1, max_size=8)}


@settings(max_examples=100, deadline=None)
@given(**TWICE)
def test_stretch_eviction_takes_a_twice_entered_small_page_once(sizes, undone, asks):
    """Eviction hands runs over in stretches (``_Runs.pop_first``): a page whose key is in the
    runs twice still leaves once, in the order of one sorted list (shared queue, two types'
    runs interleaving key by key)."""
    ev, ref = PrefixSubsetEvictor(2, per_type=False), {}
    sid = 0
    for i, n in enumerate(sizes):
        for t in (0, 1):
            sids = list(range(sid, sid + n))
            sid += n
            ev.add_many(t, sids, 10 + i, [16 * (k + 1) for k in range(n)])
            ref.update({(t, s): (10 + i, -16 * (k + 1)) for k, s in enumerate(sids)})
    for u in undone:
        page = next(((t, s) for (t, s) in ref if s == u), None)
        if page is not None:
            _enter_twice(ev, ev.remove, *page)
    for k in asks:
        want = _reference_order(ref)[:k]
        assert ev.pop_lru(k) == want
        for x in want:
            del ref[x]
    assert len(ev) == len(ref)


@settings(max_examples=100, deadline=None)
@given(**TWICE)
def test_stretch_eviction_takes_a_twice_entered_large_page_once(sizes, undone, asks):
    """The same for the large-page LRU."""
    ev, ref, lp = LargePageLRU(1 << 12), {}, 0
    for i, n in enumerate(sizes):
        lps = list(range(lp, lp + n))
        lp += n
        keys = ev.codes(10 + i, [16 * (k + 1) for k in range(n)], lps)
        ev.add_new_many(lps, keys)
        ref.update(zip(lps, keys))
    for u in undone:
        if u in ref:
            _enter_twice(ev, ev.discard, u)
    assert len(ev) == len(ref)
    for k in asks:
        want = sorted(ref, key=ref.get)[:k]
        assert ev.pop_lru(k) == want
        for x in want:
            del ref[x]


@settings(max_examples=150, deadline=None)
@given(phases=st.lists(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(20, 60),
                                          st.integers(0, 3), st.sampled_from([False, True, True])),
                                min_size=10, max_size=30),
                       min_size=1, max_size=4),
       per_type=st.booleans(), asks=st.lists(st.integers(1, 80), min_size=1, max_size=3))
def test_an_unread_queue_is_dropped_and_read_in_order(phases, per_type, asks):
    """A queue nothing read since it was built is dropped when mostly stale, instead of sorted
    (a whole-large-page type's pages leave with their large page, never through it), and rebuilt
    from the live keys at its next read: the order one sorted list gives. Phases of releases and
    whole-large-page evictions (no read) alternate with evictions through the queue."""
    ev, ref, ts, dropped = PrefixSubsetEvictor(2, per_type=per_type), {}, 0, 0
    for phase in phases:
        for t, a, n, jump, evict in phase:
            ts += jump
            sids = list(range(a, a + n))
            if evict:
                assert ev.pop_cached(t, sids) == [s for s in sids if (t, s) in ref]
                for s in sids:
                    ref.pop((t, s), None)
            else:
                sids = [s for s in sids if (t, s) not in ref]
                ev.add_many(t, sids, ts, [16 * (s + 1) for s in sids])
                ref.update({(t, s): (ts, -16 * (s + 1)) for s in sids})
            dropped += not ev._runs[0].built
        event(f"queue 0 dropped: {dropped > 0}")
        for k in asks:
            want = [x for x in _reference_order(ref) if not per_type or x[0] == 0][:k]
            assert ev.pop_lru(k) == want
            for x in want:
                del ref[x]
        assert ev.state_view() == sorted((k[0], k[1], t0, s0) for (t0, s0), k in ref.items())


def test_a_queue_is_dropped_only_when_nothing_read_it():
    """Exact: 100 pages join and leave with their large page, unread: the queue is dropped (no
    sort) and a later read rebuilds it, in order. Negative control: a queue read since it was
    built is rebuilt when mostly stale, never dropped."""
    ev = PrefixSubsetEvictor(1)
    for i in range(100):
        ev.add_many(0, [i], i, [16])
        ev.pop_cached(0, [i])
    assert not ev._runs[0].built and ev._runs[0].size == 0
    ev.add_many(0, [500, 501], 200, [16, 32])
    assert ev._runs[0].size == 0  # nothing is entered while dropped
    ev.add(0, 7, 100, 16)
    assert ev.pop_lru(5) == [(0, 7), (0, 501), (0, 500)]
    assert ev._runs[0].built
    states, prev = [], 0
    for i in range(220):
        ev.add_many(0, [i], 300 + i, [16])
        ev.pop_cached(0, [i])
        if i == 10:
            assert ev.peek_lru(0) is None  # a read (every entry is stale)
        q = ev._runs[0]
        if i > 10 and q.size < prev:  # mostly stale: rebuilt or dropped
            states.append(q.built)
        prev = q.size
    # The first time since the read: rebuilt; the next (nothing read since): dropped.
    assert states[:2] == [True, False]


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30)), min_size=17, max_size=60),
       stale=st.lists(st.integers(0, 2000), max_size=40), asks=st.lists(st.integers(1, 200), min_size=1, max_size=6))
def test_interleaving_runs_merge_and_keep_the_order(runs, stale, asks):
    """Released runs that interleave key by key (stale pages of many requests: one timestamp,
    overlapping prefix lengths), each reaching the heap at its own read: they stay apart while
    no eviction paid heap pops for them, and once 16 runs are under the heap and the pops since
    the last merge cost what a merge would, a new run merges them all (``_Runs.flush``); pages
    still leave in one sorted list's order -- both evictors, with some entries stale (pages taken
    out in between)."""
    ev, lru, ref, lref = PrefixSubsetEvictor(1, per_type=False), LargePageLRU(1 << 16), {}, {}
    sid = 0

    def add_run(i, ts, n):
        nonlocal sid
        sids = list(range(sid, sid + n))
        sid += n
        plens = [16 * (k + 1 + i % 3) for k in range(n)]
        ev.add_many(0, sids, ts, plens)
        ref.update({(0, s): (ts, -p) for s, p in zip(sids, plens)})
        keys = lru.codes(ts, plens, sids)
        lru.add_new_many(sids, keys)
        lref.update(zip(sids, keys))
        ev.peek_lru()
        lru.peek_lru()  # a read: the run joins the heap

    for i, (ts, n) in enumerate(runs):
        add_run(i, ts, n)
    # No eviction yet, no pop paid: every run stays apart (a merge here would be pure cost).
    assert len(ev._runs[0].heap) == len(lru._runs.heap) == len(runs)
    # One eviction from each whose pops (>= 1) are made to outweigh the merge: the next run
    # merges every run under the heap.
    ev._runs[0].pop_cost = lru._runs.pop_cost = 1 << 40
    first = _reference_order(ref)[0]
    assert ev.pop_lru(1) == [first]
    del ref[first]
    lfirst = min(lref, key=lref.get)
    assert lru.pop_lru(1) == [lfirst]
    del lref[lfirst]
    add_run(len(runs), 1, 5)
    assert len(ev._runs[0].heap) == len(lru._runs.heap) == 1
    for s in stale:
        if (0, s) in ref:
            ev.remove(0, s)
            del ref[(0, s)]
            lru.discard(s)
            del lref[s]
    for k in asks:
        want = _reference_order(ref)[:k]
        assert ev.pop_lru(k) == want
        for x in want:
            del ref[x]
        lwant = sorted(lref, key=lref.get)[:k]
        assert lru.pop_lru(k) == lwant
        for x in lwant:
            del lref[x]


def test_a_copied_evictor_reads_its_own_keys():
    """A deep copy (the pool copies ``cannot_fit``'s tests try an allocation on) or a pickle of an
    evictor evicts by its own cache, not the original's: taking a page out of the copy leaves the
    original's next victim alone, and the copy's next victim is the page after it."""
    import copy
    import pickle

    for clone in (copy.deepcopy, lambda e: pickle.loads(pickle.dumps(e))):
        ev = PrefixSubsetEvictor(2)
        ev.add(1, 0, 1, 1)
        ev.add(1, 5, 2, 1)
        assert ev.peek_lru(1) == (1, 0)
        dup = clone(ev)
        dup.remove(1, 0)
        assert dup.peek_lru(1) == (1, 5) and dup.take_lru(1) == (1, 5)
        assert ev.peek_lru(1) == (1, 0) and ev.count(1) == 2
