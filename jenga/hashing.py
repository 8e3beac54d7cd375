"""Content hashes of token blocks, chained: block ``i``'s hash covers the whole prefix ``[0, (i+1)*B)``.

``h_i = xxh3_64(h_{i-1} || image ids in block i || token bytes of block i)``. Tokens are hashed as
int32 bytes straight from numpy (100k-token prompts cost one pass), computed once per request and
extended as output tokens arrive. Image ids enter the chain of every block an image touches (its
tokens for decoder-only VLMs, its placeholder position for cross-attention models), so equal
placeholder tokens with different images never collide. (Cross-attention models: the image id
enters at its placeholder position only.)
"""

from __future__ import annotations

import numpy as np
import xxhash


class BlockHasher:
    """Lazily extended chain of block hashes for one request."""

    __slots__ = ("_images", "_out", "_pbytes", "_prompt", "block", "hashes")

    def __init__(self, prompt_token_ids, output_token_ids, images, block: int, images_in_prompt: bool = True):
        self.block = block
        arr = np.asarray(prompt_token_ids)
        self._prompt = arr.astype(np.int32, copy=False) if arr.dtype != np.int32 else arr
        self._out = output_token_ids
        # (start, end, image_id) position spans that mix an image id into the chain.
        self._images = [(im.offset, im.offset + (max(1, im.num_tokens) if images_in_prompt else 1), im.image_id)
                        for im in images]
        self.hashes: list[int] = []
        self._pbytes: memoryview | None = None  # the prompt's int32 bytes, made on first use

    def _known(self) -> int:
        return len(self._prompt) + len(self._out)

    def _tokens(self, lo: int, hi: int) -> bytes:
        n = len(self._prompt)
        if hi <= n:
            return self._prompt[lo:hi].tobytes()
        head = self._prompt[lo:n] if lo < n else self._prompt[:0]
        tail = np.asarray(self._out[max(lo, n) - n:hi - n], dtype=np.int32)
        return head.tobytes() + tail.tobytes()

    def hash_at(self, end: int) -> int | None:
        """Hash of the prefix ``[0, end)`` (``end`` a multiple of the block), None if those tokens
        are not known yet."""
        B = self.block
        i = end // B - 1
        if i < len(self.hashes):
            return self.hashes[i]
        if end > self._known():
            return None
        h = self.hashes[-1] if self.hashes else 0
        j0 = len(self.hashes)
        if not self._images:
            # The same chain, faster: a block inside the prompt is hashed straight from the
            # prompt's bytes (one copy per request, not one numpy slice per block), in one call on
            # the concatenation (xxh3 of the pieces streamed == xxh3 of them joined).
            n, digest, append = len(self._prompt), xxhash.xxh3_64_intdigest, self.hashes.append
            stop = min(i + 1, n // B)
            if j0 < stop:
                if self._pbytes is None:
                    self._pbytes = memoryview(self._prompt.tobytes())
                pb, w = self._pbytes, 4 * B
                for j in range(j0, stop):
                    h = digest(h.to_bytes(8, "little") + pb[j * w:(j + 1) * w])
                    append(h)
                j0 = stop
        for j in range(j0, i + 1):
            lo, hi = j * B, (j + 1) * B
            x = xxhash.xxh3_64(h.to_bytes(8, "little"))
            for a, b, img in self._images:
                if a < hi and b > lo:
                    x.update(int(img).to_bytes(8, "little", signed=True))
            x.update(self._tokens(lo, hi))
            h = x.intdigest()
            self.hashes.append(h)
        return self.hashes[i]

    def chain(self, end: int) -> list[int]:
        """The chain extended to the prefix ``[0, end)`` as far as its tokens are known (block
        ``i``'s hash at index ``i``: ``hash_at(e) == chain(e)[e // block - 1]`` when known). The
        list itself, not a copy: callers read it and never change it."""
        end = min(end, self._known())
        end -= end % self.block
        if end > len(self.hashes) * self.block:
            self.hash_at(end)
        return self.hashes

    def page_hashes(self, tpp: int, npages: int) -> list[int]:
        """Hashes of the prefixes ending at pages ``0 .. npages-1`` of ``tpp`` tokens (``tpp`` a
        multiple of the block), as far as the tokens are known: the chain is extended once and
        read by index, instead of one :meth:`hash_at` per page (a 150k-token prompt has ~10k
        pages per layer type, looked up at every admission). Shorter than ``npages`` when the
        later pages' tokens are not known yet; equal, page for page, to ``hash_at((j+1)*tpp)``."""
        if npages <= 0:
            return []
        B = self.block
        end = min(npages * tpp, self._known())
        end -= end % tpp
        if end > 0:
            self.hash_at(end)
        k = tpp // B
        n = min(npages, len(self.hashes) // k)
        return self.hashes[k - 1:n * k:k] if k > 1 else self.hashes[:n]
