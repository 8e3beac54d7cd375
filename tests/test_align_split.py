"""vLLM 0.32's align-mode prefill split (harness/backends/sim/align_split.py, a model of
``Scheduler._mamba_block_aligned_split``): exact chunk ends on analytic cases, which mixers export
their checkpoint inside a chunk, and the simulator applying it only to a vllm_hma manager in align mode
on a Mamba model (negative controls: other modes, other systems, no Mamba layer)."""

from __future__ import annotations

import pytest

import jenga
from harness.backends.sim.align_split import AlignedSplit, checkpoint_position, chunk_hook
from jenga.spec import FullAttentionSpec, MambaSpec

B = 528                                   # Qwen3.5-4B's align-mode block
GDN = AlignedSplit(B, 8192)               # gated DeltaNet: no checkpoint exported inside a chunk
MAMBA2 = AlignedSplit(B, 8192, export_alignment=1)


def chunks(split: AlignedSplit, prompt: int, start: int = 0, budget: int = 8192, generated: int = 0,
           junction: int = 0) -> list[int]:
    """The chunk sizes a lone request's prefill is cut into, each step offered ``budget`` tokens."""
    total, out = prompt + generated, []
    while start < max(prompt, total - 1):
        n = split.tokens(start, min(total - start, budget), total, prompt, junction)
        assert n > 0, (start, out)
        out.append(n)
        start += n
    return out


def test_checkpoint_position_is_the_last_block_boundary_before_the_final_token():
    assert checkpoint_position(900, B) == 528
    assert checkpoint_position(1057, B) == 1056     # 1,056 tokens + 1: the boundary itself
    assert checkpoint_position(1056, B) == 528      # one token short of 1,056
    assert checkpoint_position(1, B) == 0


def test_gdn_stops_every_prefill_at_its_last_block_boundary():
    assert chunks(GDN, 900) == [528, 372]           # the sessions trace's first turn
    assert chunks(GDN, 2356, start=1584) == [528, 244]   # after a 3-block hit: stop at 2,112
    assert chunks(GDN, 528) == [528]                # boundary = 0: nothing strictly inside
    # a preempted request replaying 20 generated tokens: prefill end 919, stop at 528
    assert chunks(GDN, 900, generated=20) == [528, 392]


def test_mamba2_exports_the_checkpoint_inside_its_last_chunk():
    assert chunks(MAMBA2, 900) == [900]
    assert chunks(MAMBA2, 2356, start=1584) == [772]
    # a chunk starting one block before its checkpoint (528 + 528 <= 1,056) still exports it
    assert chunks(MAMBA2, 1200, start=528) == [672]
    assert chunks(GDN, 1200, start=528) == [528, 144]
    # the export is only for the chunk that finishes the prefill: a budget-cut chunk still floors
    assert chunks(MAMBA2, 2000, budget=1200) == [1056, 944]


def test_budget_cut_chunks_end_on_block_boundaries():
    assert chunks(GDN, 3000, budget=1000) == [528, 528, 528, 528, 528, 360]
    # a block wider than the chunk limit advances sub-block, then re-aligns at the next boundary
    wide = AlignedSplit(B, 256)
    assert chunks(wide, 1200, budget=256) == [256, 256, 16, 256, 256, 16, 144]
    # a leftover budget below one block schedules nothing this step (the request waits)
    assert GDN.tokens(0, 500, 3000, 3000) == 0
    assert wide.tokens(0, 200, 3000, 3000) == 200


def test_shared_prefix_junction_is_a_stop_floored_to_whole_blocks_from_the_start():
    assert chunks(GDN, 3000, junction=1700) == [1584, 1056, 360]
    assert chunks(GDN, 3000, start=528, junction=1700) == [1056, 1056, 360]
    assert chunks(MAMBA2, 3000, junction=1584) == [1584, 1416]
    # a junction at or before the chunk's start, or within its first block, adds no stop
    assert chunks(GDN, 3000, start=1584, junction=1584) == [1056, 360]
    assert chunks(MAMBA2, 3000, start=1584, junction=1700) == [1416]


def test_partial_hits_also_stop_at_the_prompts_hash_aligned_tail():
    part = AlignedSplit(B, 8192, hash_block=176, partial_hits=True)
    assert chunks(part, 1000) == [528, 352, 120]          # 528, then the tail 880 = 999 // 176 * 176
    exact = AlignedSplit(B, 8192, hash_block=176, partial_hits=True, junction_checkpoint=True)
    assert chunks(exact, 1000, start=528, junction=700) == [172, 180, 120]
    assert chunks(part, 1000, start=528, junction=700) == [352, 120]   # floored to start: no stop
    with pytest.raises(ValueError, match="partial hits"):
        AlignedSplit(B, 8192, partial_hits=True)
    with pytest.raises(ValueError, match="multiple"):
        AlignedSplit(B, 8192, hash_block=100)


def test_decodes_are_never_split():
    assert GDN.tokens(904, 1, 905, 900) == 1       # prefill end max(900, 904) = 904 = start
    assert MAMBA2.tokens(1000, 1, 1001, 900) == 1


def test_the_simulator_splits_only_vllm_hma_in_align_mode_on_a_mamba_model():
    full = FullAttentionSpec("full", 4, 2048)
    gdn = MambaSpec("mamba", 12, 1097728, state_bytes_per_layer=1097728, mixer="gdn")

    def hook(system, specs, **opt):
        return chunk_hook(jenga.make_manager(system, specs, 1 << 32, enable_prefix_cache=True, **opt), 8192)

    class Seq:   # what the hook reads of the scheduler's SeqState
        target = 1200
        req = type("R", (), {"prompt_len": 1200, "request_id": "r"})()

    h = hook("vllm_hma", [full, gdn])
    assert h is not None and h(Seq, 0, 1200) == 1088                     # block 544: stop at 2 x 544
    # negative controls: other cache modes, another system, no Mamba layer
    assert hook("vllm_hma", [full, gdn], mamba_cache_mode="all") is None
    assert hook("vllm_hma", [full, gdn], mamba_cache_mode="none") is None
    assert hook("jenga", [full, gdn]) is None
    assert hook("vllm_hma", [full]) is None


def test_a_cell_schedules_vllms_chunks_and_other_modes_do_not():
    """End to end through the sim backend (variants.build -> make_scheduler): Qwen3.5-4B's first
    900-token turn runs as 528 + 372 in align mode, whole under mamba_cache_mode=all."""
    from harness import whatif as w
    from harness.backends.sim.engine import run_cell
    from harness.workloads import sessions as ww
    a = w.parse_args(["model=qwen3_5_4b", "gpu=h100", "engine.max_model_len=4096",
                      "engine.kv_cache_bytes=4000000000", "--no-sweep"])
    prof = w.profile(a)
    reqs = ww.sessions(1, spec=ww.SessionsSpec(num_sessions=1, system_tokens=600, user_tokens=300, output_len=4))

    def prefill_chunks(**opt):
        trace = run_cell(w.compose(a, "vllm_hma", opt, dataset="synthetic"), prof, reqs).trace
        return [t["num_prefill_tokens"] for t in trace if t["num_prefill_tokens"]]
    assert prefill_chunks() == [528, 372]
    assert prefill_chunks(mamba_cache_mode="all") == [900]
