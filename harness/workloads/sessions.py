"""Workloads that stress hybrid KV caches (issue 22 §3), seeded and token-for-token reproducible.

- ``sessions``: multi-turn chat sessions served round-robin: turn ``t`` of every session, then turn
  ``t + 1`` of every session, ...; each turn's prompt is the previous turn's prompt, the reply the
  engine generated for it, and a new user message, so the context grows every turn and the whole
  history is a prefix the cache can hit -- if the engine kept it (vllm#48435: with many sessions
  between two turns of one, sliding-window tails and Mamba states at the old boundary are gone).
- ``agent``: agent traces: one system prompt shared by every agent, a task per agent, then steps
  that append a tool output each; at a branching step two continuations share the whole context
  (sglang#26907's question: which SWA pool ratio and retention suit such a trace).

Replies: the serving simulator generates token ``i`` of request ``rid`` as
``(crc32(rid) * 31 + i) % 100000 + 1`` (``harness/backends/sim/scheduler.py``); the next turn
carries exactly those tokens, as a chat template re-sending the assistant's reply would. Prompt
tokens are drawn above 100000 so they never collide with replies.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from harness.workloads.request import Request

REPLY_VOCAB = 100_000  # replies use ids 1..100000 (the simulator's), prompts ids above it


@dataclass(frozen=True)
class SessionsSpec:
    num_sessions: int = 16
    system_tokens: int = 1024     # each session's own system prompt (no cross-session sharing)
    user_tokens: int = 512        # new user tokens per turn
    output_len: int = 256         # reply tokens per turn
    think_time_s: float = 0.25    # gap between two consecutive requests of the round-robin


@dataclass(frozen=True)
class AgentSpec:
    num_agents: int = 8
    system_tokens: int = 4096     # shared by every agent (tools, instructions)
    task_tokens: int = 512
    tool_tokens: int = 1024       # tool output appended per step
    output_len: int = 128
    branch_every: int = 3         # every 3rd step forks a second continuation from the same context
    step_gap_s: float = 0.2


def reply_tokens(request_id: str, n: int) -> list[int]:
    """The ``n`` tokens the simulator generates for ``request_id`` (see the module docstring)."""
    base = zlib.crc32(request_id.encode()) * 31
    return [(base + i) % REPLY_VOCAB + 1 for i in range(n)]


def reply_token(request_id: str, i: int) -> int:
    """Token ``i`` of :func:`reply_tokens` (what a backend without a model samples, so a session's next
    turn carries the reply it generated)."""
    return (zlib.crc32(request_id.encode()) * 31 + i) % REPLY_VOCAB + 1


def _tokens(rng: np.random.Generator, n: int, vocab_size: int) -> list[int]:
    hi = max(vocab_size, REPLY_VOCAB + 2)
    return rng.integers(REPLY_VOCAB + 1, hi, size=n).tolist()


def _round_robin(out: list, num_requests: int, n: int):
    """(round, member) pairs, members served in turn, until ``out`` holds ``num_requests``."""
    rnd = 0
    while len(out) < num_requests:
        for k in range(n):
            if len(out) >= num_requests:
                return
            yield rnd, k
        rnd += 1


def sessions(num_requests: int, seed: int = 0, vocab_size: int = 150_000, spec: SessionsSpec = SessionsSpec()) -> list[Request]:
    """``num_requests`` turns of ``spec.num_sessions`` sessions, served round-robin."""
    rng = np.random.default_rng(seed)
    ctx = [_tokens(rng, spec.system_tokens, vocab_size) for _ in range(spec.num_sessions)]
    out: list[Request] = []
    for turn, s in _round_robin(out, num_requests, spec.num_sessions):
        rid = f"s{s}-t{turn}"
        prompt = ctx[s] + _tokens(rng, spec.user_tokens, vocab_size)
        out.append(Request(rid, len(out) * spec.think_time_s, np.asarray(prompt, dtype=np.int32),
                           spec.output_len, prefix_group=f"session{s}"))
        ctx[s] = prompt + reply_tokens(rid, spec.output_len)
    return out


def agent(num_requests: int, seed: int = 0, vocab_size: int = 150_000, spec: AgentSpec = AgentSpec()) -> list[Request]:
    """``num_requests`` agent steps: a shared system prompt, a task per agent, tool outputs, forks."""
    rng = np.random.default_rng(seed)
    system = _tokens(rng, spec.system_tokens, vocab_size)
    ctx = [system + _tokens(rng, spec.task_tokens, vocab_size) for _ in range(spec.num_agents)]
    out: list[Request] = []
    for step, a in _round_robin(out, num_requests, spec.num_agents):
        rid = f"a{a}-s{step}"
        t = len(out) * spec.step_gap_s
        out.append(Request(rid, t, np.asarray(ctx[a], dtype=np.int32), spec.output_len, prefix_group=f"agent{a}"))
        if spec.branch_every and step % spec.branch_every == spec.branch_every - 1 and len(out) < num_requests:
            # the fork: same context, a different instruction appended (a retry / parallel tool call)
            alt = f"a{a}-s{step}-b"
            out.append(Request(alt, t, np.asarray(ctx[a] + _tokens(rng, 32, vocab_size), dtype=np.int32),
                               spec.output_len, prefix_group=f"agent{a}"))
        ctx[a] = ctx[a] + reply_tokens(rid, spec.output_len) + _tokens(rng, spec.tool_tokens, vocab_size)
    return out


GENERATORS = {"sessions": sessions, "agent": agent}
SPECS = {"sessions": SessionsSpec, "agent": AgentSpec}


def generate(name: str, num_requests: int, seed: int = 0, vocab_size: int = 150_000, **fields) -> list[Request]:
    """Workload ``name`` with ``fields`` overriding its spec (:class:`SessionsSpec`, :class:`AgentSpec`)."""
    if name not in GENERATORS:
        raise ValueError(f"workload {name!r}: unknown; generated workloads: {sorted(GENERATORS)}")
    return GENERATORS[name](num_requests, seed=seed, vocab_size=vocab_size, spec=SPECS[name](**fields))
