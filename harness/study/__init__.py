"""The one study pipeline: study file → plan (cells × axes × systems × seeds) → cells (ordinary
cached records of :func:`harness.run.run_cell`) → seed statistics → the kind's report and figure.

- :mod:`~harness.study.cli` — ``python -m harness.study``, the one entry point (arguments, checks
  before any work, ``--dry-run``);
- :mod:`~harness.study.plan` — the one planner (study file → runs; one default for seeds);
- :mod:`~harness.study.run` — running (inline joblib pool, Hydra joblib, Slurm / submitit) and the
  tally; :mod:`~harness.study.launch` — the Hydra app one launcher job runs (one cell);
- :mod:`~harness.study.stats` — seeds → means, 95 % CIs, paired speedups;
- :mod:`~harness.study.report` — what every report shares (files, tables, figure footers);
- :mod:`~harness.study.kinds` — the one registry of kinds; ``kinds/<kind>.py`` each hold a kind's
  report (figure, window, mix, ablation, lcm, micro, specdec, vlm_embed, mamba_prefix);
- :mod:`~harness.study.gpu_fig14` — the Fig. 14 launcher for a real GPU (real vLLM engine).
"""
