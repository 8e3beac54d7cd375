"""Execution backends (sim, vllm_sched, vllm) and the settings they share, resolved once per cell
(:mod:`harness.backends.settings`)."""
