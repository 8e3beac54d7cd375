"""Where a VLM's vision embeddings live under chunked prefill (paper §6.2, §7.4).

With chunked prefill an image's embeddings are consumed over several steps. Three designs, each a
cell's config (harness/backends/sim/variants.py; experiments/vlm_embed.yaml):

- ``jenga`` (``system=jenga``): the embeddings are a layer type in the KV pool, made when prefill
  reaches the image and freed chunk by chunk as prefill consumes them (``VisionEmbeddingPolicy``);
  the vision encoder runs once per image;
- ``keep`` (``system=keep_embeddings``): the same pool, but an image's embeddings stay until its
  request finishes (:class:`jenga.baselines.keep_embeddings.KeepEmbeddingManager`); the encoder
  runs once;
- ``reencode`` (``system=vllm engine.encoder_cache=false``): the baseline that does not store
  embeddings across steps (vLLM v0's KV pool has no room for them): PagedAttention for the KV, and
  the vision encoder re-runs for every prefill chunk that touches an image (:func:`encoder_tokens`). ASSUMED to be what the artifact's
  ``vllm-v0-mm-baseline`` does; its source is not public (paper_facts §3.1).
"""

from __future__ import annotations


def encoder_tokens(scheduled, reencode: bool) -> int:
    """Image tokens the vision encoder processes for one scheduled chunk: once per image when the
    chunk reaches the image's first token, or (``reencode``) the whole image for every chunk that
    overlaps it."""
    if not reencode:
        return scheduled.image_tokens_encoded
    c, n = scheduled.context_before, scheduled.num_new_tokens
    return sum(im.num_tokens for im in scheduled.seq.req.images
               if im.offset < c + n and im.offset + im.num_tokens > c)
