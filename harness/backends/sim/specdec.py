"""Speculative decoding in the sim: a draft and a target model sharing one KV pool (paper §7.4).

A cell runs it with ``engine.draft_model`` set (harness/backends/sim/variants.py picks these hooks).
Memory: the draft's and the target's layer types are one spec list, names prefixed ``draft/`` and
``target/`` (:func:`jenga.baselines.per_model_split.pair_specs`), so any manager serves both models
of a request with one ``allocate``. The study's systems (experiments/specdec.yaml):

- ``jenga``: one LCM pool over both models' types (per-type freeing, no per-model split);
- ``max_page``: one pool, every type's page padded to the largest;
- ``per_model_split``: vLLM's speculative decoding -- each model has its own paged cache with the
  **same number of blocks** (one block table serves both), i.e. a static split of the memory in
  proportion to the models' per-token KV bytes, and PagedAttention inside each (no per-type
  freeing): :class:`jenga.baselines.per_model_split.PerModelSplit`.

Step: the scheduler keeps ``k`` look-ahead slots per running request (vLLM's
``num_lookahead_slots``); a decode step runs the draft ``k`` times (one token each) and the
target once over ``k + 1`` positions; each proposal is accepted with a fixed probability (the
artifact's ``--fixed-acceptance-rate``) until the first rejection, plus one token from the target,
so a step emits ``1 + accepted`` tokens (expected ``(1 - p^(k+1)) / (1 - p)``: 2.533 for k=3, p=0.7).
Step time = ``k`` draft decode steps + one target verify step (prefill: both models' prefills).
"""

from __future__ import annotations

import numpy as np

from harness.backends.sim.scheduler import Scheduled, Scheduler
from jenga.baselines.per_model_split import PerModelSplit, pair_specs
from jenga.spec import SpecError


def accepted_tokens(rng: np.random.Generator, k: int, p: float) -> int:
    """Proposals accepted in one verify step: leading successes of ``k`` Bernoulli(p) draws."""
    if k <= 0:
        return 0
    u = rng.random(k)
    rejected = np.flatnonzero(u >= p)
    return int(rejected[0]) if rejected.size else k


class SpecScheduler(Scheduler):
    """The v0 scheduler (prefill priority) with ``k`` look-ahead slots per running request and
    multi-token decode steps; ``acceptance`` is the fixed per-proposal acceptance probability."""

    def __init__(self, mm, config, requests, k: int, acceptance: float, seed: int) -> None:
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"spec_acceptance_rate must be in [0, 1], got {acceptance!r}")
        if k < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {k!r}")
        super().__init__(mm, config, requests)
        self.k, self.p = k, acceptance
        self.rng = np.random.default_rng(seed)
        self.proposed = 0
        self.accepted = 0
        self.decode_entries = 0    # (request, decode step) pairs
        self.decode_tokens = 0     # tokens those steps emitted

    def _k_eff(self, seq) -> int:
        # Never propose past the request's last output token.
        return max(0, min(self.k, seq.max_output - seq.num_generated - 1))

    def _schedule_running(self, budget: int):
        out: list[Scheduled] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            k = self._k_eff(seq)
            need = max(0, seq.target + k - self.mm.num_computed_tokens(seq.req))
            while need and not self.mm.allocate(seq.req, need):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                out.append(Scheduled(seq, k + 1, seq.num_computed, 0, True))
                budget -= k + 1
                i += 1
        return out, budget, preempted

    def complete(self, step: list[Scheduled], now: float) -> None:
        any_done = False
        for s in step:
            seq = s.seq
            if s.is_decode:
                k = s.num_new_tokens - 1
                a = accepted_tokens(self.rng, k, self.p)
                self.proposed += k
                self.accepted += a
                emitted = a + 1
                self.decode_entries += 1
                self.decode_tokens += emitted
                seq.num_computed += emitted
            else:
                seq.num_computed += s.num_new_tokens
                if seq.num_computed < seq.target:
                    continue
                emitted = 1
            any_done |= self._emit(seq, emitted, now)
        if any_done:
            self.running = [x for x in self.running if not x.done]


def spec_step_cost(target_cost, draft_cost):
    """Step cost hook: prefills run both models; a decode step runs the draft ``k`` times and the
    target once over ``k + 1`` positions per request."""
    def cost(step: list[Scheduled]) -> float:
        pre = [(s.num_new_tokens, s.context_before, s.image_tokens_encoded) for s in step if not s.is_decode]
        dec = [s for s in step if s.is_decode]
        t = target_cost.step_time(pre) + draft_cost.step_time(pre) if pre else 0.0
        if dec:
            k = max(s.num_new_tokens - 1 for s in dec)
            for i in range(k):
                t += draft_cost.step_time([(1, s.context_before + i, 0) for s in dec if s.num_new_tokens - 1 > i])
            t += target_cost.step_time([(s.num_new_tokens, s.context_before, 0) for s in dec])
        return t
    return cost


def pool_capacity(target_cost, draft_cost, draft_profile, engine) -> int:
    """KV bytes left once both models are loaded: the target's profiled budget minus the draft's
    weights (``engine.kv_cache_bytes`` overrides it)."""
    explicit = getattr(engine, "kv_cache_bytes", None)
    if explicit:
        return int(explicit)
    cap = int(target_cost.kv_capacity_bytes() - draft_cost.loaded_weight_bytes(draft_profile))
    if cap <= 0:
        raise SpecError(f"no KV memory left after loading the draft model {draft_profile.name}")
    return cap


__all__ = ["PerModelSplit", "SpecScheduler", "accepted_tokens", "pair_specs", "pool_capacity", "spec_step_cost"]
