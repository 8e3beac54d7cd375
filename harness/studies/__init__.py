"""Studies beyond Figure 13/14 (issue 6 items 4, 5, 6): the paper's micro-experiments, speculative
decoding and the vision-embedding cache, and a Marconi-style rival for Mamba prefix caching.

Each study reads an ``experiments/<name>.yaml`` file, runs its cells on the sim backend, writes
``results/<name>/summary.csv`` (one row per cell, with provenance) and a paper-style PNG.
"""
