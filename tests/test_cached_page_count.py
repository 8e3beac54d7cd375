"""The window types' hit search reads the cached-page count lazily (jenga/prefix.py
``cached_page_count``, issue 20): any sequence of ``count(a, b)`` queries gets what the prefix sums
over every page's flag gave, and a query near the top of a long prompt looks up only its own pages."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from jenga.hashing import BlockHasher
from jenga.prefix import cached_page_count


def prefix_sum_count(flags: list[bool], npages: int):
    """The count the hit search used before: flags of every page, padded to ``npages``, summed."""
    flags = flags[:npages] + [False] * (npages - len(flags))
    p = list(accumulate(flags, initial=0))
    return lambda a, b: p[min(b, len(p) - 1)] - p[min(a, len(p) - 1)]


@settings(max_examples=200, deadline=None)
@given(ntok=st.integers(0, 400), block=st.sampled_from([1, 4]), k=st.sampled_from([1, 2, 3]),
       npages=st.integers(0, 150), cached=st.sets(st.integers(0, 140)),
       queries=st.lists(st.tuples(st.integers(0, 160), st.integers(0, 160)), max_size=12))
def test_lazy_count_equals_prefix_sums(ntok, block, k, npages, cached, queries):
    hasher = BlockHasher(list(range(1000, 1000 + ntok)), [], [], block)
    tpp = k * block
    keys = hasher.page_hashes(tpp, npages)  # only pages whose tokens are known have keys
    index = {keys[j] for j in cached if j < len(keys)}
    ref = prefix_sum_count([h in index for h in keys], npages)
    lazy = cached_page_count(index.__contains__, BlockHasher(list(range(1000, 1000 + ntok)), [], [], block),
                           tpp, npages)
    for a, b in queries:
        assert lazy(a, b) == ref(a, b), (a, b)


def test_a_window_query_reads_only_its_window():
    """A 512-page window at the top of a 10,000-page prompt looks up 512 keys, then nothing more
    for a query inside what it read (negative control: a count over all flags would have read
    10,000); a query just below grows the span by the span's size, not to the prompt's start."""
    hasher = BlockHasher(list(range(160_000)), [], [], 16)
    keys = hasher.page_hashes(16, 10_000)
    index = set(keys[::2])
    asked = []

    def contains(key):
        asked.append(key)
        return key in index

    count = cached_page_count(contains, hasher, 16, 10_000)
    assert count(9_488, 10_000) == 256 and len(asked) == 512
    assert count(9_500, 9_600) == 50 and len(asked) == 512
    # Below the span it grows by at least the span's size (a search walking down would otherwise
    # grow it page by page).
    assert count(9_400, 9_500) == 50 and len(asked) == 1_024
    assert count(0, 10_000) == 5_000 and len(asked) == 10_000
