"""Engine-core planning for Jenga inside vLLM: groups, the page-layer layout, the LCM config.

Jenga's layout (paper §4.2, "page-layer"): one KV-cache group per layer *type* (every layer with
the same vLLM spec), whatever the layer counts -- no padding layers, unlike vLLM's hybrid manager
(``kv_cache_utils._get_kv_cache_groups_uniform_page_size`` pads the smaller groups). A type's small
page holds the slices of *all* its layers for ``block_size`` tokens, so P_t = layers_t x page_t;
the large page is L = lcm(P_t) and the pool is ``num_large`` large pages in one buffer. Group t
sees that buffer as ``num_large * L / P_t`` small pages (block stride P_t, layer stride page_t,
offset 0): small page ``sid`` of type t starts at ``sid * P_t`` bytes, which is
``(sid // r_t) * L + (sid % r_t) * P_t`` -- exactly :meth:`jenga.pools.lcm.LcmPagePool.page_offset`.

``KVCacheConfig.num_blocks`` is the number of *large* pages (every group's null block, id 0, lives
in large page 0; the V2 warm-up uses ``num_blocks`` as an id bound, valid in every group); each
group's own small-page count comes from :meth:`JengaKVCacheConfig.num_blocks_of`, the one place the
worker asks how long a view is (``vllm/v1/worker/utils.py::allocate_kv_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    SlidingWindowSpec,
)

from jenga.spec import PageGeometry

SUPPORTED_SPECS = (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec)


class JengaRefusal(RuntimeError):
    """The plugin is enabled for an engine it cannot serve; the message names the reason."""


@dataclass
class JengaKVCacheTensor(KVCacheTensor):
    num_small_pages: int = 0  # small pages of this group addressable through the view


@dataclass
class JengaKVCacheConfig(KVCacheConfig):
    """vLLM's config plus the LCM geometry. ``num_blocks`` counts large pages."""

    large_page_bytes: int = 0
    small_page_bytes: tuple = ()   # P_t per group
    ratios: tuple = ()             # small pages per large page, per group
    broken_layout: bool = False    # negative control only (JENGA_VLLM_BROKEN_LAYOUT=1)

    def num_blocks_of(self, tensor) -> int:
        n = getattr(tensor, "num_small_pages", 0)
        return n if n else super().num_blocks_of(tensor)

    # -- what the plugin reports instead of vLLM's block arithmetic -------------------------------
    @property
    def usable_bytes(self) -> int:
        return max(0, self.num_blocks - 1) * self.large_page_bytes  # large page 0 holds the null blocks

    def bytes_per_token(self) -> float:
        """KV bytes one token costs across every layer (all groups)."""
        return sum(p / g.kv_cache_spec.block_size for p, g in zip(self.small_page_bytes, self.kv_cache_groups))


def check_specs(vllm_config, kv_cache_spec: dict) -> None:
    """Refuse, with one message naming the reason, what the plugin cannot serve (before any work)."""
    reasons = []
    pc = vllm_config.parallel_config
    if getattr(pc, "pipeline_parallel_size", 1) > 1:
        reasons.append("pipeline parallelism (each stage would hold a different layer mix and LCM)")
    if getattr(vllm_config, "speculative_config", None) is not None:
        reasons.append("speculative decoding (draft/EAGLE KV groups are untested with per-group small pages)")
    if getattr(vllm_config, "kv_transfer_config", None) is not None:
        reasons.append("KV connectors / KV offloading (they assume one global block-id space)")
    attn_cfg = getattr(vllm_config, "attention_config", None)
    if attn_cfg is not None and getattr(attn_cfg, "hisparse_config", None) is not None:
        reasons.append("HiSparse host pools")
    bad = sorted({type(s).__name__ for s in kv_cache_spec.values()
                  if not isinstance(s, SUPPORTED_SPECS) or not isinstance(s, AttentionSpec)})
    if bad:
        reasons.append(f"layer specs {bad}: Mamba / linear-attention / cross-attention hybrids need per-group "
                       "block zeroing and copy-on-write, which vLLM does over one flat block-id space")
    dtypes = {str(s.dtype) for s in kv_cache_spec.values() if isinstance(s, AttentionSpec)}
    if len(dtypes) > 1:
        reasons.append(f"mixed-precision KV {sorted(dtypes)} (block zeroing uses one flat id space)")
    sizes = {s.block_size for s in kv_cache_spec.values() if isinstance(s, AttentionSpec)}
    if len(sizes) > 1:
        reasons.append(f"different block sizes per layer {sorted(sizes)}")
    if reasons:
        raise JengaRefusal("jenga_vllm cannot serve this engine: " + "; ".join(reasons)
                           + ". Unset JENGA_VLLM (or use system=hybrid_groups) to run vLLM's own manager.")


