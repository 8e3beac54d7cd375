"""``backend=vllm_sched``: vLLM's real ``Scheduler`` + ``KVCacheManager`` on CPU, no model.

The same loop vLLM's own CPU tests use: ``schedule()`` → a fake ``ModelRunnerOutput`` (one token
per request whose prefill completes this step) → ``update_from_output()``. vLLM decides admission,
chunking, preemption, prefix hits, eviction and block placement (hybrid KV cache manager on or
off); only time is ours: each step lasts :class:`harness.backends.cost.model.CostModel`'s ``step_time``, so
throughput is simulated exactly as ``backend=sim``'s and the two differ only by scheduler and
allocator. ``prefix_cache_retention_interval`` is pinned per cell (``backend.options``; default 0,
what ``vllm serve`` uses) because it changes sliding-window hit rates a lot.

System ↔ vLLM (``jenga.registry.SystemInfo.vllm_hybrid`` / ``vllm_plugin``, read through
:mod:`harness.backends.vllm.common`): ``vllm`` → hybrid manager off; ``hybrid_groups`` and
``vllm_current`` → hybrid manager on; ``jenga`` and ``jenga_current`` → the jenga_vllm plugin (one group per layer type,
page-layer layout, ``jenga/``'s LCM pool under vLLM's own per-type managers; the record's
``allocator`` says ``jenga_lcm``). ``jenga_current`` on ``backend=sim`` is Jenga's LCM pool under
vLLM 0.32's rules (jenga/baselines/jenga_current.py), which is what the plugin is inside vLLM; the
artifact's ``jenga`` rules (retention, widened hit check) do not exist in vLLM, so on these backends
both names run the same plugin. Other systems exist only in ``backend=sim``. ``backend.options.check_invariants=true`` checks the plugin's pool
invariants after every step (tests).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from harness.backends.cost.model import CostModel, profile_tokens
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.vllm.common import allocator_name, check_options, hybrid_for_system, runs_plugin
from harness.backends.vllm.plan import (
    EngineKnobs,
    layer_name,
    layer_owners,
    make_vllm_config,
    plan_kv_cache,
    require_vllm,
    vllm_layer_specs,
    vllm_versions,
    write_proxy_model_dir,
)
from harness.models import ModelProfile
from harness.records import RunResult, summarize_requests
from harness.workloads.request import Request
from harness.workloads.sessions import reply_token
from jenga.spec import LayerTypeSpec, VisionEmbeddingSpec
from jenga_vllm.invariants import check_invariants

BACKEND_OPTIONS = {"prefix_cache_retention_interval", "waste_every", "max_steps", "scheduler", "check_invariants"}


def scheduler_options(cfg, options: dict) -> dict:
    """vLLM SchedulerConfig fields: ``backend.options.scheduler`` plus ``engine.full_prompt_admission``
    (when set) as ``scheduler_reserve_full_isl``, the same gate ``backend=sim`` models."""
    extra = dict(options.get("scheduler") or {})
    fpa = EngineSettings.of(cfg.engine).full_prompt_admission
    if fpa is not None:
        if extra.get("scheduler_reserve_full_isl", bool(fpa)) != bool(fpa):
            raise ValueError("engine.full_prompt_admission and backend.options.scheduler."
                             "scheduler_reserve_full_isl disagree; set one")
        extra["scheduler_reserve_full_isl"] = bool(fpa)
    return extra


def engine_knobs(cfg, profile: ModelProfile, hybrid: bool, retention, scheduler_extra: dict | None = None):
    """The cell's engine settings in vLLM terms (the same token budget rule as ``backend=sim``)."""
    engine = EngineSettings.of(cfg.engine)
    max_len = engine.model_len(profile)
    return EngineKnobs(hybrid=hybrid, block_size=int(engine.tokens_per_page),
                       max_num_seqs=int(engine.max_num_seqs),
                       max_num_batched_tokens=profile_tokens(engine, max_len), max_model_len=max_len,
                       enable_chunked_prefill=engine.mixed_batches,
                       enable_prefix_caching=bool(engine.enable_prefix_caching),
                       prefix_cache_retention_interval=retention, scheduler_extra=dict(scheduler_extra or {}))


