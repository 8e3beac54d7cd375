"""Content hashes of token blocks, chained: block ``i``'s key covers the whole prefix ``[0, (i+1)*B)``.

The definition (64-bit words, arithmetic mod 2**64; ``fmix`` is MurmurHash3's 64-bit finalizer, a
bijection with full avalanche):

- block value ``v_i = fmix(sum_k tok[i*B + k] * R[k] + sum_images fmix(image_id ^ fmix(start + 1)))``
  -- ``tok`` the int32 token ids (as two's-complement 64-bit words), ``R`` fixed odd random
  multipliers, one per position in the block; each image whose span touches block ``i`` adds its
  id mixed with the position in the block where its span starts there (so which image sits where
  in a block counts, as the image order in the block did before);
- chain ``H_i = H_{i-1} * P + v_i`` from ``H_{-1} = C0``, and key ``h_i = fmix(H_i)``.

Why this and not one ``xxh3_64(h_{i-1} || block)`` call per block (the earlier definition): a
chain of library calls is one Python step per block -- a 150k-token prompt is ~9.4k of them, and
the long-context cells hash ~0.9M blocks, ~10 % of their time (issue 20) -- while the polynomial
chain is a prefix sum, ``H_i = P**i * (C0 * P + sum_{k<=i} v_k * P**-k)`` (``P`` odd, so invertible
mod 2**64), which numpy computes for the whole prompt in a few vector passes. Keys only ever meet
in equality tests (the cache index, membership): two different prefixes share a key only if ``P``
is a root of their difference polynomial, whose coefficients are differences of ``fmix`` outputs;
inputs built to collide for every odd ``P`` (the Thue-Morse construction) are adversarial, not
what a workload generator produces. The definition is tested block for block against a plain
Python transcription (tests/test_hash_chain.py).

Image ids enter the chain of every block an image touches (its tokens for decoder-only VLMs, its
placeholder position for cross-attention models), so equal placeholder tokens with different
images never collide. Computed once per request and extended as output tokens arrive.
"""

from __future__ import annotations

import functools
from operator import mul

import numpy as np

MASK = (1 << 64) - 1
P = 0x9E3779B97F4A7C15                      # odd: invertible mod 2**64
P_INV = pow(P, -1, 1 << 64)
C0 = 0x243F6A8885A308D3                     # H_{-1}
_SEED = 0x4A656E6761                        # the multipliers R (fixed: keys are reproducible)
_F1, _F2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
# Extensions of fewer blocks than this are hashed in Python (a decode step adds one block; numpy's
# per-call overhead is ~10x one block's Python arithmetic).
_VECTOR_MIN = 8

_u = np.uint64
_pows: list[np.ndarray] = []  # [P**q, P**-q for q = 0 .. m-1], once computed (grown by doubling)


def fmix(x: int) -> int:
    """MurmurHash3's 64-bit finalizer (Python ints)."""
    x ^= x >> 33
    x = (x * _F1) & MASK
    x ^= x >> 33
    x = (x * _F2) & MASK
    return x ^ (x >> 33)


def _fmix_np(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _u(33))
    x = x * _u(_F1)
    x = x ^ (x >> _u(33))
    x = x * _u(_F2)
    return x ^ (x >> _u(33))


@functools.cache
def multipliers(block: int) -> np.ndarray:
    """``R``: one odd 64-bit multiplier per position in a block of ``block`` tokens."""
    r = np.random.default_rng(_SEED).integers(0, 1 << 64, size=block, dtype=np.uint64, endpoint=False) | _u(1)
    r.setflags(write=False)
    return r


