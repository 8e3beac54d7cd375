"""Cell composition: every experiment cell composes in smoke mode; bad input names key, file, values."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.config import CONF_DIR, GROUPS, ConfigError, compose_cell, options
from harness.models import load_profile
from harness.workloads import build_workload

REPO = Path(__file__).resolve().parent.parent
RESERVED = ("systems", "baseline", "gpus", "per_gpu", "per_system")


def _fmt(v):
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _cells(path: Path, gpu: str):
    exp = yaml.safe_load(path.read_text())
    for cell in exp["cells"]:
        if cell.get("gpus") and gpu not in cell["gpus"]:
            continue
        ov = [f"{k}={_fmt(v)}" for k, v in cell.items() if k not in RESERVED]
        ov += [f"{k}={_fmt(v)}" for k, v in (cell.get("per_gpu") or {}).get(gpu, {}).items()]
        for system in cell.get("systems") or exp["systems"]:
            own = [f"{k}={_fmt(v)}" for k, v in ((cell.get("per_system") or {}).get(system) or {}).items()]
            yield [f"gpu={gpu}", *ov, *own, f"system={system}", "mode=smoke"]


# Every cell x system on H100 takes 3-7 s: those two run in `make test-slow`; L4's (each cell once) here.
@pytest.mark.parametrize("exp, gpu", [pytest.param(e, "h100", marks=pytest.mark.slow, id=f"h100-{e}") for e in ("fig13", "fig14")]
                         + [pytest.param(e, "l4", id=f"l4-{e}") for e in ("fig13", "fig14")])
def test_every_experiment_cell_composes_in_smoke_mode(exp, gpu):
    """Every cell x system on H100; on L4 every cell once (its systems are the same option names,
    composed on H100 already): a Hydra composition costs ~0.1-0.2 s. Each model's profile and
    smoke workload are built once."""
    done_cells, done_models = set(), set()
    for ov in _cells(REPO / "experiments" / f"{exp}.yaml", gpu):
        cell = tuple(o for o in ov if not o.startswith("system="))
        if gpu != "h100" and cell in done_cells:
            continue
        done_cells.add(cell)
        cfg = compose_cell(ov)
        assert cfg.mode.name == "smoke" and cfg.gpu.name == gpu
        if cfg.model.name in done_models:
            continue
        done_models.add(cfg.model.name)
        assert load_profile(cfg.model).weight_bytes > 0
        reqs = build_workload(cfg)
        assert 0 < len(reqs) <= cfg.mode.max_requests
        assert all(r.output_len <= cfg.mode.max_output_len for r in reqs)
    assert len(done_models) >= 6


def test_fig_cells_carry_the_artifact_settings():
    fig14 = {c["model"]: c for c in yaml.safe_load((REPO / "experiments/fig14.yaml").read_text())["cells"]}
    assert fig14["llama3_2_11b_vision"]["engine.max_num_seqs"] == 52
    assert fig14["llama3_2_11b_vision"]["engine.enforce_eager"] is True
    assert fig14["jamba_1_5_mini"]["engine.max_num_seqs"] == 1024
    assert fig14["jamba_1_5_mini"]["gpu.count"] == 4
    assert fig14["jamba_1_5_mini"]["baseline"] == "static_partition"
    assert "vllm" not in fig14["jamba_1_5_mini"]["systems"]
    assert fig14["character_70b_fp8"]["engine.gpu_memory_utilization"] == 0.937
    assert fig14["character_70b_fp8"]["engine.max_model_len"] == 65536
    assert fig14["ministral_8b"]["dataset.max_len"] == 80000
    assert fig14["gemma3_12b"]["dataset.max_len"] == 90000
    assert fig14["llama4_scout"]["gpu.count"] == 8
    assert fig14["pyramidkv_70b_fp8"]["engine.max_model_len"] == 2048
    assert {c["engine.engine_version"] for c in fig14.values()} == {"v0", "v1"}
    assert len(fig14) == 8
    assert len(yaml.safe_load((REPO / "experiments/fig13.yaml").read_text())["cells"]) == 7


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    # The whole model zoo is composed by tests/test_models.py; here the small groups. The study-only
    # systems compose with what they model (tests/test_sim_variants.py: and refuse without it).
    needs = {"per_model_split": ["engine.draft_model=llama3_2_1b_fp8", "engine.num_speculative_tokens=3",
                                 "engine.spec_acceptance_rate=0.7"], "marconi": ["model=jamba_1_5_mini"]}
    for name in options(group) if group != "model" else ["llama3_2_11b_vision"]:
        cfg = compose_cell([f"{group}={name}", *(needs.get(name, []) if group == "system" else [])])
        assert cfg[group].name == name


@pytest.mark.parametrize("group", ["model", "dataset", "gpu", "system"])
def test_unknown_name_lists_valid_ones(group):
    with pytest.raises(ConfigError) as e:
        compose_cell([f"{group}=no_such_thing"])
    msg = str(e.value)
    assert "no_such_thing" in msg
    assert all(name in msg for name in options(group))


def test_ill_typed_override_names_the_key():
    with pytest.raises(ConfigError, match=r"engine\.max_num_seqs"):
        compose_cell(["engine.max_num_seqs=lots"])


def test_enumerated_values_are_checked():
    with pytest.raises(ConfigError, match=r"engine\.engine_version='v9'.*\['v0', 'v1'\]"):
        compose_cell(["engine.engine_version=v9"])
    with pytest.raises(ConfigError, match=r"dataset\.source='web'"):
        compose_cell(["dataset.source=web"])


@pytest.fixture()
def conf_copy(tmp_path):
    dst = tmp_path / "conf"
    shutil.copytree(CONF_DIR, dst)
    return dst


def test_ill_typed_field_in_a_file_names_key_and_file(conf_copy):
    f = conf_copy / "model" / "llama3_1_8b.yaml"
    f.write_text(f.read_text().replace("hidden_size: 4096", "hidden_size: wide"))
    with pytest.raises(ConfigError) as e:
        compose_cell(["model=llama3_1_8b"], conf_dir=conf_copy)
    assert "model.hidden_size" in str(e.value)
    assert "harness/conf/model/llama3_1_8b.yaml" in str(e.value)


def test_missing_field_names_key_and_file(conf_copy):
    f = conf_copy / "gpu" / "l4.yaml"
    f.write_text("\n".join(line for line in f.read_text().splitlines() if not line.startswith("mbu:")))
    with pytest.raises(ConfigError) as e:
        compose_cell(["gpu=l4"], conf_dir=conf_copy)
    assert "gpu.mbu" in str(e.value) and "harness/conf/gpu/l4.yaml" in str(e.value)


def test_misspelled_key_in_a_file_is_rejected(conf_copy):
    f = conf_copy / "dataset" / "sharegpt.yaml"
    f.write_text(f.read_text() + "num_request: 5\n")
    with pytest.raises(ConfigError, match=r"num_request.*\n?.*|harness/conf/dataset/sharegpt.yaml"):
        compose_cell(["dataset=sharegpt"], conf_dir=conf_copy)


def test_gpu_datasheet_values():
    h100, l4, h200 = (compose_cell([f"gpu={g}"]).gpu for g in ("h100", "l4", "h200"))
    assert h100.peak_bf16_flops == pytest.approx(989.4e12) and h100.peak_fp8_flops == pytest.approx(1978.9e12)
    assert h100.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert l4.peak_bf16_flops == pytest.approx(121e12) and l4.hbm_bytes_per_s == pytest.approx(300e9)
    assert h200.hbm_bytes_per_s == pytest.approx(4.8e12)
    assert l4.memory_bytes < h100.memory_bytes < h200.memory_bytes
    assert 22 * 2**30 < l4.memory_bytes < 24e9 and 79 * 2**30 < h100.memory_bytes <= 80 * 2**30


def test_composed_cells_are_cached_as_independent_copies_and_an_edit_recomposes(conf_copy):
    """The compose cache (a study composes each cell twice) must neither leak a caller's mutation
    into the next caller nor serve a stale config after a file changed (negative control: the
    edited value must show up)."""
    import os

    first = compose_cell(["model=llama3_1_8b"], conf_dir=conf_copy)
    first.model.hidden_size = 1  # a caller mutating its copy
    second = compose_cell(["model=llama3_1_8b"], conf_dir=conf_copy)
    assert second.model.hidden_size == 4096
    f = conf_copy / "model" / "llama3_1_8b.yaml"
    f.write_text(f.read_text().replace("hidden_size: 4096", "hidden_size: 4097"))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # coarse-mtime filesystems
    assert compose_cell(["model=llama3_1_8b"], conf_dir=conf_copy).model.hidden_size == 4097


# -- the two-step composition (defaults list kept per group choice, config overrides applied after) --
TRICKY = [
    ["seed=3", "dataset.num_requests=4"],
    ["dataset.num_requests=4", "dataset=arxiv_qa", "model=gemma3_12b"],     # a value before its group
    ["model=gemma3_12b", "model.sliding_window=512", "model.layer_pattern=[full,sliding,sliding]"],
    ["+model.extra.note=hi", "+model.extra.more=[1,2]", "engine.max_num_batched_tokens=null"],
    ["system.options={request_aware:false}", "engine.request_rate=2.5", "gpu=l4", "gpu.count=2"],
    ["system=static_partition", "backend=sim", "mode=smoke", "engine.kv_cache_bytes=1000000000"],
]


def _whole(ov: list[str]) -> str:
    """The reference: one whole Hydra ``compose`` with every override, checked the same way."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from harness.config import _explain, _hydra_compose, check_cell

    try:
        cfg, choices = _hydra_compose(ov, CONF_DIR)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc)) from exc
    check_cell(cfg, choices, CONF_DIR)
    return OmegaConf.to_yaml(cfg)


