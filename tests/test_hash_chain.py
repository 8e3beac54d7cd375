"""The block-key chain (jenga/hashing.py): its vector path (numpy prefix sums over a whole prompt)
and its Python path (a few blocks at a time, as decode extends it) both give the chain of the
definition in the module's docstring, block for block, whatever the order of extension (issue 20:
a changed key would change every prefix hit); and the keys tell apart what they must."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from jenga.hashing import C0, MASK, BlockHasher, P, fmix, multipliers


@dataclass(frozen=True)
class Img:
    image_id: int
    offset: int
    num_tokens: int


def reference_chain(prompt, out, block: int, n_blocks: int, images=(), images_in_prompt=True) -> list[int]:
    """The definition, one block at a time, in plain Python ints."""
    toks = [t & MASK for t in list(prompt) + list(out)]
    R = [int(r) for r in multipliers(block)]
    spans = [(im.offset, im.offset + (max(1, im.num_tokens) if images_in_prompt else 1), im.image_id)
             for im in images]
    H, chain = C0, []
    for i in range(n_blocks):
        lo, hi = i * block, (i + 1) * block
        s = sum(t * r for t, r in zip(toks[lo:hi], R))
        for a, b, img in spans:
            if a < hi and b > lo:
                s += fmix((img & MASK) ^ fmix(max(a, lo) - lo + 1))
        H = (H * P + fmix(s & MASK)) & MASK
        chain.append(fmix(H))
    return chain


tokens = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=150, deadline=None)
@given(prompt=st.lists(tokens, max_size=300), out=st.lists(tokens, max_size=40),
       block=st.sampled_from([1, 2, 4, 16]), k=st.sampled_from([1, 2, 4]), ends=st.lists(st.integers(1, 320), max_size=4))
def test_chain_matches_the_definition(prompt, out, block, k, ends):
    hasher = BlockHasher(prompt, out, [], block)
    known = (len(prompt) + len(out)) // block
    ref = reference_chain(prompt, out, block, known)
    for e in ends:  # extend piecemeal, in any order, as lookups and registrations do
        assert hasher.hash_at(e * block) == (ref[e - 1] if e <= known else None)
    assert hasher.chain(known * block + block)[:known] == ref
    tpp = k * block
    assert hasher.page_hashes(tpp, 1000) == ref[k - 1::k]
    chain, kk, n = hasher.page_chain(tpp, 1000)
    assert kk == k and n == len(ref) // k and [chain[(j + 1) * k - 1] for j in range(n)] == ref[k - 1::k]


@settings(max_examples=100, deadline=None)
@given(prompt=st.lists(st.integers(0, 50), min_size=1, max_size=120), block=st.sampled_from([1, 4, 16]),
       spans=st.lists(st.tuples(st.integers(0, 119), st.integers(0, 40), st.integers(-2**62, 2**62)), max_size=4),
       in_prompt=st.booleans(), steps=st.lists(st.integers(1, 12), max_size=6))
def test_chain_with_images_and_decode_matches_the_definition(prompt, block, spans, in_prompt, steps):
    """Images mix their ids in; output tokens arrive a few at a time (the Python path) after the
    prompt was hashed whole (the vector path)."""
    images = [Img(i, off, n) for off, n, i in spans]
    out: list[int] = []
    hasher = BlockHasher(prompt, out, images, block, in_prompt)
    hasher.chain(len(prompt))
    for n in steps:
        out.extend(range(7, 7 + n))
        hasher.chain(len(prompt) + len(out))
    known = (len(prompt) + len(out)) // block
    assert hasher.hashes == reference_chain(prompt, out, block, known, images, in_prompt)


def test_keys_tell_apart_what_they_must():
    """Negative controls: a key changes with any token of its prefix, with the image in it, with
    where an image sits in a block, and with the prefix's length; equal prefixes give equal keys
    (in two hashers, one hashed in one go and one block by block)."""
    base = list(range(100, 164))
    h = BlockHasher(base, [], [], 16).chain(64)
    one = BlockHasher(base, [], [], 16)
    assert [one.hash_at(e) for e in (16, 32, 48, 64)] == h           # same prefix, same keys
    changed = base.copy()
    changed[5] += 1
    h2 = BlockHasher(changed, [], [], 16).chain(64)
    assert all(a != b for a, b in zip(h, h2))                       # every later key changes
    assert len(set(h)) == 4                                         # lengths differ
    zeros = BlockHasher([0] * 64, [], [], 16).chain(64)
    assert len(set(zeros)) == 4                                     # equal blocks, different prefixes
    a = BlockHasher(base, [], [Img(1, 0, 4), Img(2, 4, 4)], 16).chain(64)
    b = BlockHasher(base, [], [Img(2, 0, 4), Img(1, 4, 4)], 16).chain(64)
    c = BlockHasher(base, [], [Img(3, 0, 4), Img(2, 4, 4)], 16).chain(64)
    assert a[0] != b[0] and a[0] != c[0] and a[0] != h[0]


def test_vector_and_python_paths_agree_on_a_long_prompt():
    """One 40k-token prompt hashed whole (vector path) and grown 5 blocks at a time (Python path)."""
    import numpy as np

    prompt = np.random.default_rng(3).integers(0, 100_000, 40_000).astype(np.int32)
    whole = BlockHasher(prompt, [], [], 16).chain(40_000)
    grown = BlockHasher(prompt, [], [], 16)
    for e in range(80, 40_001, 80):
        grown.hash_at(e)
    assert grown.hashes == whole
    assert whole[:50] == reference_chain(prompt.tolist(), [], 16, 50)
