"""Property tests: random streams of allocate / append / free / cache-hit / evict on every system
and several layer mixes must keep every allocator invariant (``jenga.testing.check_invariants``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from conftest import Req as StubReq
from hypothesis import given, settings
from hypothesis import strategies as st

import jenga
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
from jenga.fuzz import MIXES as FUZZ_MIXES
from jenga.manager_base import PagedManager
from jenga.testing import check_invariants, state_fingerprint

MIXES = {
    "full+swa": [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=5)],
    "full+mamba": [FullAttentionSpec("full", 1, 64),
                   MambaSpec("mamba", 2, 1, state_bytes_per_layer=200, conv_bytes_per_layer=40,
                             checkpoint_interval=8)],
    "self+cross": [FullAttentionSpec("self", 3, 128), CrossAttentionSpec("cross", 2, 128)],
    "kv_sharing": [FullAttentionSpec("full", 2, 64, num_compute_layers=4),
                   SlidingWindowSpec("swa", 1, 64, num_compute_layers=3, window=4)],
    "token_drop": [FullAttentionSpec("full", 1, 64),
                   TokenDropSpec("drop", 2, 64, keep_ratio=0.5, min_tokens=4, sink=2)],
    "llava+vision": [FullAttentionSpec("full", 2, 64), ChunkedLocalSpec("local", 2, 64, chunk=8),
                     VisionEmbeddingSpec("vision", 1, 96)],
    "spec_decode": [FullAttentionSpec("draft/full", 1, 32), FullAttentionSpec("target/full", 4, 96)],
    # Mixes the fuzzer (jenga/fuzz.py) broke: Mamba alone with checkpoints, coprime page sizes.
    "mamba": FUZZ_MIXES["mamba"],
    "coprime": FUZZ_MIXES["coprime"],
}
BASES = [np.arange(100, 140, dtype=np.int32), np.arange(200, 240, dtype=np.int32)]


@dataclass
class Req(StubReq):
    target: int = 0
    out_len: int = 0


def make_req(i, mix, base, shared, suffix, out_len, image_id, image_len):
    prompt = np.concatenate([BASES[base][:shared], np.arange(1000 + 50 * i, 1000 + 50 * i + suffix, dtype=np.int32)])
    images = ()
    image_len = 1 + 3 * image_id if image_len else 0  # the same image always has the same size
    offset = min(3, len(prompt) - 1)
    if mix == "llava+vision" and image_len and offset + image_len <= len(prompt):
        prompt[offset:offset + image_len] = 7  # placeholder token ids, content comes from image_id
        images = (ImageSpan(image_id, image_len, offset),)
    elif mix == "self+cross" and image_len:
        images = (ImageSpan(image_id, image_len, offset),)
    return Req(f"r{i}", prompt, images, [], len(prompt), out_len)


op = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 1), st.integers(0, 40), st.integers(1, 12), st.integers(1, 6),
              st.integers(1, 2), st.integers(0, 9), st.sampled_from([None, 3, 8])),
    st.tuples(st.just("step"), st.integers(0, 50)),
    st.tuples(st.just("free"), st.integers(0, 50)),
)


def run_stream(system, mix, tpp, cache, cap_pages, ops):
    specs = MIXES[mix]
    geo = jenga.page_geometry(specs, tpp)
    cap_pages = max(cap_pages, len(specs))  # a static partition needs a large page per type
    m = make_manager(system, specs, geo.large_page_bytes * cap_pages, tokens_per_page=tpp,
                     enable_prefix_cache=cache)
    running: list[Req] = []
    check = check_invariants if isinstance(m, PagedManager) else (lambda mm: mm.usage().check())
    for i, o in enumerate(ops):
        if o[0] == "new":
            _, base, shared, suffix, out_len, image_id, image_len, chunk = o
            r = make_req(i, mix, base, shared, suffix, out_len, image_id, image_len)
            hit = m.lookup_prefix(r)
            assert 0 <= hit <= len(r.prompt_token_ids) - 1
            assert hit == 0 or cache
            n = r.target - hit if chunk is None else min(chunk, r.target - hit)
            before = state_fingerprint(m)
            if m.allocate(r, n):
                assert m.num_computed_tokens(r) == hit + n
                running.append(r)
            else:
                assert m.num_computed_tokens(r) == 0
                assert state_fingerprint(m) == before, "a failed allocate changed state"
                m.free(r)
        elif running:
            r = running[o[1] % len(running)]
            done = m.num_computed_tokens(r)
            if o[0] == "free" or len(r.output_token_ids) >= r.out_len:
                m.free(r)
                running.remove(r)
                before = state_fingerprint(m)
                m.free(r)  # a double free is a defined no-op
                assert state_fingerprint(m) == before
            else:
                if done >= r.target:  # prefill finished: the last step produced a token
                    r.output_token_ids.append(int(3000 + done))
                    r.target += 1
                n = min(4, r.target - done)
                before = state_fingerprint(m)
                if not m.allocate(r, n):
                    assert m.num_computed_tokens(r) == done
                    assert state_fingerprint(m) == before, "a failed allocate changed state"
                    m.free(r)  # preempted, as a scheduler would
                    running.remove(r)
                    if r.target > len(r.prompt_token_ids):
                        r.output_token_ids.pop()
        check(m)
    for r in running:
        m.free(r)
    check(m)
    u = m.usage()
    assert u.allocated_bytes == 0 and u.needed_bytes == 0
    return m


@settings(max_examples=40, deadline=None)
@given(system=st.sampled_from(jenga.SYSTEM_NAMES), mix=st.sampled_from(sorted(MIXES)),
       tpp=st.sampled_from([1, 2, 4]), cache=st.booleans(), cap_pages=st.integers(2, 40),
       ops=st.lists(op, min_size=1, max_size=40))
def test_random_streams_keep_invariants(system, mix, tpp, cache, cap_pages, ops):
    run_stream(system, mix, tpp, cache, cap_pages, ops)


@settings(max_examples=40, deadline=None)
@given(mix=st.sampled_from(sorted(MIXES)), tpp=st.sampled_from([1, 4]), cap_pages=st.integers(2, 12),
       request_aware=st.booleans(), ops=st.lists(op, min_size=5, max_size=60))
def test_jenga_under_pressure_with_cache(mix, tpp, cap_pages, request_aware, ops):
    """Small pools with the cache on: exercises all five allocation steps and both evictions."""
    system = "jenga" if request_aware else "jenga_no_request_aware"
    m = run_stream(system, mix, tpp, True, cap_pages, ops)
    counts = m.usage().path_counts
    assert counts["retry_tight"] >= 0 and sum(v for k, v in counts.items() if k != "hit_lost_tokens") >= 0