@pytest.mark.parametrize("ov", TRICKY, ids=lambda ov: " ".join(ov))
def test_two_step_composition_equals_one_hydra_compose(ov):
    from omegaconf import OmegaConf

    from harness.config import _compose_cell

    assert OmegaConf.to_yaml(_compose_cell(ov, CONF_DIR)) == _whole(ov)


def test_two_step_composition_composes_each_group_choice_once(monkeypatch):
    """Three seeds and two request counts of one cell: one Hydra composition; another model: a second.
    Negative control: the configs differ where their overrides do."""
    from harness import config

    calls = []
    real = config._hydra_compose
    monkeypatch.setattr(config, "_DEFAULTS_COMPOSED", {})
    monkeypatch.setattr(config, "_hydra_compose", lambda ov, conf: calls.append(list(ov)) or real(ov, conf))
    cells = [config._compose_cell(["model=ministral_8b", f"seed={s}", f"dataset.num_requests={n}"], CONF_DIR)
             for s in (0, 1, 2) for n in (4, 8)]
    assert calls == [["model=ministral_8b"]]
    assert [(c.seed, c.dataset.num_requests) for c in cells] == [(s, n) for s in (0, 1, 2) for n in (4, 8)]
    cells[0].dataset.num_requests = 99                       # copies, not the kept composition
    assert config._compose_cell(["model=ministral_8b", "seed=0"], CONF_DIR).dataset.num_requests != 99
    config._compose_cell(["model=gemma3_12b", "seed=0"], CONF_DIR)
    assert calls == [["model=ministral_8b"], ["model=gemma3_12b"]]


