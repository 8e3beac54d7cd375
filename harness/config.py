"""Typed schema of a cell config (Hydra structured configs) and :func:`compose_cell`.

A *cell* is one model × dataset × GPU × system × backend × seed. The YAML files under
``harness/conf/<group>/`` are merged into the dataclasses below, so a misspelled key or a value of
the wrong type fails at composition time; :func:`compose_cell` turns Hydra's and OmegaConf's
errors into one :class:`ConfigError` that names the key and the file it came from.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from jenga import registry
from jenga.registry import check_system_names

CONF_DIR = Path(__file__).resolve().parent / "conf"
GROUPS = ("model", "dataset", "gpu", "system", "backend", "mode")


class ConfigError(ValueError):
    """A cell config cannot be composed; the message names the key, the file and the valid values."""


# ------------------------------------------------------------------------------------------- model
@dataclass
class MoeConf:
    """Mixture-of-experts layout (num_experts=0: dense)."""

    num_experts: int = 0
    experts_per_token: int = 0
    expert_layer_period: int = 1      # every `period`-th layer (from `offset`) is an MoE layer
    expert_layer_offset: int = 0
    expert_intermediate_size: int | None = None  # null = model.intermediate_size
    shared_expert: bool = False       # Llama-4: one always-on shared expert per MoE layer


@dataclass
class MambaConf:
    """Mamba mixer dimensions (Jamba). State bytes follow vLLM's cache shapes: conv state
    d_inner × (d_conv − 1), SSM state d_inner × d_state, per layer, in ``state_dtype``."""

    d_inner: int = MISSING
    d_state: int = MISSING
    d_conv: int = MISSING
    dt_rank: int = MISSING
    state_dtype: str = "bfloat16"
    checkpoint_interval: int = 512    # Jenga's prefix-cache state checkpoint (--linear-chunk-size)


@dataclass
class VisionConf:
    """Vision tower facts. ``kind``: ``cross`` (image tokens live only in cross-attention layers,
    mllama) or ``embedding`` (decoder-only VLM: image tokens are prompt tokens whose vision
    embeddings are cached until prefill consumes them)."""

    kind: str = MISSING
    tokens_per_tile: int = MISSING
    max_tiles: int = 1
    encoder_params: int = MISSING
    embedding_dim: int = MISSING      # width of one embedding handed to the LM
    image_token_index: int | None = None


@dataclass
class TokenDropConf:
    """PyramidKV/PyramidInfer-style per-layer token budget (AE ``TopKCalculator`` prefill config)."""

    schedule: str = "cosine"          # cosine | linear
    decay_ratio: float = 0.9          # prefill_decay_ratio
    recent_ratio: float = 0.2         # recent tokens never dropped
    min_tokens: int = 64              # min_context_length
    sink: int = 4                     # streamingllm_sink_len
    num_buckets: int = 4              # layers grouped into this many TokenDropSpecs by keep ratio


@dataclass
class ModelConf:
    """One model, written from its public config.json (see each file's comments for sources)."""

    name: str = MISSING
    hf_id: str = MISSING
    architecture: str = MISSING       # HF architectures[0]
    model_type: str = MISSING         # HF model_type (llama, mllama, gemma2, gemma3, mistral, jamba, ...)
    dtype: str = "bfloat16"           # weight dtype: bfloat16 | fp8
    kv_dtype: str = "bfloat16"        # vLLM kv_cache_dtype=auto keeps KV in the activation dtype
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = MISSING
    max_position_embeddings: int = MISSING
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    total_params: int | None = MISSING  # published total (LM + vision); null = estimated from shapes
    active_params: int | None = None  # LM params per token (MoE: top-k + shared; no vision tower); null = computed
    # Layer kinds: `layer_pattern` repeats to num_layers; `layer_indices` then sets explicit layers.
    # Kinds: full, sliding, chunked, mamba, cross, token_drop.
    layer_pattern: list[str] = field(default_factory=lambda: ["full"])
    layer_indices: dict[str, list[int]] = field(default_factory=dict)
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    # Cross-layer KV sharing: runs of adjacent layers of one kind (full layers: consecutive full
    # layers across blocks) share one KV cache in groups of this size (1 = no sharing).
    kv_share_group_size: int = 1
    moe: MoeConf = field(default_factory=MoeConf)
    mamba: MambaConf | None = None
    vision: VisionConf | None = None
    token_drop: TokenDropConf | None = None
    assumed: list[str] = field(default_factory=list)  # keys whose values are ASSUMED, not published
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- dataset
@dataclass
class DatasetConf:
    """A workload. ``source: twin`` generates requests from the statistics in ``stats``
    (top-level ``datasets/``); ``source: hf`` loads the real dataset with HF ``datasets``."""

    name: str = MISSING
    source: str = "twin"              # twin | hf
    stats: str = MISSING              # file under datasets/ with the twin's statistics
    num_requests: int = MISSING
    output_len: int | None = None  # null = the dataset's own output length
    max_len: int | None = None     # cap on prompt + output (arXiv-QA --hf-max-len)
    articles_per_group: int | None = None  # arXiv-QA: null = as many as fit under max_len
    questions_per_article: int = 4
    subset: str | None = None      # arXiv-QA: ministral | gemma2 (AE article-id lists)
    input_len_min: int | None = None   # microbench/synthetic: uniform input length range
    input_len_max: int | None = None
    output_len_min: int | None = None
    output_len_max: int | None = None
    image_tokens: int | None = None   # image_mix: image tokens of an image-carrying request
    image_prob: float = 1.0           # image_mix: fraction of requests that carry an image
    hf_id: str | None = None
    hf_subset: str | None = None
    hf_split: str | None = None
    hf_fallback_id: str | None = None
    tokenizer: str | None = None   # local tokenizer directory for source=hf (no hub downloads)


# --------------------------------------------------------------------------------------------- gpu
@dataclass
class GpuConf:
    """One GPU type (datasheet values) and the tensor-parallel degree ``count``."""

    name: str = MISSING
    memory_bytes: int = MISSING
    peak_bf16_flops: float = MISSING
    peak_fp8_flops: float = MISSING
    hbm_bytes_per_s: float = MISSING
    interconnect_bytes_per_s: float = MISSING
    allreduce_bytes_per_s: float | None = None   # per-direction link bandwidth (None: interconnect / 2)
    allreduce_latency_s: float | None = None     # per-collective latency (None: cost.ALLREDUCE_LATENCY_S)
    mfu: float = MISSING
    mbu: float = MISSING
    count: int = 1
    # Step-time constants fitted by scripts/calibrate.py from published measurements (issue 21);
    # read only by harness/backends/cost/model.py. None: the datasheet mfu/mbu path.
    calibration: Any = None


@dataclass
class SystemConf:
    """Memory-management system (name as in ``jenga.make_manager``) and its options.
    ``options_by_engine``: options that differ between the artifact's v0 and v1 forks, keyed by
    ``engine.engine_version``; merged over ``options`` for that engine (harness.backends.sim.engine)."""

    name: str = MISSING
    options: dict[str, Any] = field(default_factory=dict)
    options_by_engine: dict[str, Any] = field(default_factory=dict)


@dataclass
class BackendConf:
    """Execution backend: sim | vllm_sched | vllm."""

    name: str = MISSING
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModeConf:
    """smoke (tiny, seconds) or full (the paper's request counts)."""

    name: str = MISSING
    max_requests: int | None = None
    length_scale: float = 1.0         # scales prompt lengths (and max_len) of generated workloads
    max_output_len: int | None = None


@dataclass
class EngineConf:
    """vLLM engine arguments of the artifact's launch commands (vLLM defaults otherwise)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = False
    enable_prefix_caching: bool = False
    enforce_eager: bool = False
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    engine_version: str = "v0"
    tokens_per_page: int = 16
    kv_cache_bytes: int | None = None
    request_rate: float = float("inf")
    num_speculative_tokens: int = 0
    spec_acceptance_rate: float | None = None
    # Speculative decoding's draft model (a harness/conf/model/ name): draft and target share one KV
    # pool (backend=sim only; harness/backends/sim/specdec.py). None: no draft.
    draft_model: str | None = None
    # False: the vLLM v0 multimodal baseline that stores no vision embeddings across steps and
    # re-runs the encoder for every prefill chunk touching an image (backend=sim only;
    # harness/backends/sim/vision_cache.py). True: the encoder runs once per image.
    encoder_cache: bool = True
    # Today's vLLM admits a request only if its whole prompt fits (scheduler_reserve_full_isl);
    # None: on for vllm_current / jenga_current, off for the engines the artifact ran (harness/backends/sim/engine.py).
    full_prompt_admission: bool | None = None
    # vLLM v0's --disable-async-output-proc. v0 also turns async output processing off by itself
    # under enforce_eager (ModelConfig.verify_async_output_proc); harness/backends/cost/model.py, OutputProc.
    disable_async_output_proc: bool = False


@dataclass
class CellConf:
    """A composed cell."""

    model: ModelConf = MISSING
    dataset: DatasetConf = MISSING
    gpu: GpuConf = MISSING
    system: SystemConf = MISSING
    backend: BackendConf = MISSING
    mode: ModeConf = MISSING
    engine: EngineConf = field(default_factory=EngineConf)
    seed: int = 0
    out_dir: str = "results/runs"
    force: bool = False


# Every registry system is a ``system=`` value (read live, :func:`jenga.registry.all_system_names`);
# the study-only variants (registry ``cell=False``) need the sim backend and what they model
# (:func:`_check_variants`). Backend names are the ``harness/conf/backend`` files (one per entry of
# ``harness.backends.REGISTRY``; tests/test_layering.py checks the two agree): config imports no backend.
check_system_names(("per_model_split", "marconi"), "harness.config._check_variants")
ENGINE_VERSIONS = ("v0", "v1")
SOURCES = ("twin", "hf")


def register() -> None:
    """Register the schema in Hydra's ConfigStore (idempotent)."""
    ConfigStore.instance().store(name="cell_schema", node=CellConf)


register()


def options(group: str, conf_dir: Path | None = None) -> list[str]:
    """Names of the YAML files of one config group (the valid values of ``group=``)."""
    return sorted(p.stem for p in ((conf_dir or CONF_DIR) / group).glob("*.yaml"))


def _check_values(cfg: DictConfig, choices: dict[str, str], conf: Path | None = None) -> None:
    """Enumerated values that a dataclass cannot express as types."""
    checks = [("system", "name", registry.all_system_names()), ("backend", "name", tuple(options("backend", conf))),
              ("dataset", "source", SOURCES),
              ("engine", "engine_version", ENGINE_VERSIONS)]
    for group, key, allowed in checks:
        value = cfg[group][key]
        if value not in allowed:
            where = f"harness/conf/{group}/{choices.get(group)}.yaml or an override" if group in choices \
                else "an override"
            raise ConfigError(f"{group}.{key}={value!r} (from {where}) is not valid; allowed: {list(allowed)}")


def _missing(cfg: DictConfig, choices: dict[str, str]) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        group = key.split(".")[0]
        src = f"harness/conf/{group}/{choices[group]}.yaml" if group in choices else "harness/conf/config.yaml"
        raise ConfigError(f"missing mandatory value {key!r} (set it in {src}); all missing: {missing}")


_INITIALIZED_DIR: str | None = None


def release_hydra() -> None:
    """Clear Hydra's global state that :func:`compose_cell` keeps initialised (a Hydra app such as
    ``harness.run`` initialises its own); the next compose initialises again."""
    from hydra.core.global_hydra import GlobalHydra

    global _INITIALIZED_DIR
    GlobalHydra.instance().clear()
    _INITIALIZED_DIR = None


def compose_cell(overrides: list[str] | tuple[str, ...] = (), conf_dir: str | Path | None = None) -> DictConfig:
    """Compose one cell config with Hydra's compose API.

    ``overrides`` are Hydra overrides (``model=gemma3_12b``, ``dataset.num_requests=4``). Unknown
    group options, ill-typed or missing values raise :class:`ConfigError` naming the key, the file
    and the valid values. ``conf_dir`` replaces ``harness/conf`` (tests).
    """
    overrides = list(overrides)
    conf = Path(conf_dir) if conf_dir else CONF_DIR
    # A cell composed twice in one process: the second is a copy of the first (~2 ms instead of
    # ~100 ms). Keyed by the config folder's files and their modification times, so an edited
    # config file is composed afresh. Kept pickled (:func:`copy_config`).
    stamp = _conf_stamp(conf)
    key = (tuple(overrides), str(conf), stamp)
    hit = _COMPOSED.get(key)
    if hit is not None:
        return pickle.loads(hit)
    cfg = _compose_cell(overrides, conf, stamp)
    if len(_COMPOSED) >= 4096:
        _COMPOSED.clear()
    _COMPOSED[key] = pickle.dumps(cfg)
    return cfg


_COMPOSED: dict[tuple, bytes] = {}


def copy_config(cfg: DictConfig) -> DictConfig:
    """An independent copy of a composed config: a pickle round trip (the way every cell config
    reaches a study's pool workers), ~2.3 ms where ``DictConfig.copy``'s deep copy takes ~6 ms."""
    return pickle.loads(pickle.dumps(cfg))


def _conf_stamp(conf: Path) -> tuple:
    return tuple((str(p), p.stat().st_mtime_ns) for p in sorted(conf.rglob("*.yaml")))


def _compose_cell(overrides: list[str], conf: Path, stamp: tuple | None = None) -> DictConfig:
    """Hydra's composition in its own two steps: the defaults list (the group choices) is composed
    once per distinct choice and kept; the config overrides (``seed=1``, ``dataset.num_requests=4``)
    are then applied to a copy with the rules ``compose`` applies after the defaults list
    (:func:`_apply_config_overrides`, through OmegaConf's public API). A study's seeds and per-cell
    values so pay one composition per model x dataset x gpu x backend x mode, not one per cell (a
    second system of the same choices is the first's composition with its ``system`` node swapped,
    :func:`_other_system`); tests/test_config.py checks every experiment cell against a whole
    ``compose``."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for ov in overrides:
        head = ov.split("=", 1)[0].lstrip("+~")
        if head in GROUPS and "=" in ov:
            value = ov.split("=", 1)[1]
            if value not in options(head, conf):
                raise ConfigError(f"unknown {head} {value!r}; valid {head} names: {options(head, conf)}")
    try:
        split = _split_overrides(overrides)
        if split is None:                       # Hydra's own nodes, packages, sweeps: one whole compose
            cfg, choices = _hydra_compose(overrides, conf)
        else:
            groups, values = split
            key = (tuple(groups), str(conf), stamp if stamp is not None else _conf_stamp(conf))
            if key not in _DEFAULTS_COMPOSED:
                if len(_DEFAULTS_COMPOSED) >= 1024:
                    _DEFAULTS_COMPOSED.clear()
                    _BY_OTHER_GROUPS.clear()
                rest = _without_system(groups)
                entry = _other_system(groups, rest, key[1:], conf)
                if entry is None:
                    base, choices = _hydra_compose(groups, conf)
                    entry = pickle.dumps(base), choices
                    # Other systems may start from this composition only if its system node is
                    # exactly the system file over its schema (no other file wrote under system).
                    if rest is not None and base.system == _system_node(choices.get("system"), conf):
                        _BY_OTHER_GROUPS.setdefault(rest + key[1:], key)
                _DEFAULTS_COMPOSED[key] = entry
            base, choices = _DEFAULTS_COMPOSED[key]
            cfg = pickle.loads(base)
            if values:
                _apply_config_overrides(values, cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc)) from exc
    check_cell(cfg, choices, conf)
    return cfg


_DEFAULTS_COMPOSED: dict[tuple, tuple[bytes, dict[str, str]]] = {}
# The other group choices (and conf, stamp) -> a key of _DEFAULTS_COMPOSED composed with them.
_BY_OTHER_GROUPS: dict[tuple, tuple] = {}


def other_groups(overrides: Iterable[str]) -> tuple[str, ...]:
    """The group overrides (``model=...``, ``gpu=...``) but ``system=``: cells alike in these share
    one Hydra composition (:func:`_other_system`)."""
    return tuple(o for o in overrides if o.split("=", 1)[0] in GROUPS and not o.startswith("system="))


def _without_system(groups: list[str]) -> tuple[str, ...] | None:
    """:func:`other_groups` of group overrides, or None unless exactly one names the system."""
    rest = other_groups(groups)
    return rest if len(rest) == len(groups) - 1 else None


def _other_system(groups: list[str], rest: tuple | None, tail: tuple,
                  conf: Path) -> tuple[bytes, dict[str, str]] | None:
    """The defaults composition of ``groups`` from one composed with the same other choices and
    another system: a copy with its ``system`` node replaced by the chosen system file merged over
    its schema (``SystemConf``), which is what Hydra's compose puts there where no other config
    file writes under ``system`` (checked on the first composition: its node must equal its own
    system file's) and the system file has no defaults list of its own (else None, and the caller
    composes whole). A study's four systems of one model so pay one Hydra
    compose, not four (~0.2 s each; issue 20); tests/test_config.py compares every study cell with
    one whole compose."""
    done = _BY_OTHER_GROUPS.get(rest + tail) if rest is not None else None
    if done is None:
        return None
    name = next(g for g in groups if g.split("=", 1)[0] == "system").split("=", 1)[1]
    node = _system_node(name, conf)
    kept = _DEFAULTS_COMPOSED.get(done)
    if node is None or kept is None:
        return None
    base, choices = kept
    cfg = pickle.loads(base)
    cfg.system = node
    return pickle.dumps(cfg), {**choices, "system": name}


def _system_node(name: str | None, conf: Path) -> DictConfig | None:
    """System file ``name`` merged over ``SystemConf``, or None where that is not what Hydra would
    compose (no such file, its own defaults list) or the merge fails (Hydra's compose then names
    the problem)."""
    from omegaconf.errors import OmegaConfBaseException

    path = conf / "system" / f"{name}.yaml"
    if name is None or not path.is_file():
        return None
    node = OmegaConf.load(path)
    if not isinstance(node, DictConfig) or "defaults" in node:
        return None
    try:
        return OmegaConf.merge(OmegaConf.structured(SystemConf), node)
    except OmegaConfBaseException:
        return None


def _apply_config_overrides(overrides: list, cfg: DictConfig) -> None:
    """Apply parsed config (non-group) overrides to a composed cell with Hydra's rules (hydra 1.3,
    ``ConfigLoaderImpl._apply_overrides_to_config``), through public OmegaConf calls only: ``~key``
    deletes, ``+key`` adds (an existing scalar is an error), ``++key`` adds or sets, ``key`` sets an
    existing key. tests/test_config.py checks every study cell against one whole ``compose``."""
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    for o in overrides:
        key, value = o.key_or_group, o.value()
        try:
            if o.is_delete():
                current = OmegaConf.select(cfg, key, throw_on_missing=False)
                if current is None:
                    raise ConfigCompositionException(f"Could not delete from config. '{key}' does not exist.")
                if value is not None and value != current:
                    raise ConfigCompositionException(f"Could not delete from config. The value of '{key}' is "
                                                     f"{current} and not {value}.")
                parent, _, leaf = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
            elif o.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is None or isinstance(value, (dict, list)):
                    OmegaConf.update(cfg, key, value, merge=True, force_add=True)
                else:
                    raise ConfigCompositionException(f"Could not append to config. An item is already at '{key}'.")
            elif o.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as ex:
                    raise ConfigCompositionException(f"Could not override '{key}'.\nTo append to your config use "
                                                     f"+{o.input_line}") from ex
        except OmegaConfBaseException as ex:
            raise ConfigCompositionException(f"Error merging override {o.input_line}") from ex


def _split_overrides(overrides: list[str]) -> tuple[list[str], list] | None:
    """(group overrides as written, parsed config overrides) as Hydra's defaults list splits them
    (``defaults_list.Overrides``: a group name with a non-dict value is a group override), or None
    where the override touches Hydra's own config, a package or a sweep (composed whole)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    groups, values = [], []
    for line, o in zip(overrides, parsed, strict=True):
        key = o.key_or_group
        if key.startswith("hydra") or "/" in key or o.package is not None or o.is_sweep_override():
            return None
        if key in GROUPS and not isinstance(o.value(), dict):
            groups.append(line)
        else:
            values.append(o)
    return groups, values


