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
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.profile import ModelProfile
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
    import jenga
    # vLLM keeps vision embeddings in its encoder cache, outside the KV pool; compare the KV pool only.
    specs = [s for s in profile.specs if not isinstance(s, VisionEmbeddingSpec)]
    mm = jenga.make_manager("hybrid_groups" if hybrid else "vllm", specs, budget, tokens_per_page=tpp)
    # UniformPaged's "uniform/image" type is the cross-attention view of the same pages, not a group.
    groups = [(t.name, t.tokens_per_page) for t in mm.types if not t.name.endswith("/image")]
    assert all(not t.state_bytes or t.name.startswith(STATE_PREFIXES) for t in mm.types), "state type naming"
    return groups, mm.page_bytes, mm.pool.num_pages


def vllm_plan(profile: ModelProfile, budget: int, tpp: int, hybrid: bool, vc_cache: dict):
    """vLLM's plan (``PlannedKV``) for the profile; one VllmConfig per call is built from scratch."""
    from harness.backends.vllm.plan import (
        EngineKnobs,
        make_vllm_config,
        plan_kv_cache,
        vllm_layer_specs,
        write_proxy_model_dir,
    )
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


def main(argv: list[str] | None = None) -> int:
    from harness.backends.vllm.plan import require_vllm
    from harness.config import compose_cell, options
    from harness.models import load_profile
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="conf/model names (default: all)")
    ap.add_argument("--budget-gib", type=float, default=16.0)
    ap.add_argument("--tokens-per-page", type=int, default=16)
    a = ap.parse_args(argv)
    require_vllm()
    budget = int(a.budget_gib * 2**30)
    rows: list[GeometryRow] = []
    cache: dict = {}
    for name in a.models or options("model"):
        prof = load_profile(compose_cell([f"model={name}"]).model)
        rows += compare(prof, budget, a.tokens_per_page, cache)
    print(markdown(rows, budget, a.tokens_per_page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
