"""The hybrid KV what-if lab, one command (issue 22 §4): today's engines' KV rules on one model.

    python -m harness.whatif model=<zoo name | path/to/config.json> [gpu=h100] [engine.max_model_len=32768]
        [workload=<dataset | sessions | agent> [workload.<field>=v ...] | trace=path.jsonl]
        [num_requests=64] [seed=0] [tp=auto] [jobs=<parallel simulations, default: the usable cores>]
        [rules=vllm_hma,vllm_hma_off,jenga] [<rule>.<option>=value ...] [engine.<key>=value ...]
        [--json] [--no-sweep]

Per rule (a system of ``jenga.registry``; the engine version it follows is named in the output):
block size per KV cache group in tokens and bytes, KV capacity in tokens as that engine reports it
and max concurrency at ``max_model_len`` (vLLM's ``get_kv_cache_capacity``), the static waste (page
padding); with a workload, the prefix hit rate, simulated throughput and TTFT from the CPU serving
simulator (``backend=sim``) and the runtime waste breakdown. Then the knob values that change the
answer most, found by a small sweep. Every number from the simulator is **simulated** (our
step-time model on the named GPU) and says so; capacities and block sizes are the engine's
arithmetic on the model's specs, exact for vLLM 0.32 (tests/test_whatif_vllm.py).

Time on 2 cores: without a workload about 1-2 s; with a workload each rule is one simulation
(seconds; SGLang's 1-token pages make its runs the slowest) and the sweep adds one per distinct knob
value; the simulations run in parallel worker processes (one per usable core, ``jobs=`` caps them;
results do not depend on it), so about ten to twenty seconds for the generated workloads --
``--no-sweep`` for the fastest answer. A long-context dataset takes minutes under SGLang's 1-token
pages (every token a radix node): ``model=gemma3_12b workload=arxiv_qa --no-sweep`` ~1.6 min on 2
cores (measured: sglang_unified 97 s, sglang_pools 41 s, every other rule under 8 s).

``tp=auto`` (the default) serves the model on the fewest of 1, 2, 4 or 8 GPUs of ``gpu=`` at which its
weights leave KV memory (vLLM's start-up needs some) and says which; ``tp=<n>`` fixes it.
``--json`` prints a list of objects, one per rule, with at least ``rule``, ``block_size_tokens`` (per
group), ``kv_capacity_tokens``, ``max_concurrency`` and ``prefix_hit_rate`` (null without a workload).

Bad input (an unknown key, rule, option or model; a trace line that fails the schema) is one
``error:`` line and exit code 2 before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import jenga
from harness.backends.cost.model import CostModel
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.sim.engine import run_cell as sim_run_cell
from harness.config import compose_cell
from harness.config import options as group_options
from harness.config_json import ConfigJsonError, profile_from_config_json
from harness.models import load_profile
from harness.workloads import build_workload
from harness.workloads import sessions as ww
from harness.workloads.trace import TraceError, load_trace
from harness.workloads.twins import WorkloadError
from jenga.baselines.sglang import reported_capacity as sglang_capacity
from jenga.baselines.sglang_unified import reported_capacity as sglang_unified_capacity
from jenga.baselines.trtllm import TOKENS_PER_BLOCK as TRTLLM_TOKENS_PER_BLOCK
from jenga.baselines.trtllm import reported_capacity as trtllm_capacity
from jenga.baselines.vllm_hma import reported_capacity
from jenga.registry import ALL_SYSTEM_NAMES, REGISTRY
from jenga.spec import VisionEmbeddingSpec

USAGE = __doc__.split("\n\n")[1]
RULES = ("vllm_hma", "vllm_hma_off", "sglang_pools", "sglang_unified", "trtllm_pools", "jenga")
DEFAULT_RULES = RULES
ENGINE_OF = {"vllm_hma": "vLLM 0.32.0 (hybrid KV cache manager)",
             "vllm_hma_off": "vLLM 0.32.0 (--disable-hybrid-kv-cache-manager)",
             "sglang_pools": "SGLang srt main 2026 (separate SWA/full/Mamba pools, server_args defaults; "
                             "model_runner_kv_cache_mixin 001ccef0)",
             "sglang_unified": "SGLang srt main 2026-08 (--enable-unified-memory, sglang#29678; "
                               "before sglang#36713's fix)",
             "trtllm_pools": "TensorRT-LLM main 2026 (PyTorch backend, V1 KV cache manager: one pool per window "
                             "size, calculate_max_num_blocks_for_vswa equal split, tokens_per_block 32; hybrid "
                             "Mamba: CppMambaHybridCacheManager, _calculate_max_num_blocks_for_linear_attention)",
             "jenga": "Jenga (SOSP'25 LCM allocator, this repository)"}
TOP_KEYS = {"model", "gpu", "tp", "workload", "trace", "rules", "num_requests", "seed", "jobs"}
ENGINE_KEYS = {"enable_prefix_caching", "max_model_len", "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs",
               "kv_cache_bytes", "tokens_per_page", "enable_chunked_prefill", "request_rate"}
GENERATED_WORKLOADS = ("sessions", "agent")


class WhatIfError(ValueError):
    """Bad input: the message names the key."""


@dataclass
class Args:
    model: str = ""
    gpu: str = "h100"
    workload: str | None = None
    trace: str | None = None
    rules: tuple[str, ...] = DEFAULT_RULES
    num_requests: int = 64
    seed: int = 0
    tp: int | None = None  # None: tp=auto (resolve_tp)
    jobs: int | None = None  # parallel simulations (default: the usable cores)
    engine: dict = field(default_factory=dict)
    workload_opts: dict = field(default_factory=dict)  # generated workloads' fields (workload.<field>=)
    options: dict = field(default_factory=dict)  # rule -> {option: value}
    as_json: bool = False
    sweep: bool = True


def _value(text: str):
    """A command-line value: YAML scalars (ints, floats, true/false, null), else the string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_args(argv: list[str]) -> Args:
    a = Args()
    for tok in argv:
        if tok in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if tok == "--json":
            a.as_json = True
            continue
        if tok == "--no-sweep":
            a.sweep = False
            continue
        if "=" not in tok:
            raise WhatIfError(f"{tok!r}: expected key=value or --json / --no-sweep")
        key, raw = tok.split("=", 1)
        val = _value(raw)
        if key.startswith("workload."):
            a.workload_opts[key.split(".", 1)[1]] = val
            continue
        if key.startswith("engine."):
            sub = key.split(".", 1)[1]
            if sub not in ENGINE_KEYS:
                raise WhatIfError(f"{key}: unknown engine key; allowed: {sorted('engine.' + k for k in ENGINE_KEYS)}")
            a.engine[sub] = val
        elif "." in key and key.split(".", 1)[0] in REGISTRY:
            rule, opt = key.split(".", 1)
            allowed = getattr(REGISTRY[rule].factory, "option_names", ())
            if opt not in allowed:
                raise WhatIfError(f"{key}: {rule} has no option {opt!r}; allowed: {list(allowed)}")
            a.options.setdefault(rule, {})[opt] = val
        elif key == "rules":
            names = tuple(x for x in str(raw).split(",") if x)
            bad = [x for x in names if x not in REGISTRY]
            if bad or not names:
                raise WhatIfError(f"rules={raw}: unknown rule(s) {bad}; known: {list(RULES)} "
                                  f"(and any system of jenga.registry: {list(ALL_SYSTEM_NAMES)})")
            a.rules = names
        elif key == "tp" and raw == "auto":
            a.tp = None
        elif key in TOP_KEYS:
            if key in ("num_requests", "seed", "tp", "jobs"):
                lo = 0 if key == "seed" else 1
                if not isinstance(val, int) or isinstance(val, bool) or val < lo:
                    raise WhatIfError(f"{key}={raw}: must be an integer >= {lo}" + (" or auto" if key == "tp" else ""))
            setattr(a, key, str(raw) if key in ("model", "gpu", "workload", "trace") else val)
        else:
            raise WhatIfError(f"{key}: unknown key; allowed: {sorted(TOP_KEYS)}, engine.<key>, <rule>.<option>")
    if not a.model:
        raise WhatIfError("model: required (a zoo name from harness/conf/model/, or a path to a config.json)")
    if a.workload and a.trace:
        raise WhatIfError("workload and trace: give one, not both")
    if a.workload_opts:
        spec_cls = ww.SPECS.get(a.workload)
        if spec_cls is None:
            raise WhatIfError(f"workload.*: options only for the generated workloads {list(GENERATED_WORKLOADS)}")
        allowed = [f.name for f in dataclasses.fields(spec_cls)]
        bad = sorted(set(a.workload_opts) - set(allowed))
        if bad:
            raise WhatIfError(f"workload.{bad[0]}: {a.workload} has no such field; allowed: {allowed}")
    for rule in a.options:
        if rule not in a.rules:
            raise WhatIfError(f"{rule}.*: options for a rule not in rules={','.join(a.rules)}")
    return a


