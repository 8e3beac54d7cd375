"""sglang#26907: which SWA pool ratio (``--swa-full-tokens-ratio``) and retention suit an agent
trace? Ours: an agent trace (shared system prompt, tool outputs, forks;
``harness.workloads.sessions.agent``) on a tight pool, SGLang's ratio swept, beside vLLM 0.32's
retention interval and Jenga."""

from __future__ import annotations

from pathlib import Path

from harness.study.run import run_tasks
from harness.study.whatif.common import SIM_NOTE, args, simulate, source_line
from harness.workloads import sessions as ww


def variants(study):
    out = [{"label": f"SGLang ratio {r}", "rule": "sglang_pools", "options": {"swa_full_tokens_ratio": r}, "knob": r}
           for r in study["swa_full_tokens_ratios"]]
    out += [{"label": f"vLLM 0.32 retention {ri if ri is not None else 'dense'}", "rule": "vllm_hma",
             "options": {"prefix_cache_retention_interval": ri}} for ri in study["retention_intervals"]]
    return out + [{"label": "Jenga", "rule": "jenga", "options": {}}]


def run(study: dict, out: Path, jobs: int = 1) -> list[dict]:
    """One row per variant, the variants in ``jobs`` processes."""
    rows = run_tasks(_variant_row, [(study, v) for v in variants(study)], jobs, "variants", progress=False)
    _figure(study, rows, out)
    return rows


def _variant_row(study: dict, v: dict) -> dict:
    a, prof = args(study["model"], study.get("gpu", "h100"), study["max_model_len"], kv_cache_bytes=study["kv_cache_bytes"])
    reqs = ww.agent(study["num_requests"], spec=ww.AgentSpec(**study["agent"]))
    m, _ = simulate(v["rule"], a, prof, reqs, v["options"])
    return {"variant": v["label"], "rule": v["rule"], "swa_full_tokens_ratio": v.get("knob"),
            "prefix_hit_rate": round(m["prefix_hit_rate"], 4), "throughput_req_s": round(m["throughput_req_s"], 4),
            "ttft_mean_s": round(m["ttft_mean"], 3), "preemptions": m["preemptions"], "simulated": True}


def _figure(study, rows, out):
    import matplotlib.pyplot as plt

    from harness.plots import save
    fig, ax = plt.subplots(figsize=(7, 3.4))
    xs = range(len(rows))
    ax.bar(xs, [r["prefix_hit_rate"] for r in rows], color=["C0" if r["rule"] == "sglang_pools" else "C1" if r["rule"] == "vllm_hma" else "C2" for r in rows])
    ax2 = ax.twinx()
    ax2.plot(xs, [r["throughput_req_s"] for r in rows], "k.-")
    ax.set_xticks(list(xs), [r["variant"] for r in rows], rotation=35, ha="right", fontsize=6)
    ax.set_ylabel("prefix hit rate (bars, SIMULATED)")
    ax2.set_ylabel("req/s (line, SIMULATED)")
    ax.set_title(f"sglang#26907: agent trace on {study['model']}", fontsize=9)
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    lines = [f"# {study['name']}: {study['description']}", "", source_line(study), "", SIM_NOTE, "",
             "| variant | prefix hit rate | throughput (req/s) | mean TTFT (s) | preemptions |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['prefix_hit_rate']} | {r['throughput_req_s']} | {r['ttft_mean_s']} | {r['preemptions']} |")
    sg = [r for r in rows if r["rule"] == "sglang_pools"]
    best = max(sg, key=lambda r: (r["throughput_req_s"], r["prefix_hit_rate"]))
    ties = [str(r["swa_full_tokens_ratio"]) for r in sg
            if (r["throughput_req_s"], r["prefix_hit_rate"]) == (best["throughput_req_s"], best["prefix_hit_rate"])]
    default = next((r for r in sg if r["swa_full_tokens_ratio"] == 0.8), None)
    dflt = f"; the default 0.8 gives {default['prefix_hit_rate']} hits" if default else ""
    lines += ["", (f"The user asked a question, no number to reproduce. Ours (SIMULATED): among SGLang ratios the best here "
              f"is {', '.join(ties)} ({best['prefix_hit_rate']} hits, {best['throughput_req_s']} req/s){dflt}; "
              "a sliding window of a few hundred to a thousand tokens needs far fewer SWA slots than full ones, so the "
              "default 0.8 strands most of the SWA pool while the full pool limits the batch."), "", study.get("finding", ""), ""]
    return "\n".join(lines)
