"""Vision embeddings under chunked prefill: Jenga frees consumed embeddings, ``keep`` holds them,
``reencode`` re-runs the encoder for every chunk that touches an image."""

from __future__ import annotations

import numpy as np
import pytest

import jenga
from harness.backends.sim.scheduler import Scheduled, SeqState
from harness.backends.sim.vision_cache import encoder_tokens
from harness.workloads.request import Request
from jenga.interface import ImageSpan
from jenga.spec import FullAttentionSpec, VisionEmbeddingSpec

SPECS = (FullAttentionSpec("full", 2, 256), VisionEmbeddingSpec("vision_embedding", 1, 1024))
# 128-token prompt, one 64-token image at [16, 80).
REQ = Request("r0", 0.0, np.arange(128, dtype=np.int32), 4, images=(ImageSpan(7, 64, 16),))


def _embedding_bytes(mm) -> int:
    return mm.usage().per_type_allocated_bytes.get("vision_embedding", 0)


def test_jenga_frees_consumed_embeddings_chunk_by_chunk():
    mm = jenga.make_manager("jenga", SPECS, 1 << 24)
    page = 16 * 1024
    assert mm.allocate(REQ, 32)          # reaches the image: all 4 embedding pages made
    assert _embedding_bytes(mm) == 4 * page
    assert mm.allocate(REQ, 32)          # tokens 16..32 consumed -> 1 page freed
    assert _embedding_bytes(mm) == 3 * page
    assert mm.allocate(REQ, 32)          # 16..64 consumed
    assert _embedding_bytes(mm) == 1 * page
    assert mm.allocate(REQ, 32)          # the whole image consumed
    assert _embedding_bytes(mm) == 0


def test_keep_holds_embeddings_until_the_request_ends():
    mm = jenga.make_manager("keep_embeddings", SPECS, 1 << 24)
    for _ in range(4):
        assert mm.allocate(REQ, 32)
        assert _embedding_bytes(mm) == 4 * 16 * 1024
    u = mm.usage()
    assert u.unneeded_bytes >= 64 * 1024  # consumed embeddings still held: counted as waste
    mm.free(REQ)
    assert mm.usage().allocated_bytes == 0


def test_reencode_baseline_stores_no_embeddings():
    mm = jenga.make_manager("vllm", SPECS, 1 << 24)  # the reencode baseline's pool
    assert mm.allocate(REQ, 128)
    assert _embedding_bytes(mm) == 0


@pytest.mark.parametrize("c,n,once,again", [(0, 32, 64, 64), (32, 32, 0, 64), (64, 32, 0, 64), (96, 32, 0, 0),
                                            (0, 16, 0, 0)])
def test_encoder_tokens_once_or_per_chunk(c, n, once, again):
    seq = SeqState(REQ)
    img = 64 if c <= 16 < c + n else 0   # what the scheduler counts: the chunk reaching the image start
    s = Scheduled(seq, n, c, img, False)
    assert encoder_tokens(s, reencode=False) == once
    assert encoder_tokens(s, reencode=True) == again