def _hydra_compose(overrides: list[str], conf: Path) -> tuple[DictConfig, dict[str, str]]:
    """One whole Hydra ``compose`` (hydra node dropped) and the group choices it made."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    global _INITIALIZED_DIR
    gh = GlobalHydra.instance()
    # Initialising Hydra costs more than composing; keep it while the config dir is ours.
    if not (gh.is_initialized() and _INITIALIZED_DIR == str(conf)):
        if gh.is_initialized():
            gh.clear()
        initialize_config_dir(config_dir=str(conf), version_base="1.3")
        _INITIALIZED_DIR = str(conf)
    cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    choices = {k: v for k, v in OmegaConf.to_container(cfg.hydra.runtime.choices).items() if k in GROUPS}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def check_cell(cfg: DictConfig, choices: dict[str, str] | None = None, conf_dir: str | Path | None = None) -> None:
    """Every check of a composed cell, once, before any work: mandatory values, enumerated names,
    value ranges (:func:`validate`) and the study variants' needs (:func:`_check_variants`).
    Raises :class:`ConfigError` naming the key."""
    choices = choices or {}
    _unknown_keys(cfg)
    _missing(cfg, choices)
    _check_values(cfg, choices, Path(conf_dir) if conf_dir else None)
    validate(cfg)
    _check_variants(cfg, Path(conf_dir) if conf_dir else CONF_DIR)


def _check_variants(cfg: DictConfig, conf: Path) -> None:
    """The simulator's variants (harness/backends/sim/variants.py) and what each needs: a draft
    model that names a model file, speculative tokens and an acceptance rate with it; the study-only
    systems of jenga's registry and the variant keys on backend=sim only; ``per_model_split`` with a
    draft model; ``marconi`` on a model with Mamba layers."""
    e, system, backend = cfg.engine, str(cfg.system.name), str(cfg.backend.name)
    draft = e.draft_model
    if draft is not None:
        if draft not in options("model", conf):
            raise ConfigError(f"engine.draft_model={draft!r} is not a model; valid names: {options('model', conf)}")
        if backend != "sim":
            raise ConfigError(f"engine.draft_model={draft!r}: speculative decoding with a draft in the KV pool "
                              f"is simulated by backend=sim only, not backend={backend}")
        if not e.num_speculative_tokens:
            raise ConfigError(f"engine.draft_model={draft!r} needs engine.num_speculative_tokens >= 1")
        if e.spec_acceptance_rate is None:
            raise ConfigError(f"engine.draft_model={draft!r} needs engine.spec_acceptance_rate (the fixed "
                              "per-proposal acceptance probability, the artifact's --fixed-acceptance-rate)")
    if not e.encoder_cache and (cfg.model.vision is None or cfg.model.vision.kind != "embedding"):
        raise ConfigError(f"engine.encoder_cache=false (re-run the vision encoder per chunk) needs a model whose "
                          f"vision embeddings are prompt tokens (model.vision.kind=embedding); model={cfg.model.name} "
                          "has none")
    if not e.encoder_cache and backend != "sim":
        raise ConfigError(f"engine.encoder_cache=false (the vision-encoder re-run baseline) is simulated by "
                          f"backend=sim only, not backend={backend}")
    if system in registry.REGISTRY and not registry.REGISTRY[system].cell and backend != "sim":
        raise ConfigError(f"system.name={system!r} is a study variant simulated by backend=sim only, "
                          f"not backend={backend}")
    if system == "per_model_split" and draft is None:
        raise ConfigError("system.name='per_model_split' (one KV cache per model of a speculative-decoding "
                          "pair) needs engine.draft_model")
    if system == "marconi" and cfg.model.mamba is None:
        raise ConfigError(f"system.name='marconi' (Mamba-state checkpoint admission) needs a model with Mamba "
                          f"layers; model.mamba is null for model={cfg.model.name}")


# ------------------------------------------------------------------------------------ value ranges
# (key, lowest allowed, lowest inclusive?, highest allowed, why). ``None`` values are skipped (null
# means "the default"); a dataclass cannot state a range, and OmegaConf does not call
# ``__post_init__`` on overrides, so the ranges live here and :func:`check_cell` applies them once.
_POS = (1, True, None)          # an integer count or length: at least 1
RANGES: tuple[tuple[str, float, bool, float | None], ...] = (
    ("seed", 0, True, None),
    ("dataset.num_requests", *_POS), ("dataset.output_len", *_POS), ("dataset.max_len", *_POS),
    ("dataset.articles_per_group", *_POS), ("dataset.questions_per_article", *_POS),
    ("dataset.input_len_min", *_POS), ("dataset.input_len_max", *_POS),
    ("dataset.output_len_min", *_POS), ("dataset.output_len_max", *_POS),
    ("dataset.image_tokens", 0, True, None), ("dataset.image_prob", 0, True, 1.0),
    ("gpu.count", *_POS), ("gpu.memory_bytes", 0, False, None),
    ("gpu.peak_bf16_flops", 0, False, None), ("gpu.peak_fp8_flops", 0, False, None),
    ("gpu.hbm_bytes_per_s", 0, False, None), ("gpu.interconnect_bytes_per_s", 0, False, None),
    ("gpu.mfu", 0, False, 1.0), ("gpu.mbu", 0, False, 1.0),
    ("mode.max_requests", *_POS), ("mode.length_scale", 0, False, None), ("mode.max_output_len", *_POS),
    ("engine.max_num_seqs", *_POS), ("engine.max_num_batched_tokens", *_POS),
    ("engine.gpu_memory_utilization", 0, False, 1.0), ("engine.max_model_len", *_POS),
    ("engine.tokens_per_page", *_POS), ("engine.kv_cache_bytes", 0, False, None),
    ("engine.request_rate", 0, False, None), ("engine.num_speculative_tokens", 0, True, None),
    ("engine.spec_acceptance_rate", 0, True, 1.0),
    ("model.num_layers", *_POS), ("model.hidden_size", *_POS), ("model.num_heads", *_POS),
    ("model.num_kv_heads", *_POS), ("model.head_dim", *_POS), ("model.vocab_size", *_POS),
    ("model.max_position_embeddings", *_POS), ("model.sliding_window", *_POS),
    ("model.attention_chunk_size", *_POS), ("model.kv_share_group_size", *_POS),
    ("model.mamba.checkpoint_interval", *_POS),
)
# Keys where +inf means "unbounded" (all requests at once); everywhere else a value must be finite.
_INF_OK = ("engine.request_rate",)


def _nan_keys(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys of every NaN or infinite float in a config (lists included)."""
    import math

    out: list[str] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and key not in _INF_OK)):
            out.append(key)
        elif isinstance(v, (dict, list)):
            out.extend(_nan_keys(v, key))
    return out


