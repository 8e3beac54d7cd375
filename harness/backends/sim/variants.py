"""What a cell's config swaps in the one simulator loop: named hooks, not copies of the loop.

:func:`harness.backends.sim.engine.run_cell` asks :func:`build` for the cell's

- **pool**: the model's layer types and the cost model's KV budget; with ``engine.draft_model``
  both models' layer types in one pool (``specdec.pair_specs``) and the budget left once the draft's
  weights are loaded (``specdec.pool_capacity``);
- **manager options**: the system's own (``system.options``) plus those only the cost model can
  supply, keyed by registry system (:data:`COST_OPTIONS`: Marconi's prefill FLOPs a hit saves);
- **scheduler**: :class:`Scheduler`, or with a draft model :class:`specdec.SpecScheduler` (``k``
  look-ahead slots, decode steps that emit ``1 + accepted`` tokens); on a Mamba model whose manager
  is vLLM 0.32's in align mode, with vLLM's block-aligned prefill split (``align_split.py``);
- **step cost**: the step-time model; with a draft model the draft ``k`` times plus the target's
  verify step (``specdec.spec_step_cost``); for a model whose vision embeddings are prompt tokens,
  the encoder work of each chunk — once per image, or with ``engine.encoder_cache=false`` again for
  every chunk that touches the image (``vision_cache.encoder_tokens``);
- **extra metrics** (in the record beside contract §4's): ``accepted_per_proposal``,
  ``tokens_per_decode_step`` (speculative decoding); ``encoder_tokens``, ``image_tokens``,
  ``encoder_runs_per_image_token``, ``peak_allocated_gib`` (vision-embedding models);
  ``checkpoints_admitted``, ``mean_cached_gib`` (Mamba models).

The config checks of these keys (a draft that is no model, a variant on another backend, Marconi
without Mamba) run before any work, in :func:`harness.config.check_cell`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.backends.cost.model import CostModel
from harness.backends.settings import EngineSettings
from harness.backends.sim import align_split, specdec, vision_cache
from harness.backends.sim.scheduler import Scheduler
from harness.models import ModelProfile, zoo_profile
from jenga.baselines.marconi import prefix_flops
from jenga.registry import check_system_names

GiB = 2**30
Metrics = Callable[[Scheduler, Any, list[dict], list], dict[str, Any]]

# Manager options a system takes from the cell's cost model (registry name -> hook): Marconi's
# FLOP-aware eviction prices a checkpoint by the prefill FLOPs a hit on it saves.
COST_OPTIONS: dict[str, Callable[[CostModel, ModelProfile], dict[str, Any]]] = {
    "marconi": lambda cost, profile: {"prefix_flops": prefix_flops(profile.specs, cost.matmul_params,
                                                                   cost.attn_flops_per_pair)},
}
check_system_names(COST_OPTIONS, "harness.backends.sim.variants.COST_OPTIONS")


@dataclass
class Variant:
    """One cell's pieces of the loop (see the module docstring)."""

    cost: CostModel                                   # the (target) model's step-time model
    specs: list                                       # layer types the manager serves
    capacity: int                                     # KV pool bytes
    step_cost: Callable[[list], float]
    make_scheduler: Callable[..., Scheduler]          # (mm, sched_cfg, requests) -> Scheduler
    manager_options: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metrics] = field(default_factory=list)
    names: list[str] = field(default_factory=list)    # which variants the cell runs (record meta)
    # The scheduler's per-step work over the running set (CostModel.running_time), or None.
    running_cost: Callable[[int, int], float] | None = None

    def extra_metrics(self, sched: Scheduler, mm, trace: list[dict], requests: list) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for m in self.metrics:
            out.update(m(sched, mm, trace, requests))
        return out


def draft_profile(name: str) -> ModelProfile:
    """The draft model's profile from its ``harness/conf/model/<name>.yaml``."""
    return zoo_profile(name)


