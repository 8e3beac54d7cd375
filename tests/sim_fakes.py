"""Small test doubles for the sim tests: a one-type paged MemoryManager with an LRU prefix cache,
and hand-built ModelProfile / GPU / engine configs whose step times are easy to compute by hand."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np

from harness.models import ModelProfile
from harness.workloads.request import Request
from jenga.interface import MemoryManager, MemoryUsage
from jenga.spec import FullAttentionSpec


class FakePagedManager(MemoryManager):
    """Uniform pages of ``tokens_per_page`` tokens; with caching, full prompt pages of freed requests
    stay cached (keyed by their prefix) and are evicted LRU. Asserts it never exceeds capacity."""

    def __init__(self, specs, capacity_bytes, tokens_per_page=16, enable_prefix_cache=False, **_):
        self.specs = tuple(specs)
        self.capacity_bytes = capacity_bytes
        self.tokens_per_page = tokens_per_page
        self.enable_prefix_cache = enable_prefix_cache
        self.page_bytes = sum(s.small_page_bytes(tokens_per_page) for s in specs)
        self.num_pages = capacity_bytes // self.page_bytes
        self.free_pages = self.num_pages
        self.cached: OrderedDict[tuple, None] = OrderedDict()   # prefix key -> one cached page
        self.tokens: dict[str, int] = {}
        self.pages: dict[str, int] = {}
        self.held_keys: dict[str, list] = {}
        self.pinned: dict[str, list] = {}
        self.max_used_pages = 0
        self.lookups = 0

    def _keys(self, req, n_tokens):
        ids = np.asarray(req.prompt_token_ids)
        t = self.tokens_per_page
        return [tuple(ids[: (i + 1) * t].tolist()) for i in range(min(n_tokens, len(ids)) // t)]

    def lookup_prefix(self, req):
        self.lookups += 1
        if not self.enable_prefix_cache:
            return 0
        hit = []
        for k in self._keys(req, req.prompt_len - 1):
            if k not in self.cached:
                break
            hit.append(k)
        self.pinned[req.request_id] = hit
        return len(hit) * self.tokens_per_page

    def allocate(self, req, n):
        rid = req.request_id
        pinned = self.pinned.pop(rid, []) if rid not in self.tokens else []
        have = self.tokens.get(rid, len(pinned) * self.tokens_per_page)
        held = self.pages.get(rid, len(pinned))
        need = -(-(have + n) // self.tokens_per_page) - held
        evictable = len(self.cached) - len(pinned)
        if need > self.free_pages + evictable:
            return False
        for k in pinned:
            del self.cached[k]
        while need > self.free_pages:
            self.cached.popitem(last=False)
            self.free_pages += 1
        self.free_pages -= need
        self.tokens[rid] = have + n
        self.pages[rid] = held + need
        self.held_keys.setdefault(rid, []).extend(pinned)
        used = self.num_pages - self.free_pages - len(self.cached)
        self.max_used_pages = max(self.max_used_pages, used)
        assert self.free_pages >= 0 and used + len(self.cached) <= self.num_pages
        return True

    def free(self, req):
        rid = req.request_id
        pages = self.pages.pop(rid, 0)
        tokens = self.tokens.pop(rid, 0)
        self.held_keys.pop(rid, None)
        self.pinned.pop(rid, None)
        if self.enable_prefix_cache:
            for k in self._keys(req, tokens):
                if k in self.cached:
                    self.cached.move_to_end(k)
                elif pages > 0:
                    self.cached[k] = None
                    pages -= 1
        self.free_pages += pages

    def usage(self):
        used = self.num_pages - self.free_pages - len(self.cached)
        needed = sum(self.tokens.values()) * (self.page_bytes // self.tokens_per_page)
        alloc = used * self.page_bytes
        return MemoryUsage(self.capacity_bytes, needed, 0, alloc - needed, len(self.cached) * self.page_bytes,
                           self.capacity_bytes - alloc - len(self.cached) * self.page_bytes,
                           large_pages_total=self.num_pages, large_pages_used=used + len(self.cached),
                           path_counts={"new": 0})

    def num_computed_tokens(self, req):
        return self.tokens.get(req.request_id, 0)


def tiny_profile(active_params=1_000_000_000, layers=2, bytes_per_token_per_layer=1024, **kw) -> ModelProfile:
    spec = FullAttentionSpec("full", layers, bytes_per_token_per_layer)
    base = {"name": "tiny", "hf_id": "none/tiny", "architecture": "LlamaForCausalLM", "num_layers": layers,
                "hidden_size": 1024, "num_heads": 8, "num_kv_heads": 1, "head_dim": 128, "intermediate_size": 4096,
                "vocab_size": 1000, "max_model_len": 4096, "weight_dtype_bytes": 2, "kv_dtype_bytes": 2,
                "total_params": active_params, "active_params": active_params,
                "layer_kinds": ("full",) * layers, "specs": (spec,)}
    base.update(kw)
    return ModelProfile(**base)


def tiny_gpu(**kw):
    g = {"name": "toy", "memory_bytes": 80 * 2**30, "peak_bf16_flops": 1e15, "peak_fp8_flops": 2e15,
             "hbm_bytes_per_s": 1e12, "interconnect_bytes_per_s": 1e11, "mfu": 1.0, "mbu": 1.0, "count": 1}
    g.update(kw)
    return SimpleNamespace(**g)


def tiny_engine(**kw):
    e = {"max_num_seqs": 256, "max_num_batched_tokens": None, "enable_chunked_prefill": False,
             "enable_prefix_caching": False, "enforce_eager": False, "gpu_memory_utilization": 0.9,
             "max_model_len": None, "engine_version": "v0", "tokens_per_page": 16, "kv_cache_bytes": None,
             "request_rate": float("inf")}
    e.update(kw)
    return SimpleNamespace(**e)


def make_requests(specs: list[tuple[int, int]], shared_prefix: int = 0, seed: int = 0,
                  arrivals: list[float] | None = None) -> list[Request]:
    """Requests from (prompt_len, output_len) pairs; the first ``shared_prefix`` tokens are common."""
    rng = np.random.default_rng(seed)
    common = rng.integers(1, 50_000, size=shared_prefix, dtype=np.int32)
    out = []
    for i, (p, o) in enumerate(specs):
        own = rng.integers(1, 50_000, size=max(0, p - shared_prefix), dtype=np.int32)
        ids = np.concatenate([common[:p], own]).astype(np.int32)
        out.append(Request(f"r{i}", arrivals[i] if arrivals else 0.0, ids, o))
    return out


def fake_record(model: str, system: str, tp: float, seed: int = 0) -> dict:
    """A finished sim record with every metric a summary reads (analysis and report tests)."""
    return {"model": model, "dataset": "d", "gpu": "h100", "system": system, "backend": "sim", "seed": seed,
            "status": "ok", "throughput_req_s": tp, "waste_fraction": 0.1,
            "waste_breakdown": {"unneeded": 0.1, "fragmentation": 0.0}, "prefix_hit_rate": 0.0,
            "mean_decode_batch": 4.0, "preemptions": 0, "kv_capacity_bytes": 2**30, "ttft_mean": 1.0,
            "tpot_mean": 0.1, "makespan_s": 10.0, "simulated": True}
