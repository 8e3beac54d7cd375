"""The sim backend: scheduler + memory manager + step-time model in a discrete-event loop.

``run_cell(cfg, profile, requests) -> RunResult`` (contract §4). Time advances by the step-time
model's estimate of each step; idle gaps jump to the next arrival. Memory is sampled once per
step, right after scheduling (the state the step runs with). Every number is simulated.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jenga
from harness.backends.cost.model import CostModel, block_manager_of, profile_tokens
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.sim import variants
from harness.backends.sim.scheduler import Scheduler, SchedulerConfig
from harness.backends.sim.variants import step_time_hook
from harness.config import ENGINE_VERSIONS
from harness.models import ModelProfile
from harness.records import RunResult, summarize_requests
from harness.workloads.request import Request
from jenga.registry import full_prompt_admission_systems
from jenga.spec import page_geometry

# vLLM v0's BlockSpaceManager default (``watermark: float = 0.01``); the artifact's launch
# commands do not change it.
V0_WATERMARK = 0.01


def scheduler_config(engine, profile: ModelProfile, system: str | None = None) -> SchedulerConfig:
    """The cell's scheduling policy from its engine settings (see ``cost.profile_tokens``).
    ``engine.full_prompt_admission`` unset: on for the systems that model today's vLLM
    (``jenga.registry.full_prompt_admission_systems``: ``vllm_current``, ``jenga_current``), off
    otherwise (the engines the artifact ran)."""
    engine = EngineSettings.of(engine)
    version = engine.engine_version
    mixed = engine.mixed_batches
    full_isl = engine.full_prompt_admission
    return SchedulerConfig(
        max_num_seqs=int(engine.max_num_seqs),
        token_budget=profile_tokens(engine, engine.model_len(profile)),
        mixed=mixed, chunked_prefill=mixed,
        enable_prefix_caching=bool(engine.enable_prefix_caching),
        # Both v0 forks (upstream BlockSpaceManagerV2, Jenga's PerlayerBlockSpaceManager) admit a
        # prefill only if its whole sequence fits above the 1 % watermark (scheduler docstring).
        v0_can_allocate=version == "v0",
        watermark=V0_WATERMARK,
        full_prompt_admission=mixed and bool(system in full_prompt_admission_systems()
                                             if full_isl is None else full_isl),
        # v1's check_stop ends a request at max_model_len tokens (vllm/v1/core/sched/utils.py; the
        # scheduler module docstring); v0's StopChecker caps one token later and is not modelled.
        max_model_len=engine.model_len(profile) if version == "v1" else None)


def make_manager(system: str, profile: ModelProfile, capacity: int, engine, options: dict | None,
                 specs=None):
    """The cell's memory manager over ``specs`` (default: the model's layer types)."""
    engine = EngineSettings.of(engine)
    return jenga.make_manager(system, list(profile.specs if specs is None else specs), capacity,
                              tokens_per_page=int(engine.tokens_per_page),
                              enable_prefix_cache=bool(engine.enable_prefix_caching),
                              **dict(options or {}))


def system_options(system, engine) -> dict:
    """``system.options`` with ``system.options_by_engine[engine.engine_version]`` merged over them:
    the artifact ran the same system flag in two forks (v0 and v1) whose managers differ."""
    version = EngineSettings.of(engine).engine_version
    by_engine = dict(system.options_by_engine or {})
    unknown = sorted(set(by_engine) - set(ENGINE_VERSIONS))
    if unknown:
        raise ValueError(f"system.options_by_engine: unknown engine version(s) {unknown}; "
                         f"valid: {list(ENGINE_VERSIONS)}")
    return {**dict(system.options or {}), **dict(by_engine.get(version) or {})}


StepCost = Callable[[list], float]
Complete = Callable[[list, float], None]


def run_loop(sched: Scheduler, mm, step_cost: StepCost, complete: Complete | None = None,
             max_steps: int = 10_000_000,
             running_cost: Callable[[int, int], float] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The discrete-event loop. ``step_cost`` prices a scheduled step and ``complete`` finishes it
    (default ``sched.complete``); ``running_cost(num_running, num_scheduled)`` (optional) adds the
    scheduler's per-step work over the whole running set (``CostModel.running_time``), which the
    scheduled batch alone does not show. :func:`run_cell` fills all three from the cell's variant
    (:mod:`harness.backends.sim.variants`). Returns the per-step trace and the step aggregates."""
    with cyclic_gc_paused():
        return _run_loop(sched, mm, step_cost, complete or sched.complete, max_steps, running_cost)


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic collector off inside: a long-context cell holds hundreds of thousands of page
    records (and allocates more every step), so each collection walks them all for nothing -- the
    loop makes no reference cycles worth collecting (69 full collections per Llama-4 cell took half
    its time, issue 20). Reference counting still frees everything. Nested uses keep it off until
    the outermost ends."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _run_loop(sched: Scheduler, mm, step_cost: StepCost, complete: Complete, max_steps: int,
              running_cost) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    now = min((s.req.arrival_time for s in sched.seqs), default=0.0)
    trace: list[dict[str, Any]] = []
    # The step aggregates, summed in locals (returned as one dict).
    waste_sum = unneeded_sum = frag_sum = occupancy_sum = running_sum = 0.0
    decode_steps = decode_batch = 0
    steps = 0
    while sched.has_unfinished:
        step = sched.schedule(now)
        if not step and (sched.waiting or sched.running):
            # A step that only preempted (v0 decode out of memory) leaves work to readmit.
            step = sched.schedule(now)
        if not step:
            nxt = sched.next_arrival()
            if nxt is None:
                if sched.waiting or sched.running:
                    # Scheduling made no progress and nothing will arrive: a capacity bug.
                    raise RuntimeError("scheduler stalled with waiting/running requests and no arrivals")
                break
            now = max(now, nxt)
            continue
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"simulation exceeded {max_steps} steps")
        num_running = len(sched.running)
        dt = step_cost(step)
        if running_cost is not None:
            dt += running_cost(num_running, len(step))
        u = sched.step_usage()      # mm's usage, read once per step (Scheduler.step_usage)
        # An allocator that over-commits must fail the cell, not write an "ok" record.
        assert u.free_bytes >= 0, f"{type(mm).__name__} over-committed: free_bytes={u.free_bytes} at step {steps}"
        alloc = u.allocated_bytes
        waste = u.waste_fraction
        num_decode = prefill_tokens = 0
        for s in step:
            if s.is_decode:
                num_decode += 1
            else:
                prefill_tokens += s.num_new_tokens
        waste_sum += waste
        if alloc:
            unneeded_sum += u.unneeded_bytes / alloc
            frag_sum += u.fragmentation_bytes / alloc
        occupancy_sum += u.large_page_occupancy
        running_sum += num_running
        if num_decode:
            decode_steps += 1
            decode_batch += num_decode
        trace.append({"step": steps, "time_s": now, "dt_s": dt, "num_running": num_running,
                      "num_waiting": len(sched.waiting), "num_decode": num_decode,
                      "num_prefill_tokens": prefill_tokens,
                      "waste_fraction": waste, "allocated_bytes": alloc, "needed_bytes": u.needed_bytes,
                      "unneeded_bytes": u.unneeded_bytes, "fragmentation_bytes": u.fragmentation_bytes,
                      "cached_bytes": u.cached_bytes, "free_bytes": u.free_bytes,
                      "preemptions": sched.num_preemptions})
        now += dt
        complete(step, now)
    agg = {"waste": waste_sum, "unneeded": unneeded_sum, "frag": frag_sum, "occupancy": occupancy_sum,
           "running": running_sum, "decode_steps": decode_steps, "decode_batch": decode_batch, "samples": steps}
    return trace, agg


