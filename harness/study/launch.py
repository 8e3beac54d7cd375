"""Hydra app: run one cell of a study (the job of a Hydra multirun).

    python -m harness.study.launch -m study=experiments/window_sweep.yaml 'cell=range(0,12)' \
        hydra/launcher=joblib hydra.launcher.n_jobs=2          # one process per cell
    python -m harness.study.launch -m study=... 'cell=range(0,12)' hydra/launcher=slurm \
        hydra.launcher.partition=cpu                           # one Slurm job per cell (submitit)

Config: ``harness/conf/sweep.yaml``; launchers: Hydra's ``joblib``, ``harness/conf/hydra/launcher/
slurm.yaml`` and submitit's ``submitit_local`` (the Slurm code path on this machine).
:mod:`harness.study.run` writes these command lines for you.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

# Registered before Hydra snapshots its singletons: the joblib launcher restores that snapshot in
# each job, so a schema registered only inside a (reused) worker would vanish for its next job.
from harness import config as cell_config
from harness.study import plan as planner
from harness.study.cli import load_study_file
from harness.study.run import run_one


@hydra.main(config_path="../conf", config_name="sweep", version_base="1.3")
def main(cfg: DictConfig) -> str:
    """Plan the study and run cell ``cfg.cell``; returns the record's status."""
    cell_config.register()
    path = str(cfg.study)
    p = planner.plan(load_study_file(path), [str(o) for o in cfg.cli])
    if not 0 <= int(cfg.cell) < len(p.runs):
        raise ValueError(f"cell={cfg.cell} is out of range; the study has {len(p.runs)} cells (0..{len(p.runs) - 1})")
    run = p.runs[int(cfg.cell)]
    rec = run_one(run.overrides, bool(cfg.force))
    print(f"cell {cfg.cell}: {planner.label_of(run)}: {rec.get('status')}"
          f"{' (reused)' if rec.get('reused') else ''}{'' if rec.get('status') == 'ok' else ': ' + str(rec.get('error'))}")
    return str(rec.get("status"))


if __name__ == "__main__":
    main()
