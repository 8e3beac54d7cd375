"""Step costs by architecture and v0 input preparation (harness/backends/cost/model.py): exact values for the
analytic cases (all-reduce, MoE expert expectation, Mamba kernel bytes, block-table entries) and
monotonicity properties."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost import model as costmod
from harness.backends.cost.model import (
    CostModel,
    allreduce_time,
    block_manager_of,
    expected_distinct_experts,
    gpu_efficiency,
)
from jenga.spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec

CONF = costmod.PROFILES_DIR.parent


def test_allreduce_exact_and_l4_is_slower_than_nvlink():
    msg = 1 << 20
    assert allreduce_time(msg, 1, 450e9, 8e-6) == 0.0
    assert allreduce_time(msg, 8, 450e9, 8e-6) == pytest.approx(8e-6 + 2 * 7 / 8 * msg / 450e9, rel=1e-12)
    assert allreduce_time(msg, 2, 32e9, 25e-6) == pytest.approx(25e-6 + msg / 32e9, rel=1e-12)
    h100 = OmegaConf.load(CONF / "h100.yaml")
    l4 = OmegaConf.load(CONF / "l4.yaml")
    # YAML "450e9" (no dot) must still read as a number.
    assert float(h100.allreduce_bytes_per_s) == 450e9 and float(l4.allreduce_bytes_per_s) == 32e9
    prof = tiny_profile(layers=4)
    b = [(4096, 0, 0)]
    nv = CostModel(prof, tiny_gpu(count=4, allreduce_bytes_per_s=450e9, allreduce_latency_s=8e-6), tiny_engine())
    pcie = CostModel(prof, tiny_gpu(count=4, allreduce_bytes_per_s=32e9, allreduce_latency_s=25e-6), tiny_engine())
    msg = 4096 * 1024 * 2
    diff = 2 * 4 * (allreduce_time(msg, 4, 32e9, 25e-6) - allreduce_time(msg, 4, 450e9, 8e-6))
    assert pcie.step_time(b) - nv.step_time(b) == pytest.approx(diff, rel=1e-9)


def test_moe_distinct_experts_batch_one_and_large():
    assert expected_distinct_experts(16, 1, 1) == pytest.approx(1.0)
    assert expected_distinct_experts(16, 2, 1) == pytest.approx(2.0)
    assert expected_distinct_experts(16, 1, 2) == pytest.approx(16 * (1 - (15 / 16) ** 2))
    assert expected_distinct_experts(16, 1, 10_000) == pytest.approx(16.0)
    assert expected_distinct_experts(16, 1, 0) == 0.0


@settings(max_examples=50, deadline=None)
@given(e=st.integers(2, 64), k=st.integers(1, 8), t=st.integers(1, 5000))
def test_moe_distinct_experts_monotone_and_bounded(e, k, t):
    k = min(k, e)
    x, y = expected_distinct_experts(e, k, t), expected_distinct_experts(e, k, t + 1)
    assert k - 1e-9 <= x <= y <= e + 1e-9


def test_moe_weight_bytes_touched():
    # 16 experts top-1, 1e9 routed params per expert index (over all layers), 2e9 shared+dense.
    e, k, expert = 16, 1, 10**9
    total, active = 2 * 10**9 + e * expert, 2 * 10**9 + k * expert
    prof = tiny_profile(active_params=active, total_params=total, num_experts=e, experts_per_token=k)
    cm = CostModel(prof, tiny_gpu(), tiny_engine())
    assert cm.weight_bytes_read(1) == pytest.approx(2 * active)            # shared + one expert
    assert cm.weight_bytes_read(100_000) == pytest.approx(2 * total)        # every expert
    # A text-served VLM's vision tower is in the published total but never read per token.
    vis = tiny_profile(active_params=active, total_params=total + 5 * 10**8, num_experts=e,
                       experts_per_token=k, extra={"vision_tower_params": 5 * 10**8})
    assert CostModel(vis, tiny_gpu(), tiny_engine()).weight_bytes_read(1) == pytest.approx(2 * active)


def _mamba_profile(layers=3):
    di, ds, dc = 256, 16, 4
    conv, ssm = di * (dc - 1) * 2, di * ds * 2
    spec = MambaSpec("mamba", layers, conv + ssm, state_bytes_per_layer=conv + ssm,
                     conv_bytes_per_layer=conv)
    return tiny_profile(specs=(spec,), layers=layers, layer_kinds=("mamba",) * layers,
                        extra={"mamba": {"d_inner": di, "d_state": ds, "d_conv": dc}}), (di, ds, dc, conv + ssm)


def test_mamba_decode_bytes_exact():
    prof, (di, ds, dc, state) = _mamba_profile()
    gpu = tiny_gpu(hbm_bytes_per_s=1e9, peak_bf16_flops=1e18)   # memory-bound kernel
    cm = CostModel(prof, gpu, tiny_engine())
    seqs = 5
    # Decode: each sequence reads and writes its conv + SSM state in all 3 layers, plus one
    # token's scan activations per layer.
    nbytes = 2 * 3 * state * seqs + seqs * 3 * ((4 * di + 2 * ds) + dc * di) * 2
    assert cm.mamba_kernel_time(seqs, seqs) == pytest.approx(nbytes / 1e9, rel=1e-12)
    assert cm.mamba_kernel_time(0, 0) == 0.0
    # A dense model has no Mamba kernel.
    assert CostModel(tiny_profile(), gpu, tiny_engine()).mamba_kernel_time(10, 10) == 0.0


def test_mamba_prefill_scan_grows_with_tokens_not_state():
    prof, _ = _mamba_profile()
    cm = CostModel(prof, tiny_gpu(hbm_bytes_per_s=1e9), tiny_engine())
    one = cm.mamba_kernel_time(1000, 1)
    assert cm.mamba_kernel_time(2000, 1) > one
    assert cm.mamba_kernel_time(2000, 1) - one == pytest.approx(cm.mamba_kernel_time(2000, 2) - cm.mamba_kernel_time(1000, 2))


def test_v0_input_prep_per_layer_groups_exact():
    specs = (FullAttentionSpec("full", 1, 1024), SlidingWindowSpec("sw", 1, 1024, window=512))
    prof = tiny_profile(specs=specs, layer_kinds=("full", "sliding"))
    v0 = costmod.INPUT_PREP["v0"]
    uni = CostModel(prof, tiny_gpu(), tiny_engine(), block_manager="uniform")
    per = CostModel(prof, tiny_gpu(), tiny_engine(), block_manager="per_layer")
    decode = [(1, 999, 0)] * 3
    # 1000 tokens = 63 blocks; uniform: one table per sequence; per-layer: one per group (2).
    assert uni.input_prep_time(decode) == pytest.approx(3 * 63 * v0.uniform_entry_s)
    assert per.input_prep_time(decode) == pytest.approx(3 * 2 * 63 * v0.per_layer_entry_s)
    prefill = [(4096, 0, 0)]
    assert per.input_prep_time(prefill) == pytest.approx(
        256 * 2 * v0.per_layer_entry_s + 4096 * (v0.prefill_token_s + 2 * v0.slot_token_s))
    # v1 keeps persistent numpy block tables: none of this.
    v1 = CostModel(prof, tiny_gpu(), tiny_engine(engine_version="v1"), block_manager="per_layer")
    assert v1.input_prep_time(decode + prefill) == 0.0
    with pytest.raises(ValueError, match="block_manager"):
        CostModel(prof, tiny_gpu(), tiny_engine(), block_manager="paged")


def test_block_manager_of_follows_the_artifact_forks():
    assert block_manager_of("vllm") == "uniform"
    for s in ("jenga", "max_page", "static_partition"):
        assert block_manager_of(s) == "per_layer"


@settings(max_examples=40, deadline=None)
@given(c=st.integers(0, 200_000), b=st.integers(1, 300), eager=st.booleans(),
       version=st.sampled_from(["v0", "v1"]), manager=st.sampled_from(["uniform", "per_layer"]))
def test_step_time_monotone_in_context_and_batch(c, b, eager, version, manager):
    specs = (FullAttentionSpec("full", 2, 1024), SlidingWindowSpec("sw", 2, 1024, window=4096))
    prof = tiny_profile(specs=specs, layers=4, layer_kinds=("full", "sliding") * 2)
    cm = CostModel(prof, tiny_gpu(), tiny_engine(enforce_eager=eager, engine_version=version),
                   block_manager=manager)
    t = cm.step_time([(1, c, 0)] * b)
    assert cm.step_time([(1, c + 1000, 0)] * b) >= t
    assert cm.step_time([(1, c, 0)] * (b + 1)) >= t


def test_measured_profile_replaces_datasheet_efficiency(tmp_path):
    gpu = tiny_gpu(name="toy", mfu=0.6, mbu=0.8)
    assert gpu_efficiency(gpu, tmp_path)["source"] == "datasheet defaults"
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump({"device": "Toy GPU", "mfu_bf16": 0.5, "mbu": 0.9}))
    eff = gpu_efficiency(gpu, tmp_path)
    assert (eff["mfu_bf16"], eff["mfu_fp8"], eff["mbu"]) == (0.5, 0.5, 0.9)
    cm = CostModel(tiny_profile(), gpu, tiny_engine(), profiles_dir=tmp_path)
    assert cm.flops_per_s == pytest.approx(1e15 * 0.5) and cm.bytes_per_s == pytest.approx(1e12 * 0.9)
    # A TP group's GPU runs narrower shards: the table's by_tp entry for that degree wins.
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(
        {"mfu_bf16": 0.5, "mbu": 0.9, "by_tp": {8: {"mfu_bf16": 0.3, "mbu": 0.7}}}))
    tp8 = CostModel(tiny_profile(), tiny_gpu(name="toy", count=8), tiny_engine(), profiles_dir=tmp_path)
    assert tp8.flops_per_s == pytest.approx(1e15 * 0.3 * 8) and tp8.bytes_per_s == pytest.approx(1e12 * 0.7 * 8)
    assert gpu_efficiency(gpu, tmp_path, tp=4)["mfu_bf16"] == 0.5      # no entry for 4: the TP-1 values
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump({"mfu_bf16": "fast", "mbu": 0.9}))
    with pytest.raises(ValueError, match="mfu_bf16"):
        gpu_efficiency(gpu, tmp_path)


def test_v0_image_mapper_runs_per_image_prefill_only():
    prof = tiny_profile()
    v0 = costmod.INPUT_PREP["v0"]
    cm = CostModel(prof, tiny_gpu(), tiny_engine())
    with_img, without = cm.input_prep_time([(100, 0, 6404)]), cm.input_prep_time([(100, 0, 0)])
    assert with_img - without == pytest.approx(6404 * v0.mm_input_per_image_token_s)
    # 4 tiles of 1601 tokens: the measured ~8.8 ms per tile of transformers 4.45.2's processor.
    assert 6404 * v0.mm_input_per_image_token_s == pytest.approx(4 * 8.8e-3)
    v1 = CostModel(prof, tiny_gpu(), tiny_engine(engine_version="v1"))
    assert v1.input_prep_time([(100, 0, 6404)]) == 0.0
