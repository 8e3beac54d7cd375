"""The v0 forks' Mamba kernels timed from their launch structure (harness/backends/cost/mamba_kernels.py;
issue 21 §3): launch configuration and grid as in ``csrc/mamba/mamba_ssm/selective_scan_fwd.cu`` /
``causal_conv1d.cu``, the Jenga fork's chunk steps, and the mechanism switch with its negative
controls (off → the roofline; the baseline fork's decode and v1 untouched)."""

from __future__ import annotations

import pytest
from sim_fakes import tiny_engine, tiny_gpu, tiny_profile

from harness.backends.cost import mamba_kernels as mk
from harness.backends.cost.model import CostModel
from jenga.spec import FullAttentionSpec, MambaSpec

H100 = mk.SM_ARCH["h100"]
CAL = {"source": "test", "gemm": {"mfu": 0.5, "mbu": 0.5, "blend": 2.0, "floor_s": 0.0},
       "allreduce": {"latency_s": 1e-5, "bytes_per_s": 1e11}, "eager_layer_s": {"v0": 1e-3}}


def test_scan_config_is_the_kernels_dispatch_on_total_tokens():
    # selective_scan_fwd_cuda: thresholds on params.seqlen (the varlen batch's total tokens)
    assert [mk.scan_config(n) for n in (1, 128, 129, 256, 257, 512, 513, 1024, 1025, 8192)] == [
        (32, 4), (32, 4), (32, 8), (32, 8), (32, 16), (32, 16), (64, 16), (64, 16), (128, 16), (128, 16)]


def test_occupancy_matches_the_kernels_own_launch_bound_comment():
    # "Setting MinBlocksPerMP to be 3 (instead of 2) for 128 threads improves occupancy": the
    # 128-thread variant is register-limited to 3 blocks per SM.
    regs = mk.scan_registers(128, 16)
    assert regs <= 65536 // (3 * 128)
    assert mk.resident_blocks(128, regs, H100) == 3
    # One warp with 4 items is limited by the 32-blocks-per-SM cap (cc 9.0), 24 on L4 (cc 8.9).
    assert mk.resident_blocks(32, mk.scan_registers(32, 4), H100) == 32
    assert mk.resident_blocks(32, mk.scan_registers(32, 4), mk.SM_ARCH["l4"]) == 24


def test_block_chain_grows_with_dstate_and_chunks():
    a = mk.scan_block_cycles(128, 16, 16, 1)
    assert mk.scan_block_cycles(128, 16, 32, 1) > a
    assert mk.scan_block_cycles(128, 16, 16, 2) == 2 * a
    assert mk.conv_block_cycles(4, 2) > mk.conv_block_cycles(4, 1)


def test_latency_bound_launch_is_linear_in_blocks_once_the_gpu_is_full():
    # Decode: one block per (sequence, channel); past one wave the time is work / slots.
    t64 = mk.selective_scan_fwd_seconds([1] * 64, 2048, 16, H100)
    t128 = mk.selective_scan_fwd_seconds([1] * 128, 2048, 16, H100)   # same <32, 4> launch
    assert t128 == pytest.approx(2 * t64, rel=1e-9)
    # One sequence of one channel is one block: the chain itself.
    one = mk.selective_scan_fwd_seconds([1], 1, 16, H100)
    assert one == pytest.approx(mk.scan_block_cycles(32, 4, 16, 1, act_latency=mk.LATENCY_CYCLES.l2) / H100.clock_hz)
    assert mk.selective_scan_fwd_seconds([], 2048, 16, H100) == 0.0


def test_jenga_fork_chunk_steps():
    # LAMetadataBuilder._add_seq_group: prefills split at --linear-chunk-size from their aligned
    # context; decode tokens join step 0; a decode-only batch is one launch.
    assert mk.jenga_fork_launches([(2500, 0, 0), (700, 1024, 0), (1, 50, 0)], 1024) == [
        [1024, 700, 1], [1024], [452]]
    assert mk.jenga_fork_launches([(1, 10, 0)] * 3, 1024) == [[1, 1, 1]]


def _mamba_cm(block_manager="per_layer", version="v0", mech=True, name="h100", tp=4):
    di, ds, dc = 8192, 16, 4
    conv, ssm = di // tp * (dc - 1) * 2, di // tp * ds * 2
    specs = (MambaSpec("mamba", 28, conv + ssm, state_bytes_per_layer=conv + ssm, conv_bytes_per_layer=conv,
                       checkpoint_interval=1024),
             FullAttentionSpec("full", 4, 1024))
    prof = tiny_profile(specs=specs, layers=32, layer_kinds=("mamba",) * 28 + ("full",) * 4,
                        extra={"mamba": {"d_inner": di, "d_state": ds, "d_conv": dc}})
    cal = {**CAL, "mechanisms": {"mamba_scan_latency": mech}}
    return CostModel(prof, tiny_gpu(name=name, count=tp, calibration=cal), tiny_engine(engine_version=version),
                     block_manager=block_manager)


