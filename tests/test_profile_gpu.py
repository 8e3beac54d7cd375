"""scripts/profile_gpu.py on CPU with shrunken shapes: it writes a table the cost model loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost.model import CostModel, gpu_efficiency

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "profile_gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("profile_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_cpu_tiny_profile_is_loaded_by_the_cost_model(tmp_path):
    mod = _load()
    out = tmp_path / "h100.yaml"
    assert mod.main(["--gpu", "h100", "--device", "cpu", "--tiny", "--iters", "1", "--out", str(out)]) == 0
    table = yaml.safe_load(out.read_text())
    assert table["gpu"] == "h100" and "cpu" in table["device"]
    assert table["mfu_bf16"] > 0 and table["mbu"] > 0 and "mfu_fp8" not in table   # no FP8 GEMM on CPU
    assert {r["dtype"] for r in table["gemms"]} == {"bf16"}
    # Every zoo model contributes its shapes; the decode (1-token) and prefill sizes are both there.
    assert {r["tokens"] for r in table["gemms"]} == set(mod.TINY_TOKENS)
    # Whole layers and one GPU's shard at each experiment TP degree, each with its own efficiency.
    assert {r["tp"] for r in table["gemms"]} == set(mod.TP_DEGREES) == set(table["by_tp"])
    assert table["by_tp"][1]["mfu_bf16"] == table["mfu_bf16"]
    # The eager decoder layer runs everywhere; its CUDA-graph twin only on a GPU.
    assert table["decoder_layer"]["eager_s"] > 0 and table["decoder_layer"]["graph_s"] is None
    eff = gpu_efficiency(tiny_gpu(name="h100"), tmp_path)
    assert eff["mfu_bf16"] == table["mfu_bf16"] and eff["mfu_fp8"] == table["mfu_bf16"]
    assert eff["source"].startswith("profiled")
    cm = CostModel(tiny_profile(), tiny_gpu(name="h100"), tiny_engine(), profiles_dir=tmp_path)
    assert cm.bytes_per_s == pytest.approx(1e12 * table["mbu"])


def test_cpu_run_refuses_the_committed_profiles_dir():
    with pytest.raises(SystemExit):
        _load().main(["--gpu", "h100", "--device", "cpu", "--tiny"])