def _group_layer_types(kvc, owners: dict[str, LayerTypeSpec]) -> list[list[tuple[LayerTypeSpec, int]]]:
    """Per vLLM group: (our layer type, layers of it in the group). With the hybrid manager off
    one group mixes sliding and full layers, so "needed" must follow each layer's own type."""
    out = []
    for g in kvc.kv_cache_groups:
        counts: dict[str, list] = {}
        for name in g.layer_names:
            s = owners.get(name)
            if s is not None:  # vLLM's padding layers hold nothing anyone reads
                counts.setdefault(s.name, [s, 0])[1] += 1
        out.append([(s, n) for s, n in counts.values()])
    return out


def _needed_and_allocated(sched, bytes_per_block: list[int], group_types) -> tuple[int, int]:
    """(needed, allocated) bytes of running requests' blocks right now, shared blocks counted once.

    Allocated = distinct blocks held × that group's bytes per block (one size for vLLM's pool; each
    type's small page under jenga_vllm).
    Needed = per distinct block, the tokens each layer of the group still reads (whole context for
    full attention, the last ``window-1`` tokens for a sliding window, the current chunk for chunked
    local attention, the latest state for Mamba), at vLLM's bytes per token of that group.
    """
    coord = sched.kv_cache_manager.coordinator
    allocated = needed = 0
    for mgr, types, block_bytes in zip(coord.single_type_managers, group_types, bytes_per_block):
        spec = mgr.kv_cache_spec
        bs = spec.block_size
        per_token_layer = spec.page_size_bytes // bs
        is_state = not hasattr(spec, "num_kv_heads")
        seen: dict[int, int] = {}
        for rid, blocks in mgr.req_to_blocks.items():
            req = sched.requests.get(rid)
            if req is None:
                continue
            n = req.num_computed_tokens
            ranges = [(s.needed_token_range(n), k) for s, k in types]
            last = len(blocks) - 1
            for j, blk in enumerate(blocks):
                if blk.is_null:
                    continue
                if is_state:
                    need = spec.page_size_bytes * sum(k for _, k in types) if j == last else 0
                else:
                    a0, b0 = j * bs, (j + 1) * bs
                    need = sum(max(0, min(hi, b0) - max(lo, a0)) * k for (lo, hi), k in ranges) * per_token_layer
                if need > seen.get(blk.block_id, -1):
                    seen[blk.block_id] = need
        allocated += len(seen) * block_bytes
        needed += sum(seen.values())
    return needed, allocated