# -- the model and the cell ----------------------------------------------------------------------------
def _is_path(model: str) -> bool:
    return model.endswith(".json") or "/" in model or Path(model).is_dir()


def compose(a: Args, system: str = "vllm_hma", options: dict | None = None, dataset: str | None = None):
    """The Hydra cell (model, GPU, engine, system) for one rule; for a config.json the zoo's default
    model fills the config and :func:`profile` supplies the real specs."""
    if not _is_path(a.model) and a.model not in group_options("model"):
        raise WhatIfError(f"model={a.model}: not a zoo model (harness/conf/model/) nor a config.json path; "
                          f"zoo: {group_options('model')}")
    if a.gpu not in group_options("gpu"):
        raise WhatIfError(f"gpu={a.gpu}: unknown; known: {group_options('gpu')}")
    ov = [f"gpu={a.gpu}", f"gpu.count={1 if a.tp is None else a.tp}", f"system={system}", "backend=sim", f"seed={a.seed}", "engine.engine_version=v1",
          "engine.enable_chunked_prefill=true"]
    if not _is_path(a.model):
        ov.append(f"model={a.model}")
    if dataset:
        ov.append(f"dataset={dataset}")
    # vLLM 0.32's defaults: prefix caching on (CacheConfig.enable_prefix_caching = True), 8192
    # tokens per step on a datacenter GPU
    eng = {"max_num_batched_tokens": 8192, "enable_prefix_caching": True, **a.engine}
    ov += [f"engine.{k}={'null' if v is None else v}" for k, v in eng.items()]
    cfg = compose_cell(ov)
    if options:
        # over the system's own defaults (harness/conf/system/<rule>.yaml: Jenga's sliding retention
        # and, on v1, its widened hit check and block copies), not instead of them
        cfg.system.options = {**cfg.system.options, **options}
    return cfg


