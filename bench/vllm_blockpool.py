"""vLLM's ``BlockPool`` (allocate + free) on op streams comparable to ``bench/allocator.py``.

Needs the vLLM venv: ``.venv-vllm/bin/python -m bench.vllm_blockpool`` (``make setup-vllm``).

Two streams, both seeded, prefix caching on (as vLLM serves), 16-token blocks:

- ``batch16``: 2000 live requests; each op allocates a batch of 16 blocks for a random live request
  (``get_new_blocks(16)``); when a request reaches its length (16-512 blocks) all its blocks are
  freed (``free_blocks`` in reverse order, as vLLM frees a request) and a new request takes its place.
- ``manager``: the ``serving`` stream through ``KVCacheManager.allocate_slots`` / ``free`` (the
  level of our allocators' ``allocate`` / ``free``; the pool is one level below).
- ``serving``: ``bench/allocator.py``'s continuous-batching stream (the same seeded request lengths
  from its ``op_stream``): up to ``--batch`` running requests; a new request allocates its prompt's
  blocks at once, each step every running request appends one token and allocates a block when it
  crosses a block boundary; a finished request frees its blocks.

Reported: microseconds of allocator calls per block handed out (allocate + free time / blocks),
best of ``--repeat`` runs. Python-level cost only, the same as our allocators' benchmark.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

BLOCK = 16


def _pool(num_blocks: int):
    from vllm.v1.core.block_pool import BlockPool
    return BlockPool(num_gpu_blocks=num_blocks, enable_caching=True, hash_block_size=BLOCK)


def batch16(ops: int, live: int, seed: int = 0) -> dict:
    """2000 live requests, 16 blocks per allocation, whole-request frees."""
    rng = np.random.default_rng(seed)
    target = rng.integers(1, 33, size=ops + live) * 16     # 16..512 blocks per request
    pool = _pool(live * 512 + 1)
    held: list[list] = [[] for _ in range(live)]
    goal = list(target[:live])
    nxt = live
    picks = rng.integers(0, live, size=ops)
    perf = time.perf_counter
    t = 0.0
    blocks = 0
    for i in picks:
        t0 = perf()
        new = pool.get_new_blocks(16)
        t += perf() - t0
        blocks += 16
        held[i].extend(new)
        if len(held[i]) >= goal[i]:
            t0 = perf()
            pool.free_blocks(reversed(held[i]))
            t += perf() - t0
            held[i] = []
            goal[i] = target[nxt]
            nxt += 1
    return {"stream": "batch16", "blocks": blocks, "us_per_block": 1e6 * t / blocks}


def serving(steps: int, batch: int, seed: int = 0) -> dict:
    """bench/allocator.py's stream, through vLLM's BlockPool."""
    from bench.allocator import op_stream
    stream = op_stream(seed, 10**9, False)
    pool = _pool(int(1.25 * batch * 2560 / BLOCK) + 1)
    running: list[tuple] = []   # (req, blocks, tokens)
    perf = time.perf_counter
    t = 0.0
    blocks = 0
    for _ in range(steps):
        while len(running) < batch:
            r = next(stream)
            n = -(-len(r.prompt_token_ids) // BLOCK)
            t0 = perf()
            got = pool.get_new_blocks(n)
            t += perf() - t0
            blocks += n
            running.append((r, got, len(r.prompt_token_ids)))
        keep = []
        for r, got, tokens in running:
            if tokens - len(r.prompt_token_ids) >= r.out_len:
                t0 = perf()
                pool.free_blocks(reversed(got))
                t += perf() - t0
                continue
            tokens += 1
            if tokens > len(got) * BLOCK:
                t0 = perf()
                got.extend(pool.get_new_blocks(1))
                t += perf() - t0
                blocks += 1
            keep.append((r, got, tokens))
        running = keep
    return {"stream": "serving", "blocks": blocks, "us_per_block": 1e6 * t / max(blocks, 1)}


def manager(steps: int, batch: int, seed: int = 0) -> dict:
    """The ``serving`` stream through vLLM's ``KVCacheManager`` (``allocate_slots`` / ``free``): the
    level our allocators' ``allocate`` / ``free`` sit at. One full-attention group (Llama-3.1-8B
    shaped), prefix caching off as in bench/allocator.py."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    from bench.allocator import op_stream
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    kvc = KVCacheConfig(num_blocks=int(1.25 * batch * 2560 / BLOCK) + 1, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec([f"layers.{i}" for i in range(32)], spec)])
    mgr = KVCacheManager(kvc, max_model_len=8192, scheduler_block_size=BLOCK, hash_block_size=BLOCK,
                         enable_caching=False)
    stream = op_stream(seed, 10**9, False)
    running: list = []
    perf = time.perf_counter
    t = 0.0
    blocks = 0
    for _ in range(steps):
        while len(running) < batch:
            r = next(stream)
            req = Request(r.request_id, r.prompt_token_ids.tolist(), SamplingParams(max_tokens=r.out_len), None)
            n = len(r.prompt_token_ids)
            t0 = perf()
            ok = mgr.allocate_slots(req, n)
            t += perf() - t0
            assert ok is not None
            req.num_computed_tokens = n
            blocks += -(-n // BLOCK)
            running.append((r, req))
        keep = []
        for r, req in running:
            if req.num_output_tokens >= r.out_len:
                t0 = perf()
                mgr.free(req)
                t += perf() - t0
                continue
            req.append_output_token_ids(1)
            before = -(-req.num_computed_tokens // BLOCK)
            t0 = perf()
            mgr.allocate_slots(req, 1)
            t += perf() - t0
            req.num_computed_tokens += 1
            blocks += -(-req.num_computed_tokens // BLOCK) - before
            keep.append((r, req))
        running = keep
    return {"stream": "manager", "blocks": blocks, "us_per_block": 1e6 * t / max(blocks, 1)}


def main(argv=None) -> None:
    import vllm
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000, help="batch16: allocation ops")
    ap.add_argument("--live", type=int, default=2000, help="batch16: live requests")
    ap.add_argument("--steps", type=int, default=400, help="serving: scheduler steps")
    ap.add_argument("--batch", type=int, default=128, help="serving: running requests")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    print(f"# vLLM BlockPool bench: vllm {vllm.__version__}, block {BLOCK} tokens, python "
          f"{platform.python_version()}, host {platform.node()} (best of {a.repeat})")
    for fn, args in ((batch16, (a.ops, a.live)), (serving, (a.steps, a.batch)), (manager, (a.steps, a.batch))):
        best = min((fn(*args) for _ in range(a.repeat)), key=lambda r: r["us_per_block"])
        print(f"{best['stream']:8s} blocks={best['blocks']:9d}  {best['us_per_block']:.3f} us/block")


if __name__ == "__main__":
    main()
