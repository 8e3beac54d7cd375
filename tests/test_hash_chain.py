"""The block-hash chain's fast path (prompt blocks hashed from the prompt's bytes, one xxh3 call
each; ``chain`` / ``page_hashes`` read by index) gives the chain of the definition in
jenga/hashing.py, block for block (issue 20: a changed hash would change every prefix hit)."""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from jenga.hashing import BlockHasher


def reference_chain(prompt, out, block: int, n_blocks: int) -> list[int]:
    """The definition, one block at a time: h_i = xxh3_64(h_{i-1} || int32 tokens of block i)."""
    toks = np.asarray(list(prompt) + list(out), dtype=np.int32)
    h, chain = 0, []
    for i in range(n_blocks):
        x = xxhash.xxh3_64(h.to_bytes(8, "little"))
        x.update(toks[i * block:(i + 1) * block].tobytes())
        h = x.intdigest()
        chain.append(h)
    return chain


@settings(max_examples=150, deadline=None)
@given(prompt=st.lists(st.integers(0, 2**31 - 1), max_size=120), out=st.lists(st.integers(0, 2**31 - 1), max_size=30),
       block=st.sampled_from([1, 2, 4, 16]), k=st.sampled_from([1, 2, 4]), ends=st.lists(st.integers(1, 160), max_size=4))
def test_chain_matches_the_definition(prompt, out, block, k, ends):
    hasher = BlockHasher(prompt, out, [], block)
    known = (len(prompt) + len(out)) // block
    for e in ends:  # extend piecemeal, in any order, as lookups and registrations do
        assert hasher.hash_at(e * block) == (reference_chain(prompt, out, block, e)[-1] if 0 < e <= known else
                                             (None if e > known else hasher.hash_at(e * block)))
    ref = reference_chain(prompt, out, block, known)
    assert hasher.chain(known * block + block)[:known] == ref
    tpp = k * block
    assert hasher.page_hashes(tpp, 1000) == ref[k - 1::k]
