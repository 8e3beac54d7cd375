"""Shared pieces of the what-if studies: the cell of one rule, a simulation that also returns each
request's prefix hit, and the report's source line."""

from __future__ import annotations

from harness import whatif as w
from harness.backends.settings import EngineSettings, GpuSettings
from harness.backends.sim import engine as sim
from harness.backends.sim import variants
from harness.backends.sim.scheduler import Scheduler

SIM_NOTE = ("Hit rates, TTFT and throughput are SIMULATED (the CPU serving simulator, backend=sim, "
            "our step-time model on the named GPU); capacities and block sizes are the engines' arithmetic.")


def args(model: str, gpu: str = "h100", max_model_len: int = 32768, tp: int = 1, **engine) -> tuple:
    argv = [f"model={model}", f"gpu={gpu}", f"tp={tp}", f"engine.max_model_len={max_model_len}", "--no-sweep"]
    argv += [f"engine.{k}={v}" for k, v in engine.items()]
    a = w.parse_args(argv)
    return a, w.profile(a)


class AlignedSplitScheduler(Scheduler):
    """The simulator's scheduler with vLLM 0.32's align-mode chunk split
    (``v1/core/sched/scheduler.py`` ``Scheduler._mamba_block_aligned_split``): a prefill chunk that the
    token budget cuts before the prompt's end is clipped down to a block boundary (``aligned_end =
    end // block * block``), so Mamba states are written there; a chunk that cannot reach a boundary
    waits, unless the block is wider than the budget (then it advances sub-block)."""

    block = 0   # set per instance: the vllm_hma manager's block size

    def _clip_chunk(self, seq, start: int, n: int) -> int:
        end, B = start + n, self.block
        if not B or end >= len(seq.req.prompt_token_ids):
            return n
        aligned = end // B * B
        if aligned > start or B <= self.cfg.token_budget:
            return max(aligned - start, 0)
        return n


def simulate(rule: str, a, prof, requests, options: dict | None = None,
             aligned_split: bool = False) -> tuple[dict, dict]:
    """``(metrics, {request_id: hit tokens on first admission})`` of ``requests`` under ``rule``
    (what :func:`harness.backends.sim.engine.run_cell` runs, keeping the scheduler's requests).
    ``aligned_split``: a ``vllm_hma`` manager in align mode gets vLLM's block-aligned prefill chunks
    (:class:`AlignedSplitScheduler`; the shared simulator does not split there)."""
    base = w.compose(a)
    cfg = w.compose(a, rule, w.rule_options(rule, options or {}, w._max_model_len(base, prof), prof, base),
                    dataset="synthetic")
    cfg.engine.tokens_per_page = w.page_tokens(rule, int(cfg.engine.tokens_per_page or 16))
    eng, gpu = EngineSettings.of(cfg.engine), GpuSettings.of(cfg.gpu)
    v = variants.build(cfg, prof, eng, gpu, rule, sim.block_manager_of(rule))
    mm = sim.make_manager(rule, prof, v.capacity, eng, {**sim.system_options(cfg.system, eng), **v.manager_options},
                          specs=v.specs)
    sched_cfg, reqs = sim.scheduler_config(eng, prof, rule), [r.fresh_copy() for r in requests]
    if aligned_split and getattr(mm, "mamba_cache_mode", None) == "align":
        sched = AlignedSplitScheduler(mm, sched_cfg, reqs)
        sched.block = mm.mamba_block_size
    else:
        sched = v.make_scheduler(mm, sched_cfg, reqs)
    trace, agg = sim.run_loop(sched, mm, v.step_cost, running_cost=v.running_cost)
    metrics = sim.loop_metrics(sched, trace, agg, v.capacity)
    return metrics, {s.req.request_id: s.hit_tokens for s in sched.seqs}


def source_line(study: dict) -> str:
    rep = study.get("reported") or {}
    where = f"[{rep.get('thread', '?')}]({rep['url']})" if rep.get("url") else rep.get("thread", "?")
    return f"User report ({where}, as summarised in issue 22): {rep.get('summary', '')}"
