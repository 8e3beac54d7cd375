"""Where a VLM's vision embeddings live under chunked prefill (paper §6.2, §7.4).

With chunked prefill an image's embeddings are consumed over several steps. Three designs:

- ``jenga``: the embeddings are a layer type in the KV pool, made when prefill reaches the image
  and freed chunk by chunk as prefill consumes them (``VisionEmbeddingPolicy``); the vision encoder
  runs once per image;
- ``keep``: the same pool, but an image's embeddings stay until its request finishes
  (``keep_embeddings``: :class:`jenga.baselines.keep_embeddings.KeepEmbeddingManager`); the encoder
  runs once;
- ``reencode``: the baseline that does not store embeddings across steps (vLLM v0's KV pool has no
  room for them): PagedAttention for the KV, and the vision encoder re-runs for every prefill chunk
  that touches an image (:func:`encoder_tokens`). ASSUMED to be what the artifact's
  ``vllm-v0-mm-baseline`` does; its source is not public (paper_facts §3.1).
"""

from __future__ import annotations

from jenga.registry import check_system_names, make_manager

# The VLM-embedding study's systems -> registry names (``keep_embeddings``:
# jenga/baselines/keep_embeddings.py; ``reencode`` runs PagedAttention's pool, ``vllm``).
SYSTEMS = {"reencode": "vllm", "keep": "keep_embeddings", "jenga": "jenga"}
check_system_names(SYSTEMS.values(), "harness.backends.sim.vision_cache.SYSTEMS")


def make_vision_manager(system: str, specs, capacity: int, tokens_per_page: int = 16):
    """The manager of ``system`` (one of :data:`SYSTEMS`)."""
    if system not in SYSTEMS:
        raise ValueError(f"vision-embedding system {system!r}; allowed: {list(SYSTEMS)}")
    return make_manager(SYSTEMS[system], list(specs), capacity, tokens_per_page=tokens_per_page)


def encoder_tokens(scheduled, reencode: bool) -> int:
    """Image tokens the vision encoder processes for one scheduled chunk: once per image when the
    chunk reaches the image's first token, or (``reencode``) the whole image for every chunk that
    overlaps it."""
    if not reencode:
        return scheduled.image_tokens_encoded
    c, n = scheduled.context_before, scheduled.num_new_tokens
    return sum(im.num_tokens for im in scheduled.seq.req.images
               if im.offset < c + n and im.offset + im.num_tokens > c)


def vision_step_cost(cost, reencode: bool):
    """Step cost hook for :func:`harness.studies.common.run_loop`."""
    def step_cost(step) -> float:
        return cost.step_time([(s.num_new_tokens, s.context_before, encoder_tokens(s, reencode)) for s in step])
    return step_cost