def profile(a: Args):
    if _is_path(a.model):
        try:
            return profile_from_config_json(a.model)
        except ConfigJsonError as e:
            raise WhatIfError(f"model={a.model}: {e}") from None
    return load_profile(compose(a).model)


def kv_bytes(cfg, prof) -> int:
    """KV bytes the engine gets on this GPU (vLLM's profile run: memory x utilization - weights -
    activation peak), or ``engine.kv_cache_bytes`` when given."""
    try:
        return CostModel(prof, GpuSettings.of(cfg.gpu), EngineSettings.of(cfg.engine)).kv_capacity_bytes()
    except ValueError as e:
        raise WhatIfError(f"model={prof.name} gpu={cfg.gpu.name} tp={cfg.gpu.count}: {e}; raise tp= or set "
                          "engine.kv_cache_bytes=") from None


AUTO_TP = (1, 2, 4, 8)


def resolve_tp(a: Args, prof) -> int:
    """``a.tp``, or for ``tp=auto`` the fewest GPUs of :data:`AUTO_TP` at which the model's weights
    and activation peak leave KV memory on ``a.gpu`` (the error of the largest when none does)."""
    if a.tp is not None:
        return a.tp
    for n in AUTO_TP:
        try:
            kv_bytes(compose(dataclasses.replace(a, tp=n)), prof)
            return n
        except WhatIfError as e:
            last = e
    fits = []
    for gpu in group_options("gpu"):
        if gpu == a.gpu:
            continue
        try:
            kv_bytes(compose(dataclasses.replace(a, gpu=gpu, tp=AUTO_TP[-1])), prof)
            fits.append(gpu)
        except WhatIfError:
            pass
    hint = f"; on {AUTO_TP[-1]} GPUs it fits {', '.join('gpu=' + g for g in fits)}" if fits else ""
    raise WhatIfError(f"{last} (tp=auto tried {', '.join(map(str, AUTO_TP))} GPUs{hint})")


# -- per rule ---------------------------------------------------------------------------------------
def page_tokens(rule: str, default: int) -> int:
    """Tokens per page each engine uses by default: SGLang's page_size 1, TensorRT-LLM's
    tokens_per_block 32, ``engine.tokens_per_page`` (vLLM's 16) for the rest."""
    if rule.startswith("sglang"):
        return 1
    if rule == "trtllm_pools":
        return TRTLLM_TOKENS_PER_BLOCK
    return default