def simulate(mm, cost: CostModel, sched_cfg: SchedulerConfig, requests: list[Request],
             cross_attention: bool = False, max_steps: int = 10_000_000) -> tuple[Scheduler, list[dict], dict]:
    """Run the loop to completion; returns the scheduler, the per-step trace and step aggregates."""
    sched = Scheduler(mm, sched_cfg, [r.fresh_copy() for r in requests])
    trace, agg = run_loop(sched, mm, step_time_hook(cost, cross_attention), max_steps=max_steps,
                          running_cost=getattr(cost, "running_time", None))
    return sched, trace, agg


def loop_metrics(sched: Scheduler, trace: list[dict], agg: dict, capacity: int) -> dict[str, Any]:
    """The record's metric fields (contract §4) from a finished :func:`run_loop`."""
    seqs = sched.seqs
    metrics = summarize_requests(
        [s.req.arrival_time for s in seqs], [s.first_token_time for s in seqs],
        # the tokens each request generated (fewer than output_len where max_model_len ended it)
        [s.finish_time for s in seqs], [s.req.prompt_len for s in seqs], [s.num_generated for s in seqs])
    n = max(1, agg["samples"])
    prompt_tokens = sum(s.req.prompt_len for s in seqs if s.first_admitted)
    hit_tokens = sum(s.hit_tokens for s in seqs)
    metrics.update({
        "mean_decode_batch": agg["decode_batch"] / agg["decode_steps"] if agg["decode_steps"] else 0.0,
        "mean_running": agg["running"] / n,
        "waste_fraction": agg["waste"] / n,
        "waste_breakdown": {"unneeded": agg["unneeded"] / n, "fragmentation": agg["frag"] / n},
        "prefix_hit_rate": hit_tokens / prompt_tokens if prompt_tokens else 0.0,
        "prefix_hit_tokens": hit_tokens, "prompt_tokens": prompt_tokens,
        "preemptions": sched.num_preemptions,
        "recomputed_tokens": sum(s.recomputed_tokens for s in seqs),
        "kv_capacity_bytes": capacity,
        "large_page_occupancy": agg["occupancy"] / n,
        "num_steps": len(trace), "num_ignored": sched.num_ignored,
        "simulated_s": metrics["makespan_s"],
    })
    if not math.isfinite(metrics["makespan_s"]):
        raise RuntimeError("non-finite makespan")
    return metrics


