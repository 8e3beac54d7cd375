"""The one study pipeline (issue 10 item 1): experiment file → plan (cells × axes × systems ×
seeds) → cells (ordinary cached records of :func:`harness.run.run_cell`) → seed aggregation →
report and figure.

- :mod:`harness.study.driver` — ``python -m harness.study``, the one entry point;
- :mod:`harness.study.kinds` — the registry keyed by the study file's ``kind:`` (each kind supplies
  only its axes and its report: ``figure`` = :mod:`harness.experiment`, ``window``/``mix``/
  ``ablation``/``lcm`` = :mod:`harness.sweeps`, ``micro``/``specdec``/``vlm_embed``/
  ``mamba_prefix`` = :mod:`harness.studies`);
- :mod:`harness.study.run` — running: inline joblib pool, Hydra joblib or Slurm (submitit) launcher;
- :mod:`harness.study.launch` — the Hydra app a launcher job runs (one cell).
"""
