"""``trtllm_pools`` (jenga/baselines/trtllm.py): TensorRT-LLM's per-window pools, the behaviour its
source documents (calculate_max_num_blocks_for_vswa, calculateWindowSizeToShare, calculateMaxNumBlocks,
getMaxCapacityBatchSize, detachFrontBlock), each with a negative control."""

from __future__ import annotations

import random

import pytest
from conftest import req

import jenga
from jenga.baselines.trtllm import (
    TOKENS_PER_BLOCK,
    adjust_window_sizes_for_vswa,
    blocks_per_window,
    reported_capacity,
    split,
)
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec, SpecError
from jenga.testing import shared_prefix_stream


def _prefill(mm, r, chunk: int = 64) -> bool:
    """Chunked prefill (as the scheduler runs it): ``chunk`` tokens per step."""
    n = len(r.prompt_token_ids) - mm.num_computed_tokens(r)
    while n > 0:
        if not mm.allocate(r, min(chunk, n)):
            return False
        mm.begin_step()
        n -= chunk
    return True

GiB = 1 << 30
FULL = FullAttentionSpec("full", 12, 2048)
SWA = SlidingWindowSpec("sliding", 12, 2048, window=128)


def test_vswa_split_is_equal_per_window_on_the_pytorch_backend():
    """calculate_max_num_blocks_for_vswa (resource_manager.py): "equal proportion shares of memory for
    all window sizes" -- gpt-oss-20b-like 12 full + 12 sliding-128 layers of 2 KiB in 40 GiB: each
    window 20 GiB, int(20 GiB / 24,576 B // 32) = 27,306 blocks; TRTLLM_WINDOW_SIZE_SHARES
    (window_size_shares) moves it."""
    cap = 40 * GiB
    share, blocks = split([(32768, 12 * 2048), (128, 12 * 2048)], cap, 32)
    assert share == {128: 0.5, 32768: 0.5}
    assert blocks == {128: 27306, 32768: 27306} == {w: int(cap * 0.5 / 24576 // 32) for w in (128, 32768)}
    share, blocks = split([(32768, 12 * 2048), (128, 12 * 2048)], cap, 32, window_size_shares=[0.25, 0.75])
    assert blocks == {128: 13653, 32768: 40960}
    # negative control: the TensorRT engine backend's calculateWindowSizeToShare weights by window:
    # the 128-window pool gets 128 / 32,896 of the memory, ceilDiv'd: 213 blocks
    assert split([(32768, 12 * 2048), (128, 12 * 2048)], cap, 32, "cpp")[1] == {128: 213, 32768: 54401}
    with pytest.raises(SpecError, match="TRTLLM_WINDOW_SIZE_SHARES"):
        split([(32768, 1), (128, 1)], cap, 32, window_size_shares=[0.5, 0.6])


def test_window_share_is_bytes_per_token_times_window_on_the_cpp_backend():
    """BlockManager's own example (kvCacheManager.h, calculateWindowSizeToShare): windows
    {1024: [1], 4096: [0, 4, 5], 8192: [2, 3]} with equal layers -> {0.0345, 0.4138, 0.5517}."""
    share, _ = split([(1024, 1), (4096, 3), (8192, 2)], 1 << 20, 32, "cpp")
    assert share[1024] == pytest.approx(1024 / 29696) == pytest.approx(0.0345, abs=1e-4)
    assert share[4096] == pytest.approx(0.4138, abs=1e-4) and share[8192] == pytest.approx(0.5517, abs=1e-4)
    # TRT-LLM's unit test (BlockManagerTestWindowSizeToShare): one window size takes everything
    assert split([(1024, 3)], 1 << 20, 32, "cpp")[0] == split([(1024, 3)], 1 << 20, 32)[0] == {1024: 1.0}


def test_blocks_per_window_and_max_batch_size():
    """calculate_max_num_blocks_for_vswa: int(mem * share / bytes per token // tokens_per_block);
    getMaxCapacityBatchSize: min over windows of blocks / ceilDiv(min(len, window), 32)."""
    cap = 40 * GiB
    bpw = blocks_per_window([FULL, SWA], cap, 32768)
    for w in (128, 32768):
        assert bpw[w] == int(cap * 0.5 / (12 * 2048) // 32)
    mm = jenga.make_manager("trtllm_pools", [FULL, SWA], cap, max_seq_len=32768)
    assert mm.tokens_per_page == TOKENS_PER_BLOCK == 32
    rc = reported_capacity(mm, 32768)
    assert rc["max_batch_size"] == min(bpw[128] // 4, bpw[32768] // 1024) == 26
    assert rc["kv_capacity_tokens"] == bpw[32768] * 32
    # the equal split does not depend on max_seq_len; the cpp weights do: a longer one starves the SWA pool
    assert blocks_per_window([FULL, SWA], cap, 131072) == {128: bpw[128], 131072: bpw[32768]}
    assert blocks_per_window([FULL, SWA], cap, 131072, window_split="cpp")[128] < \
        blocks_per_window([FULL, SWA], cap, 32768, window_split="cpp")[128]
    # negative control: with every layer full there is one pool, the whole memory (ceilDiv: C++)
    one = blocks_per_window([FullAttentionSpec("full", 24, 2048)], cap, 32768)
    assert one == {32768: -(-int(cap / (24 * 2048)) // 32)}


def test_windows_shrink_when_the_pool_cannot_hold_one_sequence_of_each():
    """KVCacheManager.adjust_window_sizes_for_vswa (resource_manager.py): Gemma-3-like 1 full layer +
    5 sliding-1024 layers of 1,000 B per token, max_seq_len 32,768, need 1,024 x 5,000 + 32,768 x
    1,000 = 37,888,000 B for one sequence of each window. In 20,000,000 B: the band (0, 1024] costs all
    6 layers 6,000 B a token (1,024 tokens, 6,144,000 B); the rest, 13,856,000 B, buys the full layer
    13,856 tokens of (1024, 32768]: its window becomes 1,024 + 13,856 = 14,880. The equal split then
    gives each window 10,000,000 B: int(10e6 / 5,000 // 32) = 62 and int(10e6 / 1,000 // 32) = 312
    blocks."""
    full, swa = FullAttentionSpec("full", 1, 1000), SlidingWindowSpec("sliding", 5, 1000, window=1024)
    pairs = [(32768, 1000), (1024, 5000)]
    assert adjust_window_sizes_for_vswa(pairs, 20_000_000) == {1024: 1024, 32768: 14880}
    assert blocks_per_window([full, swa], 20_000_000, 32768) == {1024: 62, 14880: 312}
    mm = jenga.make_manager("trtllm_pools", [full, swa], 20_000_000, max_seq_len=32768, enable_prefix_cache=True)
    assert mm.window_adjustments == {32768: 14880} and mm.blocks == {1024: 62, 14880: 312}
    assert [getattr(s, "window", None) for s in mm.specs] == [14880, 1024]   # the full layer attends to 14,880
    # a window that cannot be filled merges with the larger ones: 3,000,000 B buys 500 tokens of all 6
    # layers, both windows become 500 -- one window size, still the VSWA split: int(3e6 / 6,000 // 32)
    assert adjust_window_sizes_for_vswa(pairs, 3_000_000) == {1024: 500, 32768: 500}
    assert blocks_per_window([full, swa], 3_000_000, 32768) == {500: 15}
    # negative control: a pool that holds one sequence of each window (37,888,001 B) keeps them
    assert adjust_window_sizes_for_vswa(pairs, 37_888_001) == {1024: 1024, 32768: 32768}
    assert jenga.make_manager("trtllm_pools", [full, swa], 37_888_001, max_seq_len=32768).window_adjustments == {}
    # and without the adjustment the full window's pool would be sized for 32,768 (as before)
    assert split(pairs, 20_000_000, 32) == ({1024: 0.5, 32768: 0.5}, {1024: 62, 32768: 312})


def test_split_is_static_idle_blocks_never_serve_another_window():
    """Pools sized for max_seq_len-token requests: 2048-token prompts (chunked prefill of 64) run the
    sliding pool dry -- each holds its window plus the step's chunk, 6 blocks -- while a third of the
    full pool sits idle; the pool sizes never change."""
    cap = 640 * 32 * 24576 * 2176 // 2048          # 640 full blocks and 40 sliding blocks at max_seq_len 2048

    def admitted(mm):
        n = 0
        while _prefill(mm, req(f"x{n}", [n * 10**4 + k for k in range(2048)])):
            n += 1
        return n
    mm = jenga.make_manager("trtllm_pools", [FULL, SWA], cap, max_seq_len=2048, window_split="cpp")
    assert mm.blocks == {128: 40, 2048: 640}
    n = admitted(mm)
    assert n == 40 // 6
    full, swa = mm.pool.pools
    assert len(swa.free_pages) < 6 and len(full.free_pages) >= 640 - 64 * (n + 1)
    # negative control: the same bytes in one shared pool with per-type pages (Jenga) admit more
    assert admitted(jenga.make_manager("jenga", [FULL, SWA], cap, tokens_per_page=32)) > n


def test_out_of_window_blocks_are_detached_and_reusable():
    """detachFrontBlock: blocks leaving the window are released (to the eviction policy: reusable);
    a request holds only its window's blocks; a sibling with the same prefix still hits."""
    mm = jenga.make_manager("trtllm_pools", [FULL, SWA], 16 * GiB, max_seq_len=32768, enable_prefix_cache=True)
    doc = list(range(1024))
    a = req("a", doc + [7] * 32)
    assert mm.lookup_prefix(a) == 0 and _prefill(mm, a)
    held_swa = len(mm.reqs["a"].pages[1])
    assert held_swa <= -(-127 // 32) + 1                      # the window's blocks, not 33
    assert mm.pool.cached[1] >= 33 - held_swa                 # the detached ones stay reusable
    mm.free(a)
    b = req("b", doc + [9] * 32)
    assert mm.lookup_prefix(b) == 1024
    # negative control: capping the full layers' window too (max_attention_window) detaches their
    # blocks as well, and a request then holds a window's worth in both pools
    mm2 = jenga.make_manager("trtllm_pools", [FULL, SWA], 4 * GiB, max_seq_len=32768, max_attention_window=256)
    c = req("c", doc + [7] * 32)
    assert _prefill(mm2, c)
    assert len(mm2.reqs["c"].pages[0]) <= -(-255 // 32) + 1 < 1056 // 32


MAMBA = MambaSpec("mamba", 8, 1 << 20, state_bytes_per_layer=1 << 20)   # 8 MiB of state per request
ATTN = FullAttentionSpec("full", 4, 4096)                                   # 16 KiB per token


def test_hybrid_split_is_the_affine_model():
    """_calculate_max_num_blocks_for_linear_attention: max_tokens = (budget - max_batch_size x state) //
    (attention bytes per token + state // interval); attention blocks = max_tokens // 32; recurrent
    slots = max_batch_size + 1 (+ max_tokens // interval with reuse and snapshots)."""
    cap, state, mbs = 8 * GiB, 8 << 20, 64
    mm = jenga.make_manager("trtllm_pools", [ATTN, MAMBA], cap, max_seq_len=32768, max_batch_size=mbs)
    T = (cap - mbs * state) // 16384
    assert mm.blocks == {32768: T // 32, -1: mbs + 1}
    assert mm.pool_blocks == {32768: T // 32, -1: mbs}               # the CUDA-graph padding slot is no request's
    rc = reported_capacity(mm, 32768)
    assert rc["kv_capacity_tokens"] == T // 32 * 32 and rc["max_concurrency"] == min(T // 32 / 1024, mbs)
    # periodic snapshots (with block reuse) charge state // interval per token: fewer attention blocks,
    # and one snapshot slot per interval of the token budget
    snap = jenga.make_manager("trtllm_pools", [ATTN, MAMBA], cap, max_seq_len=32768, max_batch_size=mbs,
                              enable_prefix_cache=True, periodic_snapshot_interval=256)
    T2 = (cap - mbs * state) // (16384 + state // 256)
    assert snap.blocks == {32768: T2 // 32, -1: mbs + 1 + T2 // 256} and T2 < T
    # negative control: the interval is read only with block reuse on (states_snapshot_interval = 0)
    off = jenga.make_manager("trtllm_pools", [ATTN, MAMBA], cap, max_seq_len=32768, max_batch_size=mbs,
                             periodic_snapshot_interval=256)
    assert off.blocks == mm.blocks
    # the live states come first: a max_batch_size whose states outgrow the memory leaves no attention pool
    with pytest.raises(SpecError, match="lower max_batch_size"):
        jenga.make_manager("trtllm_pools", [ATTN, MAMBA], cap, max_batch_size=1024)


def test_hybrid_reuse_only_at_snapshot_boundaries():
    """prepare_expect_snapshot_points: states kept at every multiple of periodic_snapshot_interval up to
    the prompt length; a hit ends on one. Off by default: no hit at all."""
    doc = list(range(1000))

    def hit(**opts):
        mm = jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, max_seq_len=32768, max_batch_size=16,
                                enable_prefix_cache=True, **opts)
        a = req("a", doc + [7] * 40)
        assert mm.lookup_prefix(a) == 0 and _prefill(mm, a)
        mm.free(a)
        mm.begin_step()
        return mm.lookup_prefix(req("b", doc + [9] * 40))
    assert hit(periodic_snapshot_interval=256) == 768                 # 1000 shared tokens -> the 768 snapshot
    assert hit(periodic_snapshot_interval=128) == 896
    assert hit(periodic_snapshot_interval=32) == 992                  # every block: the attention blocks decide
    # negative control: the default (no periodic snapshots) never reuses, though the attention blocks are cached
    assert hit() == 0 and hit(periodic_snapshot_interval=0) == 0
    with pytest.raises(SpecError, match="multiple of tokens_per_block"):
        jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, periodic_snapshot_interval=100)


def test_hybrid_families_and_windows():
    """is_hybrid_linear decides which Mamba models TensorRT-LLM runs; CppMambaHybridCacheManager charges
    every attention layer at max_seq_len and overwrites max_attention_window."""
    with pytest.raises(SpecError, match="is_hybrid_linear"):
        jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, architecture="JambaForCausalLM")
    for arch in ("NemotronHForCausalLM", "Qwen3NextForCausalLM"):        # negative control: these run
        assert jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, architecture=arch, max_batch_size=16)
    with pytest.raises(SpecError, match="overwritten"):
        jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, max_attention_window=4096)
    swa = SlidingWindowSpec("sliding", 4, 4096, window=128)
    mm = jenga.make_manager("trtllm_pools", [swa, MAMBA], 8 * GiB, max_seq_len=32768, max_batch_size=16)
    assert mm.blocks == jenga.make_manager("trtllm_pools", [ATTN, MAMBA], 8 * GiB, max_seq_len=32768,
                                           max_batch_size=16).blocks
    assert set(mm.blocks) == {32768, -1}
    # negative control: without Mamba layers the same sliding layer keeps its own 128-token window pool
    assert 128 in jenga.make_manager("trtllm_pools", [ATTN, swa], 8 * GiB).blocks
    with pytest.raises(SpecError, match="max_attention_window"):
        jenga.make_manager("trtllm_pools", [FULL, SWA], 4 * GiB, max_attention_window=0)


@pytest.mark.parametrize("opts", [{}, {"max_attention_window": 24},
                                  {"mamba": True, "max_batch_size": 4, "periodic_snapshot_interval": 8}])
def test_random_streams_keep_the_allocator_invariants(opts):
    opts = dict(opts)
    specs = [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=20)]
    if opts.pop("mamba", False):
        specs = [FullAttentionSpec("full", 2, 64), MambaSpec("m", 2, 500, state_bytes_per_layer=500)]
    for seed in range(5):
        rng = random.Random(seed)
        mm = jenga.make_manager("trtllm_pools", specs, 40_000 * rng.choice([3, 6, 12]), tokens_per_page=4,
                                enable_prefix_cache=True, max_seq_len=256, **opts)
        shared_prefix_stream(mm, rng)


def test_whatif_prints_a_rule_under_which_no_request_fits(capsys):
    """Gemma-4-31B at its 262,144-token max_model_len under the TensorRT engine backend's split
    (window_split=cpp): the 1024-token window gets 19 blocks (608 tokens, less than one window), so no
    request is admitted; the answer says so. The PyTorch backend's equal split serves both."""
    from harness import whatif as w
    assert w.main(["model=gemma4_31b", "gpu=h100", "workload=sessions", "num_requests=2", "rules=trtllm_pools",
                   "trtllm_pools.window_split=cpp", "--no-sweep"]) == 0
    out = capsys.readouterr().out
    assert "{'1024': 19, '262144': 4752}" in out and "no request completed (2 ignored" in out
    assert w.main(["model=gemma4_31b", "gpu=h100", "workload=sessions", "num_requests=2", "rules=trtllm_pools",
                   "--no-sweep"]) == 0
    assert "no request completed" not in capsys.readouterr().out


def test_whatif_reports_trtllm_for_hybrid_mamba_models(capsys):
    """Nemotron-Nano-9B-v2 (H100) and Qwen3-Next-80B-A3B (H200, TP 2): trtllm_pools answers with an
    attention window and the kRecurrentStates window; Jamba is refused in one line (not hybrid-linear)."""
    import json

    from harness import whatif as w
    for argv in (["model=nemotron_nano_9b_v2", "gpu=h100"], ["model=qwen3_next_80b_a3b", "gpu=h200", "tp=2"]):
        assert w.main(argv + ["rules=trtllm_pools", "--no-sweep", "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert set(row["blocks_per_window"]) == {str(row["max_model_len"]), "-1"}
        assert row["blocks_per_window"]["-1"] == 257                    # max_num_seqs 256 + the padding slot
        assert row["kv_capacity_tokens"] == row["blocks_per_window"][str(row["max_model_len"])] * 32
    assert w.main(["model=jamba_1_5_mini", "gpu=h100", "tp=2", "rules=trtllm_pools", "--no-sweep"]) == 0
    assert "is_hybrid_linear" in capsys.readouterr().out