def test_systems_of_one_cell_share_one_hydra_composition(monkeypatch):
    """Five systems of one model and dataset: one Hydra compose, the other four derived from it (the
    system node swapped, harness.config._other_system), each equal to its own whole compose
    (per-engine options included) and checked with its own system's choices. Negative control:
    another dataset composes again."""
    from omegaconf import OmegaConf

    from harness import config

    calls = []
    real = config._hydra_compose
    monkeypatch.setattr(config, "_DEFAULTS_COMPOSED", {})
    monkeypatch.setattr(config, "_BY_OTHER_GROUPS", {})
    monkeypatch.setattr(config, "_hydra_compose", lambda ov, conf: calls.append(list(ov)) or real(ov, conf))
    cells = [["model=gemma3_12b", "dataset=arxiv_qa", f"system={s}", "seed=1", "engine.engine_version=v1"]
             for s in ("vllm", "max_page", "static_partition", "jenga", "sglang_unified")]
    two = [OmegaConf.to_yaml(config._compose_cell(ov, CONF_DIR)) for ov in cells]
    assert calls == [["model=gemma3_12b", "dataset=arxiv_qa", "system=vllm"]]
    config._compose_cell(["model=gemma3_12b", "dataset=mmlu_pro", "system=jenga"], CONF_DIR)
    assert len(calls) == 2
    assert two == [_whole(ov) for ov in cells]
    assert len(set(two)) == len(cells)


def test_a_system_file_the_swap_cannot_take_is_composed_whole(conf_copy, monkeypatch):
    """A system file with a defaults list of its own is composed by Hydra, not swapped in; a system
    file with an unknown key gives Hydra's own error whether or not another system of the cell was
    composed first (the negative control of the swap's merge)."""
    from harness import config

    calls = []
    real = config._hydra_compose
    monkeypatch.setattr(config, "_DEFAULTS_COMPOSED", {})
    monkeypatch.setattr(config, "_BY_OTHER_GROUPS", {})
    monkeypatch.setattr(config, "_hydra_compose", lambda ov, conf: calls.append(list(ov)) or real(ov, conf))
    f = conf_copy / "system" / "max_page.yaml"
    f.write_text("defaults:\n  - _self_\n" + f.read_text())
    bad = conf_copy / "system" / "static_partition.yaml"
    bad.write_text(bad.read_text() + "bogus_key: 1\n")
    config._compose_cell(["model=gemma3_12b", "system=vllm"], conf_copy)
    cfg = config._compose_cell(["model=gemma3_12b", "system=max_page"], conf_copy)
    assert len(calls) == 2 and cfg.system.name == "max_page"
    assert config._compose_cell(["model=gemma3_12b", "system=jenga"], conf_copy).system.name == "jenga"
    assert len(calls) == 2  # jenga's file the swap takes (the positive control in this folder)
    with pytest.raises(ConfigError) as after_swap:
        config._compose_cell(["model=gemma3_12b", "system=static_partition"], conf_copy)
    monkeypatch.setattr(config, "_DEFAULTS_COMPOSED", {})
    monkeypatch.setattr(config, "_BY_OTHER_GROUPS", {})
    with pytest.raises(ConfigError) as alone:
        config._compose_cell(["model=gemma3_12b", "system=static_partition"], conf_copy)
    assert "bogus_key" in str(alone.value) and str(after_swap.value) == str(alone.value)