def run_cell(cfg, profile: ModelProfile, requests: list[Request]) -> RunResult:
    """Run one cell through vLLM's scheduler and KV cache manager (contract §4)."""
    system = str(cfg.system.name)
    hybrid = hybrid_for_system(system, "vllm_sched")
    jenga = runs_plugin(system)
    options = dict(cfg.backend.options or {})
    check_options(options, BACKEND_OPTIONS, "vllm_sched")
    require_vllm()
    if profile.vision is not None and profile.vision.cross_attention:
        raise ValueError(f"model {profile.name!r} uses cross-attention (encoder-decoder); vLLM's scheduler "
                         "has no KV cache manager for it in this harness. Use backend=sim.")
    retention = options.get("prefix_cache_retention_interval", 0)
    retention = None if retention in (None, "dense", "none") else int(retention)
    waste_every = max(1, int(options.get("waste_every", 1)))
    max_steps = int(options.get("max_steps", 5_000_000))

    import vllm  # noqa: F401  (imported here: seconds of start-up, only for this backend)
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request as VRequest
    from vllm.v1.structured_output import StructuredOutputManager

    cost = CostModel(profile, GpuSettings.of(cfg.gpu), EngineSettings.of(cfg.engine))
    kv_bytes = cost.kv_capacity_bytes()
    knobs = engine_knobs(cfg, profile, hybrid, retention, scheduler_options(cfg, options))
    # The proxy model directory must outlive the config (ModelConfig may read it again).
    tmp = tempfile.TemporaryDirectory(prefix="vllm_sched_")
    vc = make_vllm_config(profile, knobs, write_proxy_model_dir(profile, knobs.max_model_len, Path(tmp.name)))
    mamba_mode = getattr(vc.cache_config, "mamba_cache_mode", "none")
    plan = plan_kv_cache(vc, vllm_layer_specs(profile, knobs.block_size, mamba_mode), kv_bytes, jenga=jenga)
    desc = plan.describe()
    kvc = plan.kv_cache_config
    block_bytes = (list(kvc.small_page_bytes) if jenga else [desc["bytes_per_block"]] * len(kvc.kv_cache_groups))
    group_types = _group_layer_types(plan.kv_cache_config,
                                     {layer_name(i): s for i, s in enumerate(layer_owners(profile))})
    sched = Scheduler(vllm_config=vc, kv_cache_config=plan.kv_cache_config,
                      structured_output_manager=StructuredOutputManager(vc), block_size=plan.scheduler_block_size,
                      hash_block_size=plan.hash_block_size, log_stats=True)
    alloc = None
    if jenga:
        from jenga_vllm.install import install
        alloc = install(sched.kv_cache_manager, kvc)
    check = bool(options.get("check_invariants", False)) and alloc is not None
    init_none_hash(sha256)
    hasher = get_request_block_hasher(plan.hash_block_size, sha256)

    ours = sorted(requests, key=lambda r: r.arrival_time)
    by_id = {r.request_id: r for r in ours}
    vreqs: dict[str, Any] = {}
    pending = list(reversed(ours))
    now = ours[0].arrival_time if ours else 0.0
    first: dict[str, float] = {}
    finish: dict[str, float] = {}
    trace: list[dict[str, Any]] = []
    hits = queries = scheduled_tokens = 0
    agg = {"running": 0, "decode_steps": 0, "decode_batch": 0, "waste": 0.0, "waste_samples": 0}
    wall0 = time.perf_counter()
    while pending or sched.has_unfinished_requests():
        while pending and pending[-1].arrival_time <= now:
            r = pending.pop()
            n_out = int(r.output_len)
            sp = SamplingParams(max_tokens=n_out, min_tokens=n_out, ignore_eos=True, detokenize=False)
            vr = VRequest(r.request_id, [int(t) for t in r.prompt_token_ids], sp, None,
                          arrival_time=r.arrival_time, block_hasher=hasher)
            vreqs[r.request_id] = vr
            sched.add_request(vr)
        out = sched.schedule()
        if out.total_num_scheduled_tokens == 0:
            if pending:
                now = max(now, pending[-1].arrival_time)
                continue
            if sched.has_unfinished_requests():
                raise RuntimeError("vLLM scheduler stalled: requests waiting, none schedulable, none arriving "
                                   f"(num_blocks={desc['num_blocks']}; a prompt may not fit the KV pool)")
            break
        batch, req_ids, sampled = [], [], []
        num_decode = prefill_tokens = 0
        for rid, n in out.num_scheduled_tokens.items():
            vr = sched.requests[rid]
            ctx = vr.num_computed_tokens - n
            batch.append((n, ctx, 0))
            req_ids.append(rid)
            done_prefill = vr.num_computed_tokens >= vr.num_tokens
            # Output tokens differ per request (a real model's do), so outputs never share blocks; they
            # are the simulator's, which a sessions trace's next turn re-sends (workloads/sessions.py).
            sampled.append([reply_token(rid, len(vr.output_token_ids))]
                           if done_prefill else [])
            if ctx >= vr.num_prompt_tokens:
                num_decode += 1
            else:
                prefill_tokens += n
            scheduled_tokens += n
        # The scheduler's walk over its running set (CostModel.running_time), as backend=sim adds it.
        dt = cost.step_time(batch) + cost.running_time(len(sched.running), len(batch))
        sample_waste = len(trace) % waste_every == 0
        if sample_waste:
            needed, allocated = _needed_and_allocated(sched, block_bytes, group_types)
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled)
        now += dt
        eco = sched.update_from_output(out, mro)
        if check:
            check_invariants(sched.kv_cache_manager)
        stats = None
        for outs in eco.values():
            for o in outs.outputs:
                if o.new_token_ids and o.request_id not in first:
                    first[o.request_id] = now
                if o.finish_reason is not None:
                    finish[o.request_id] = now
            stats = outs.scheduler_stats or stats
        row = {"step": len(trace) + 1, "time_s": now - dt, "dt_s": dt, "num_running": len(sched.running),
               "num_waiting": len(sched.waiting), "num_decode": num_decode, "num_prefill_tokens": prefill_tokens,
               "num_scheduled_reqs": len(req_ids)}
        if stats is not None:
            pcs = stats.prefix_cache_stats
            hits += pcs.hits
            queries += pcs.queries
            row.update(kv_cache_usage=stats.kv_cache_usage, prefix_hits=pcs.hits, prefix_queries=pcs.queries,
                       preempted_hits=pcs.preempted_hits)
        if sample_waste:
            waste = (allocated - needed) / allocated if allocated else 0.0
            agg["waste"] += waste
            agg["waste_samples"] += 1
            row.update(waste_fraction=waste, allocated_bytes=allocated, needed_bytes=needed)
        row["preemptions"] = sum(v.num_preemptions for v in vreqs.values()) if vreqs else 0
        agg["running"] += len(req_ids)
        if num_decode:
            agg["decode_steps"] += 1
            agg["decode_batch"] += num_decode
        trace.append(row)
        if len(trace) > max_steps:
            raise RuntimeError(f"vllm_sched exceeded backend.options.max_steps={max_steps}")
    driver_wall = time.perf_counter() - wall0
    tmp.cleanup()

    ids = [r.request_id for r in ours]
    # The tokens vLLM generated: fewer than output_len where check_stop ended a request at
    # max_model_len (vllm/v1/core/sched/utils.py, FINISHED_LENGTH_CAPPED); output_len if unfinished.
    outputs = [vreqs[i].num_output_tokens if i in finish else by_id[i].output_len for i in ids]
    metrics = summarize_requests([by_id[i].arrival_time for i in ids], [first.get(i) for i in ids],
                                 [finish.get(i) for i in ids], [by_id[i].prompt_len for i in ids], outputs)
    preemptions = sum(v.num_preemptions for v in vreqs.values())
    # Work beyond each request's one pass (prompt − first-admission hits + output − 1) is recompute.
    one_pass = sum(by_id[i].prompt_len for i in ids) + sum(outputs) - len(ids) - hits
    n = max(1, len(trace))
    cap_specs = [s for s in profile.specs if not isinstance(s, VisionEmbeddingSpec)]
    metrics.update({
        "mean_decode_batch": agg["decode_batch"] / agg["decode_steps"] if agg["decode_steps"] else 0.0,
        "mean_running": agg["running"] / n,
        "waste_fraction": agg["waste"] / agg["waste_samples"] if agg["waste_samples"] else 0.0,
        "waste_breakdown": None,  # vLLM does not tell unneeded from fragmentation per block
        "prefix_hit_rate": hits / queries if queries else 0.0, "prefix_hit_tokens": hits,
        "prompt_tokens": queries, "preemptions": preemptions,
        "recomputed_tokens": max(0, scheduled_tokens - one_pass),
        "kv_capacity_bytes": kv_bytes, "kv_capacity_pages": desc["num_blocks"],
        "large_page_occupancy": None, "path_counts": dict(alloc.pool.path_counts) if alloc else {},
        "num_steps": len(trace),
        "num_ignored": len(ids) - len(finish), "simulated_s": metrics["makespan_s"],
    })
    meta = {"simulated": True, "allocator": allocator_name(hybrid, jenga), "requested_system": system,
            "jenga_allocator": alloc.summary() if alloc else None,
            "hybrid_kv_cache_manager": hybrid and not jenga, "kv_cache": desc, "versions": vllm_versions(),
            "scheduler": {"max_num_seqs": knobs.max_num_seqs, "max_num_batched_tokens":
                          vc.scheduler_config.max_num_batched_tokens, "enable_chunked_prefill":
                          knobs.enable_chunked_prefill, "enable_prefix_caching": knobs.enable_prefix_caching,
                          "prefix_cache_retention_interval": retention, "block_size": knobs.block_size,
                          "scheduler_reserve_full_isl": getattr(vc.scheduler_config, "scheduler_reserve_full_isl", None),
                          **knobs.scheduler_extra},
            "layer_types": [s.name for s in cap_specs], "driver_wall_s": driver_wall,
            "step_time_model": "harness.backends.cost.model.CostModel"}
    return RunResult(metrics=metrics, trace=trace, meta=meta)