@functools.cache
def _mult_list(block: int) -> list[int]:
    """``multipliers(block)`` as Python ints."""
    return [int(x) for x in multipliers(block)]


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(P**q, P**-q)`` for ``q = 0 .. n-1`` or more (mod 2**64), grown by doubling and kept."""
    if not _pows or len(_pows[0]) < n:
        m = max(n, 2 * len(_pows[0]) if _pows else 1024)
        with np.errstate(over="ignore"):
            fwd = np.full(m, P, dtype=np.uint64)
            inv = np.full(m, P_INV, dtype=np.uint64)
            fwd[0] = inv[0] = 1
            _pows[:] = [np.cumprod(fwd, dtype=np.uint64), np.cumprod(inv, dtype=np.uint64)]
    return _pows[0], _pows[1]


def _words(tokens) -> np.ndarray:
    """Token ids as 64-bit words: int32 values sign-extended, then taken mod 2**64 (C's cast)."""
    return np.asarray(tokens, dtype=np.int32).astype(np.uint64)


class BlockHasher:
    """Lazily extended chain of block keys for one request."""

    __slots__ = ("_H", "_images", "_out", "_prompt", "block", "hashes")

    def __init__(self, prompt_token_ids, output_token_ids, images, block: int, images_in_prompt: bool = True):
        self.block = block
        arr = np.asarray(prompt_token_ids)
        self._prompt = arr.astype(np.int32, copy=False) if arr.dtype != np.int32 else arr
        self._out = output_token_ids
        # (start, end, image_id) position spans that mix an image id into the chain.
        self._images = [(im.offset, im.offset + (max(1, im.num_tokens) if images_in_prompt else 1), im.image_id)
                        for im in images]
        self.hashes: list[int] = []
        self._H = C0  # the chain's state after the last hashed block (H_{i}, before fmix)

    def _known(self) -> int:
        return len(self._prompt) + len(self._out)

    def _tokens(self, lo: int, hi: int) -> np.ndarray:
        n = len(self._prompt)
        if hi <= n:
            return self._prompt[lo:hi]
        head = self._prompt[lo:n] if lo < n else self._prompt[:0]
        return np.concatenate([head, np.asarray(self._out[max(lo, n) - n:hi - n], dtype=np.int32)])

    def _token_list(self, lo: int, hi: int) -> list[int]:
        """Tokens ``lo .. hi-1`` as Python ints mod 2**64 (the Python path: no numpy call per block)."""
        n = len(self._prompt)
        toks = self._prompt[lo:min(hi, n)].tolist() if lo < n else []
        if hi > n:
            toks += self._out[max(lo, n) - n:hi - n]
        return [t & MASK for t in toks]

    def _image_terms(self, j0: int, j1: int) -> dict[int, int]:
        """Per block ``j0 <= i < j1`` that an image touches: the sum of its images' terms."""
        B, out = self.block, {}
        for a, b, img in self._images:
            for i in range(max(j0, a // B), min(j1, (b - 1) // B + 1)):
                start = max(a, i * B) - i * B
                out[i] = (out.get(i, 0) + fmix((int(img) & MASK) ^ fmix(start + 1))) & MASK
        return out

    def _extend(self, j0: int, j1: int) -> None:
        """Hash blocks ``j0 .. j1-1`` (``j0 == len(self.hashes)``)."""
        B, R = self.block, multipliers(self.block)
        imgs = self._image_terms(j0, j1) if self._images else {}
        if j1 - j0 < _VECTOR_MIN:
            r, toks = _mult_list(B), self._token_list(j0 * B, j1 * B)
            H, append = self._H, self.hashes.append
            for q in range(j1 - j0):
                s = sum(map(mul, toks[q * B:(q + 1) * B], r)) + imgs.get(j0 + q, 0)
                H = (H * P + fmix(s & MASK)) & MASK
                append(fmix(H))
            self._H = H
            return
        words = _words(self._tokens(j0 * B, j1 * B)).reshape(j1 - j0, B)
        with np.errstate(over="ignore"):
            s = words @ R  # integer matmul: no BLAS, wraps mod 2**64
            for i, term in imgs.items():
                s[i - j0] += _u(term)
            v = _fmix_np(s)
            fwd, inv = _powers(j1 - j0)
            n = j1 - j0
            # H_{j0+q} = P**q * (H_{j0-1} * P + sum_{q' <= q} v_{j0+q'} * P**-q')
            acc = np.cumsum(v * inv[:n], dtype=np.uint64) + _u((self._H * P) & MASK)
            H = fwd[:n] * acc
        self._H = int(H[-1])
        self.hashes += _fmix_np(H).tolist()

    def hash_at(self, end: int) -> int | None:
        """Key of the prefix ``[0, end)`` (``end`` a multiple of the block), None if those tokens
        are not known yet."""
        i = end // self.block - 1
        if i < len(self.hashes):
            return self.hashes[i]
        if end > self._known():
            return None
        self._extend(len(self.hashes), i + 1)
        return self.hashes[i]

    def chain(self, end: int) -> list[int]:
        """The chain extended to the prefix ``[0, end)`` as far as its tokens are known (block
        ``i``'s key at index ``i``: ``hash_at(e) == chain(e)[e // block - 1]`` when known). The
        list itself, not a copy: callers read it and never change it."""
        end = min(end, self._known())
        end -= end % self.block
        if end > len(self.hashes) * self.block:
            self.hash_at(end)
        return self.hashes

    def page_chain(self, tpp: int, npages: int) -> tuple[list[int], int, int]:
        """``(chain, k, n)``: the chain extended as :meth:`page_hashes` extends it, ``k = tpp //
        block`` and the number ``n`` of pages whose key is known -- page ``j < n`` has key
        ``chain[(j + 1) * k - 1]``. For callers that read a few pages' keys, not all ``npages``."""
        if npages <= 0:
            return self.hashes, tpp // self.block, 0
        end = min(npages * tpp, self._known())
        end -= end % tpp
        if end > 0:
            self.hash_at(end)
        k = tpp // self.block
        return self.hashes, k, min(npages, len(self.hashes) // k)

    def page_hashes(self, tpp: int, npages: int) -> list[int]:
        """Keys of the prefixes ending at pages ``0 .. npages-1`` of ``tpp`` tokens (``tpp`` a
        multiple of the block), as far as the tokens are known: the chain is extended once and
        read by index, instead of one :meth:`hash_at` per page (a 150k-token prompt has ~10k
        pages per layer type, looked up at every admission). Shorter than ``npages`` when the
        later pages' tokens are not known yet; equal, page for page, to ``hash_at((j+1)*tpp)``."""
        hs, k, n = self.page_chain(tpp, npages)
        return hs[k - 1:n * k:k] if k > 1 else hs[:n]
