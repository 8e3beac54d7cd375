"""Steps to drain on ``backend=vllm_sched``: the jenga_vllm plugin against vLLM's hybrid manager.

Issue 11's goal: "with the plugin, ``vllm_sched`` steps-to-drain <= the hybrid manager's at every
budget on the crosscheck workloads". For every cell of ``harness/tools/crosscheck.py`` (``CELLS``),
each variant (``VARIANTS``: vLLM's full-prompt admission gate on / off) and each KV budget (a
fraction of the cell's own budget, ``CostModel.kv_capacity_bytes``, set as ``engine.kv_cache_bytes``),
it runs ``system=jenga`` (the plugin) and ``system=vllm_current`` (hybrid manager on; on this backend
``hybrid_groups`` runs the identical code) on the same requests and prints one markdown row:
steps (scheduler steps with work until every request finished, ``num_steps``), preemptions, prefix
hit tokens and simulated throughput of each, and whether the plugin's steps are <= the hybrid
manager's. A budget too small for one ``max_model_len`` request is refused by both engines at start
(``-``). Deterministic (vLLM decides, our step-time model prices); minutes per tight cell on 2 cores.

    .venv-vllm/bin/python -m bench.vllm_steps [--cells NAME ...] [--fracs 1 0.5 0.25] [--out FILE.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

SYSTEMS = ("jenga", "vllm_current")  # the plugin, the hybrid manager
HEAD = ("| cell | variant | budget (fraction, GB) | plugin steps / preempt / hit tok / req/s "
        "| hybrid steps / preempt / hit tok / req/s | plugin steps <= hybrid |\n|---|---|---|---|---|---|")


def run_budget(name: str, variant: str, frac: float) -> dict:
    """One (cell, variant, budget): each system's metrics, or its start-up refusal."""
    from harness.backends.cost.model import CostModel
    from harness.backends.settings import EngineSettings, GpuSettings
    from harness.backends.vllm import sched as vllm_sched
    from harness.config import compose_cell
    from harness.models import load_profile
    from harness.tools.crosscheck import CELLS, VARIANTS
    from harness.workloads import build_workload

    base = [*CELLS[name], *VARIANTS[variant], "backend=vllm_sched", "+backend.options.waste_every=1000000000"]
    cfg0 = compose_cell([*base, "system=vllm_current"])
    profile = load_profile(cfg0.model)
    kv = int(CostModel(profile, GpuSettings.of(cfg0.gpu), EngineSettings.of(cfg0.engine)).kv_capacity_bytes() * frac)
    row: dict = {"cell": name, "variant": variant, "frac": frac, "kv_bytes": kv}
    for system in SYSTEMS:
        cfg = compose_cell([*base, f"system={system}", *([] if frac == 1.0 else [f"engine.kv_cache_bytes={kv}"])])
        try:
            m = vllm_sched.run_cell(cfg, profile, build_workload(cfg)).metrics
            row[system] = {k: m[k] for k in ("num_steps", "preemptions", "prefix_hit_tokens", "throughput_req_s")}
        except ValueError as exc:  # the engine refuses a budget below one max_model_len request
            row[system] = {"error": str(exc).splitlines()[0][:160]}
    return row


def markdown_row(row: dict) -> str:
    def cell(m: dict) -> str:
        if "error" in m:
            return f"- (refused: {m['error'][:70]}...)"
        return (f"{m['num_steps']} / {m['preemptions']} / {m['prefix_hit_tokens']} / "
                f"{m['throughput_req_s']:.4g}")
    ours, theirs = row["jenga"], row["vllm_current"]
    ok = "-" if "error" in ours or "error" in theirs else ("yes" if ours["num_steps"] <= theirs["num_steps"] else "**no**")
    return (f"| {row['cell']} | {row['variant']} | {row['frac']:g}, {row['kv_bytes'] / 1e9:.2f} | {cell(ours)} "
            f"| {cell(theirs)} | {ok} |")


def main(argv=None) -> int:
    from harness.backends.vllm.plan import require_vllm
    from harness.tools.crosscheck import CELLS, VARIANTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="*", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--fracs", nargs="*", type=float, default=[1.0, 0.5, 0.25],
                    help="KV budgets as fractions of each cell's own")
    ap.add_argument("--out", help="also write the table to this markdown file")
    a = ap.parse_args(argv)
    require_vllm()
    lines = [HEAD]
    print(HEAD, flush=True)
    for name in a.cells:
        for variant in a.variants:
            for frac in a.fracs:
                lines.append(markdown_row(run_budget(name, variant, frac)))
                print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
