"""vllm#45238: Mamba ``align`` mode, 64 requests sharing a prefix: a 1600/600 split gave 52/64 hits
and 433 ms TTFT, 1500/700 gave 0/64 and 905 ms (block 528): the checkpoint lands inside the
request-unique tokens. Ours: the same trace on Qwen3.5-4B (its 4 KV heads x 256 and fp32
gated-DeltaNet state give exactly the reported 528-token block) under each rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.study.whatif.common import SIM_NOTE, args, simulate, source_line
from harness.workloads.request import Request


def requests(shared: int, unique: int, n: int, output_len: int, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    prefix = rng.integers(1000, 100000, shared).tolist()
    return [Request(f"r{i}", 0.0, np.asarray(prefix + rng.integers(1000, 100000, unique).tolist(), dtype=np.int32),
                    output_len, prefix_group="shared") for i in range(n)]


def run(study: dict, out: Path) -> list[dict]:
    a, prof = args(study["model"], study.get("gpu", "h100"), study.get("max_model_len", 8192))
    rows = []
    for shared, unique in study["splits"]:
        reqs = requests(shared, unique, study["num_requests"], study.get("output_len", 32))
        for v in study["variants"]:
            m, hits = simulate(v["rule"], a, prof, reqs, v.get("options") or {})
            hitting = sum(1 for h in hits.values() if h > 0)
            rows.append({"split": f"{shared}/{unique}", "variant": v["label"], "rule": v["rule"],
                         "requests_hit": hitting, "num_requests": len(reqs),
                         "max_hit_tokens": max(hits.values()), "prefix_hit_rate": round(m["prefix_hit_rate"], 4),
                         "ttft_mean_ms": round(1000 * m["ttft_mean"], 1), "simulated": True})
    _figure(study, rows, out)
    return rows


def _figure(study, rows, out):
    import matplotlib.pyplot as plt

    from harness.plots import save
    variants = [v["label"] for v in study["variants"]]
    splits = [f"{s}/{u}" for s, u in study["splits"]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    width = 0.8 / (len(variants) + 1)
    rep = study["reported"]["by_split"]
    for k, (ax, key, lab) in enumerate(((axes[0], "requests_hit", "requests with a hit (of 64)"),
                                         (axes[1], "ttft_mean_ms", "mean TTFT (ms)"))):
        for i, var in enumerate(variants):
            ys = [next(r[key] for r in rows if r["split"] == s and r["variant"] == var) for s in splits]
            ax.bar([j + i * width for j in range(len(splits))], ys, width, label=f"{var} (SIMULATED)")
        ys = [rep.get(s, {}).get("hits" if k == 0 else "ttft_ms", 0) for s in splits]
        ax.bar([j + len(variants) * width for j in range(len(splits))], ys, width, color="k", label="reported")
        ax.set_xticks([j + 0.4 for j in range(len(splits))], splits)
        ax.set_xlabel("shared / unique tokens")
        ax.set_ylabel(lab)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"vllm#45238 on {study['model']} (block 528): who hits", fontsize=9)
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    rep = study["reported"]["by_split"]
    lines = [f"# {study['name']}: {study['description']}", "", source_line(study), "", SIM_NOTE, "",
             "| split | variant | requests hit (of 64) | max hit tokens | mean TTFT (ms, SIMULATED) | reported hits | reported TTFT |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rp = rep.get(r["split"], {})
        lines.append(f"| {r['split']} | {r['variant']} | {r['requests_hit']} | {r['max_hit_tokens']} | {r['ttft_mean_ms']} | "
                     f"{rp.get('hits', '-')} | {rp.get('ttft_ms', '-')} |")
    lines += ["", study["finding"], ""]
    return "\n".join(lines)
