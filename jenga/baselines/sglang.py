"""``sglang_pools``: SGLang's separate KV pools for hybrid models, as a what-if system.

Engine followed: **SGLang** ``srt`` as of its server-args defaults ``swa_full_tokens_ratio = 0.8``,
``mamba_full_memory_ratio = 0.9``, ``mamba_scheduler_strategy = "no_buffer"``, ``page_size = 1``
(``python/sglang/srt/server_args.py``). Sizing (``model_executor/model_runner.py`` /
``model_runner_kv_cache_mixin.py``):

- **Mamba pool** (``HybridLinearKVPool`` with a ``MambaPool``): of the memory left for caches,
  ``rest * r / (1 + r)`` (``r = mamba_full_memory_ratio``) goes to Mamba states,
  ``max_mamba_cache_size = budget // state bytes per request``; the attention pools get the rest,
  ``rest / (1 + r)``.
- **SWA / full pools** (``SWAKVPool``, ``set_num_token_hybrid``): full tokens ``F`` and sliding
  tokens ``S = ratio * F`` solve ``F * full_bytes_per_token + S * swa_bytes_per_token = attention
  bytes`` (SGLang writes it per layer: ``F = total_tokens / (ratio * swa_layers * head_ratio +
  full_layers)``), both rounded down to the page size. The split is fixed at start-up: idle SWA
  slots cannot serve full-attention tokens and vice versa.

Prefix caching: ``SWARadixCache`` frees (tombstones) a request's sliding-window KV as it leaves the
window and matches a prefix only where the last ``window`` tokens' SWA KV is still present; each pool
evicts by LRU on its own. ``MambaRadixCache`` under ``no_buffer`` keeps one state per cached
request, at the end of what it inserted (modelled: at the end of the prompt; SGLang's
``cache_finished_req`` also covers the generated tokens, which a next chat turn re-sends -- a
difference that only under-counts Mamba hits here). ``extra_buffer`` (states every
``mamba_track_interval`` tokens) is not modelled.

``sglang_unified`` (``--enable-unified-memory``: one arena, sub-pools grown from opposite ends) is
not modelled yet.
"""

from __future__ import annotations

from jenga.manager_base import PagedManager
from jenga.pools.flat import PartitionedPool
from jenga.spec import FullAttentionSpec, MambaSpec, SpecError

ENGINE_VERSION = "SGLang srt (server_args defaults: swa_full_tokens_ratio 0.8, mamba_full_memory_ratio 0.9)"


def sglang_split(specs, capacity_bytes: int, page_size: int = 1, swa_full_tokens_ratio: float = 0.8,
                 mamba_full_memory_ratio: float = 0.9) -> dict:
    """Tokens (attention pools) and slots (Mamba) SGLang gives each pool out of ``capacity_bytes``."""
    if not 0 < swa_full_tokens_ratio <= 1:
        raise SpecError(f"swa_full_tokens_ratio must be in (0, 1], got {swa_full_tokens_ratio!r}")
    if not mamba_full_memory_ratio > 0:
        raise SpecError(f"mamba_full_memory_ratio must be > 0, got {mamba_full_memory_ratio!r}")
    mamba = [s for s in specs if isinstance(s, MambaSpec)]
    attn = [s for s in specs if s.token_based]
    out: dict = {"full_tokens": 0, "swa_tokens": 0, "mamba_slots": 0}
    rest = capacity_bytes
    if mamba:
        r = mamba_full_memory_ratio
        budget = capacity_bytes * r / (1 + r)
        out["mamba_slots"] = int(budget // sum(s.state_bytes for s in mamba))
        rest = capacity_bytes / (1 + r)
    full_bpt = sum(s.bytes_per_token for s in attn if type(s) is FullAttentionSpec)
    other_bpt = sum(s.bytes_per_token for s in attn if type(s) is not FullAttentionSpec)
    if full_bpt and other_bpt:
        f = int(rest / (full_bpt + swa_full_tokens_ratio * other_bpt))
        out["full_tokens"] = f - f % page_size
        s = int(f * swa_full_tokens_ratio)
        out["swa_tokens"] = s - s % page_size
    elif full_bpt:
        f = int(rest // full_bpt)
        out["full_tokens"] = f - f % page_size
    elif other_bpt:
        s = int(rest // other_bpt)
        out["swa_tokens"] = s - s % page_size
    return out


class SglangPools(PagedManager):
    """Separate, statically sized pools per layer kind (see the module docstring)."""

    system_name = "sglang_pools"
    engine_version = ENGINE_VERSION
    option_names = ("swa_full_tokens_ratio", "mamba_full_memory_ratio")

    def make_pool(self, **options):
        split = sglang_split(self.specs, self.capacity_bytes, self.tokens_per_page,
                             options.get("swa_full_tokens_ratio", 0.8), options.get("mamba_full_memory_ratio", 0.9))
        self.split = split
        shares = []
        for st, s in zip(self.types, self.specs):
            if isinstance(s, MambaSpec):
                n = split["mamba_slots"]
            elif type(s) is FullAttentionSpec:
                n = split["full_tokens"] // st.tokens_per_page
            else:
                n = split["swa_tokens"] // st.tokens_per_page
            shares.append(n * st.page_bytes)
        if any(x <= 0 for x in shares):
            raise SpecError(f"capacity_bytes ({self.capacity_bytes}) leaves a pool empty under SGLang's split {split}")
        return PartitionedPool([st.page_bytes for st in self.types], shares, self.capacity_bytes,
                               self.enable_prefix_cache)

    # -- MambaRadixCache (no_buffer): one state at the end of the cached prompt -------------------
    def checkpoint_positions(self, rs, t, prev, T):
        return (rs.prompt_len,) if prev < rs.prompt_len <= T else ()

    def checkpoint_hit(self, t, hasher, L):
        if self.types[t].policy.pages_per_state != 1:
            return 0
        idx = self.index[t]
        step = self.hash_block
        b = L - L % step
        while b > 0:
            if hasher.hash_at(b) in idx:
                return b
            b -= step
        return 0


def reported_capacity(mm, max_model_len: int) -> dict:
    """SGLang's start-up numbers for ``mm`` (a :class:`SglangPools`): ``max_total_num_tokens`` (the
    full pool; the SWA pool when the model has no full layer), the SWA tokens and Mamba slots, and a
    max concurrency at ``max_model_len`` taken as the smallest over pools of what one such request
    needs (full: every token; SWA: its window; Mamba: one slot) -- SGLang logs no such number."""
    sp = mm.split
    conc = []
    for s in mm.specs:
        if isinstance(s, MambaSpec):
            conc.append(sp["mamba_slots"])
        elif type(s) is FullAttentionSpec:
            conc.append(sp["full_tokens"] / max_model_len)
        elif s.token_based:
            conc.append(sp["swa_tokens"] / min(getattr(s, "window", max_model_len), max_model_len))
    c = min(conc) if conc else 0.0
    return {**sp, "max_concurrency": c,
            "kv_capacity_tokens": sp["full_tokens"] or sp["swa_tokens"]}
