"""Vision embeddings kept for the request's lifetime (paper §6.2, §7.4 ablation).

Jenga stores an image's embeddings as a layer type in the KV pool and frees them chunk by chunk as
chunked prefill consumes them (``VisionEmbeddingPolicy``). This system is the same LCM pool with
the embeddings held from the step that reaches the image until the request finishes.
"""

from __future__ import annotations

from jenga.jenga_manager import JengaManager
from jenga.policies import VisionEmbeddingPolicy, cdiv
from jenga.reqstate import StorageType


class KeepEmbeddingPolicy(VisionEmbeddingPolicy):
    """Vision embeddings held from the step that reaches the image until the request ends."""

    def held_intervals(self, rs, prev, T, tpp):
        return [(base, base + cdiv(im.num_tokens, tpp)) for im, base in rs.images_with_base(self, tpp)
                if T > im.c0]


class KeepEmbeddingManager(JengaManager):
    """Jenga's LCM pool; ``storage_types`` swaps the vision-embedding policy for
    :class:`KeepEmbeddingPolicy`."""

    system_name = "keep_embeddings"

    def storage_types(self, **options) -> list[StorageType]:
        out = []
        for st in super().storage_types(**options):
            if isinstance(st.policy, VisionEmbeddingPolicy):
                st = StorageType(st.name, KeepEmbeddingPolicy(st.policy.spec), st.tokens_per_page, st.page_bytes,
                                 st.data_bytes_per_token, st.state_bytes)
            out.append(st)
        return out
