"""Studies beyond Figure 13/14 (issue 6 items 4, 5, 6): the paper's micro-experiments, speculative
decoding and the vision-embedding cache, and a Marconi-style rival for Mamba prefix caching.

Each module is the report of a study kind (harness/study/kinds.py): the cells are ordinary cached
cells planned by harness/sweeps/plan.py (specdec, vlm_embed and mamba_prefix variants are sim
config keys, harness/backends/sim/variants.py), and the module holds ``report(plan, records, out)``
writing ``results/<name>/summary.csv``, ``summary_mean.csv`` and a paper-style figure.
"""