def rule_options(rule: str, options: dict, max_model_len: int, prof=None, cfg=None) -> dict:
    """The rule's options with what the engine takes from the cell: TensorRT-LLM's full-attention
    window (and its split's weight) is ``max_seq_len``, and vLLM's KV cache manager allocates no block
    past ``max_model_len``; for a model with Mamba / linear-attention
    layers also the architecture (TensorRT-LLM runs only its hybrid-linear families) and
    ``max_batch_size``, taken as the cell's ``engine.max_num_seqs`` (the same knob: the most requests
    in a batch; it sizes the live recurrent states TensorRT-LLM reserves first). SGLang's rules get
    the recurrent layers' state shapes (``mamba_state_elems``), which SGLang sizes in its own dtypes."""
    if rule == "trtllm_pools":
        extra = {}
        if prof is not None and any(s.kind == "mamba" for s in prof.specs):
            extra["architecture"] = prof.architecture
            if cfg is not None and cfg.engine.max_num_seqs:
                extra["max_batch_size"] = int(cfg.engine.max_num_seqs)
        return {"max_seq_len": max_model_len, **extra, **options}
    if rule == "vllm_hma":
        # KVCacheManager.allocate_slots clamps a request's blocks at max_model_len (vllm_hma.py)
        return {"max_model_len": max_model_len, **options}
    if rule.startswith("sglang") and prof is not None and "mamba_state_elems_per_layer" in prof.extra:
        # SGLang sizes states with its own dtypes (bf16 conv, fp32 recurrent state): the shapes go along
        return {"mamba_state_elems": list(prof.extra["mamba_state_elems_per_layer"]), **options}
    return dict(options)


def _max_model_len(cfg, prof) -> int:
    mml = cfg.engine.max_model_len
    return int(mml) if mml else int(prof.max_model_len)


def check_vllm_start(mm, kv: int, max_model_len: int, max_num_batched_tokens: int, blocks_per_request: int) -> None:
    """vLLM 0.32 refuses to start when the KV cache cannot hold one ``max_model_len`` request
    (``v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory``): the memory one request's specs
    need at most (``max_memory_usage_bytes``: here the blocks one request needs, every group, times the
    pool's block) against the memory less the null block the pool keeps back
    (``_pool_bytes_per_block``); its message names the longest ``max_model_len`` that would start
    (``estimate_max_model_len``, a binary search). ValueError with vLLM's message."""
    block = mm.pool.page_bytes_flat
    usable = kv - block

    def needed(length: int) -> int:
        per = reported_capacity(mm, length, max_num_batched_tokens=max_num_batched_tokens)["blocks_per_request"]
        return per * block

    if blocks_per_request * block <= usable:
        return
    lo, hi = 0, max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed(mid) <= usable:
            lo = mid
        else:
            hi = mid - 1
    est = f" Based on the available memory, the estimated maximum model length is {lo}." if lo > 0 else ""
    raise ValueError(f"vLLM refuses to start: to serve one request of max_model_len {max_model_len}, "
                     f"{blocks_per_request * block / 2**30:.2f} GiB of KV cache is needed, more than the "
                     f"{usable / 2**30:.2f} GiB available (check_enough_kv_cache_memory).{est} "
                     "Lower engine.max_model_len or raise tp= / gpu_memory_utilization.")


