"""Parameter sweeps beyond Figure 13/14 (issue 6 items 1, 2, 3, 7, 8, 10).

A *study file* (``experiments/<name>.yaml``) names the models, the systems, the seeds and the
axes of a grid; :mod:`harness.sweeps.plan` expands it into cells, :mod:`harness.study` (the one study
pipeline) runs them (in process with joblib, or through a Hydra launcher: ``joblib`` on one
machine, ``slurm`` via submitit) and hands the records to the study's report module (``kind:`` in the
file: :mod:`~harness.sweeps.window`, :mod:`~harness.sweeps.mix`, :mod:`~harness.sweeps.ablation`,
:mod:`~harness.sweeps.lcm`), which writes ``results/<name>/summary.csv`` and a PNG.

    python -m harness.study experiments/window_sweep.yaml [mode=smoke] [seeds=0,1] [--launcher L]

Every cell is an ordinary record of :func:`harness.run.run_cell`, so an interrupted sweep resumes
without redoing finished cells. Seeds (default 3) are aggregated to mean ± 95 % CI
(:mod:`harness.sweeps.stats`).
"""
