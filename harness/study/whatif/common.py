"""Shared pieces of the what-if studies: the cell of one rule, a simulation that also returns each
request's prefix hit, and the report's source line."""

from __future__ import annotations

from harness import whatif as w
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.sim import engine as sim
from harness.backends.sim import variants

SIM_NOTE = ("Hit rates, TTFT and throughput are SIMULATED (the CPU serving simulator, backend=sim, "
            "our step-time model on the named GPU); capacities and block sizes are the engines' arithmetic.")


def args(model: str, gpu: str = "h100", max_model_len: int = 32768, tp: int = 1, **engine) -> tuple:
    argv = [f"model={model}", f"gpu={gpu}", f"tp={tp}", f"engine.max_model_len={max_model_len}", "--no-sweep"]
    argv += [f"engine.{k}={v}" for k, v in engine.items()]
    a = w.parse_args(argv)
    return a, w.profile(a)


def simulate(rule: str, a, prof, requests, options: dict | None = None) -> tuple[dict, dict]:
    """``(metrics, {request_id: hit tokens on first admission})`` of ``requests`` under ``rule``
    (what :func:`harness.backends.sim.engine.run_cell` runs, keeping the scheduler's requests; a
    ``vllm_hma`` manager in align mode gets vLLM's block-aligned prefill chunks there,
    ``harness/backends/sim/align_split.py``)."""
    # As run_cell: the cyclic collector off until the manager is gone (it goes by reference counting).
    with sim.cyclic_gc_paused():
        return _simulate(rule, a, prof, requests, options)


def _simulate(rule: str, a, prof, requests, options: dict | None) -> tuple[dict, dict]:
    base = w.compose(a)
    cfg = w.compose(a, rule, w.rule_options(rule, options or {}, w._max_model_len(base, prof), prof, base),
                    dataset="synthetic")
    cfg.engine.tokens_per_page = w.page_tokens(rule, int(cfg.engine.tokens_per_page or 16))
    eng, gpu = EngineSettings.of(cfg.engine), GpuSettings.of(cfg.gpu)
    v = variants.build(cfg, prof, eng, gpu, rule, sim.block_manager_of(rule))
    mm = sim.make_manager(rule, prof, v.capacity, eng, {**sim.system_options(cfg.system, eng), **v.manager_options},
                          specs=v.specs)
    sched_cfg, reqs = sim.scheduler_config(eng, prof, rule), [r.fresh_copy() for r in requests]
    sched = v.make_scheduler(mm, sched_cfg, reqs)
    trace, agg = sim.run_loop(sched, mm, v.step_cost, running_cost=v.running_cost)
    metrics = sim.loop_metrics(sched, trace, agg, v.capacity)
    return metrics, {s.req.request_id: s.hit_tokens for s in sched.seqs}


def source_line(study: dict) -> str:
    rep = study.get("reported") or {}
    where = f"[{rep.get('thread', '?')}]({rep['url']})" if rep.get("url") else rep.get("thread", "?")
    return f"User report ({where}, as summarised in issue 22): {rep.get('summary', '')}"
