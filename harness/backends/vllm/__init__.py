"""The real vLLM backend: the engine driver (``engine``), its child process (``worker``), the plan
and proxy-model config writers (``plan``, ``hf_config``), the CPU check (``tiny``) and the GPU
Fig. 14 runner (``fig14``)."""
