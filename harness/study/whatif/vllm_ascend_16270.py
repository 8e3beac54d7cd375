"""vllm-ascend#16270: the LCM of the groups' block sizes reaches thousands of tokens and shorter
prefixes are never cached. Ours: the block size each rule picks for today's Mamba hybrids and the
prefix hit rate of requests sharing a prefix of P tokens, against P."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness import whatif as w
from harness.study.whatif.common import SIM_NOTE, args, simulate, source_line
from harness.workloads.request import Request


def requests(shared: int, unique: int, n: int, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    prefix = rng.integers(1000, 100000, shared).tolist()
    # r0 fills the cache, r1 arrives after it (under vLLM 0.32 it pins the shared-prefix junction),
    # the rest after r1: the steady state of a shared system prompt
    return [Request(f"r{i}", min(i, 2) * 5.0, np.asarray(prefix + rng.integers(1000, 100000, unique).tolist(),
                                                          dtype=np.int32), 16) for i in range(n)]


def run(study: dict, out: Path) -> list[dict]:
    rows = []
    for model in study["models"]:
        a, prof = args(model, study.get("gpu", "h100"), study["max_model_len"], kv_cache_bytes=study["kv_cache_bytes"])
        cfg = w.compose(a)
        kv = w.kv_bytes(cfg, prof)
        for rule in study["rules"]:
            st = w.static_answer(rule, prof, kv, cfg, {}, True)
            block = max(st["block_size_tokens"].values())
            for p in study["shared_prefix_tokens"]:
                m, hits = simulate(rule, a, prof, requests(p, study["unique_tokens"], study["num_requests"]))
                rows.append({"model": model, "rule": rule, "block_size_tokens": block, "shared_prefix_tokens": p,
                             "prefix_hit_rate": round(m["prefix_hit_rate"], 4),
                             "mean_hit_tokens_after_first": round(sum(list(hits.values())[1:]) / max(1, len(hits) - 1), 1),
                             "hit_tokens_steady_state": hits[f"r{len(hits) - 1}"],
                             "simulated": True})
    _figure(study, rows, out)
    return rows


def _figure(study, rows, out):
    import matplotlib.pyplot as plt

    from harness.plots import save
    models = study["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(3.2 * len(models), 3.2), sharey=True)
    for ax, model in zip(np.atleast_1d(axes), models):
        for rule in study["rules"]:
            rs = [r for r in rows if r["model"] == model and r["rule"] == rule]
            ax.plot([r["shared_prefix_tokens"] for r in rs], [r["hit_tokens_steady_state"] for r in rs], "o-",
                    label=f"{rule} (block {rs[0]['block_size_tokens']})")
        ax.plot(study["shared_prefix_tokens"], study["shared_prefix_tokens"], "k:", lw=0.8, label="shared prefix")
        ax.set_title(model, fontsize=8)
        ax.set_xlabel("shared prefix (tokens)")
        ax.legend(fontsize=6)
    np.atleast_1d(axes)[0].set_ylabel("hit tokens per request (SIMULATED)")
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    lines = [f"# {study['name']}: {study['description']}", "", source_line(study), "", SIM_NOTE, "",
             "| model | rule | block (tokens) | " + " | ".join(f"P={p}" for p in study["shared_prefix_tokens"]) + " |",
             "|---|---|---|" + "---|" * len(study["shared_prefix_tokens"])]
    for model in study["models"]:
        for rule in study["rules"]:
            rs = [r for r in rows if r["model"] == model and r["rule"] == rule]
            lines.append(f"| {model} | {rule} | {rs[0]['block_size_tokens']} | "
                         + " | ".join(f"{r['hit_tokens_steady_state']}" for r in rs) + " |")
    lines += ["", ("Cells: prefix-hit tokens of the last request (steady state: the prefix has been served twice "
              "before it; SIMULATED)."), "",
              study.get("finding", ""), ""]
    return "\n".join(lines)