def static_answer(rule: str, prof, kv: int, cfg, options: dict, prefix_caching: bool) -> dict:
    """Geometry and capacity of ``rule`` (no simulation)."""
    specs = [s for s in prof.specs if not isinstance(s, VisionEmbeddingSpec)] if rule.startswith("vllm") else list(prof.specs)
    mml = _max_model_len(cfg, prof)
    mnbt = int(cfg.engine.max_num_batched_tokens or 8192)
    # SGLang's page_size defaults to 1 token; the others page by engine.tokens_per_page (16)
    tpp = page_tokens(rule, int(cfg.engine.tokens_per_page or 16))
    mm = jenga.make_manager(rule, specs, kv, tokens_per_page=tpp, enable_prefix_cache=prefix_caching,
                            **rule_options(rule, options, mml, prof, cfg))
    types = [t for t in mm.types if not t.name.endswith("/image")]
    out = {"rule": rule, "engine": ENGINE_OF.get(rule, getattr(mm, "engine_version", rule)),
           "options": options, "kv_bytes": kv, "max_model_len": mml,
           "block_size_tokens": {t.name: t.tokens_per_page for t in types},
           "page_bytes": {t.name: t.page_bytes for t in types}}
    if rule.startswith("sglang"):
        cap = (sglang_unified_capacity if rule == "sglang_unified" else sglang_capacity)(mm, mml)
        out.update(num_blocks=None, kv_capacity_tokens=cap["kv_capacity_tokens"],
                   max_concurrency=round(cap["max_concurrency"], 4), full_tokens=cap["full_tokens"],
                   swa_tokens=cap["swa_tokens"], mamba_slots=cap["mamba_slots"])
        if rule == "sglang_unified":
            out.update(arena_bytes=cap["arena_bytes"], full_tokens_if_alone=cap["full_tokens_if_alone"])
    elif rule == "trtllm_pools":
        cap = trtllm_capacity(mm, mml)
        out.update(num_blocks=sum(cap["blocks_per_window"].values()), kv_capacity_tokens=cap["kv_capacity_tokens"],
                   max_concurrency=round(cap["max_concurrency"], 4),
                   blocks_per_window={str(w): n for w, n in cap["blocks_per_window"].items()},
                   window_share={str(w): x for w, x in cap["window_share"].items()})
    elif rule.startswith("vllm"):
        cap = reported_capacity(mm, mml, max_num_batched_tokens=mnbt)
        check_vllm_start(mm, kv, mml, mnbt, cap["blocks_per_request"])
        out.update(num_blocks=cap["num_blocks"], kv_capacity_tokens=cap["kv_capacity_tokens"],
                   max_concurrency=round(cap["max_concurrency"], 4))
        if rule == "vllm_hma":
            out["mamba_cache_mode"] = mm.mamba_cache_mode if any(s.kind == "mamba" for s in specs) else None
            out["prefix_cache_retention_interval"] = mm.retention_interval
    else:
        # Jenga reports no capacity line; the same definition as vLLM's: concurrency of
        # max_model_len-token requests x max_model_len, a request holding the pages its types need
        # (sliding: the window plus one step's tokens; Mamba: one state).
        geo = mm.geometry
        per_req = 0
        for s in specs:
            page = geo.small_page_bytes[s.name]
            if s.kind == "mamba":
                per_req += page
            elif s.kind == "sliding":
                per_req += (math.ceil(min(s.window - 1 + mnbt, mml) / tpp) + 1) * page
            elif s.kind == "chunked":  # the current chunk plus one step's tokens
                per_req += math.ceil(min(s.chunk + mnbt, mml) / tpp) * page
            elif s.kind == "vision_embedding":
                continue
            else:
                per_req += math.ceil(mml / tpp) * page
        usable = (kv // geo.large_page_bytes) * geo.large_page_bytes
        conc = usable / per_req
        out.update(num_blocks=usable // geo.large_page_bytes, large_page_bytes=geo.large_page_bytes,
                   kv_capacity_tokens=int(conc * mml), max_concurrency=round(conc, 4))
    kinds = {s.kind for s in specs}
    notes = []
    if "chunked" in kinds and rule == "vllm_hma":
        notes.append("vLLM 0.32 turns the hybrid manager off for models with attention_chunk_size (Llama 4) "
                     "unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (config/vllm.py); "
                     "vllm_hma_off is its default")
    if "chunked" in kinds and rule.startswith("sglang"):
        notes.append("SGLang sizes Llama 4's chunked pool with its own formula (set_num_token_hybrid's Llama4 "
                     "branch), not modelled: chunked layers are split here like sliding-window ones")
    if notes:
        out["notes"] = notes
    # Static waste: bytes of every page that hold no data (Mamba states padded to the attention
    # page, group padding layers), as a fraction of a page of each group.
    pad = {}
    for t in types:
        if t.state_bytes:
            pad[t.name] = round(1 - t.state_bytes / t.page_bytes, 4)
        elif t.data_bytes_per_token:
            pad[t.name] = round(1 - t.data_bytes_per_token * t.tokens_per_page / t.page_bytes, 4)
    out["page_padding_fraction"] = pad
    return out


def simulate(rule: str, a: Args, prof, requests, options: dict) -> dict:
    """Serve ``requests`` under ``rule`` in the CPU simulator; every metric is simulated."""
    base = compose(a)
    cfg = compose(a, rule, rule_options(rule, options, _max_model_len(base, prof), prof, base), dataset="synthetic")
    cfg.engine.tokens_per_page = page_tokens(rule, int(cfg.engine.tokens_per_page or 16))
    t0 = time.perf_counter()
    res = sim_run_cell(cfg, prof, requests)
    m = res.metrics
    return {"simulated": True, "prefix_hit_rate": m.get("prefix_hit_rate"),
            "prefix_hit_tokens": m.get("prefix_hit_tokens"), "throughput_req_s": m.get("throughput_req_s"),
            "output_tok_s": m.get("output_tok_s"), "ttft_mean_s": m.get("ttft_mean"), "ttft_p50_s": m.get("ttft_p50"),
            "preemptions": m.get("preemptions"), "waste_fraction": m.get("waste_fraction"),
            "waste_breakdown": m.get("waste_breakdown"), "num_ignored": m.get("num_ignored"),
            "sim_wall_s": round(time.perf_counter() - t0, 2)}


def build_requests(a: Args, prof):
    """The workload: a generated one (``sessions``, ``agent``), a dataset twin of the harness, or a
    user trace (JSONL)."""
    if a.trace:
        try:
            return load_trace(a.trace, vocab_size=prof.vocab_size)
        except TraceError as e:
            raise WhatIfError(f"trace={a.trace}: {e}") from None
    if a.workload in GENERATED_WORKLOADS:
        return ww.generate(a.workload, num_requests=a.num_requests, seed=a.seed, vocab_size=prof.vocab_size,
                           **a.workload_opts)
    if a.workload not in group_options("dataset"):
        raise WhatIfError(f"workload={a.workload}: unknown; known: {list(GENERATED_WORKLOADS) + group_options('dataset')}")
    cfg = compose(a, dataset=a.workload)
    cfg.dataset.num_requests = a.num_requests
    # The dataset's requests are capped at the context being asked about (engine.max_model_len, else
    # the model's own), as the study cells cap theirs: an arXiv article longer than the model's
    # context is cut, not a crash.
    cfg.dataset.max_len = _max_model_len(cfg, prof)
    try:
        return build_workload(cfg)
    except WorkloadError as e:
        raise WhatIfError(f"workload={a.workload}: {e}") from None


# -- knob sweep ----------------------------------------------------------------------------------------
def knob_variants(rule: str, prof, align: int) -> list[tuple[str, dict]]:
    """A small sweep of the knobs that change the answer most for ``rule``."""
    kinds = {s.kind for s in prof.specs}
    if rule == "sglang_pools":
        out = []
        if "sliding" in kinds and "full" in kinds:
            out += [(f"swa_full_tokens_ratio={r}", {"swa_full_tokens_ratio": r}) for r in (0.2, 0.5, 1.0)]
        if "mamba" in kinds:
            out += [(f"mamba_full_memory_ratio={r}", {"mamba_full_memory_ratio": r}) for r in (0.1, 0.5, 2.0)]
        return out
    if rule == "sglang_unified":
        # the ratios only size the arena (boot labels); what changes the runtime is sglang#36713's fix
        return [("evict_full_for_mamba=true", {"evict_full_for_mamba": True})] if "mamba" in kinds else []
    if rule == "trtllm_pools":
        if "mamba" in kinds:
            # mamba_state_config.periodic_snapshot_interval: off by default, so no prefix is ever reused;
            # each snapshot interval also takes state_bytes / interval per token from the attention pool
            return [(f"periodic_snapshot_interval={n}", {"periodic_snapshot_interval": n}) for n in (256, 1024, 4096)]
        # KvCacheConfig.max_attention_window: capping every window also re-weighs the static split
        return [(f"max_attention_window={w}", {"max_attention_window": w}) for w in (4096, 16384)
                if "full" in kinds]
    if rule == "jenga":
        # Jenga's update_last_access gives out-of-window pages a timestamp below every other, so they
        # go first; a shared document's last window is such a page for the next question about it
        return ([("stale_pages_first=false", {"stale_pages_first": False})]
                if kinds & {"sliding", "chunked"} else [])
    if rule != "vllm_hma":
        return []
    out: list[tuple[str, dict]] = []
    if "mamba" in kinds:
        out += [("mamba_cache_mode=all", {"mamba_cache_mode": "all"}),
                ("mamba_cache_mode=none", {"mamba_cache_mode": "none"})]
    if kinds & {"sliding", "mamba"}:
        # intervals must be multiples of the scheduler block (vLLM's CacheConfig check)
        for ri in sorted({-(-x // align) * align for x in (2048, 8192)}):
            out.append((f"prefix_cache_retention_interval={ri}", {"prefix_cache_retention_interval": ri}))
        out.append(("prefix_cache_retention_interval=null (dense)", {"prefix_cache_retention_interval": None}))
    return out


def sweep_variants(rule: str, a: Args, prof, kv: int, cfg) -> list[tuple[str, dict, dict | None, str | None]]:
    """``(knob label, options, static answer, error)`` for every knob value of ``rule``'s sweep."""
    caching = bool(cfg.engine.enable_prefix_caching)
    try:
        mm = jenga.make_manager(rule, prof.specs, kv, enable_prefix_cache=caching,
                                **rule_options(rule, a.options.get(rule, {}), _max_model_len(cfg, prof), prof, cfg))
    except ValueError:
        return []
    out = []
    for label, opt in knob_variants(rule, prof, mm.align):
        opts = {**a.options.get(rule, {}), **opt}
        try:
            out.append((label, opts, static_answer(rule, prof, kv, cfg, opts, caching), None))
        except ValueError as e:
            out.append((label, opts, None, str(e)))
    return out


def sweep(rule: str, variants, base: dict, requests, sims: dict) -> list[dict]:
    """The sweep's rows, the knobs that move the answer most first (``sims``: the simulations of
    :func:`run_simulations`, by :func:`_job_key`)."""
    rows = []
    for label, opts, st, err in variants:
        if err is not None:
            rows.append({"knob": label, "error": err})
            continue
        row = {"knob": label, "kv_capacity_tokens": st["kv_capacity_tokens"],
               "block_size_tokens": sorted(set(st["block_size_tokens"].values()))}
        if requests:
            sim = sims[_job_key(rule, opts)]
            row.update(prefix_hit_rate=sim["prefix_hit_rate"], throughput_req_s=sim["throughput_req_s"],
                       simulated=True)
        rows.append(row)
    key = "prefix_hit_rate" if requests else "kv_capacity_tokens"
    ref = base.get(key) or 0

    def delta(r):
        return abs((r.get(key) or 0) - ref)
    ok = sorted((r for r in rows if "error" not in r), key=delta, reverse=True)
    if not requests:  # without a workload only capacity can move: drop the knobs that leave it
        ok = [r for r in ok if delta(r)]
    return ok + [r for r in rows if "error" in r]


# -- output ---------------------------------------------------------------------------------------------
def _fmt_groups(d: dict) -> str:
    sizes: dict[int, list[str]] = {}
    for name, v in d.items():
        sizes.setdefault(v, []).append(name.split("/")[0])
    return ", ".join(f"{'/'.join(sorted(set(n)))} {v}" for v, n in sorted(sizes.items()))


def print_text(model: str, gpu: str, answers: list[dict]) -> None:
    print(f"what-if: {model} on {gpu}  (capacities: the engine's arithmetic; throughput/TTFT/hit rate: SIMULATED)")
    for r in answers:
        if "error" in r:
            print(f"\n[{r['rule']}] {r['error']}")
            continue
        print(f"\n[{r['rule']}] {r['engine']}")
        print(f"  block size (tokens): {_fmt_groups(r['block_size_tokens'])}")
        print(f"  page (bytes):        {_fmt_groups(r['page_bytes'])}")
        print(f"  KV cache: {r['kv_bytes'] / 2**30:.2f} GiB = {r['kv_capacity_tokens']:,} tokens; "
              f"max concurrency at {r['max_model_len']:,} tokens: {r['max_concurrency']:.2f}x")
        for note in r.get("notes", []):
            print(f"  note: {note}")
        if r.get("arena_bytes") is not None:
            print(f"  one arena, sub-pools growing toward each other: boot labels full {r['full_tokens']:,} tokens, "
                  f"SWA {r['swa_tokens']:,}, Mamba {r['mamba_slots']:,} slots; full alone up to "
                  f"{r['full_tokens_if_alone']:,} tokens (the split floats at run time)")
        elif r.get("blocks_per_window") is not None:
            print(f"  pools per window (blocks of {r['block_size_tokens'] and max(r['block_size_tokens'].values())} "
                  f"tokens, fixed at start-up): {r['blocks_per_window']}")
        elif r.get("full_tokens") is not None:
            print(f"  pools: full {r['full_tokens']:,} tokens, SWA {r['swa_tokens']:,} tokens, "
                  f"Mamba {r['mamba_slots']:,} slots (fixed at start-up)")
        if any(r["page_padding_fraction"].values()):
            print(f"  page padding (static waste): {r['page_padding_fraction']}")
        if r.get("simulated") and (r.get("ttft_mean_s") is None or r.get("throughput_req_s") is None):
            print(f"  SIMULATED: no request completed ({r.get('num_ignored')} ignored: a request does not fit "
                  "the rule's pools at this max_model_len)")
        elif r.get("prefix_hit_rate") is not None:
            wb = r.get("waste_breakdown") or {}
            print(f"  SIMULATED: prefix hit rate {r['prefix_hit_rate']:.3f}, {r['throughput_req_s']:.3f} req/s, "
                  f"TTFT mean {r['ttft_mean_s']:.3f} s, waste {r['waste_fraction']:.3f} "
                  f"(unneeded {wb.get('unneeded', 0):.3f}, fragmentation {wb.get('fragmentation', 0):.3f}), "
                  f"preemptions {r['preemptions']}")
        for s in r.get("sweep", [])[:3]:
            if "error" in s:
                print(f"  knob {s['knob']}: {s['error']}")
                continue
            extra = (f", hit rate {s['prefix_hit_rate']:.3f} (SIMULATED), {s['throughput_req_s']:.3f} req/s"
                     if s.get("prefix_hit_rate") is not None and s.get("throughput_req_s") is not None else "")
            print(f"  knob {s['knob']}: {s['kv_capacity_tokens']:,} tokens, blocks {s['block_size_tokens']}{extra}")


def _job_key(rule: str, opts: dict) -> tuple:
    """One simulation's identity: the rule and its options (equal options give equal runs)."""
    return rule, json.dumps(opts, sort_keys=True, default=str)


_SIM_CONTEXT: tuple | None = None  # (args, profile, requests): inherited by forked workers


def _simulate_job(job: tuple[str, dict]) -> dict:
    rule, opts = job
    a, prof, requests = _SIM_CONTEXT
    return simulate(rule, a, prof, requests, opts)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _workers(a: Args, n_jobs: int) -> int:
    if a.jobs is not None:
        return max(1, min(a.jobs, n_jobs))
    return max(1, min(usable_cores(), n_jobs))


def run_simulations(a: Args, prof, requests, jobs: list[tuple[str, dict]]) -> dict:
    """Every distinct simulation of the answer (one per rule, one per sweep knob value), run in
    parallel worker processes when cores allow (``jobs=`` caps them; the simulator is deterministic,
    so the results do not depend on how many run at once). Returns them by :func:`_job_key`."""
    global _SIM_CONTEXT
    todo: dict[tuple, tuple[str, dict]] = {}
    for rule, opts in jobs:
        todo.setdefault(_job_key(rule, opts), (rule, opts))
    # Longest first, so that no worker idles while the last long run finishes: a simulation's
    # cost grows with the pages it moves, so SGLang's 1-token pages go first, and among equal
    # pages every rule's own run before the sweeps' variants (Gemma-3 arxiv_qa, 64 requests, 2
    # cores: the unified arena's one 81 s run had started behind the separate pools' four 35 s
    # runs). Results are keyed, so the order changes no answer.
    base = {_job_key(rule, a.options.get(rule, {})) for rule, _ in jobs}
    keys = sorted(todo, key=lambda k: (page_tokens(todo[k][0], 16), k not in base))
    n = _workers(a, len(keys))
    if n > 1:  # compose each rule's cell once here: forked workers inherit compose_cell's cache
        for rule in {r for r, _ in todo.values()}:
            compose(a, rule, dataset="synthetic")
    _SIM_CONTEXT = (a, prof, requests)
    try:
        if n <= 1 or "fork" not in mp.get_all_start_methods():
            return {k: _simulate_job(todo[k]) for k in keys}
        with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as ex:
            return dict(zip(keys, ex.map(_simulate_job, [todo[k] for k in keys])))
    finally:
        _SIM_CONTEXT = None


def run(argv: list[str]) -> list[dict]:
    a = parse_args(argv)
    prof = profile(a)
    a.tp = resolve_tp(a, prof)
    cfg = compose(a)
    kv = kv_bytes(cfg, prof)
    requests = build_requests(a, prof) if (a.workload or a.trace) else None
    caching = bool(cfg.engine.enable_prefix_caching)
    answers, plans, jobs = [], [], []
    for rule in a.rules:
        opts = a.options.get(rule, {})
        try:
            r = static_answer(rule, prof, kv, cfg, opts, caching)
        except ValueError as e:  # e.g. vllm_hma_off on a Mamba hybrid: vLLM refuses to start
            answers.append({"rule": rule, "engine": ENGINE_OF.get(rule, rule), "error": str(e), "tp": a.tp,
                            "block_size_tokens": None, "kv_capacity_tokens": None, "max_concurrency": None,
                            "prefix_hit_rate": None})
            continue
        r["prefix_hit_rate"] = None
        variants = sweep_variants(rule, a, prof, kv, cfg) if a.sweep else []
        if requests:
            jobs.append((rule, opts))
            jobs += [(rule, vo) for _, vo, st, err in variants if err is None]
        r["tp"] = a.tp
        answers.append(r)
        plans.append((r, rule, opts, variants))
    sims = run_simulations(a, prof, requests, jobs) if requests else {}
    for r, rule, opts, variants in plans:
        if requests:
            r.update(sims[_job_key(rule, opts)])
        if a.sweep:
            r["sweep"] = sweep(rule, variants, r, requests, sims)
    return answers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        a = parse_args(argv)
        answers = run(argv)
        tp = next((r["tp"] for r in answers if "tp" in r), a.tp)
    except WhatIfError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.as_json:
        print(json.dumps(answers, indent=1, default=str))
    else:
        print_text(a.model, f"{tp} x {a.gpu}" if tp else a.gpu, answers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["main", "parse_args", "run"]
