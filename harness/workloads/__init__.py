"""Workloads: the Request type, real HF loaders and offline synthetic twins.

:func:`build_workload` is the one entry point: it reads ``cfg.dataset`` (which dataset, twin or
real), ``cfg.model`` (vocabulary, vision tower, context length), ``cfg.mode`` (smoke caps),
``cfg.engine`` (max_model_len, request_rate) and ``cfg.seed``.
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig

from harness.workloads import twins
from harness.workloads.request import Request
from harness.workloads.twins import Shape, WorkloadError

__all__ = ["Request", "WorkloadError", "build_workload", "check_context"]

_TWINS = ("mmlu_pro", "mmmu_pro", "arxiv_qa", "sharegpt", "synthetic", "microbench", "image_mix")


def _shape(cfg: DictConfig) -> Shape:
    ds, mode = cfg.dataset, cfg.mode
    n = ds.num_requests if mode.max_requests is None else min(ds.num_requests, mode.max_requests)
    return Shape(num_requests=int(n), seed=int(cfg.seed), vocab_size=int(cfg.model.vocab_size),
                 output_len=ds.output_len, max_len=ds.max_len, length_scale=float(mode.length_scale),
                 max_output_len=mode.max_output_len, model_name=cfg.model.name)


def _image_token(cfg: DictConfig) -> int:
    vis = cfg.model.vision
    if vis is not None and vis.image_token_index is not None and vis.image_token_index < cfg.model.vocab_size:
        return int(vis.image_token_index)
    return int(cfg.model.vocab_size) - 1  # a reserved-looking id; only the count matters


def build_twin(cfg: DictConfig) -> list[Request]:
    """Requests from the offline twin of ``cfg.dataset``."""
    ds, shape = cfg.dataset, _shape(cfg)
    stats = twins.load_stats(ds.stats)
    if ds.name == "mmlu_pro":
        return twins.mmlu_pro(shape, stats)
    if ds.name == "mmmu_pro":
        vision = None if cfg.model.vision is None else dict(cfg.model.vision)
        return twins.mmmu_pro(shape, stats, vision, _image_token(cfg))
    if ds.name == "arxiv_qa":
        return twins.arxiv_qa(shape, stats, ds.subset, ds.articles_per_group, ds.questions_per_article)
    if ds.name == "sharegpt":
        return twins.sharegpt(shape, stats)
    if ds.name == "image_mix":
        from harness.workloads.image_mix import image_mix

        vision = None if cfg.model.vision is None else dict(cfg.model.vision)
        return image_mix(shape, ds, vision, _image_token(cfg))
    if ds.name in ("synthetic", "microbench"):
        return twins.uniform(shape, ds.name, ds.input_len_min, ds.input_len_max, ds.output_len_min,
                             ds.output_len_max)
    raise WorkloadError(f"dataset {ds.name!r} has no offline twin; twins exist for {list(_TWINS)}")


def check_context(requests: list[Request], max_model_len: int, model: str) -> None:
    """Reject (with its id) any request whose prompt + output exceeds the model's context."""
    for r in requests:
        if r.total_len > max_model_len:
            raise WorkloadError(
                f"request {r.request_id}: prompt {r.prompt_len} + output {r.output_len} = {r.total_len} "
                f"tokens exceeds max_model_len={max_model_len} of model {model} (lower dataset.max_len or "
                "raise engine.max_model_len)")


def _arrivals(requests: list[Request], rate: float, seed: int) -> None:
    """All at t=0 for rate=inf (the artifact's default); else a Poisson process."""
    if rate == float("inf"):
        return
    if rate <= 0:
        raise WorkloadError(f"engine.request_rate must be > 0 or inf, got {rate}")
    gaps = twins.rng(seed, 99).exponential(1.0 / rate, size=len(requests))
    for r, t in zip(requests, np.cumsum(gaps) - gaps[0]):
        r.arrival_time = float(t)


def build_workload(cfg: DictConfig) -> list[Request]:
    """The cell's requests: seeded, token-for-token reproducible.

    ``dataset.source=twin`` (default) generates them offline; ``source=hf`` loads the real dataset
    with HF ``datasets`` from the hub or from a local copy (``dataset.hf_id`` = a ``save_to_disk``
    folder, a parquet/JSONL file or a folder of them) and tokenises it with ``dataset.tokenizer``
    (see :mod:`harness.workloads.hf`); an unreachable hub gives one message naming the twin, a bad
    local path or schema one naming the key and the path. Requests longer than the model's context
    (``engine.max_model_len`` or the model's ``max_position_embeddings``) raise
    :class:`WorkloadError` naming the request.
    """
    if cfg.dataset.source == "twin":
        requests = build_twin(cfg)
    elif cfg.dataset.source == "hf":
        from harness.workloads import hf

        requests = hf.load(cfg, _shape(cfg))
    else:
        raise WorkloadError(f"dataset.source={cfg.dataset.source!r}; allowed: ['twin', 'hf']")
    max_len = cfg.engine.max_model_len or cfg.model.max_position_embeddings
    check_context(requests, int(max_len), cfg.model.name)
    _arrivals(requests, float(cfg.engine.request_rate), int(cfg.seed))
    return requests
