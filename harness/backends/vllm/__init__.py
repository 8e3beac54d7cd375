"""The two vLLM backends: ``vllm_sched`` (``sched``: vLLM's own scheduler and KV cache manager on
CPU, no model, our step times) and ``vllm`` (the real engine: the driver ``engine`` and its child
process ``worker``); the plan and proxy-model config writers (``plan``, ``hf_config``), the CPU
check on tiny checkpoints (``tiny``) and what both backends share (``common``)."""
