"""vLLM-style continuous batching over any :class:`jenga.interface.MemoryManager`.

Two policies, as the artifact's two forks schedule:

- **v0, chunked prefill off** (vLLM 0.6.3 ``_schedule_default``): prefill priority. If waiting
  requests can be admitted, the step is a batch of whole prefills (token budget
  ``max(max_num_batched_tokens, max_model_len)``); otherwise it is one decode step of every
  running request. A decode that cannot get memory preempts the newest running request.
- **mixed** (vLLM v1, and v0 with chunked prefill on): running requests first (decodes and the
  next chunk of unfinished prefills, newest preempted while memory is short), then waiting
  requests take prefill chunks from the remaining token budget. Waiting requests are not admitted
  in a step that preempted (v1 does the same).

Preemption is by recompute: the victim is ``free``d (its computed pages stay cached when prefix
caching is on) and requeued at the front of the waiting queue; on readmission it prefills its
prompt plus the tokens it had generated. Prefix hits are counted only on a request's first
admission (hit rate = first-admission hit tokens / prompt tokens); later hits save compute but
are not hits. Admission is FCFS: the first waiting request that does not fit stops admission.

**v0 admission gate** (``SchedulerConfig.v0_can_allocate``): vLLM v0's ``_schedule_prefills``
asks the block manager ``can_allocate`` before a prefill, and both the upstream v0.6.x
``BlockSpaceManagerV2`` and the artifact's ``PerlayerBlockSpaceManager`` (Jenga's v0 fork)
answer from the pages the request's **whole** token sequence needs, ignoring prefix-cache hits,
against free + evictable pages minus a watermark of ``watermark`` × all pages (default 0.01):
``total − required < watermark`` → never (the request is ignored), ``free + evictable − required
< watermark`` → later (admission stops). Pages a running request shares are not free, so a
request whose prefix another running request holds still needs room for all of it. The same
prefill counts its whole prompt against the token budget (v0 does not know the hit until the
model runner). We measure "required" as the bytes the same allocator gives the sequence from an
empty pool (:class:`FullPromptProbe`).

**Full-prompt admission** (``SchedulerConfig.full_prompt_admission``, mixed policy): today's vLLM
(0.3x, ``SchedulerConfig.scheduler_reserve_full_isl``, default on) admits a waiting request only if
free + evictable memory holds its *whole* remaining sequence -- counting its prefix hit and the
sliding-window cap (``KVCacheManager.allocate_slots(full_sequence_must_fit=True)``), sized by
:func:`jenga.baselines.current.full_sequence_demand` -- so an admitted request can always finish
its chunked prefill. The April-2025 V1 engine the artifact forked admitted chunk by chunk (off).

**Length cap** (``SchedulerConfig.max_model_len``, engine v1): vLLM v1 ends a request once its
length reaches ``max_model_len`` -- ``check_stop`` (vllm/v1/core/sched/utils.py, vLLM 0.32), called
by ``Scheduler._update_request_with_output`` after each sampled token, sets FINISHED_LENGTH_CAPPED
when ``request.num_tokens >= max_model_len`` before it looks at ``min_tokens`` -- so a request of
prompt ``P`` and ``output_len`` ``O`` generates ``min(O, max(1, max_model_len - P))`` tokens (a
prompt at or past ``max_model_len`` still gets the one token of its prefill step). vLLM's front end
(``InputProcessor._validate_prompt_len``) refuses a prompt of ``max_model_len`` tokens or more, and
the harness's datasets refuse any request whose prompt + output exceeds it
(``harness.workloads.check_context``), so the cap fires only on generated or user traces fed
directly (``harness.whatif``), as ``backend=vllm_sched`` feeds vLLM's scheduler. Not applied to v0:
vLLM v0's ``StopChecker.maybe_stop_sequence`` caps at ``seq.get_len() > max_model_len`` (one token
later) and its scheduler ignores over-long prompts instead, a different rule not modelled here.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.workloads.request import Request
from jenga.baselines.current import full_sequence_demand
from jenga.interface import MemoryManager, MemoryUsage


@dataclass(slots=True)
class SeqState:
    """Scheduler-side state of one request."""

    req: Request
    num_computed: int = 0          # tokens with KV computed (pinned cache hit included)
    num_generated: int = 0
    first_admitted: bool = False
    hit_tokens: int = 0            # prefix hit on first admission
    first_token_time: float | None = None
    finish_time: float | None = None
    num_preemptions: int = 0
    recomputed_tokens: int = 0     # tokens computed again after a preemption
    computed_before_preemption: int = 0
    ignored: bool = False          # can never fit in the KV pool (vLLM ignores such prompts)
    done: bool = False
    # Tokens known so far (prompt + generated); all but the newest have KV once decoding. A field
    # kept by _emit, not a property: the scheduler reads it millions of times per study.
    target: int = field(init=False)
    # _token_id's per-request part, computed once (a crc32 of the id per generated token was ~0.2 s
    # of a Fig. 13 study).
    token_base: int = field(init=False, repr=False)
    # Output tokens it generates before it finishes: its output_len, or fewer where the scheduler's
    # max_model_len cap ends it first (Scheduler.__init__).
    max_output: int = field(init=False)

    def __post_init__(self) -> None:
        self.target = self.req.prompt_len + self.num_generated
        self.token_base = _token_base(self.req)
        self.max_output = self.req.output_len


@dataclass(slots=True)
class Scheduled:
    """One request's share of a step."""

    seq: SeqState
    num_new_tokens: int
    context_before: int
    image_tokens_encoded: int
    is_decode: bool


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    token_budget: int
    mixed: bool                    # True: v1 / chunked-prefill policy; False: v0 prefill priority
    chunked_prefill: bool
    enable_prefix_caching: bool
    v0_can_allocate: bool = False  # vLLM v0's whole-prompt admission gate (module docstring)
    watermark: float = 0.01        # v0 BlockSpaceManager watermark, fraction of all pages
    full_prompt_admission: bool = False  # vLLM >= 0.3x's scheduler_reserve_full_isl (module docstring)
    max_model_len: int | None = None     # vLLM v1's length cap (module docstring); None: off