def _schema_of(path: str):
    """The dataclass that types the config node at dotted ``path`` ("" = the cell), or None where
    the node is free-form (``model.extra``, ``system.options``, ...) or not in the schema."""
    import dataclasses
    import types
    import typing

    cls = CellConf
    for part in [p for p in path.split(".") if p]:
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return None
        typ = hints[part]
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        typ = args[0] if typing.get_origin(typ) in (typing.Union, types.UnionType) and len(args) == 1 else typ
        if not dataclasses.is_dataclass(typ):
            return None
        cls = typ
    return cls


def _did_you_mean(path: str) -> str:
    """`` (did you mean 'dataset.num_requests'?)`` for a misspelled dotted key, or ''."""
    import dataclasses
    import difflib

    parent, _, name = path.rpartition(".")
    cls = _schema_of(parent)
    if cls is None:
        return ""
    near = difflib.get_close_matches(name, [f.name for f in dataclasses.fields(cls)], n=1)
    return f" (did you mean {'.'.join(filter(None, (parent, near[0])))!r}?)" if near else ""


def _unknown_keys(cfg: DictConfig, path: str = "") -> None:
    """A key the schema does not have is a typo, even when added with ``+`` (Hydra lets ``+`` add a
    key to a structured node and the cell would silently run without it): one error naming it."""
    import dataclasses

    cls = _schema_of(path)
    if cls is None:
        return
    names = {f.name for f in dataclasses.fields(cls)}
    for key in cfg:
        full = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(f"unknown key {full!r}{_did_you_mean(full)}; the keys of "
                              f"{path or 'a cell'} are the fields of harness/config.py {cls.__name__}: {sorted(names)}")
        if OmegaConf.is_missing(cfg, key):
            continue
        node = OmegaConf.select(cfg, str(key), throw_on_resolution_failure=False)
        if isinstance(node, DictConfig):
            _unknown_keys(node, full)