def run_cell(cfg, profile: ModelProfile, requests: list[Request]) -> RunResult:
    """Simulate one cell (contract §4): the manager, scheduler and step cost its config picks
    (:func:`harness.backends.sim.variants.build`) in the one loop (:func:`run_loop`)."""
    # The collector stays off until the cell's manager and scheduler are gone: turned back on
    # while they live, its first young-generation pass would walk every page record the loop made
    # (~0.3 s of a 3 s Llama-4 cell); after they are freed (by reference counting: the manager
    # and its pool make no cycle) there is nothing left for it to walk.
    with cyclic_gc_paused():
        return _run_cell(cfg, profile, requests)


def _run_cell(cfg, profile: ModelProfile, requests: list[Request]) -> RunResult:
    # Resolved once here and handed to the cost model, the manager and the scheduler.
    engine, gpu = EngineSettings.of(cfg.engine), GpuSettings.of(cfg.gpu)
    system = str(cfg.system.name)
    if int(engine.num_speculative_tokens or 0) > 0 and not engine.draft_model:
        # Speculative decoding needs a draft model in the pool; refuse rather than silently
        # simulating plain decoding.
        raise ValueError("engine.num_speculative_tokens > 0 needs engine.draft_model (a model name, e.g. "
                         "gemma2_2b): backend=sim simulates speculative decoding with the draft in the KV pool")
    # The fork a system ran on decides v0's per-step block-table work (cost.InputPrep).
    v = variants.build(cfg, profile, engine, gpu, system, block_manager_of(system))
    cost, capacity = v.cost, v.capacity
    mm = make_manager(system, profile, capacity, engine, {**system_options(cfg.system, engine),
                                                          **v.manager_options}, specs=v.specs)
    sched_cfg = scheduler_config(engine, profile, system)
    cap = getattr(mm, "max_running_requests", None)
    if cap is not None and cap < sched_cfg.max_num_seqs:
        # an engine whose memory split also caps its running requests (SGLang: a third of the Mamba
        # slots); the cell's max_num_seqs stands when it is the smaller
        sched_cfg = dataclasses.replace(sched_cfg, max_num_seqs=max(1, cap))
    sched = v.make_scheduler(mm, sched_cfg, [r.fresh_copy() for r in requests])
    trace, agg = run_loop(sched, mm, v.step_cost, running_cost=v.running_cost)
    final = mm.usage()
    geom = page_geometry(list(v.specs), int(engine.tokens_per_page))
    metrics = loop_metrics(sched, trace, agg, capacity)
    metrics.update({"kv_capacity_pages": capacity // geom.large_page_bytes,
                    "path_counts": dict(final.path_counts)})
    metrics.update(v.extra_metrics(sched, mm, trace, requests))
    # The max_model_len cap is left out of the record: it follows from engine.engine_version and
    # engine.max_model_len (scheduler_config), and a record of a cell it cannot touch (every dataset
    # cell: harness.workloads.check_context) stays byte-identical (tests/test_sim_digest.py).
    sched_meta = {k: v for k, v in vars(sched_cfg).items() if k != "max_model_len"}
    meta = {"simulated": True, "allocator": type(mm).__name__, "scheduler": sched_meta,
            "activation_peak_bytes": cost.activation_peak_bytes(), "tensor_parallel": cost.tp,
            "large_page_bytes": geom.large_page_bytes, "engine_overhead": vars(cost.overhead),
            "block_manager": cost.block_manager, "gpu_efficiency": cost.efficiency, "variants": v.names}
    return RunResult(metrics=metrics, trace=trace, meta=meta)
