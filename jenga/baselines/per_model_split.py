"""vLLM speculative decoding's KV memory (paper §7.4): one paged cache per model, each holding
every token of the request in all of that model's layers (PagedAttention), with the **same number
of blocks** (one block table serves both), i.e. a static split of the memory in proportion to the
models' per-token KV bytes, and no per-type freeing.

The draft's and the target's layer types come as one spec list, names prefixed ``target/`` and
``draft/`` (:func:`pair_specs`), so the manager serves both models of a request with one
``allocate``.
"""

from __future__ import annotations

import dataclasses

from jenga.manager_base import PagedManager
from jenga.policies import FullPolicy
from jenga.pools.flat import PartitionedPool
from jenga.reqstate import StorageType
from jenga.spec import FullAttentionSpec, LayerTypeSpec, SpecError

MODEL_PREFIXES = ("target/", "draft/")


def pair_specs(target: tuple[LayerTypeSpec, ...], draft: tuple[LayerTypeSpec, ...]) -> list[LayerTypeSpec]:
    """Both models' layer types in one list, names prefixed ``target/`` and ``draft/``."""
    return ([dataclasses.replace(s, name=f"target/{s.name}") for s in target]
            + [dataclasses.replace(s, name=f"draft/{s.name}") for s in draft])


class PerModelSplit(PagedManager):
    """One merged PagedAttention type per model (``storage_types``) over a pool partitioned into
    the same block count for both (``make_pool``)."""

    system_name = "per_model_split"

    def storage_types(self, **_):
        tpp = self.tokens_per_page
        out = []
        for prefix in MODEL_PREFIXES:
            specs = [s for s in self.specs if s.name.startswith(prefix)]
            if any(not s.token_based for s in specs):
                raise SpecError("per_model_split supports token-based layer types only (no Mamba)")
            bpt = sum(s.bytes_per_token for s in specs)
            if bpt:
                merged = FullAttentionSpec(f"{prefix}uniform", 1, bpt)
                out.append(StorageType(merged.name, FullPolicy(merged), tpp, tpp * bpt, bpt))
        if len(out) != 2:
            raise SpecError(f"per_model_split needs spec names prefixed with each of {list(MODEL_PREFIXES)}")
        return out

    def make_pool(self, **_):
        pages = [st.page_bytes for st in self.types]
        blocks = self.capacity_bytes // sum(pages)  # the same block count for both models
        if blocks == 0:
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) must hold one block of each model "
                            f"({sum(pages)} bytes)")
        return PartitionedPool(pages, [blocks * p for p in pages], self.capacity_bytes, self.enable_prefix_cache)