def jenga_groups(vllm_config, kv_cache_spec: dict) -> list[KVCacheGroupSpec]:
    """One group per distinct layer spec, in first-layer order (no padding layers)."""
    check_specs(vllm_config, kv_cache_spec)
    buckets: dict = {}
    for name, spec in kv_cache_spec.items():
        buckets.setdefault(spec, []).append(name)
    return [KVCacheGroupSpec(names, spec) for spec, names in buckets.items()]


def small_page_bytes(group) -> int:
    return len(group.layer_names) * group.kv_cache_spec.page_size_bytes


def page_geometry(groups) -> PageGeometry:
    """jenga's LCM page geometry of the groups (one small page per group: its layers' pages side by
    side), the same object jenga's pools are sized by -- the plugin does no page math of its own."""
    return PageGeometry(groups[0].kv_cache_spec.block_size if groups else 16,
                        {str(i): small_page_bytes(g) for i, g in enumerate(groups)})


def large_page_bytes(groups) -> int:
    return page_geometry(groups).large_page_bytes


def jenga_config(vllm_config, groups, num_large: int, broken: bool = False) -> JengaKVCacheConfig:
    """The page-layer layout over one buffer of ``num_large`` large pages.

    ``broken`` is the negative control: the layers of a type overlap (layer stride
    0), so outputs must change -- proof that the bit-identity check can fail."""
    geo = page_geometry(groups)
    L = geo.large_page_bytes
    tensors, ratios, smalls = [], [], []
    for i, g in enumerate(groups):
        page, P = g.kv_cache_spec.page_size_bytes, small_page_bytes(g)
        ratios.append(geo.small_pages_per_large(str(i)))
        smalls.append(P)
        tensors.append(JengaKVCacheTensor(size=num_large * L, layers=list(g.layer_names),
                                          layer_stride=page // 2 if broken and len(g.layer_names) > 1 else page,
                                          block_stride=P, offset=0, num_small_pages=num_large * (L // P)))
    cfg = JengaKVCacheConfig(
        num_blocks=num_large, kv_cache_tensors=tensors, kv_cache_groups=groups,
        prefix_cache_retention_interval=vllm_config.cache_config.prefix_cache_retention_interval,
        large_page_bytes=L, small_page_bytes=tuple(smalls), ratios=tuple(ratios), broken_layout=broken)
    if not broken:
        check_plan(cfg)
    return cfg


def check_plan(cfg: JengaKVCacheConfig) -> None:
    """The layout is Jenga's: within a small page the layers' slices tile it exactly, every view
    ends inside the buffer, and small page ``sid`` sits where the LCM pool says it does."""
    L = cfg.large_page_bytes
    for t, (tensor, group) in enumerate(zip(cfg.kv_cache_tensors, cfg.kv_cache_groups)):
        page = group.kv_cache_spec.page_size_bytes
        n = len(tensor.layers)
        problems = []
        if tensor.layer_stride != page or tensor.block_stride != n * page or tensor.offset != 0:
            problems.append(f"strides (layer {tensor.layer_stride}, block {tensor.block_stride}, offset "
                            f"{tensor.offset}) != page-layer ({page}, {n * page}, 0)")
        if L % tensor.block_stride or cfg.ratios[t] * tensor.block_stride != L:
            problems.append(f"small page {tensor.block_stride} B does not tile the large page {L} B")
        if tensor.num_small_pages * tensor.block_stride != tensor.size:
            problems.append(f"{tensor.num_small_pages} small pages x {tensor.block_stride} B != buffer {tensor.size} B")
        if problems:
            raise AssertionError(f"jenga_vllm plan, group {t} ({type(group.kv_cache_spec).__name__}): "
                                 + "; ".join(problems))


def _max_blocks(vllm_config, group) -> int:
    """Small pages of ``group`` one request of ``max_model_len`` tokens can hold at once (vLLM's
    own per-spec count, as in ``_max_memory_usage_bytes_from_groups``)."""
    spec = group.kv_cache_spec
    return -(-spec.max_memory_usage_bytes(vllm_config) // spec.page_size_bytes)


def request_bytes(vllm_config, groups) -> int:
    """Bytes of small pages one request of ``max_model_len`` tokens holds: per group its blocks
    times its own small page (what it costs when large pages are shared with other requests)."""
    return sum(_max_blocks(vllm_config, g) * small_page_bytes(g) for g in groups)


def max_usage_bytes(vllm_config, groups) -> int:
    """Bytes one request of ``max_model_len`` tokens needs alone in the pool: request-aware
    placement packs its small pages of type t into ceil(n_t / r_t) large pages, so the need is
    sum_t ceil(n_t / r_t) x L. (vLLM's ``_max_memory_usage_bytes_from_groups`` multiplies every
    group's blocks by one bytes-per-block, which over-counts here; the engine's start-up check
    compares this with the usable bytes, null block's large page held back.) Adding one large page
    of rounding to :func:`request_bytes` instead is short by up to G-2 large pages with G >= 3 types."""
    geo = page_geometry(groups)
    return sum(-(-_max_blocks(vllm_config, g) // geo.small_pages_per_large(str(i)))
               for i, g in enumerate(groups)) * geo.large_page_bytes


def max_concurrency(vllm_config, cfg: JengaKVCacheConfig) -> float:
    """Requests of ``max_model_len`` tokens that fit the usable bytes (vLLM's meaning of the number)."""
    per_req = request_bytes(vllm_config, cfg.kv_cache_groups)
    return cfg.usable_bytes / per_req if per_req else 0.0


def token_capacity(cfg: JengaKVCacheConfig) -> int:
    """Tokens whose KV (every layer) fits the usable bytes."""
    bpt = cfg.bytes_per_token()
    return int(cfg.usable_bytes // bpt) if bpt else 0


def describe(cfg: JengaKVCacheConfig) -> dict:
    return {"allocator": "jenga_lcm", "num_large_pages": int(cfg.num_blocks),
            "large_page_bytes": int(cfg.large_page_bytes), "small_page_bytes": list(cfg.small_page_bytes),
            "small_pages_per_large": list(cfg.ratios),
            "small_pages": [int(t.num_small_pages) for t in cfg.kv_cache_tensors],
            "layers_per_group": [len(g.layer_names) for g in cfg.kv_cache_groups],
            "usable_bytes": int(cfg.usable_bytes), "token_capacity": token_capacity(cfg),
            "broken_layout": bool(cfg.broken_layout)}


def check_views(cfg, kv_caches: dict) -> None:
    """Start-up self-check on the worker: every layer's view has the stride, length and byte offset
    the plan gave it (vLLM builds them from ``KVCacheTensor`` + ``num_blocks_of``)."""
    if not isinstance(cfg, JengaKVCacheConfig) or not kv_caches:
        return
    base = None
    for t in kv_caches.values():
        base = t.untyped_storage().data_ptr()
        break
    for tensor in cfg.kv_cache_tensors:
        for li, name in enumerate(tensor.layers):
            v = kv_caches[name]
            es = v.element_size()
            got = (v.shape[0], v.stride(0) * es, v.data_ptr() - base)
            want = (tensor.num_small_pages, tensor.block_stride, tensor.offset + li * tensor.layer_stride)
            if got != want or v.untyped_storage().data_ptr() != base:
                raise AssertionError(f"jenga_vllm view self-check failed for {name}: (blocks, block stride B, "
                                     f"offset B) = {got}, plan says {want}")


def plan_for_scheduler(vllm_config, layer_specs: dict, kv_bytes: int, broken: bool = False) -> JengaKVCacheConfig:
    """The plan the engine core would make for ``kv_bytes`` of KV memory (scheduler-only drivers
    such as the harness's ``backend=vllm_sched`` call this instead of vLLM's planner)."""
    groups = jenga_groups(vllm_config, dict(layer_specs))
    num_large = int(kv_bytes) // large_page_bytes(groups)
    if num_large < 2:
        raise ValueError(f"jenga_vllm: {kv_bytes} B hold {num_large} large page(s) of {large_page_bytes(groups)} B; "
                         "need at least 2 (large page 0 holds the null blocks)")
    cfg = jenga_config(vllm_config, groups, num_large, broken=broken)
    need = max_usage_bytes(vllm_config, groups)
    if need > cfg.usable_bytes:  # the engine's start-up check (_check_enough_kv_cache_memory), same rule
        raise ValueError(f"jenga_vllm: one request of max_model_len={vllm_config.model_config.max_model_len} tokens "
                         f"needs {need} B of KV cache; {kv_bytes} B hold {cfg.usable_bytes} usable B")
    return cfg
