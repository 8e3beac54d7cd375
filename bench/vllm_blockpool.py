"""Like for like: the project's allocator against vLLM's, the same op stream at the same level, in one run.

Needs vLLM (``.venv-vllm/bin/python -m bench.vllm_blockpool``, ``make bench``); without it the
comparison is skipped with a message. One Llama-3.1-8B-shaped full-attention layer type (32 layers,
8 KV heads x 128 x bf16), 16-token blocks, the ``serving`` stream of ``bench/allocator.py`` (the
same seeded prompt and output lengths): up to ``--batch`` running requests; a new request takes its
prompt's blocks at once; each step every running request appends one token; a finished request
frees everything. Capacity is roomy (nothing is preempted), so both sides do the same work.

- ``pool``: block level. Ours: :class:`jenga.pools.lcm.LcmPagePool` ``alloc_many(n)`` (what
  ``JengaManager`` calls) and ``free_many`` in reverse order, prefix caching on; vLLM's:
  ``BlockPool.get_new_blocks(n)`` and ``free_blocks`` in reverse order (what its ``KVCacheManager``
  calls), ``enable_caching=True``. Both are called only when a request crosses a block boundary.
- ``manager``: request level, called for every running request every step, as both schedulers do.
  Ours: ``JengaManager.allocate`` / ``free``; vLLM's: ``KVCacheManager.allocate_slots`` / ``free``.
  Prefix caching off in both (vLLM's needs block hashes from its own request hasher to cache).

Printed: time of ours / time of vLLM's (best of ``--repeat`` runs of each, interleaved so that load
from other processes hits both alike). Below 1.0 x ours is faster. Python-level cost only.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time

BLOCK = 16
KV = 8 * 128 * 2 * 2  # 8 KV heads x 128 head dim x (K, V) x bf16
LAYERS = 32


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def _capacity_blocks(batch: int) -> int:
    return int(1.25 * batch * 2560 / BLOCK) + 1  # bench/allocator.py's roomy capacity


# -- pool level ------------------------------------------------------------------------------------
def _pool_stream(steps: int, batch: int, take, give, seed: int) -> float:
    """The serving stream at block level; ``take(rid, n)`` -> handles, ``give(handles)``."""
    from bench.allocator import op_stream

    stream = op_stream(seed, 10**9, False)
    running: list[list] = []  # [req, handles, tokens]
    perf = time.perf_counter
    t = 0.0
    for _ in range(steps):
        while len(running) < batch:
            r = next(stream)
            t0 = perf()
            got = take(r.request_id, _blocks(len(r.prompt_token_ids)))
            t += perf() - t0
            running.append([r, got, len(r.prompt_token_ids)])
        keep = []
        for item in running:
            r, got, tokens = item
            if tokens - len(r.prompt_token_ids) >= r.out_len:
                t0 = perf()
                give(got)
                t += perf() - t0
                continue
            item[2] = tokens = tokens + 1
            if tokens > len(got) * BLOCK:
                t0 = perf()
                got.extend(take(r.request_id, 1))
                t += perf() - t0
            keep.append(item)
        running = keep
    return t


def pool_ours(steps: int, batch: int, seed: int = 0) -> float:
    from jenga.pools.lcm import LcmPagePool

    page = BLOCK * KV * LAYERS
    pool = LcmPagePool([page], _capacity_blocks(batch) * page, request_aware=True, enable_cache=True)
    alloc_many, free_many = pool.alloc_many, pool.free_many
    return _pool_stream(steps, batch, lambda rid, n: alloc_many(0, rid, n),
                        lambda sids: free_many(0, reversed(sids)), seed)


def pool_vllm(steps: int, batch: int, seed: int = 0) -> float:
    from vllm.v1.core.block_pool import BlockPool

    pool = BlockPool(num_gpu_blocks=_capacity_blocks(batch), enable_caching=True, hash_block_size=BLOCK)
    return _pool_stream(steps, batch, lambda rid, n: pool.get_new_blocks(n),
                        lambda blocks: pool.free_blocks(reversed(blocks)), seed)


# -- manager level ---------------------------------------------------------------------------------
def manager_ours(steps: int, batch: int, seed: int = 0) -> float:
    import jenga
    from bench.allocator import decode_loop, op_stream

    page = BLOCK * KV * LAYERS
    m = jenga.make_manager("jenga", [jenga.FullAttentionSpec("full", LAYERS, KV)], _capacity_blocks(batch) * page,
                           tokens_per_page=BLOCK)
    t = decode_loop(op_stream(seed, 10**9, False), steps, batch,
                    admit=lambda r: m.allocate(r, len(r.prompt_token_ids)) and r,
                    decode=lambda r: m.allocate(r, 1), free=m.free)
    return t["admit"] + t["decode"] + t["free"]


def manager_vllm(steps: int, batch: int, seed: int = 0) -> float:
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    from bench.allocator import decode_loop, op_stream
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    kvc = KVCacheConfig(num_blocks=_capacity_blocks(batch), kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec([f"layers.{i}" for i in range(LAYERS)], spec)])
    mgr = KVCacheManager(kvc, max_model_len=8192, scheduler_block_size=BLOCK, hash_block_size=BLOCK,
                         enable_caching=False)

    def prepare(r):
        return Request(r.request_id, r.prompt_token_ids.tolist(), SamplingParams(max_tokens=r.out_len), None)

    def admit(req):
        return req if mgr.allocate_slots(req, req.num_prompt_tokens) is not None else None

    def begin(r, req):
        req.num_computed_tokens = len(r.prompt_token_ids)

    def decode(req):
        mgr.allocate_slots(req, 1)
        req.num_computed_tokens += 1

    t = decode_loop(op_stream(seed, 10**9, False), steps, batch, admit=admit, decode=decode, free=mgr.free,
                    prepare=prepare, begin=begin, grow=lambda req: req.append_output_token_ids(1))
    return t["admit"] + t["decode"] + t["free"]


def best_ratio(ours, theirs, repeat: int, *args) -> tuple[float, float, float]:
    """(best time of ours, best of theirs, ratio), runs interleaved."""
    a = b = float("inf")
    for _ in range(repeat):
        gc.collect()
        a = min(a, ours(*args))
        gc.collect()
        b = min(b, theirs(*args))
    return a, b, a / b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400, help="scheduler steps")
    ap.add_argument("--batch", type=int, default=128, help="running requests")
    ap.add_argument("--repeat", type=int, default=5, help="best of N runs of each side")
    a = ap.parse_args(argv)
    try:
        import vllm
    except ImportError:
        print("pool/manager comparison with vLLM skipped: vLLM is not installed here (make setup-vllm; "
              "run with .venv-vllm/bin/python -m bench.vllm_blockpool)")
        return 0
    print(f"# like-for-like allocator bench: vllm {vllm.__version__}, {BLOCK}-token blocks, steps={a.steps} "
          f"batch={a.batch}, python {platform.python_version()}, host {platform.node()} (best of {a.repeat})")
    ours, theirs, r = best_ratio(pool_ours, pool_vllm, a.repeat, a.steps, a.batch)
    print(f"pool: LCM pool vs vLLM BlockPool (prefix caching on in both): {r:.2f} x  "
          f"({1e3 * ours:.1f} ms vs {1e3 * theirs:.1f} ms)")
    ours, theirs, r = best_ratio(manager_ours, manager_vllm, a.repeat, a.steps, a.batch)
    print(f"manager: jenga allocate vs vLLM KVCacheManager.allocate_slots: {r:.2f} x  "
          f"({1e3 * ours:.1f} ms vs {1e3 * theirs:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
