"""Oracle: byte-granular memory that keeps exactly what some layer will still read.

No pages, no rounding, nothing kept that no layer reads: allocated bytes = needed bytes, so its
waste is zero by construction; it is the physical limit the paged systems are measured against.
A request fits while the sum of every running request's needed bytes stays within capacity. It
keeps no prefix cache (``lookup_prefix`` returns 0).
"""

from __future__ import annotations

from jenga.interface import MemoryManager, MemoryUsage, RequestView
from jenga.policies import policy_for
from jenga.reqstate import ReqState, image_infos
from jenga.spec import CrossAttentionSpec, SpecError, page_geometry


class Oracle(MemoryManager):
    """The physical limit: allocated = needed, byte for byte."""

    system_name = "oracle"

    def __init__(self, specs, capacity_bytes: int, tokens_per_page: int = 16,
                 enable_prefix_cache: bool = False, **options):
        if options:
            raise SpecError(f"unknown option(s) {sorted(options)} for system 'oracle'; allowed: []")
        self.specs = tuple(specs)
        page_geometry(self.specs, tokens_per_page)
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool) or capacity_bytes <= 0:
            raise SpecError(f"capacity_bytes must be a positive integer, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self.tokens_per_page = tokens_per_page
        self.enable_prefix_cache = bool(enable_prefix_cache)
        self.images_in_prompt = not any(isinstance(s, CrossAttentionSpec) for s in self.specs)
        self.acct = [policy_for(s) for s in self.specs]
        self.reqs: dict[object, ReqState] = {}
        self.total = 0

    def _needed(self, rs: ReqState, prev: int, T: int) -> int:
        return sum(p.needed_bytes(rs, prev, T) for p in self.acct)

    def lookup_prefix(self, request: RequestView) -> int:
        return 0

    def allocate(self, request: RequestView, num_new_tokens: int) -> bool:
        if not isinstance(num_new_tokens, int) or isinstance(num_new_tokens, bool) or num_new_tokens < 0:
            raise SpecError(f"num_new_tokens must be an integer >= 0, got {num_new_tokens!r}")
        rs = self.reqs.get(request.request_id)
        if rs is None:
            rs = ReqState(request.request_id, len(request.prompt_token_ids),
                          image_infos(request, self.images_in_prompt), 0, None)
        prev, T = rs.T, rs.T + num_new_tokens
        new = self._needed(rs, prev, T)
        if self.total - rs.contrib[0] + new > self.capacity_bytes:
            return False
        self.total += new - rs.contrib[0]
        rs.contrib = (new, new)
        rs.prev, rs.T = prev, T
        self.reqs[request.request_id] = rs
        return True

    def free(self, request: RequestView) -> None:
        rs = self.reqs.pop(request.request_id, None)
        if rs is not None:
            self.total -= rs.contrib[0]

    def num_computed_tokens(self, request: RequestView) -> int:
        rs = self.reqs.get(request.request_id)
        return 0 if rs is None else rs.T

    def usage(self) -> MemoryUsage:
        return MemoryUsage(self.capacity_bytes, self.total, 0, 0, 0, self.capacity_bytes - self.total,
                           path_counts={}, per_type_allocated_bytes={})
