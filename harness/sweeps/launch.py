"""Hydra app: run one cell of a study (the job of a Hydra multirun).

    python -m harness.sweeps.launch -m study=experiments/window_sweep.yaml 'cell=range(0,12)' \
        hydra/launcher=joblib hydra.launcher.n_jobs=2          # one process per cell
    python -m harness.sweeps.launch -m study=... 'cell=range(0,12)' hydra/launcher=slurm \
        hydra.launcher.partition=cpu                           # one Slurm job per cell (submitit)

Config: ``harness/conf/sweep.yaml``; launchers: Hydra's ``joblib`` and ``harness/conf/hydra/
launcher/slurm.yaml``. :mod:`harness.sweeps.driver` writes these command lines for you.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

# Registered before Hydra snapshots its singletons: the joblib launcher restores that snapshot in
# each job, so a schema registered only inside a (reused) worker would vanish for its next job.
from harness import config as cell_config
from harness.sweeps.driver import run_one
from harness.sweeps.plan import plan


@hydra.main(config_path="../conf", config_name="sweep", version_base="1.3")
def main(cfg: DictConfig) -> str:
    """Plan the study and run cell ``cfg.cell``; returns the record's status."""
    cell_config.register()
    runs = plan(str(cfg.study), [str(o) for o in cfg.cli]).runs
    if not 0 <= int(cfg.cell) < len(runs):
        raise ValueError(f"cell={cfg.cell} is out of range; the study has {len(runs)} cells (0..{len(runs) - 1})")
    run = runs[int(cfg.cell)]
    rec = run_one(run.overrides, bool(cfg.force))
    print(f"cell {cfg.cell}: {run.model} {run.params} {run.system} seed={run.seed}: {rec.get('status')}"
          f"{' (reused)' if rec.get('reused') else ''}{'' if rec.get('status') == 'ok' else ': ' + str(rec.get('error'))}")
    return str(rec.get("status"))


if __name__ == "__main__":
    main()
