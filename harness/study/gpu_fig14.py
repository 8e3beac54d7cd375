"""The Fig. 14 launcher for a real GPU (``make gpu-fig14``, scripts/gpu_fig14.sh): it writes a figure-kind
study file of Fig. 14's cells for the real vLLM engine and runs it through the study pipeline.

Takes ``experiments/fig14.yaml`` (the artifact's settings per model), keeps the cells vLLM can
serve from a written ``config.json`` with dummy weights and that fit the visible GPUs, and runs
each with the hybrid KV cache manager off (``system=vllm``), on (``system=hybrid_groups``) and
with the jenga_vllm plugin (``system=jenga``: jenga/'s LCM allocator inside the engine). Mamba
hybrids cannot start with the hybrid manager off and the plugin refuses them (vLLM zeroes and
copies Mamba blocks over one flat id space), so Jamba runs ``hybrid_groups`` only. Llama 4 Scout
(TP 8) is handed to vLLM as its text model, ``Llama4ForCausalLM`` on Scout's ``text_config``
(36 chunked-local + 12 NoPE full layers, ``harness.backends.vllm.hf_config``); its cell runs where
8 GPUs are visible. Cells vLLM cannot serve are listed with the reason (Llama-3.2-Vision: not
served since vLLM 0.11; character.ai: cross-layer KV sharing; PyramidKV: token dropping). The
generated experiment file and the summary go to ``results/fig14_vllm/`` (never over the
simulator's reference outputs). ``--dry-run`` writes nothing under the repository: it puts the
experiment file in a fresh temporary directory (printed) and stops, so ``git status`` stays clean.

    python -m harness.study.gpu_fig14 [--gpu h100] [--num-gpus N] [--dry-run] [extra overrides ...]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import yaml

from harness.backends.vllm.hf_config import HFConfigError, hf_config_dict
from harness.models import zoo_profile
from harness.records import REPO_ROOT
from harness.study import cli

OUT = REPO_ROOT / "results" / "fig14_vllm"


def visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


def servable(model: str) -> str | None:
    """None if vLLM can serve ``model`` from a written config.json, else the reason."""
    try:
        hf_config_dict(zoo_profile(model))
    except HFConfigError as e:
        return str(e)
    return None


def build(gpu: str, num_gpus: int, source: Path = REPO_ROOT / "experiments" / "fig14.yaml") -> tuple[dict, list[str]]:
    """The vLLM experiment dict and the list of skipped cells with reasons."""
    exp = yaml.safe_load(source.read_text())
    cells, skipped = [], []
    for cell in exp["cells"]:
        if cell.get("gpus") and gpu not in cell["gpus"]:
            skipped.append(f"{cell['model']}: not run on {gpu} in the paper")
            continue
        cell = dict(cell)
        for k, v in (cell.pop("per_gpu", None) or {}).get(gpu, {}).items():
            cell[k] = v
        model = cell["model"]
        need = int(cell.get("gpu.count", 1))
        if need > num_gpus:
            skipped.append(f"{model}: needs {need} GPUs (tensor parallel), {num_gpus} visible")
            continue
        reason = servable(model)
        if reason:
            skipped.append(f"{model}: {reason}")
            continue
        is_mamba = "jamba" in model
        if is_mamba:
            skipped.append(f"{model} system=jenga: the jenga_vllm plugin refuses Mamba hybrids")
        cell["systems"] = ["hybrid_groups"] if is_mamba else ["vllm", "hybrid_groups", "jenga"]
        cell["baseline"] = "hybrid_groups" if is_mamba else "vllm"
        cells.append(cell)
    out = {"name": "fig14_vllm", "gpu": gpu,
           "description": "Fig. 14 cells on the real vLLM engine: hybrid KV cache manager off, on, jenga_vllm plugin",
           "systems": ["vllm", "hybrid_groups", "jenga"], "seeds": exp.get("seeds", [0]), "cells": cells}
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="conf/gpu name of this machine's GPU (h100, h200, l4)")
    ap.add_argument("--num-gpus", type=int, default=None, help="GPUs to use (default: all visible)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the experiment file to a temporary directory (printed) and stop")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. mode=smoke")
    a = ap.parse_args(argv)
    n = visible_gpus() if a.num_gpus is None else a.num_gpus
    if n == 0 and not a.dry_run:
        print("no NVIDIA GPU visible (nvidia-smi -L). The real-engine Fig. 14 run needs one; on a CPU host "
              "use `make crosscheck` (vLLM's scheduler, backend=vllm_sched) or `make reproduce-fig14` (backend=sim).")
        return 2
    exp, skipped = build(a.gpu, max(n, 1) if a.dry_run and n == 0 else n)
    # A dry run leaves the repository as it was: results/fig14_vllm/ holds a real run's outputs only.
    out = Path(tempfile.mkdtemp(prefix="fig14_vllm_dry_run_")) if a.dry_run else OUT
    out.mkdir(parents=True, exist_ok=True)
    path = out / "experiment.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    print(f"wrote {path}: {len(exp['cells'])} cells")
    for s in skipped:
        print(f"skipped {s}")
    if a.dry_run:
        return 0
    return cli.main([str(path), f"gpu={a.gpu}", "backend=vllm", *a.overrides, "--jobs", "1",
                            "--out", str(OUT)])


if __name__ == "__main__":
    raise SystemExit(main())
