"""The step-time model and KV-capacity model shared by every backend that needs simulated time
(``sim``, ``vllm_sched``) and by the real engine's profiling-token rule (``vllm``): ``model.py``
holds :class:`~harness.backends.cost.model.CostModel` and its per-GPU, per-engine-version
constants. No backend imports another backend for these."""
