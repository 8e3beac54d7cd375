"""EngineSettings / GpuSettings: resolved once from the config, defaults only from the structured configs."""

from dataclasses import fields
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from sim_fakes import tiny_gpu

from harness.backends.settings import EngineSettings, GpuSettings
from harness.config import ConfigError, EngineConf


def test_engine_defaults_are_engineconf():
    s = EngineSettings.of(SimpleNamespace())
    for f in fields(EngineConf):
        assert getattr(s, f.name) == getattr(EngineConf(), f.name), f.name
    assert EngineSettings.of(s) is s  # resolving twice is free


def test_engine_from_dictconfig_and_dict_agree():
    d = {"engine_version": "v1", "tokens_per_page": 32, "max_model_len": 4096}
    a, b = EngineSettings.of(OmegaConf.create(d)), EngineSettings.of(d)
    assert a == b and a.tokens_per_page == 32 and a.max_num_seqs == 256


@pytest.mark.parametrize("version,chunked,mixed", [("v0", False, False), ("v0", True, True),
                                                   ("v1", False, True), ("v1", True, True)])
def test_mixed_batches(version, chunked, mixed):
    assert EngineSettings.of({"engine_version": version, "enable_chunked_prefill": chunked}).mixed_batches is mixed


def test_model_len_falls_back_to_profile():
    prof = SimpleNamespace(max_model_len=777)
    assert EngineSettings.of({}).model_len(prof) == 777
    assert EngineSettings.of({"max_model_len": 100}).model_len(prof) == 100


def test_gpu_required_key_is_one_clear_error():
    g = vars(tiny_gpu()).copy()
    del g["mfu"]
    with pytest.raises(ConfigError, match=r"gpu\.mfu"):
        GpuSettings.of(g)
    ok = GpuSettings.of(tiny_gpu(count=4))
    assert ok.tp == 4 and ok.allreduce_bytes_per_s is None  # GpuConf's default