class FullPromptProbe:
    """Bytes an allocator gives a request's whole token sequence, counted from an empty pool with
    no prefix cache: what v0's ``can_allocate`` counts as required. One scratch manager of the
    same class is reused (allocate, read, free); results are cached per page count and images,
    which is all that page counts depend on."""

    def __init__(self, mm: MemoryManager) -> None:
        self._mm = mm
        self._scratch: MemoryManager | None = None
        self._cache: dict[tuple, int] = {}

    def required_bytes(self, req: Request, num_tokens: int) -> int:
        tpp = self._mm.tokens_per_page
        key = (-(-num_tokens // tpp), tuple((im.offset, im.num_tokens) for im in req.images))
        if key not in self._cache:
            if self._scratch is None:
                # Room for anything the real pool could ever hold (static partitions split it).
                self._scratch = type(self._mm)(self._mm.specs, 8 * self._mm.capacity_bytes,
                                               tokens_per_page=tpp, enable_prefix_cache=False)
            probe = Request(f"__probe_{key[0]}", 0.0, req.prompt_token_ids[:num_tokens],
                            req.output_len, req.images)
            # A preempted request's sequence also holds the tokens it generated.
            probe.output_token_ids.extend(req.output_token_ids[:max(0, num_tokens - req.prompt_len)])
            if self._scratch.allocate(probe, num_tokens):
                self._cache[key] = self._scratch.usage().allocated_bytes
                self._scratch.free(probe)
            else:
                self._cache[key] = 1 << 62   # larger than any pool: never fits
        return self._cache[key]


class Scheduler:
    """Waiting and running queues plus the step policy; the engine owns time and step costs."""

    # The tokens a prefill chunk of n tokens from start keeps, (seq, start, n) -> int (0: none this
    # step); None: the token budget alone cuts chunks. The cell's variant sets vLLM's align-mode split
    # (harness/backends/sim/align_split.py).
    split_chunk: Callable[[SeqState, int, int], int] | None = None

    def __init__(self, mm: MemoryManager, config: SchedulerConfig, requests: list[Request]) -> None:
        self.mm = mm
        self.cfg = config
        self.seqs = [SeqState(r) for r in sorted(requests, key=lambda r: r.arrival_time)]
        mml = config.max_model_len
        if mml is not None:
            for s in self.seqs:
                # vLLM v1's check_stop after each sampled token: prompt + output >= max_model_len ends
                # it (module docstring), so a prompt already at or past it yields one token.
                s.max_output = min(s.req.output_len, max(1, mml - s.req.prompt_len))
        self._pending = deque(self.seqs)          # not yet arrived
        self.waiting: deque[SeqState] = deque()
        self.running: list[SeqState] = []
        self.num_preemptions = 0
        self.num_finished = 0
        self.num_ignored = 0
        # (head request, (free + cached, per-type allocated bytes) when its admission failed)
        self._blocked: tuple[SeqState, tuple[int, dict[str, int]]] | None = None
        self._probe = FullPromptProbe(mm) if config.v0_can_allocate else None
        # The pool's usage as the last schedule() left it, when admission read it last and nothing
        # changed the pool after (None: ask the manager); see step_usage().
        self._usage: MemoryUsage | None = None

    # -- queues -------------------------------------------------------------------------------
    def arrive(self, now: float) -> None:
        while self._pending and self._pending[0].req.arrival_time <= now:
            self.waiting.append(self._pending.popleft())

    def next_arrival(self) -> float | None:
        return self._pending[0].req.arrival_time if self._pending else None

    @property
    def has_unfinished(self) -> bool:
        return bool(self._pending or self.waiting or self.running)

    def _preempt(self, seq: SeqState) -> None:
        self.mm.free(seq.req)
        seq.computed_before_preemption = max(seq.computed_before_preemption, seq.num_computed)
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    # -- policy -------------------------------------------------------------------------------
    def schedule(self, now: float) -> list[Scheduled]:
        """Pick the next step's work and allocate its memory."""
        # The last step's work is computed: its Mamba checkpoints become hittable by every request
        # (vLLM v0 marks blocks computed at the end of each schedule(); jenga.PagedManager.begin_step).
        self._usage = None
        self.mm.begin_step()
        self.arrive(now)
        if self.cfg.mixed:
            return self._schedule_mixed()
        prefills = self._admit(self.cfg.token_budget, chunk=False)
        if prefills:
            return prefills
        self._usage = None          # the decodes allocate after admission read the pool
        return self._schedule_running(self.cfg.token_budget)[0]

    def step_usage(self) -> MemoryUsage:
        """The pool's usage as :meth:`schedule` left it (the state the step runs with): the snapshot
        admission read just before it stopped, when nothing touched the pool after it (a head
        request that stays blocked in a mixed step: most of Llama-3.1-70B's 15k steps), else the
        manager's ``usage()``. The loop asks every step; this saves the second read."""
        return self._usage if self._usage is not None else self.mm.usage()

    def _schedule_running(self, budget: int) -> tuple[list[Scheduled], int, bool]:
        out: list[Scheduled] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.target - seq.num_computed, budget)
            if self.split_chunk is not None:
                n = self.split_chunk(seq, seq.num_computed, n)
                if n <= 0:
                    i += 1
                    continue
            while not self.mm.allocate(seq.req, n):
                victim = self.running.pop()      # the newest running request
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                out.append(self._entry(seq, n))
                budget -= n
                i += 1
        return out, budget, preempted

    def _schedule_mixed(self) -> list[Scheduled]:
        out, budget, preempted = self._schedule_running(self.cfg.token_budget)
        if not preempted:
            out += self._admit(budget, chunk=self.cfg.chunked_prefill)
        return out

    @staticmethod
    def _reclaimable(u: MemoryUsage) -> tuple[int, dict[str, int]]:
        return u.free_bytes + u.cached_bytes, dict(u.per_type_allocated_bytes)

    def _still_blocked(self, seq: SeqState) -> tuple[bool, MemoryUsage | None]:
        """(True, ...) if the head request's last admission failed and must fail again: no memory came
        back since (free + cached did not grow) and no running request is prefilling (so no new
        cached pages could lengthen its prefix hit). It saves re-pinning and rolling back a long
        cached prefix every step (Gemma-3 cells: 170 s -> 6 s). Not a proof of equivalence: over
        fig13/fig14 it changed one cell (Llama-4, static partition) by 3.5e-5 req/s.

        Also returns the pool's usage when it read it (else None): the caller reuses it while nothing
        changes the pool."""
        if self._blocked is None or self._blocked[0] is not seq:
            return False, None
        if any(r.target - r.num_computed > 1 for r in self.running):
            return False, None
        u = self.mm.usage()
        now_free, now_types = self._reclaimable(u)
        then_free, then_types = self._blocked[1]
        # Memory came back if free + cached grew, or any type released pages (a partitioned pool
        # can gain room for one type while its total stays flat).
        return now_free <= then_free and all(now_types.get(k, 0) >= v for k, v in then_types.items()), u

    def _can_allocate(self, seq: SeqState, u: MemoryUsage) -> str:
        """vLLM v0's ``can_allocate`` on the pool's usage ``u``: "ok", "later" or "never" (see the
        module docstring)."""
        assert self._probe is not None
        required = self._probe.required_bytes(seq.req, seq.target)
        watermark = self.cfg.watermark * u.capacity_bytes
        if u.capacity_bytes - required < watermark:
            return "never"
        return "ok" if u.free_bytes + u.cached_bytes - required >= watermark else "later"

    def _full_prompt_fits(self, seq: SeqState, hit: int) -> bool:
        """Today's vLLM admission gate (module docstring): the whole sequence must fit."""
        u = self.mm.usage()
        need = full_sequence_demand(self.mm, seq.req, hit, seq.target, self.cfg.token_budget)
        return need <= u.free_bytes + u.cached_bytes

    def _ignore(self, seq: SeqState) -> None:
        self.waiting.popleft()
        seq.ignored = seq.done = True
        self.num_ignored += 1

    def _admit(self, budget: int, chunk: bool) -> list[Scheduled]:
        out: list[Scheduled] = []
        while self.waiting and len(self.running) < self.cfg.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            u = None    # the pool's usage read in this pass (nothing has changed the pool since)
            if not out:
                blocked, u = self._still_blocked(seq)
                if blocked:
                    self._usage = u
                    break
            if self._probe is not None:
                if u is None:
                    u = self.mm.usage()
                status = self._can_allocate(seq, u)
                if status == "never":
                    self._ignore(seq)
                    continue
                if status == "later":
                    self._blocked = (seq, self._reclaimable(u)) if not out else None
                    self._usage = u
                    break
                # v0 counts the whole prompt against the token budget (hits are found later).
                if not chunk and out and seq.target > budget:
                    self._usage = u
                    break
            hit = self.mm.lookup_prefix(seq.req) if self.cfg.enable_prefix_caching else 0
            if self.cfg.full_prompt_admission and not self._full_prompt_fits(seq, hit):
                self._block(seq, out)
                break
            n = seq.target - hit
            if chunk and n > budget:
                n = budget
            elif out and n > budget:
                break
            if self.split_chunk is not None:
                n = self.split_chunk(seq, hit, n)
                if n <= 0:
                    break
            if not self.mm.allocate(seq.req, n):
                if not self.running and not out:
                    # Nothing else holds memory, so this request can never fit: drop it as
                    # vLLM does for prompts longer than the KV pool.
                    self._ignore(seq)
                    continue
                self._block(seq, out)
                break
            self.waiting.popleft()
            if not seq.first_admitted:
                seq.first_admitted = True
                seq.hit_tokens = hit
            else:
                seq.recomputed_tokens += max(0, seq.computed_before_preemption - hit)
                seq.computed_before_preemption = 0
            seq.num_computed = hit
            self.running.append(seq)
            out.append(self._entry(seq, n))
            budget -= seq.target if (self._probe is not None and not chunk) else n
        return out

    def _block(self, seq: SeqState, out: list[Scheduled]) -> None:
        """Admission stops at ``seq``: if it is the step's first, remember the pool it failed against
        (:meth:`_still_blocked`), a read that is also the step's usage (admission ends here)."""
        if out:
            self._blocked = None
            return
        u = self.mm.usage()
        self._blocked = (seq, self._reclaimable(u))
        self._usage = u

    @staticmethod
    def _entry(seq: SeqState, n: int) -> Scheduled:
        c = seq.num_computed
        images = seq.req.images
        img = sum(im.num_tokens for im in images if c <= im.offset < c + n) if images else 0
        is_decode = seq.num_generated > 0 and c + n == seq.target and n == 1
        return Scheduled(seq, n, c, img, is_decode)

    # -- step completion ------------------------------------------------------------------------
    def complete(self, step: list[Scheduled], now: float) -> None:
        """Apply a finished step: advance computed tokens, emit tokens, free finished requests."""
        any_done = False
        for s in step:
            seq = s.seq
            seq.num_computed += s.num_new_tokens
            if seq.num_computed < seq.target:
                continue                              # a prefill chunk that is not the last
            any_done |= self._emit(seq, 1, now)
        if any_done:
            self.running = [s for s in self.running if not s.done]

    def _emit(self, seq: SeqState, n: int, now: float) -> bool:
        """Append ``n`` generated tokens to ``seq``'s request (none past ``seq.max_output``: vLLM's
        ``_update_request_with_output`` trims a multi-token step at the stop); finish and free it when
        it has all its output. True when it finished."""
        req = seq.req
        n = min(n, seq.max_output - seq.num_generated)
        for _ in range(n):
            req.output_token_ids.append((seq.token_base + seq.num_generated) % 100_000 + 1)    # _token_id
            seq.num_generated += 1
            seq.target += 1
        if seq.first_token_time is None:
            seq.first_token_time = now
        if seq.num_generated < seq.max_output:
            return False
        seq.finish_time = now
        seq.done = True
        self.num_finished += 1
        self.mm.free(req)
        return True


def _token_base(req: Request) -> int:
    return zlib.crc32(req.request_id.encode()) * 31


def _token_id(req: Request, i: int) -> int:
    """A deterministic generated token: distinct per request so outputs never fake a shared prefix
    (``Scheduler._emit`` inlines it over ``SeqState.token_base``)."""
    return (_token_base(req) + i) % 100_000 + 1
