"""Engine and GPU settings, resolved once per cell from the composed config and passed down.

The defaults live in one place, the structured configs :class:`harness.config.EngineConf` and
:class:`harness.config.GpuConf`; :meth:`EngineSettings.of` / :meth:`GpuSettings.of` fill what a
partial source (a test's namespace, a dict) leaves out from them, and a key a ``GpuConf`` declares
required (``???``) that is still missing is one :class:`ConfigError` naming it. Backends and the
cost model read attributes of these frozen objects, never a raw config with defaults of their own.
"""

from __future__ import annotations

from dataclasses import MISSING as DC_MISSING
from dataclasses import dataclass, fields
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from harness.config import ConfigError, EngineConf, GpuConf


def _as_dict(src: Any) -> dict:
    if src is None:
        return {}
    if isinstance(src, dict):
        return src
    if isinstance(src, DictConfig):
        return OmegaConf.to_container(src, resolve=True)
    return vars(src)


def _resolve(cls, conf_cls, src: Any, group: str):
    if isinstance(src, cls):
        return src
    given = _as_dict(src)
    defaults = {f.name: f.default for f in fields(conf_cls)}
    values = {}
    for f in fields(cls):
        value = given.get(f.name, defaults.get(f.name, f.default))
        if value is DC_MISSING or value == MISSING:
            raise ConfigError(f"{group}.{f.name} is required (harness/conf/{group}/)")
        values[f.name] = value
    return cls(**values)


@dataclass(frozen=True)
class EngineSettings:
    """The vLLM engine arguments of one cell (field meanings: :class:`harness.config.EngineConf`)."""

    max_num_seqs: int
    max_num_batched_tokens: int | None
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    enforce_eager: bool
    gpu_memory_utilization: float
    max_model_len: int | None
    engine_version: str
    tokens_per_page: int
    kv_cache_bytes: int | None
    request_rate: float
    num_speculative_tokens: int
    spec_acceptance_rate: float | None
    draft_model: str | None
    encoder_cache: bool
    full_prompt_admission: bool | None
    disable_async_output_proc: bool

    @classmethod
    def of(cls, engine: Any) -> EngineSettings:
        """From ``cfg.engine`` (DictConfig, dataclass, namespace or dict); unset keys take
        ``EngineConf``'s defaults."""
        return _resolve(cls, EngineConf, engine, "engine")

    @property
    def mixed_batches(self) -> bool:
        """Whether the scheduler mixes prefill chunks with decodes: vLLM v1 always does (its
        chunked prefill is on unless disabled, and the artifact's v1 cells keep the default);
        v0 only under ``--enable-chunked-prefill``. The sim and vllm_sched backends schedule by
        this; the real vLLM backend passes the raw ``enable_chunked_prefill`` flag on."""
        return bool(self.enable_chunked_prefill) or self.engine_version == "v1"

    def model_len(self, profile) -> int:
        """``max_model_len``, or the model's own when unset."""
        return int(self.max_model_len or profile.max_model_len)


@dataclass(frozen=True)
class GpuSettings:
    """One cell's GPU (field meanings: :class:`harness.config.GpuConf`)."""

    name: str
    memory_bytes: int
    peak_bf16_flops: float
    peak_fp8_flops: float
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float
    allreduce_bytes_per_s: float | None
    allreduce_latency_s: float | None
    mfu: float
    mbu: float
    count: int
    calibration: Any = None

    @classmethod
    def of(cls, gpu: Any) -> GpuSettings:
        """From ``cfg.gpu``; a key ``GpuConf`` requires and the source lacks is a ConfigError."""
        return _resolve(cls, GpuConf, gpu, "gpu")

    @property
    def tp(self) -> int:
        """Tensor-parallel degree: one cell's GPUs."""
        return int(self.count or 1)
