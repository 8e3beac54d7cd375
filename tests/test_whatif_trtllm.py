"""``trtllm_pools`` (jenga/baselines/trtllm.py): TensorRT-LLM's per-window pools, the behaviour its
source documents (calculateWindowSizeToShare, calculateMaxNumBlocks, getMaxCapacityBatchSize,
detachFrontBlock), each with a negative control."""

from __future__ import annotations

import random

import pytest
from conftest import req

import jenga
from jenga.baselines.trtllm import TOKENS_PER_BLOCK, blocks_per_window, reported_capacity, split
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec, SpecError
from jenga.testing import check_invariants


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


def test_window_share_is_bytes_per_token_times_window():
    """BlockManager's own example (kvCacheManager.h, calculateWindowSizeToShare): windows
    {1024: [1], 4096: [0, 4, 5], 8192: [2, 3]} with equal layers -> {0.0345, 0.4138, 0.5517}."""
    share, _ = split([(1024, 1), (4096, 3), (8192, 2)], 1 << 20, 32)
    assert share[1024] == pytest.approx(1024 / 29696) == pytest.approx(0.0345, abs=1e-4)
    assert share[4096] == pytest.approx(0.4138, abs=1e-4) and share[8192] == pytest.approx(0.5517, abs=1e-4)
    # TRT-LLM's unit test (BlockManagerTestWindowSizeToShare): one window size takes everything
    assert split([(1024, 3)], 1 << 20, 32)[0] == {1024: 1.0}


def test_blocks_per_window_and_max_batch_size():
    """calculateMaxNumBlocks: ceilDiv(int(mem * share / bytes per token), tokens_per_block);
    getMaxCapacityBatchSize: min over windows of blocks / ceilDiv(min(len, window), 32)."""
    cap = 40 * GiB
    bpw = blocks_per_window([FULL, SWA], cap, 32768)
    share = {32768: 32768 / (32768 + 128), 128: 128 / (32768 + 128)}
    for w in (128, 32768):
        assert bpw[w] == -(-int(cap * share[w] / (12 * 2048)) // 32)
    mm = jenga.make_manager("trtllm_pools", [FULL, SWA], cap, max_seq_len=32768)
    assert mm.tokens_per_page == TOKENS_PER_BLOCK == 32
    rc = reported_capacity(mm, 32768)
    assert rc["max_batch_size"] == min(bpw[128] // 4, bpw[32768] // 1024)
    assert rc["kv_capacity_tokens"] == bpw[32768] * 32
    # the split depends on max_seq_len (the full layers' window): a longer one starves the SWA pool
    assert blocks_per_window([FULL, SWA], cap, 131072)[128] < bpw[128]
    # negative control: with every layer full there is one pool, the whole memory
    one = blocks_per_window([FullAttentionSpec("full", 24, 2048)], cap, 32768)
    assert one == {32768: -(-int(cap / (24 * 2048)) // 32)}


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
    mm = jenga.make_manager("trtllm_pools", [FULL, SWA], cap, max_seq_len=2048)
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


def test_mamba_and_unknown_kinds_are_refused_with_one_error():
    gdn = MambaSpec("mamba", 12, 1097728, state_bytes_per_layer=1097728)
    with pytest.raises(SpecError, match="kRecurrentStates"):
        jenga.make_manager("trtllm_pools", [FULL, gdn], 4 * GiB)
    with pytest.raises(SpecError, match="max_attention_window"):
        jenga.make_manager("trtllm_pools", [FULL, SWA], 4 * GiB, max_attention_window=0)
    # negative control: the same model without the Mamba layers starts
    assert jenga.make_manager("trtllm_pools", [FULL, SWA], 4 * GiB).pool.num_large > 0


@pytest.mark.parametrize("opts", [{}, {"max_attention_window": 24}])
def test_random_streams_keep_the_allocator_invariants(opts):
    specs = [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=20)]
    for seed in range(5):
        rng = random.Random(seed)
        mm = jenga.make_manager("trtllm_pools", specs, 40_000 * rng.choice([3, 6, 12]), tokens_per_page=4,
                                enable_prefix_cache=True, max_seq_len=256, **opts)
        prefixes = [[rng.randrange(1, 50) for _ in range(rng.randrange(8, 120))] for _ in range(3)]
        running = []
        for i in range(60):
            if running and rng.random() < 0.4:
                mm.free(running.pop(rng.randrange(len(running))))
            elif running and rng.random() < 0.5:
                mm.allocate(rng.choice(running), rng.randrange(1, 9))
            else:
                r = req(f"r{i}", rng.choice(prefixes) + [rng.randrange(50, 99) for _ in range(rng.randrange(1, 40))])
                hit = mm.lookup_prefix(r)
                assert 0 <= hit < len(r.prompt_token_ids)
                if mm.allocate(r, len(r.prompt_token_ids) - hit):
                    running.append(r)
            mm.begin_step()
            check_invariants(mm)
        for r in running:
            mm.free(r)
        check_invariants(mm)


def test_whatif_prints_a_rule_under_which_no_request_fits(capsys):
    """Gemma-4-31B at its 262,144-token max_model_len: TRT-LLM's split gives the 1024-token window
    19 blocks (608 tokens, less than one window), so no request is admitted; the answer says so."""
    from harness import whatif as w
    assert w.main(["model=gemma4_31b", "gpu=h100", "workload=sessions", "num_requests=2", "rules=trtllm_pools",
                   "--no-sweep"]) == 0
    out = capsys.readouterr().out
    assert "{'1024': 19, '262144': 4752}" in out and "no request completed (2 ignored" in out
