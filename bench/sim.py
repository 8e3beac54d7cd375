"""How fast the simulator recomputes Fig. 14 (issue 20): one benchmark line, not a test.

    python -m bench.sim                 # fig14, H100, 3 seeds, every core, fresh records in a temp dir
    python -m bench.sim --jobs 1 --study experiments/fig13.yaml

Runs the study exactly as ``make reproduce-fig14 ARGS=--force`` does (``python -m harness.study``,
every cell recomputed), but writes its records and summary to a temporary folder so the committed
results are untouched, then prints

    sim: fig14 H100 3 seeds X s on N cores, Y simulated s per wall s, slowest cell M steps/s (model/system)

X: the study's wall time; Y: simulated seconds of every cell over X; M: the lowest steps per
second of any cell (its steps over its record's ``wall_s``, which includes building its workload).
Wall time on shared cores is noisy: compare before/after back to back, and read the CPU seconds
and the host reference (:func:`host_reference_s`, timed before and after the study) printed beside
it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def records(runs: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(runs.rglob("record.json"))]


def summary_line(name: str, gpu: str, seeds: int, wall: float, cores: int, recs: list[dict]) -> str:
    ok = [r for r in recs if r.get("status") == "ok"]
    sim_s = sum(float(r["simulated_s"]) for r in ok)
    slow = min(ok, key=lambda r: r["num_steps"] / max(r["wall_s"], 1e-9))
    rate = slow["num_steps"] / max(slow["wall_s"], 1e-9)
    return (f"sim: {name} {gpu.upper()} {seeds} seeds {wall:.1f} s on {cores} cores, "
            f"{sim_s / wall:.0f} simulated s per wall s, slowest cell {rate:.0f} steps/s "
            f"({slow['model']}/{slow['system']})")


def host_reference_s(repeat: int = 3) -> float:
    """Seconds this machine takes, now, for a fixed pure-Python workload shaped like the
    simulator's (int-keyed dicts filled and emptied, lists built and sliced): the best of
    ``repeat``. A shared VM drifts by tens of percent within an hour; the same code's wall time
    follows this number, so two runs compare only at similar values of it."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        d: dict[int, int] = {}
        for r in range(4):
            keys = list(range(r * 7919, r * 7919 + 200_000))
            d.update(zip(keys, keys))
            _ = [d[k] + 1 for k in keys[::3]]
            for k in keys[1::2]:
                del d[k]
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="experiments/fig14.yaml")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", help="write records here (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="extra study overrides (gpu=l4, seeds=0, ...)")
    args = ap.parse_args(argv)
    import yaml

    study = yaml.safe_load((REPO / args.study).read_text())
    gpu = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("gpu=")), study.get("gpu", "h100"))
    seeds = next((len(o.split("=", 1)[1].split(",")) for o in args.overrides if o.startswith("seeds=")),
                 len(study.get("seeds", [0])))
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        out = Path(args.keep or tmp)
        cmd = [sys.executable, "-m", "harness.study", args.study, f"out_dir={out / 'runs'}", "--out",
               str(out / study["name"]), "--force", "--no-progress", "--jobs", str(args.jobs), *args.overrides]
        ref = host_reference_s()
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        recs = records(out / "runs")
        failed = [f"{r.get('model')}/{r.get('system')}" for r in recs if r.get("status") != "ok"]
        if failed or not recs:
            print(f"sim: {len(failed)} failed cells: {failed[:5]}", file=sys.stderr)
            return 1
        print(summary_line(study["name"], gpu, seeds, wall, args.jobs, recs))
        sim_s = sum(float(r["simulated_s"]) for r in recs)
        print(f"  ({len(recs)} cells, {cpu.ru_utime + cpu.ru_stime:.1f} CPU s in the study's processes; "
              f"{sim_s / wall / args.jobs:.0f} simulated s per wall s per core; host reference {ref:.3f} s, "
              f"{host_reference_s():.3f} s after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
