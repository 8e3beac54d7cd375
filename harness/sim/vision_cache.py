"""Where a VLM's vision embeddings live under chunked prefill (paper §6.2, §7.4).

With chunked prefill an image's embeddings are consumed over several steps. Three designs:

- ``jenga``: the embeddings are a layer type in the KV pool, made when prefill reaches the image
  and freed chunk by chunk as prefill consumes them (``VisionEmbeddingPolicy``); the vision encoder
  runs once per image;
- ``keep``: the same pool, but an image's embeddings stay until its request finishes
  (:class:`KeepEmbeddingManager`); the encoder runs once;
- ``reencode``: the baseline that does not store embeddings across steps (vLLM v0's KV pool has no
  room for them): PagedAttention for the KV, and the vision encoder re-runs for every prefill chunk
  that touches an image (:func:`encoder_tokens`). ASSUMED to be what the artifact's
  ``vllm-v0-mm-baseline`` does; its source is not public (paper_facts §3.1).
"""

from __future__ import annotations

from jenga.manager import JengaManager
from jenga.policies import VisionEmbeddingPolicy, cdiv
from jenga.reqstate import StorageType

SYSTEMS = ("reencode", "keep", "jenga")


class KeepEmbeddingPolicy(VisionEmbeddingPolicy):
    """Vision embeddings held from the step that reaches the image until the request ends."""

    def held_intervals(self, rs, prev, T, tpp):
        return [(base, base + cdiv(im.num_tokens, tpp)) for im, base in rs.images_with_base(self, tpp)
                if T > im.c0]


class KeepEmbeddingManager(JengaManager):
    """Jenga's LCM pool with the vision embeddings kept for the request's lifetime."""

    system_name = "keep"

    def _storage_types(self, **options) -> list[StorageType]:
        out = []
        for st in super()._storage_types(**options):
            if isinstance(st.policy, VisionEmbeddingPolicy):
                st = StorageType(st.name, KeepEmbeddingPolicy(st.policy.spec), st.tokens_per_page, st.page_bytes,
                                 st.data_bytes_per_token, st.state_bytes)
            out.append(st)
        return out


def make_vision_manager(system: str, specs, capacity: int, tokens_per_page: int = 16):
    """The manager of ``system`` (one of :data:`SYSTEMS`)."""
    import jenga

    if system == "keep":
        return KeepEmbeddingManager(list(specs), capacity, tokens_per_page)
    if system == "jenga":
        return jenga.make_manager("jenga", list(specs), capacity, tokens_per_page=tokens_per_page)
    if system == "reencode":
        return jenga.make_manager("vllm", list(specs), capacity, tokens_per_page=tokens_per_page)
    raise ValueError(f"vision-embedding system {system!r}; allowed: {list(SYSTEMS)}")


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
