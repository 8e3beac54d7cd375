"""Page-layer layout over one torch tensor (paper §4.2).

All KV memory is one flat ``uint8`` tensor of ``capacity_bytes``. A small page of a layer type
carries every layer of the type for its tokens: layer ``l``'s slice of the page starts at
``l * tokens_per_page * bytes_per_token_per_layer``. Because a large page is an exact multiple of
every small page, the byte address of small page ``sid`` of a type is ``sid * page_bytes`` (plus the
pool base), so each layer is described to an unmodified paged-attention kernel by three values:
``start`` (its first slice), ``page_bytes`` (the stride between pages) and the page ids. A plain
gather at ``start + page_id * page_bytes + [0, slot_bytes)`` reads exactly what was written.

Only this module imports torch (``import jenga`` does not need it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jenga.manager_base import PagedManager


@dataclass(frozen=True)
class LayerView:
    """What a paged-attention kernel needs for one layer: base offset, page stride, slot size."""

    storage: str          # storage type name
    layer: int
    start: int            # byte offset of this layer's slice in page 0
    page_bytes: int       # stride between consecutive page ids
    slot_bytes: int       # bytes of this layer in one page (tokens_per_page * bytes per token)
    tokens_per_page: int
    bytes_per_token: int  # of this layer (0 for a state)


class PageLayerLayout:
    """The KV tensor of a :class:`jenga.manager_base.PagedManager` and every layer's view into it."""

    def __init__(self, manager: PagedManager, device: str = "cpu"):
        self.manager = manager
        self.buffer = torch.zeros(manager.capacity_bytes, dtype=torch.uint8, device=device)
        self.views: dict[tuple[str, int], LayerView] = {}
        pool = manager.pool
        for t, st in enumerate(manager.types):
            base = pool.page_offset(t, 0)
            stride = pool.page_offset(t, 1) - base if self._pages_of(t) > 1 else st.page_bytes
            layers, per_layer = self._layers(st)
            for layer in range(layers):
                slot = per_layer if st.policy.state_based else st.tokens_per_page * per_layer
                self.views[(st.name, layer)] = LayerView(st.name, layer, base + layer * slot, stride, slot,
                                                         st.tokens_per_page,
                                                         0 if st.policy.state_based else per_layer)

    def _pages_of(self, t: int) -> int:
        pool = self.manager.pool
        if hasattr(pool, "pools"):
            return pool.pools[t].num_pages
        if hasattr(pool, "ratio"):
            return pool.num_large * pool.ratio[t]
        return pool.num_pages

    @staticmethod
    def _layers(st) -> tuple[int, int]:
        """(number of layer slices, bytes per token per slice) of a storage type."""
        spec = st.policy.spec
        if st.policy.state_based:
            n = spec.num_layers
            return (n, st.state_bytes // n) if st.state_bytes % n == 0 else (1, st.state_bytes)
        d = st.data_bytes_per_token
        n = spec.num_layers
        if d == spec.bytes_per_token and d % n == 0:
            return n, d // n
        return 1, d

    def page_ids(self, request, storage: str) -> list[int | None]:
        """Page id of every logical page of the request for a storage type (None if not held)."""
        t = [st.name for st in self.manager.types].index(storage)
        rs = self.manager.reqs[request.request_id]
        if not rs.pages[t]:
            return []
        return [rs.pages[t].get(j) for j in range(max(rs.pages[t]) + 1)]

    def addresses(self, view: LayerView, page_ids: torch.Tensor) -> torch.Tensor:
        """Byte addresses ``[num_pages, slot_bytes]`` of a layer's slices in the given pages."""
        return view.start + page_ids.view(-1, 1) * view.page_bytes + torch.arange(view.slot_bytes)

    def gather(self, view: LayerView, page_ids) -> torch.Tensor:
        """What a paged-attention read of ``page_ids`` sees for this layer (uint8 slices)."""
        ids = torch.as_tensor(page_ids, dtype=torch.int64)
        return self.buffer[self.addresses(view, ids)]

    def write_token(self, view: LayerView, page_id: int, slot: int, data: torch.Tensor) -> None:
        """Write one token's bytes (``bytes_per_token``) into slot ``slot`` of a page."""
        off = view.start + page_id * view.page_bytes + slot * view.bytes_per_token
        self.buffer[off:off + data.numel()] = data

    def write_state(self, view: LayerView, page_id: int, data: torch.Tensor) -> None:
        off = view.start + page_id * view.page_bytes
        self.buffer[off:off + data.numel()] = data
