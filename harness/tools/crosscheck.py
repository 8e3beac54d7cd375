"""Cross-check of our simulator against vLLM's own scheduler (``make crosscheck``).

On the same cells, each *arm* runs twice: ``backend=sim`` with a simulator system and
``backend=vllm_sched`` (vLLM 0.32's real scheduler and KV cache manager) with the system that maps
to the same allocator (:data:`ARMS`): ``vllm`` ↔ hybrid manager off, ``vllm_current`` (today's vLLM,
D1-D3 of CROSSCHECK.md) ↔ hybrid manager on, and ``jenga_current`` (Jenga's LCM pool under vLLM
0.32's rules) ↔ the jenga_vllm plugin (``vllm_sched system=jenga``: jenga/'s LCM pool under vLLM's
own per-type managers). ``system=jenga`` in the simulator is the artifact's Jenga (its forks'
retention and hit rules) and ``hybrid_groups`` the April-2025 manager; neither is expected to match
vLLM 0.32, so neither is an arm. Two variants: vLLM's full-prompt admission gate on (its default)
and off, set on both sides through ``engine.full_prompt_admission``. The run ends with one line,
``crosscheck: worst throughput gap X.X % (cell, variant)``, over every row. Both use the same
step-time model and the same KV byte budget, so every difference comes from scheduling (admission,
chunking, preemption) and the KV cache manager (placement, freeing, prefix caching). Writes
``results/crosscheck/crosscheck.csv`` and ``results/crosscheck/table.md``; the explanation of every
difference above 5 % lives in ``results/crosscheck/CROSSCHECK.md``.

    python -m harness.tools.crosscheck [--cells NAME ...] [--force] [--out results/crosscheck]

Run it with the vLLM venv's interpreter (``make crosscheck``): ``vllm_sched`` needs vLLM.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from harness.backends.vllm.plan import require_vllm
from harness.config import compose_cell
from harness.records import REPO_ROOT
from harness.run import run_cell

# All cells use the V1 engine settings: vllm_sched runs vLLM's V1 scheduler, so the sim's v1
# policy (mixed prefill/decode batches, chunked prefill) is the comparable one.
V1 = ["engine.engine_version=v1", "engine.enable_chunked_prefill=true"]
CELLS: dict[str, list[str]] = {
    # full attention only: the hybrid manager changes nothing; isolates scheduler agreement
    "llama3_1_8b-mmlu_pro": ["model=llama3_1_8b", "dataset=mmlu_pro", "dataset.num_requests=200", *V1,
                             "engine.max_num_batched_tokens=8192", "engine.enable_prefix_caching=true"],
    # Fig. 14's Gemma-3 cell (SOSP): 5 sliding (1024) : 1 full, shared arXiv articles
    "gemma3_12b-arxiv_qa": ["model=gemma3_12b", "dataset=arxiv_qa", "dataset.subset=ministral",
                            "dataset.num_requests=40", "dataset.output_len=150", "dataset.max_len=90000", *V1,
                            "engine.max_model_len=90112",  # vLLM refuses 128k: one request must fit
                            "engine.max_num_batched_tokens=8192", "engine.enable_prefix_caching=true"],
    # Fig. 14's Ministral cell on the V1 scheduler: 3 sliding (32k) : 1 full, long prompts
    "ministral_8b-arxiv_qa": ["model=ministral_8b", "dataset=arxiv_qa", "dataset.subset=ministral",
                              "dataset.num_requests=32", "dataset.output_len=150", "dataset.max_len=80000", *V1,
                              "engine.max_model_len=80128",
                              "engine.max_num_batched_tokens=8192", "engine.enable_prefix_caching=true"],
    # memory-tight: Gemma-2 9B on an L4 (24 GB), no prefix caching: preemption and batch size
    "gemma2_9b-l4-mmlu_pro": ["model=gemma2_9b", "gpu=l4", "dataset=mmlu_pro", "dataset.num_requests=200", *V1,
                              "engine.max_model_len=4096",  # MMLU-pro prompts are < 3.1k tokens
                              "engine.max_num_batched_tokens=2048", "engine.enable_prefix_caching=false"],
}
# (sim system, vllm_sched system, what vllm_sched runs for it): the simulator system that models
# the allocator vLLM runs (harness/backends/vllm/sched.py SYSTEM_HYBRID / the plugin for "jenga").
ARMS = (("vllm", "vllm", "hybrid off"),
        ("vllm_current", "vllm_current", "hybrid on"),
        ("jenga_current", "jenga", "jenga plugin"))
# vLLM 0.32's scheduler admits a request only if its whole prompt fits (scheduler_reserve_full_isl,
# default on); the April-2025 V1 engine the sim's v1 policy follows admitted chunk by chunk. The sim
# models the gate (engine.full_prompt_admission), so each variant sets it on both sides.
VARIANTS = {"default": ["engine.full_prompt_admission=true"], "no_full_isl": ["engine.full_prompt_admission=false"]}
METRICS = ("mean_running", "mean_decode_batch", "preemptions", "prefix_hit_rate", "throughput_req_s")
THRESHOLD = 0.05


def rel_diff(a: float | None, b: float | None) -> float | None:
    """|a - b| / max(|a|, |b|); 0 when both are 0; None when either is missing."""
    if a is None or b is None:
        return None
    m = max(abs(a), abs(b))
    return 0.0 if m == 0 else abs(a - b) / m


def run_cell_pair(name: str, sim_system: str, sched_system: str, variant: str, out_dir: Path,
                  force: bool) -> tuple[dict, dict]:
    base = [*CELLS[name], f"out_dir={out_dir}", f"force={str(force).lower()}", *VARIANTS[variant]]
    sim = run_cell(compose_cell([*base, f"system={sim_system}", "backend=sim"]))
    sched = run_cell(compose_cell([*base, f"system={sched_system}", "backend=vllm_sched",
                                   "+backend.options.waste_every=10"]))
    return sim, sched


def rows_for(names: list[str], out_dir: Path, force: bool) -> list[dict]:
    rows = []
    for name in names:
        for (sim_system, sched_system, arm), variant in ((a, v) for a in ARMS for v in VARIANTS):
            sim, sched = run_cell_pair(name, sim_system, sched_system, variant, out_dir, force)
            row = {"cell": name, "sim_system": sim_system, "vllm_sched_system": sched_system, "vllm_arm": arm,
                   "variant": variant,
                   "sim_status": sim.get("status"), "vllm_sched_status": sched.get("status")}
            for m in METRICS:
                a, b = sim.get(m), sched.get(m)
                row[f"sim_{m}"], row[f"vllm_{m}"] = a, b
                row[f"diff_{m}"] = rel_diff(a, b)
            row["sim_kv_pages"], row["vllm_kv_blocks"] = sim.get("kv_capacity_pages"), sched.get("kv_capacity_pages")
            row["errors"] = "; ".join(str(r.get("error")) for r in (sim, sched) if r.get("status") != "ok")
            rows.append(row)
    return rows


def worst_gap(rows: list[dict]) -> tuple[float, str, str]:
    """The largest throughput difference over every row: (gap, cell, variant); a row without both
    throughputs counts as a 100 % gap (it must not hide)."""
    worst = (-1.0, "-", "-")
    for r in rows:
        d = r["diff_throughput_req_s"]
        d = 1.0 if d is None else d
        if d > worst[0]:
            worst = (d, f"{r['cell']} {r['sim_system']}", r["variant"])
    return worst


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def markdown(rows: list[dict]) -> str:
    head = ["cell", "sim system ↔ vllm_sched system (vLLM runs) [variant]",
            *[f"{m}: sim / vLLM (diff)" for m in METRICS]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["cell"], f"{r['sim_system']} ↔ {r['vllm_sched_system']} ({r['vllm_arm']}) [{r['variant']}]"]
        for m in METRICS:
            d = r[f"diff_{m}"]
            flag = " **>5%**" if d is not None and d > THRESHOLD else ""
            cells.append(f"{_fmt(r[f'sim_{m}'])} / {_fmt(r[f'vllm_{m}'])} ({_fmt(d)}){flag}")
        out.append("| " + " | ".join(cells) + " |")
        if r["errors"]:
            out.append(f"| {r['cell']} | errors | {r['errors'][:300]} |" + " |" * (len(head) - 3))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="sim vs vLLM's scheduler on the same cells")
    ap.add_argument("--cells", nargs="*", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--force", action="store_true", help="rerun cells whose records exist")
    ap.add_argument("--out", default=str(REPO_ROOT / "results" / "crosscheck"))
    a = ap.parse_args(argv)
    require_vllm()
    out = Path(a.out)
    rows = rows_for(a.cells, out / "runs", a.force)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "crosscheck.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    table = markdown(rows)
    (out / "table.md").write_text(
        "<!-- generated by `make crosscheck` (harness/tools/crosscheck.py); explanations: CROSSCHECK.md -->\n"
        f"Relative difference = |sim - vLLM| / max; flagged above {THRESHOLD:.0%}.\n\n{table}\n")
    print(table)
    gap, cell, variant = worst_gap(rows)
    print(f"crosscheck: worst throughput gap {100 * gap:.1f} % ({cell}, {variant})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
