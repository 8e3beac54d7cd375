"""Hydra app: run one cell of a study (the job of a Hydra multirun).

    python -m harness.study.launch -m study=experiments/window_sweep.yaml 'cell=range(0,12)' \
        hydra/launcher=joblib hydra.launcher.n_jobs=2          # one process per cell
    python -m harness.study.launch -m study=... 'cell=range(0,12)' hydra/launcher=slurm \
        hydra.launcher.partition=cpu                           # one Slurm job per cell (submitit)

Config: ``harness/conf/sweep.yaml``; launchers: Hydra's ``joblib`` and ``harness/conf/hydra/
launcher/slurm.yaml``. :mod:`harness.study.run` writes these command lines for you.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

# Registered before Hydra snapshots its singletons: the joblib launcher restores that snapshot in
# each job, so a schema registered only inside a (reused) worker would vanish for its next job.
from harness import cli
from harness import config as cell_config
from harness.study import kinds
from harness.study.run import run_one


@hydra.main(config_path="../conf", config_name="sweep", version_base="1.3")
def main(cfg: DictConfig) -> str:
    """Plan the study and run cell ``cfg.cell``; returns the record's status."""
    cell_config.register()
    path = str(cfg.study)
    _, labels, overrides = kinds.plan_cells(path, cli.load_study_file(path, None), [str(o) for o in cfg.cli])
    if not 0 <= int(cfg.cell) < len(overrides):
        raise ValueError(f"cell={cfg.cell} is out of range; the study has {len(overrides)} cells (0..{len(overrides) - 1})")
    rec = run_one(overrides[int(cfg.cell)], bool(cfg.force))
    print(f"cell {cfg.cell}: {labels[int(cfg.cell)]}: {rec.get('status')}"
          f"{' (reused)' if rec.get('reused') else ''}{'' if rec.get('status') == 'ok' else ': ' + str(rec.get('error'))}")
    return str(rec.get("status"))


if __name__ == "__main__":
    main()