def test_no_swap_where_another_file_writes_under_system(conf_copy, monkeypatch):
    """If any other config file writes under ``system`` (here config.yaml's own keys), the first
    composition's system node is not its system file's, so other systems compose whole and keep
    that value (a swap would drop it: the negative control is the value itself)."""
    from harness import config

    calls = []
    real = config._hydra_compose
    monkeypatch.setattr(config, "_DEFAULTS_COMPOSED", {})
    monkeypatch.setattr(config, "_BY_OTHER_GROUPS", {})
    monkeypatch.setattr(config, "_hydra_compose", lambda ov, conf: calls.append(list(ov)) or real(ov, conf))
    f = conf_copy / "config.yaml"
    f.write_text(f.read_text() + "system:\n  options:\n    injected: 1\n")
    first = config._compose_cell(["model=gemma3_12b", "system=vllm"], conf_copy)
    second = config._compose_cell(["model=gemma3_12b", "system=max_page"], conf_copy)
    assert len(calls) == 2
    assert first.system.options.injected == second.system.options.injected == 1


@pytest.mark.parametrize("ov, needle", [
    (["seed=abc"], "seed"),
    (["model.no_such_key=1"], "no_such_key"),
    (["~model.rope_scaling"], "rope_scaling"),              # a schema node cannot be deleted
    (["seed=1,2"], "seed=1,2"),                              # a sweep: Hydra says ambiguous
    (["hydra.job.chdir=true", "seed=x"], "seed"),           # Hydra's own node: composed whole
])
def test_two_step_composition_gives_hydras_errors(ov, needle):
    from harness.config import _compose_cell

    with pytest.raises(ConfigError) as two:
        _compose_cell(ov, CONF_DIR)
    with pytest.raises(ConfigError) as whole:
        _whole(ov)
    assert needle in str(two.value) and str(two.value) == str(whole.value)


@pytest.mark.slow
def test_every_study_cell_composes_as_one_hydra_compose():
    """Every cell of every shipped study file (smoke plans, one seed: ~100 cells) composed in two steps
    equals one whole Hydra compose. (All 2,737 cells of the smoke, full and L4 plans were compared once
    by hand, 818 s, all equal.)"""
    from omegaconf import OmegaConf

    from harness.config import _compose_cell
    from harness.study.plan import plan

    seen = set()
    for f in sorted((REPO / "experiments").glob("*.yaml")):
        study = yaml.safe_load(f.read_text())
        for ov in [r.overrides for r in plan(study, ["mode=smoke", "seeds=0"]).runs]:
            if tuple(ov) not in seen:
                seen.add(tuple(ov))
                assert OmegaConf.to_yaml(_compose_cell(list(ov), CONF_DIR)) == _whole(list(ov)), (f.name, ov)
    assert len(seen) > 90


@pytest.mark.parametrize("ov, message", [
    (["dataset.num_requsts=4"], "unknown key 'dataset.num_requsts' (did you mean 'dataset.num_requests'?)"),
    (["+dataset.num_requsts=4"], "unknown key 'dataset.num_requsts' (did you mean 'dataset.num_requests'?)"),
    (["datset.num_requests=3"], "unknown key 'datset' (did you mean 'dataset'?)"),
    (["model=jamba_1_5_mini", "+model.mamba.d_statee=3"], "unknown key 'model.mamba.d_statee' (did you mean"),
    (["+num_requests=3"], "unknown key 'num_requests'"),
    (["dataset.num_requests=nan"], "dataset.num_requests=nan is not a valid integer (got float)"),
    (["engine.max_num_seqs=lots"], "engine.max_num_seqs=lots is not a valid integer (got str)"),
])
def test_a_misspelled_or_ill_typed_key_is_one_line_naming_it(ov, message):
    """Hydra's own text is seven lines and advises ``+key=value``, which used to add the typo to a
    structured node silently (the cell ran with the default): now one line, and ``+`` is refused too."""
    with pytest.raises(ConfigError) as e:
        compose_cell(ov)
    assert message in str(e.value) and "\n" not in str(e.value) and "To append" not in str(e.value)


def test_plus_still_adds_to_the_free_form_nodes():
    """Negative control: ``model.extra`` and ``backend.options`` are dicts by design."""
    cfg = compose_cell(["+model.extra.note=x", "+backend.options.waste_every=5"])
    assert cfg.model.extra.note == "x" and cfg.backend.options.waste_every == 5