def validate(cfg: DictConfig) -> None:
    """Refuse out-of-range values, naming the key: counts and lengths of 0 or below, fractions
    outside (0, 1] (``engine.gpu_memory_utilization=1.5`` would hand vLLM more memory than the GPU
    has), a negative seed, and NaN (or infinity) anywhere."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    bad = _nan_keys(plain)
    if bad:
        raise ConfigError(f"{bad[0]}={OmegaConf.select(cfg, bad[0])} is not a number; every value must be finite"
                          + (f" (also: {bad[1:]})" if len(bad) > 1 else ""))
    for key, lo, lo_incl, hi in RANGES:
        value = OmegaConf.select(cfg, key, default=None)
        if value is None or isinstance(value, bool):
            continue
        below = value < lo if lo_incl else value <= lo
        if below or (hi is not None and value > hi):
            lo_txt = f"{'>=' if lo_incl else '>'} {lo:g}"
            rng = lo_txt if hi is None else f"{lo_txt} and <= {hi:g}"
            raise ConfigError(f"{key}={value} is out of range: it must be {rng}")
    d = cfg.dataset
    for a, b in (("input_len_min", "input_len_max"), ("output_len_min", "output_len_max")):
        if d[a] is not None and d[b] is not None and d[a] > d[b]:
            raise ConfigError(f"dataset.{a}={d[a]} is above dataset.{b}={d[b]}")


def _explain(exc: BaseException) -> str:
    """One readable line from a Hydra/OmegaConf composition error chain: the key, what is wrong with
    it and, for a misspelled key, the nearest real one. Hydra's advice to add the key with ``+``
    is dropped: the schema has no such key, and :func:`_unknown_keys` refuses it anyway."""
    parts = []
    e: BaseException | None = exc
    while e is not None:
        msg = str(e).strip()
        if msg and "$VALUE" not in msg and not any(msg in p for p in parts):
            parts.append(msg)
        e = e.__cause__ or e.__context__
    text = "\n".join(parts)
    # Name the file: Hydra says "In 'model/foo'"; users edit harness/conf/model/foo.yaml.
    text = re.sub(r"In '(\w+)/(\w+)'", r"In harness/conf/\1/\2.yaml", text)
    full_key = re.search(r"full_key: (\S+)", text)
    unknown = re.search(r"Key '(\w+)' not in '\w+'", text)
    if unknown and full_key:
        where = re.search(r"In (harness/conf/\S+\.yaml)", text)
        return (f"cannot compose cell config: unknown key {full_key.group(1)!r}{_did_you_mean(full_key.group(1))}"
                + (f" in {where.group(1)}" if where else ""))
    bad_type = re.search(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", text)
    if bad_type and full_key:
        where = re.search(r"In (harness/conf/\S+\.yaml)", text)
        value, typ, want = bad_type.groups()
        return (f"cannot compose cell config: {full_key.group(1)}={value} is not a valid {want.lower()} "
                f"(got {typ})" + (f" in {where.group(1)}" if where else ""))
    noise = ("To append to your config", "full_key:", "reference_type=", "object_type=")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(noise)]
    return f"cannot compose cell config: {'; '.join(lines)}"