def build(cfg, profile: ModelProfile, engine: EngineSettings, gpu, system: str, block_manager: str) -> Variant:
    """The cell's variant, picked from its config: speculative decoding (``engine.draft_model``),
    vision-encoder accounting (a model with vision embeddings), Mamba checkpoint metrics, and the
    cost-model options of its system."""
    cost = CostModel(profile, gpu, engine, block_manager=block_manager)
    if engine.draft_model:
        v = _speculative(cfg, profile, engine, gpu, cost, block_manager)
    else:
        cross = profile.vision is not None and profile.vision.cross_attention
        v = Variant(cost, list(profile.specs), cost.kv_capacity_bytes(), step_time_hook(cost, cross), Scheduler)
        if profile.vision is not None and not cross:
            _vision(v, cost, reencode=not engine.encoder_cache)
    v.running_cost = cost.running_time     # the target's scheduler, once per step
    if any(s.kind == "mamba" for s in profile.specs):
        v.metrics.append(_mamba_metrics)
        v.names.append("mamba_checkpoints")
        # vLLM's align-mode prefill split, when the cell's manager is in align mode (align_split.py)
        v.make_scheduler = align_split.with_split(v.make_scheduler)
    if system in COST_OPTIONS:
        v.manager_options.update(COST_OPTIONS[system](cost, profile))
        v.names.append(f"{system}_cost_options")
    return v


def step_time_hook(cost: CostModel, cross_attention: bool = False) -> Callable[[list], float]:
    """The default step cost: the step-time model over the scheduled batch."""
    if cross_attention:
        def step_cost(step: list) -> float:
            return cost.step_time([(s.num_new_tokens, s.context_before, s.image_tokens_encoded,
                                    s.seq.req.num_image_tokens) for s in step])
        return step_cost

    def step_cost_self(step: list) -> float:
        return cost.step_time([(s.num_new_tokens, s.context_before, s.image_tokens_encoded) for s in step])
    return step_cost_self


def _speculative(cfg, profile, engine, gpu, cost, block_manager) -> Variant:
    """Draft + target in one pool, ``SpecScheduler``, ``spec_step_cost``."""
    draft = draft_profile(str(engine.draft_model))
    dcost = CostModel(draft, gpu, engine, block_manager=block_manager)
    k, p, seed = int(engine.num_speculative_tokens), float(engine.spec_acceptance_rate), int(cfg.seed)

    def make_scheduler(mm, sched_cfg, requests):
        return specdec.SpecScheduler(mm, sched_cfg, requests, k, p, seed)

    def metrics(sched, _mm, _trace, _requests):
        return {"accepted_per_proposal": sched.accepted / max(1, sched.proposed),
                "tokens_per_decode_step": sched.decode_tokens / max(1, sched.decode_entries)}

    return Variant(cost, specdec.pair_specs(profile.specs, draft.specs),
                   specdec.pool_capacity(cost, dcost, draft, engine), specdec.spec_step_cost(cost, dcost),
                   make_scheduler, metrics=[metrics], names=["speculative_decoding"])


def _vision(v: Variant, cost: CostModel, reencode: bool) -> None:
    """Price and count the vision encoder's work per step (once per image, or per chunk)."""
    encoded = [0]

    def step_cost(step: list) -> float:
        enc = [vision_cache.encoder_tokens(s, reencode) for s in step]
        encoded[0] += sum(enc)
        return cost.step_time([(s.num_new_tokens, s.context_before, e) for s, e in zip(step, enc)])

    def metrics(_sched, _mm, trace, requests):
        image_tokens = sum(r.num_image_tokens for r in requests)
        return {"encoder_tokens": encoded[0], "image_tokens": image_tokens,
                "encoder_runs_per_image_token": encoded[0] / image_tokens if image_tokens else 0.0,
                "peak_allocated_gib": max((t["allocated_bytes"] for t in trace), default=0) / GiB}

    v.step_cost = step_cost
    v.metrics.append(metrics)
    v.names.append("vision_encoder_rerun" if reencode else "vision_encoder_once")


def _mamba_metrics(_sched, mm, trace, _requests) -> dict[str, Any]:
    out = {"mean_cached_gib": sum(t["cached_bytes"] for t in trace) / max(1, len(trace)) / GiB}
    if hasattr(mm, "checkpoints_saved"):
        out["checkpoints_admitted"] = mm.checkpoints_saved
    return out
