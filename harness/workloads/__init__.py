"""Workloads: the Request type, real HF loaders and offline synthetic twins.

:func:`build_workload` is the one entry point: it reads ``cfg.dataset`` (which dataset, twin or
real), ``cfg.model`` (vocabulary, vision tower, context length), ``cfg.mode`` (smoke caps),
``cfg.engine`` (max_model_len, request_rate) and ``cfg.seed``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from omegaconf import DictConfig

from harness.workloads import hf, twins
from harness.workloads.image_mix import image_mix
from harness.workloads.request import Request
from harness.workloads.twins import Shape, WorkloadError

__all__ = ["TWINS", "Request", "WorkloadError", "build_workload", "check_context", "twin"]



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


# The offline twins: dataset name -> generator of its requests. One place to add a twin: write the
# generator (usually in twins.py) and register it here with @twin("<name>"), then add
# harness/conf/dataset/<name>.yaml with source: twin (docs/ARCHITECTURE.md walks through one).
TwinGenerator = Callable[[DictConfig, Shape], list[Request]]
TWINS: dict[str, TwinGenerator] = {}


def twin(name: str) -> Callable[[TwinGenerator], TwinGenerator]:
    """Register ``fn(cfg, shape) -> requests`` as the offline twin of dataset ``name``."""
    def register(fn: TwinGenerator) -> TwinGenerator:
        if name in TWINS:
            raise ValueError(f"offline twin {name!r} is registered twice")
        TWINS[name] = fn
        return fn
    return register


def _vision(cfg: DictConfig) -> dict | None:
    return None if cfg.model.vision is None else dict(cfg.model.vision)


@twin("mmlu_pro")
def _mmlu_pro(cfg: DictConfig, shape: Shape) -> list[Request]:
    return twins.mmlu_pro(shape, twins.load_stats(cfg.dataset.stats))


@twin("mmmu_pro")
def _mmmu_pro(cfg: DictConfig, shape: Shape) -> list[Request]:
    return twins.mmmu_pro(shape, twins.load_stats(cfg.dataset.stats), _vision(cfg), _image_token(cfg))


@twin("arxiv_qa")
def _arxiv_qa(cfg: DictConfig, shape: Shape) -> list[Request]:
    ds = cfg.dataset
    return twins.arxiv_qa(shape, twins.load_stats(ds.stats), ds.subset, ds.articles_per_group,
                          ds.questions_per_article)


@twin("sharegpt")
def _sharegpt(cfg: DictConfig, shape: Shape) -> list[Request]:
    return twins.sharegpt(shape, twins.load_stats(cfg.dataset.stats))


@twin("image_mix")
def _image_mix(cfg: DictConfig, shape: Shape) -> list[Request]:
    return image_mix(shape, cfg.dataset, _vision(cfg), _image_token(cfg))


def _uniform(cfg: DictConfig, shape: Shape) -> list[Request]:
    ds = cfg.dataset
    return twins.uniform(shape, ds.name, ds.input_len_min, ds.input_len_max, ds.output_len_min, ds.output_len_max)


twin("synthetic")(_uniform)
twin("microbench")(_uniform)


def build_twin(cfg: DictConfig) -> list[Request]:
    """Requests from the offline twin of ``cfg.dataset`` (:data:`TWINS`)."""
    gen = TWINS.get(cfg.dataset.name)
    if gen is None:
        raise WorkloadError(f"dataset {cfg.dataset.name!r} has no offline twin; twins exist for {sorted(TWINS)}")
    return gen(cfg, _shape(cfg))


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
        requests = hf.load(cfg, _shape(cfg))
    else:
        raise WorkloadError(f"dataset.source={cfg.dataset.source!r}; allowed: ['twin', 'hf']")
    max_len = cfg.engine.max_model_len or cfg.model.max_position_embeddings
    check_context(requests, int(max_len), cfg.model.name)
    _arrivals(requests, float(cfg.engine.request_rate), int(cfg.seed))
    return requests
