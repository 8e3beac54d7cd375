"""Per-request state and storage-type descriptions shared by the paged managers."""

from __future__ import annotations

from dataclasses import dataclass

from jenga.interface import RequestView
from jenga.policies import ImageInfo, Policy, cdiv


@dataclass(frozen=True)
class StorageType:
    """What one page table stores: ``policy`` decides which logical pages are held; a page holds
    ``tokens_per_page`` tokens of ``data_bytes_per_token`` real bytes (or one state of
    ``state_bytes``) and takes ``page_bytes`` of the pool (more when padded)."""

    name: str
    policy: Policy
    tokens_per_page: int
    page_bytes: int
    data_bytes_per_token: int = 0
    state_bytes: int = 0


def image_infos(request: RequestView, images_in_prompt: bool) -> list[ImageInfo]:
    """The allocator's view of a request's images, with a deterministic random priority each
    (the set_prefix_length hook of image types: whole images are evicted together)."""
    out = []
    for im in request.images:
        prio = (hash((im.image_id, 0x9E3779B9)) & 0xFFFFF) + 1
        c1 = im.offset + im.num_tokens if images_in_prompt else im.offset + 1
        out.append(ImageInfo(im.image_id, im.num_tokens, im.offset, c1, prio))
    return out


class ReqState:
    """Everything the manager keeps about one request that holds memory.

    ``prev``: tokens computed before the current step (pinned hit included); ``start``: the hit
    the request was admitted with (pages below its window were never held); ``T``: tokens
    allocated (``prev`` plus this step's). Per storage type ``t``: ``pages[t]`` maps logical page
    -> page id, ``held[t]`` the held logical-page intervals, ``reg[t]`` the next page to register
    in the prefix cache. ``transients``: Mamba checkpoint pages held for one step
    ``(t, sid, key, prefix length, data bytes)``. ``held_ckpts``: the latest checkpoints the request
    keeps while it runs on a manager that holds some (``PrefixCacheMixin.hold_last_checkpoints``),
    the same tuples, every Mamba type's. ``contrib``: (needed, held data)
    bytes counted in the manager's totals."""

    __slots__ = (
        "T",
        "_bases",
        "contrib",
        "hasher",
        "held",
        "held_ckpts",
        "image_held",
        "images",
        "num_image_tokens",
        "pages",
        "prev",
        "prompt_len",
        "quiet",
        "reg",
        "rid",
        "start",
        "transients",
    )

    def __init__(self, rid, prompt_len, images, ntypes, hasher):
        self.rid = rid
        self.prompt_len = prompt_len
        self.images = images
        self.num_image_tokens = sum(im.num_tokens for im in images)
        self.prev = 0
        self.T = 0
        self.start = 0  # tokens that were a prefix-cache hit when the request was admitted
        self.pages: list[dict[int, int]] = [{} for _ in range(ntypes)]
        self.held: list[list[tuple[int, int]]] = [[] for _ in range(ntypes)]
        self.reg = [0] * ntypes
        self.transients: list[tuple] = []  # (t, sid, key, plen, data_bytes)
        self.quiet = 0  # allocate may reach this many tokens by the common decode step alone
        self.held_ckpts: tuple[tuple, ...] = ()  # (t, sid, key, plen, data_bytes); replaced, never mutated
        self.hasher = hasher
        self.contrib = (0, 0)  # (needed bytes, held data bytes)
        self._bases: dict[int, list] = {}
        # Manager._account's memo of image pages' data: policy -> (held intervals, bytes).
        self.image_held: dict[object, tuple] = {}

    def images_with_base(self, policy, tpp: int) -> list:
        out = self._bases.get(tpp)
        if out is None:
            out, base = [], 0
            for im in self.images:
                out.append((im, base))
                base += cdiv(im.num_tokens, tpp)
            self._bases[tpp] = out
        return out

    def image_of_page(self, policy, tpp: int, page: int) -> ImageInfo:
        return self.image_and_local(tpp, page)[0]

    def image_and_local(self, tpp: int, page: int) -> tuple[ImageInfo, int]:
        for im, base in self.images_with_base(None, tpp):
            if base <= page < base + cdiv(im.num_tokens, tpp):
                return im, page - base
        raise KeyError(page)


def _subtract(new: list[tuple[int, int]], old: list[tuple[int, int]]):
    """Pages in the intervals ``new`` and not in ``old``."""
    for a, b in new:
        pieces = [(a, b)]
        for c, d in old:
            nxt = []
            for x, y in pieces:
                if d <= x or c >= y:
                    nxt.append((x, y))
                else:
                    if x < c:
                        nxt.append((x, c))
                    if d < y:
                        nxt.append((d, y))
            pieces = nxt
        for x, y in pieces:
            yield from range(x, y)


def diff_intervals(old: list[tuple[int, int]], new: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(pages in old not in new, pages in new not in old). Held intervals only move forward, so the
    common single-interval case is two ranges."""
    if len(old) == 1 and len(new) == 1:
        (a, b), (c, d) = old[0], new[0]
        if a <= c and b <= d:
            return list(range(a, min(b, c))), list(range(max(b, c), d))
    return list(_subtract(old, new)), list(_subtract(new, old))
