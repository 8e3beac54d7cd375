"""The summary: for every hybrid model of the zoo x workload, which rule gives the most KV capacity,
prefix hits and simulated throughput, and by how much over the next best."""

from __future__ import annotations

import dataclasses
from itertools import chain
from pathlib import Path

from harness import whatif as w
from harness.study.run import run_tasks
from harness.study.whatif.common import SIM_NOTE, args, simulate
from harness.workloads import sessions as ww


def run(study: dict, out: Path, jobs: int = 1) -> list[dict]:
    """Every model x workload x rule; the model x workload cells in ``jobs`` processes (each cell's
    rows do not depend on the others or on the order: the simulator is deterministic)."""
    tasks = [(entry, wl, study["rules"], study["max_model_len"], study["num_requests"])
             for entry in study["models"] for wl in study["workloads"]]
    rows = list(chain.from_iterable(run_tasks(_cell_rows, tasks, jobs, "summary", progress=False)))
    _figure(study, rows, out)
    return rows


def _cell_rows(entry: dict, wl: dict, rules: list[str], max_model_len: int, num_requests: int) -> list[dict]:
    """One model x workload: each rule's capacity (engine arithmetic) and simulated hits and
    throughput, or the error that kept it from starting or serving."""
    model, gpu, tp = entry["model"], entry.get("gpu", "h100"), entry.get("tp", 1)
    a, prof = args(model, gpu, max_model_len, tp=tp)
    cfg = w.compose(a)
    kv = w.kv_bytes(cfg, prof)
    reqs = workload_requests(wl, a, prof, num_requests)
    rows = []
    for rule in rules:
        row = {"model": model, "gpu": gpu, "tp": tp, "workload": wl["name"], "rule": rule}
        try:
            st = w.static_answer(rule, prof, kv, cfg, {}, True)
        except ValueError as e:
            rows.append({**row, "error": str(e)})
            continue
        m, _ = simulate(rule, a, prof, reqs)
        if m["throughput_req_s"] is None:   # nothing finished: every request refused by the pool
            rows.append({**row, "error": f"no request finished ({m['num_ignored']} of {len(reqs)} refused)"})
            continue
        rows.append({**row, "kv_capacity_tokens": st["kv_capacity_tokens"], "max_concurrency": st["max_concurrency"],
                     "block_size_tokens": max(st["block_size_tokens"].values()),
                     "prefix_hit_rate": round(m["prefix_hit_rate"], 4),
                     "throughput_req_s": round(m["throughput_req_s"], 4), "simulated": True})
    return rows


def workload_requests(wl: dict, a, prof, num_requests: int):
    """A generated workload (``spec``: its fields) or, with ``dataset:``, one of the harness's
    dataset twins capped at the study's max_model_len, as ``harness.whatif workload=<dataset>``
    builds it."""
    if "dataset" not in wl:
        return ww.generate(wl["name"], num_requests, **(wl.get("spec") or {}))
    return w.build_requests(dataclasses.replace(a, workload=wl["dataset"], num_requests=num_requests), prof)


def winners(rows, key):
    out = {}
    for r in rows:
        if key in r:
            out.setdefault((r["model"], r["workload"]), []).append(r)
    res = {}
    for k, rs in out.items():
        rs = sorted(rs, key=lambda r: r[key], reverse=True)
        best = rs[0]
        # Rules within 0.5 % of the best share the lead; the margin is over the next rule after them.
        leaders = [r["rule"] for r in rs if best[key] and r[key] >= best[key] / 1.005] or [best["rule"]]
        nxt = rs[len(leaders)] if len(rs) > len(leaders) else None
        margin = (best[key] / nxt[key] - 1) if nxt and nxt[key] else None
        res[k] = (" = ".join(leaders), best[key], margin)
    return res


def _figure(study, rows, out):
    import matplotlib.pyplot as plt
    import numpy as np

    from harness.plots import save
    wl = study["workloads"][0]["name"]
    models = [e["model"] for e in study["models"]]
    rules = study["rules"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, key, lab in ((axes[0], "max_concurrency", "max concurrency at max_model_len (engine arithmetic)"),
                         (axes[1], "throughput_req_s", f"req/s on '{wl}' (SIMULATED)")):
        width = 0.8 / len(rules)
        for i, rule in enumerate(rules):
            ys = []
            for mdl in models:
                r = next((r for r in rows if r["model"] == mdl and r["rule"] == rule and r["workload"] == wl), {})
                ys.append(r.get(key, 0) or 0)
            ax.bar(np.arange(len(models)) + i * width, ys, width, label=rule)
        ax.set_xticks(np.arange(len(models)) + 0.4, models, rotation=40, ha="right", fontsize=6)
        ax.set_ylabel(lab, fontsize=8)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=6)
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    # Capacity is ranked by max concurrency at max_model_len: each engine reports KV capacity in its own
    # unit (TensorRT-LLM its full-attention pool's tokens, vLLM concurrency x max_model_len, SGLang its
    # full pool), but how many max_model_len requests fit at once means the same under every rule.
    cap, hit, thr = winners(rows, "max_concurrency"), winners(rows, "prefix_hit_rate"), winners(rows, "throughput_req_s")
    lines = [f"# {study['name']}: {study['description']}", "", SIM_NOTE, "",
             "| model | workload | most capacity: max concurrency at max_model_len (margin over next) | most hits (margin) | most throughput (margin, SIMULATED) |",
             "|---|---|---|---|---|"]

    def fmt(x):
        rule, _, m = x
        if m is None and " = " in rule:
            return "all tie (within 0.5 %)"
        return f"{rule} ({'n/a' if m is None else f'+{100 * m:.1f} %'})"
    for k in sorted(cap):
        lines.append(f"| {k[0]} | {k[1]} | {fmt(cap[k])} | {fmt(hit[k])} | {fmt(thr[k])} |")
    errs = sorted({(r["model"], r["rule"], r["error"]) for r in rows if "error" in r})
    boot = [(m, r) for m, r, e in errs if not e.startswith("no request finished")]
    idle = [(m, r, e) for m, r, e in errs if e.startswith("no request finished")]
    if boot:
        lines += ["", "Refused at start-up (the engine's own rule): " + "; ".join(f"{m}/{r}" for m, r in boot) + "."]
    if idle:
        lines += ["", "Started but served nothing (every request refused by its pool; left out of the ranking): "
                  + "; ".join(f"{m}/{r} ({e[len('no request finished ('):-1]})" for m, r, e in idle) + "."]
    lines += ["", study.get("finding", ""), ""]
    return "\n".join(lines)