def test_mechanism_on_jenga_fork_decode_is_latency_bound():
    on, off = _mamba_cm(), _mamba_cm(mech=False)
    batch = [(1, 500, 0)] * 512
    lat = on.mamba_latency_time(batch)
    assert lat == pytest.approx(28 * (mk.selective_scan_fwd_seconds([1] * 512, 2048, 16, H100)
                                      + mk.causal_conv1d_fwd_seconds([1] * 512, 2048, 4, H100)))
    roof = off.mamba_kernel_time(512, 512, batch)
    assert on.mamba_kernel_time(512, 512, batch) == pytest.approx(max(roof, lat))
    assert lat > 10 * roof                      # the point of the mechanism: far above the roofline
    # In the step (a graphed decode batch of 200: no eager launch floor to hide behind) it adds
    # exactly the excess over the roofline.
    small = [(1, 500, 0)] * 200
    extra = on.mamba_latency_time(small) - off.mamba_kernel_time(200, 200, small)
    assert on.step_time(small) - off.step_time(small) == pytest.approx(extra, rel=1e-9)


def test_negative_controls_baseline_decode_v1_and_unknown_gpu_keep_the_roofline():
    batch = [(1, 500, 0)] * 512
    roof = _mamba_cm(mech=False).mamba_kernel_time(512, 512, batch)
    # vllm-v0-baseline decodes with selective_state_update (not timed by this mechanism)
    assert _mamba_cm(block_manager="uniform").mamba_kernel_time(512, 512, batch) == pytest.approx(roof)
    assert _mamba_cm(version="v1").mamba_kernel_time(512, 512, batch) == pytest.approx(
        _mamba_cm(version="v1", mech=False).mamba_kernel_time(512, 512, batch))
    assert _mamba_cm(name="toy").mamba_kernel_time(512, 512, batch) == pytest.approx(roof)
    # ...but the baseline fork's prefill runs selective_scan_fwd once over the varlen batch
    pre = [(800, 0, 0)] * 10
    uni = _mamba_cm(block_manager="uniform")
    assert uni.mamba_latency_time(pre) == pytest.approx(28 * (mk.selective_scan_fwd_seconds([800] * 10, 2048, 16, H100)
                                                              + mk.causal_conv1d_fwd_seconds([800] * 10, 2048, 4, H100)))


# ------------------------------------------------------------- v0 KV pool from the reserved peak
def test_caching_allocator_best_fit_and_new_segments():
    from harness.backends.cost.model import caching_allocator_new_bytes as new
    MiB = 1 << 20
    # Everything fits the cached blocks (best fit, split): nothing new is reserved.
    assert new([300 * MiB, 100 * MiB], [250 * MiB, 90 * MiB, 50 * MiB]) == 0
    # 250 MiB takes the 300 MiB block, leaving 50 MiB; a second 250 MiB needs its own segment.
    assert new([300 * MiB], [250 * MiB, 250 * MiB]) == 250 * MiB
    # Sizes round up to 2 MiB; requests of 1-10 MiB get a 20 MiB segment that later ones share.
    assert new([], [(251 * MiB)]) == 252 * MiB
    assert new([], [5 * MiB, 5 * MiB, 5 * MiB]) == 20 * MiB


def test_v0_reserved_peak_counts_sampler_tensors_the_forward_blocks_cannot_hold():
    from harness.backends.cost.model import SAMPLER_BYTES_PER_LOGIT, caching_allocator_new_bytes
    prof = tiny_profile(vocab_size=128_000, hidden_size=1024, intermediate_size=4096)
    eng = tiny_engine(max_num_seqs=256, max_model_len=2048)
    on = CostModel(prof, tiny_gpu(calibration={**CAL, "mechanisms": {"reserved_peak": True}}), eng)
    off = CostModel(prof, tiny_gpu(calibration={**CAL, "mechanisms": {"reserved_peak": False}}), eng)
    live = off.activation_peak_bytes()
    assert live == 256 * 128_000 * SAMPLER_BYTES_PER_LOGIT            # the sampler is the live peak
    P = 2048
    blocks = [P * 2 * 4096 * 2, P * 4096 * 2] + [P * 1024 * 2] * 4
    layer = P * (3 * 4096 + 4 * 1024) * 2
    sampler = [256 * 128_000 * b for b in (2, 4, 4, 8, 1, 4, 4, 1, 4)]
    assert on.activation_peak_bytes() == layer + caching_allocator_new_bytes(blocks, sampler)
    assert on.activation_peak_bytes() > live
    assert on.kv_capacity_bytes() < off.kv_capacity_bytes()
    # v1 is untouched (its own sampler rule).
    v1 = {"engine_version": "v1", "max_num_seqs": 256, "max_model_len": 2048}
    assert CostModel(prof, tiny_gpu(calibration={**CAL, "mechanisms": {"reserved_peak": True}}),
                     tiny_engine(**v1)).activation_peak_bytes() == CostModel(
        prof, tiny_gpu(calibration={**CAL, "mechanisms": {"reserved_peak": False}}), tiny_engine(**v1)).activation_peak_bytes()
