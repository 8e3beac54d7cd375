"""Studies beyond Figure 13/14 (issue 6 items 4, 5, 6): the paper's micro-experiments, speculative
decoding and the vision-embedding cache, and a Marconi-style rival for Mamba prefix caching.

``specdec``, ``vlm_embed`` and ``mamba_prefix`` are reports of pipeline kinds (harness/study/kinds.py):
their cells are ordinary cached sim cells whose variants are config keys
(harness/backends/sim/variants.py); each module holds ``report(plan, records, out)`` writing
``results/<name>/summary.csv``, ``summary_mean.csv`` and a paper-style PNG. ``micro`` still plans
and runs its own cells (``common``).
"""
