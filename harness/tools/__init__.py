"""Command-line tools beside the pipeline: page geometry (``pages``), analytic waste (``waste``),
vLLM's page geometry cross-check (``vllm_pages``), the sim-vs-vLLM crosscheck (``crosscheck``) and
the plugin check (``vllm_plugin_check``)."""
