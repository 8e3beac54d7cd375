"""vllm#42317 / vllm#51250: Qwen3.5/3.6 MoE in vLLM's Mamba ``align`` mode gets 0 % prefix hits at
concurrency 1 and some hits at higher concurrency. In align mode a Mamba (gated-DeltaNet) state is
written only where a prefill chunk ends on a block boundary, plus the prompt's last block boundary
(``get_mamba_prefill_checkpoint_position``). A lone request fits one 8,192-token chunk, so its only
state lies in its own request-unique tokens; when several requests share the budget, chunks are cut
(and block-aligned, ``_mamba_block_aligned_split``) inside the shared prefix, and later requests hit
there by accident. Ours: a shared-prefix trace on Qwen3.5-35B-A3B (block 1,056 tokens) at concurrency
1..16 (``engine.max_num_seqs``; every request waiting at t=0, the closed loop of ``--max-concurrency``)
under the reporter's align mode, vLLM 0.32's, and the fixes."""

from __future__ import annotations

from pathlib import Path

from harness.study.whatif.common import SIM_NOTE, args, simulate, source_line
from harness.study.whatif.vllm_45238 import requests


def run(study: dict, out: Path) -> list[dict]:
    shared, unique = study["shared_tokens"], study["unique_tokens"]
    reqs = requests(shared, unique, study["num_requests"], study.get("output_len", 32))
    rows = []
    for v in study["variants"]:
        for c in study["concurrency"]:
            engine = {"max_num_seqs": c, **(v.get("engine") or {})}
            a, prof = args(study["model"], study.get("gpu", "h100"), study.get("max_model_len", 32768), **engine)
            m, hits = simulate(v["rule"], a, prof, reqs, v.get("options") or {})
            rows.append({"trace": "shared_prefix", "variant": v["label"], "rule": v["rule"], "concurrency": c,
                         "max_num_batched_tokens": engine.get("max_num_batched_tokens", 8192),
                         "requests_hit": sum(1 for h in hits.values() if h > 0), "num_requests": len(reqs),
                         "max_hit_tokens": max(hits.values()),
                         "prefix_hit_rate": round(m["prefix_hit_rate"], 4),
                         "req_per_s": round(len(reqs) / m["makespan_s"], 3), "simulated": True})
    rows += _repeat(study)
    _figure(study, rows, out)
    return rows


def _repeat(study: dict) -> list[dict]:
    """vllm#51250's control: one long prompt sent twice (concurrency 1): align mode hits up to the
    prompt's last block boundary before its final token."""
    rep = study.get("repeat")
    if not rep:
        return []
    n = rep["prompt_tokens"]
    reqs = requests(n, 0, 2, 1)
    rows = []
    for label in rep["variants"]:
        v = next(x for x in study["variants"] if x["label"] == label)
        a, prof = args(study["model"], study.get("gpu", "h100"), rep.get("max_model_len", 65536), max_num_seqs=1)
        m, hits = simulate(v["rule"], a, prof, reqs, v.get("options") or {})
        rows.append({"trace": f"repeat_{n}", "variant": v["label"], "rule": v["rule"], "concurrency": 1,
                     "max_num_batched_tokens": 8192, "requests_hit": sum(1 for h in hits.values() if h > 0),
                     "num_requests": 2, "max_hit_tokens": max(hits.values()),
                     "prefix_hit_rate": round(m["prefix_hit_rate"], 4), "simulated": True})
    return rows


def _figure(study, rows, out):
    import matplotlib.pyplot as plt

    from harness.plots import save
    conc = study["concurrency"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for v in study["variants"]:
        mine = [r for r in rows if r["variant"] == v["label"] and r["trace"] == "shared_prefix"]
        for ax, key in ((axes[0], "prefix_hit_rate"), (axes[1], "req_per_s")):
            ys = [next(r[key] for r in mine if r["concurrency"] == c) for c in conc]
            ys = [100 * y for y in ys] if key == "prefix_hit_rate" else ys
            ax.plot(conc, ys, marker="o", label=f"{v['label']} (SIMULATED)")
    axes[0].scatter([1], [study["reported"]["hit_rate_c1"]], color="k", marker="*", s=90, zorder=5,
                    label="reported (concurrency 1: 0 %)")
    axes[0].set_ylabel("prefix hit rate (% of prompt tokens)")
    axes[1].set_ylabel("requests / s")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("concurrency (requests in flight)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.14))
    fig.suptitle(f"vllm#42317 on {study['model']} (block 1,056): align-mode hits vs concurrency", fontsize=9)
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    rep = study["reported"]
    lines = [f"# {study['name']}: {study['description']}", "", source_line(study), ""]
    lines += [f"- {q}" for q in rep.get("quotes", [])]
    lines += ["", SIM_NOTE, "",
              (f"Trace: {study['num_requests']} requests of {study['shared_tokens']:,} shared + "
              f"{study['unique_tokens']:,} unique prompt tokens, {study.get('output_len', 32)} output tokens, "
              f"all waiting at t=0; concurrency = `max_num_seqs` (so no TTFT is shown: it would count the queue the "
              f"benchmark client keeps on its side). Hit rate = hit prompt tokens / prompt tokens."),
              "", ("| variant | concurrency | max_num_batched_tokens | requests hit | max hit tokens | "
              "hit rate (SIMULATED) | req/s (SIMULATED) | reported |"),
              "|---|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["trace"] == "shared_prefix"):
        said = rep["by_concurrency"].get(r["concurrency"], "-") if r["variant"] == study["variants"][0]["label"] else ""
        lines.append(f"| {r['variant']} | {r['concurrency']} | {r['max_num_batched_tokens']} | "
                     f"{r['requests_hit']}/{r['num_requests']} | {r['max_hit_tokens']} | "
                     f"{100 * r['prefix_hit_rate']:.1f} % | {r['req_per_s']} | {said} |")
    rep_rows = [r for r in rows if r["trace"] != "shared_prefix"]
    if rep_rows:
        n = study["repeat"]["prompt_tokens"]
        lines += ["", (f"vllm#51250's control: one {n:,}-token prompt sent twice at concurrency 1 "
                  "(the second request's hit):"), "",
                  "| variant | hit tokens (SIMULATED) | reported (Qwen3.6-27B, block 784, no drafter) |", "|---|---|---|"]
        lines += [f"| {r['variant']} | {r['max_hit_tokens']:,} | {study['repeat']['reported']} |" for r in rep_rows]
    lines += ["", study["finding"], ""]
    return "\n".join(lines)
