"""Can a cell start, and can its pool hold every request? No simulation (issue 9 §2).

vLLM's start-up decides two things before any request runs (see :mod:`harness.backends.cost.model`): the KV
pool left after the profiling pass (``CostModel.kv_capacity_bytes``; none left is a start-up
failure), and, once serving, whether each request can ever be admitted. The v0 forks admit a
prefill only if its whole sequence fits above the 1 % watermark (``can_allocate`` ->
``AllocStatus.NEVER`` ignores the request: "Input prompt ... exceeds the capacity of
block_manager"); both v0 forks comment out the start-up ``max_model_len`` check
(``raise_if_cache_size_invalid`` in vllm/worker/worker.py of vllm-v0-baseline and vllm-v0-jenga).
The V1 fork refuses to start unless one ``max_model_len`` request fits
(``check_enough_kv_cache_memory``, vllm/v1/core/kv_cache_utils.py). :func:`fit_report` applies the
v0 rule to the cell's own workload with the scheduler's probe (V1: the start check, then each
request's first chunk, which is when the V1 scheduler drops one), so a cell that passes here
ignores no request in the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.backends.cost.model import CostModel
from harness.backends.settings import EngineSettings, GpuSettings


@dataclass(frozen=True)
class FitReport:
    system: str
    starts: bool               # the profiling pass leaves KV memory
    capacity_bytes: int        # 0 when it does not start
    never_fit: int             # requests the pool can never admit (vLLM ignores them)
    num_requests: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.starts and self.never_fit == 0


def fit_report(cfg, profile, requests) -> FitReport:
    """Start-up and admission check of one composed cell (``cfg``) for its ``system``."""
    from harness.backends.sim.engine import V0_WATERMARK, make_manager
    from harness.backends.sim.scheduler import FullPromptProbe

    system = str(cfg.system.name)
    engine = EngineSettings.of(cfg.engine)
    try:
        capacity = CostModel(profile, GpuSettings.of(cfg.gpu), engine).kv_capacity_bytes()
    except ValueError as exc:
        return FitReport(system, False, 0, len(requests), len(requests), str(exc))
    if engine.engine_version == "v1":
        need = v1_one_request_bytes(profile, engine)
        if need > capacity:
            return FitReport(system, False, capacity, len(requests), len(requests),
                             f"V1 check_enough_kv_cache_memory: one max_model_len request needs "
                             f"{need / 2**30:.2f} GiB > {capacity / 2**30:.2f} GiB")
    mm = make_manager(system, profile, capacity, engine, cfg.system.options or {})
    probe = FullPromptProbe(mm)
    if engine.engine_version == "v1":
        # V1 admits chunk by chunk; the scheduler drops a request only when its first chunk does
        # not fit an otherwise empty pool (harness/backends/sim/scheduler.py ``_admit``).
        budget = sched_budget(profile, engine)
        never = sum(1 for r in requests if probe.required_bytes(r, min(r.prompt_len, budget)) > capacity)
    else:
        room = capacity - V0_WATERMARK * capacity
        never = sum(1 for r in requests if probe.required_bytes(r, r.prompt_len) > room)
    return FitReport(system, True, capacity, never, len(requests))


def sched_budget(profile, engine) -> int:
    from harness.backends.cost.model import profile_tokens

    engine = EngineSettings.of(engine)
    return profile_tokens(engine, engine.model_len(profile))


def v1_one_request_bytes(profile, engine) -> int:
    """KV bytes V1 requires at start-up for one ``max_model_len`` request, per layer spec as the
    fork's ``max_memory_usage_bytes`` counts them (vllm/v1/kv_cache_interface.py, branch vllm-v1):
    full attention ``max_model_len`` tokens; sliding window ``min(window - 1 + budget,
    max_model_len)`` tokens plus one block; chunked local ``min(chunk + ceil(budget / chunk),
    max_model_len)`` tokens; rounded up to 16-token blocks. The check runs on the hybrid spec
    before ``--disable-hybrid-allocator`` unifies it, so it is the same for every system."""
    engine = EngineSettings.of(engine)
    tpp = int(engine.tokens_per_page)
    max_len = engine.model_len(profile)
    budget = sched_budget(profile, engine)
    total = 0
    for s in profile.specs:
        if s.kind == "sliding":
            tokens = min(s.window - 1 + budget, max_len) + tpp
        elif s.kind == "chunked":
            tokens = min(s.chunk + -(-budget // s.chunk), max_len)
        elif s.kind == "mamba":
            total += s.num_layers * s.state_bytes_per_layer
            continue
        else:
            tokens = max_len
        total += -(-tokens // tpp) * tpp * s.bytes_per_token_per_layer * s.num_layers
    return total
