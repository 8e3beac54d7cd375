"""harness.whatif (issue 22 §4), its workloads (§3) and the user trace format: answers in seconds,
the --json keys, bad input as one error line before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import whatif as w
from harness.workloads import sessions as ww
from harness.workloads.trace import TraceError, load_trace, validate_trace

REPO = Path(__file__).resolve().parents[1]


def _json(argv):
    return w.run([*argv, "--json"])


def test_json_keys_and_exact_capacity_without_workload():
    out = _json(["model=gpt_oss_20b", "gpu=h100", "engine.max_model_len=32768", "--no-sweep"])
    by = {r["rule"]: r for r in out}
    assert set(by) == {"vllm_hma", "vllm_hma_off", "sglang_pools", "sglang_unified", "trtllm_pools", "jenga"}
    for r in out:
        assert {"rule", "block_size_tokens", "kv_capacity_tokens", "max_concurrency", "prefix_hit_rate"} <= set(r)
        assert r["prefix_hit_rate"] is None
    hma, off = by["vllm_hma"], by["vllm_hma_off"]
    # gpt-oss-20b: 12 full + 12 sliding-128 layers, 8 KV heads x 64 -> one 16-token block of a
    # 12-layer group = 16 * 12 * 2048 B; with the hybrid manager off, 24 layers per block
    assert hma["page_bytes"] == {"full/g0": 393216, "sliding/g0": 393216}
    assert off["page_bytes"] == {"uniform": 786432}
    kv = hma["kv_bytes"]
    assert hma["num_blocks"] == kv // 393216 and off["num_blocks"] == kv // 786432
    # vLLM's reported size: full cdiv(32768,16)=2048 blocks + sliding cdiv(127+8192,16)+1=521 per request
    assert hma["kv_capacity_tokens"] == int(kv // 393216 / (2048 + 521) * 32768)
    assert off["kv_capacity_tokens"] == int(kv // 786432 / 2048 * 32768)
    # hf-mem#70's point, from the engine's own arithmetic: charging the sliding layers at full length
    # halves the capacity (ratio 2569/4096 blocks per request at 32k)
    assert off["kv_capacity_tokens"] / hma["kv_capacity_tokens"] == pytest.approx(2569 / 4096, rel=1e-3)


def test_mamba_hybrid_refused_with_hma_off_and_sweep_moves_capacity():
    out = _json(["model=nemotron_nano_9b_v2", "gpu=h100", "engine.max_model_len=32768"])
    by = {r["rule"]: r for r in out}
    assert "Failed to promote" in by["vllm_hma_off"]["error"]
    hma = by["vllm_hma"]
    # fp32 SSM state (vLLM's NemotronH default): 73,728 conv + 5,242,880 state bytes per layer;
    # 16 * cdiv(5316608, 16 * 4096) = 1312 tokens
    assert set(hma["block_size_tokens"].values()) == {1312}
    assert hma["mamba_cache_mode"] == "align"
    knobs = {s["knob"]: s for s in hma["sweep"]}
    assert knobs["mamba_cache_mode=all"]["block_size_tokens"] == [1536]  # lcm(256, 16) * cdiv(1298, 256)


def test_config_json_path_gives_the_zoo_answer(tmp_path):
    from test_config_json import GPT_OSS_20B
    d = tmp_path / "my-gpt-oss"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(GPT_OSS_20B))
    a = {r["rule"]: r for r in _json([f"model={d / 'config.json'}", "engine.max_model_len=32768", "--no-sweep"])}
    b = {r["rule"]: r for r in _json(["model=gpt_oss_20b", "engine.max_model_len=32768", "--no-sweep"])}
    for rule in ("vllm_hma", "vllm_hma_off"):
        assert a[rule]["block_size_tokens"] == b[rule]["block_size_tokens"]
        assert a[rule]["kv_capacity_tokens"] == pytest.approx(b[rule]["kv_capacity_tokens"], rel=0.01)


@pytest.mark.parametrize("argv,needle", [
    (["gpu=h100"], "model: required"),
    (["model=nope"], "model=nope"),
    (["model=gpt_oss_20b", "rules=vllm_hma,sglang_magic"], "sglang_magic"),
    (["model=gpt_oss_20b", "vllm_hma.mamba_mode=all"], "vllm_hma.mamba_mode"),
    (["model=gpt_oss_20b", "engine.max_modl_len=4"], "engine.max_modl_len"),
    (["model=gpt_oss_20b", "num_requests=0"], "num_requests"),
    (["model=gpt_oss_20b", "workload=sessions", "workload.sessionz=3"], "workload.sessionz"),
    (["model=gpt_oss_20b", "foo=1"], "foo"),
    (["model=qwen3_next_80b_a3b", "gpu=h100", "tp=1"], "raise tp="),
    (["model=minimax_m1", "gpu=h100"], "tp=auto tried 1, 2, 4, 8 GPUs; on 8 GPUs it fits gpu=h200"),
    (["model=gpt_oss_20b", "tp=two"], "or auto"),
])
def test_bad_input_is_one_error_line(argv, needle, capsys):
    assert w.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err and "\n" not in err


def test_sessions_workload_reproduces_the_retention_cliff():
    """vllm#48435's shape (SIMULATED): sessions served round-robin, vLLM's default retention keeps
    few hits once the sessions' contexts fill the pool; dense retention (or Jenga) keeps them."""
    a = w.parse_args(["model=gemma4_31b", "gpu=h100", "engine.max_model_len=32768", "--no-sweep"])
    prof = w.profile(a)
    reqs = ww.sessions(32, spec=ww.SessionsSpec(num_sessions=8))
    default = w.simulate("vllm_hma", a, prof, reqs, {})["prefix_hit_rate"]
    dense = w.simulate("vllm_hma", a, prof, reqs, {"prefix_cache_retention_interval": None})["prefix_hit_rate"]
    assert dense > 0.5 and default < 0.25
    # negative control: 2 sessions fit the pool, so the default keeps its hits
    few = w.simulate("vllm_hma", a, prof, ww.sessions(32, spec=ww.SessionsSpec(num_sessions=2)), {})
    assert few["prefix_hit_rate"] > 0.8


def test_generated_workloads_are_reproducible_and_grow():
    s1, s2 = ww.sessions(12, seed=3, spec=ww.SessionsSpec(num_sessions=4)), ww.sessions(12, seed=3, spec=ww.SessionsSpec(num_sessions=4))
    assert all(np.array_equal(x.prompt_token_ids, y.prompt_token_ids) for x, y in zip(s1, s2))
    t0, t1 = s1[0], s1[4]          # session 0, turns 0 and 1 (round-robin over 4 sessions)
    assert t1.request_id == "s0-t1" and len(t1.prompt_token_ids) == len(t0.prompt_token_ids) + 256 + 512
    assert np.array_equal(t1.prompt_token_ids[:len(t0.prompt_token_ids)], t0.prompt_token_ids)
    ag = ww.agent(10, spec=ww.AgentSpec(num_agents=2, system_tokens=100))
    assert all(np.array_equal(r.prompt_token_ids[:100], ag[0].prompt_token_ids[:100]) for r in ag)
    assert any(r.request_id.endswith("-b") for r in ag)


def test_replies_are_the_simulators_tokens():
    from harness.backends.sim.scheduler import _token_id
    r = ww.sessions(1)[0]
    assert ww.reply_tokens(r.request_id, 5) == [_token_id(r, i) for i in range(5)]


def _write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return p


def test_trace_loads_through_datasets_and_segments_share_prefixes(tmp_path):
    p = _write(tmp_path, [
        {"session": "u1", "turn": 0, "arrival": 0.0, "segments": [{"id": "sys", "len": 40}, {"id": "q1", "len": 5}], "output_len": 8},
        {"session": "u2", "turn": 0, "arrival": 0.5, "segments": [{"id": "sys", "len": 40}, {"id": "q2", "len": 7}], "output_len": 8},
        {"session": 3, "turn": 1, "arrival": 1.0, "prompt": [1, 2, 3], "output_len": 2},
    ])
    reqs = load_trace(p)
    assert [len(r.prompt_token_ids) for r in reqs] == [45, 47, 3]
    assert np.array_equal(reqs[0].prompt_token_ids[:40], reqs[1].prompt_token_ids[:40])
    assert not np.array_equal(reqs[0].prompt_token_ids[40:45], reqs[1].prompt_token_ids[40:45])


@pytest.mark.parametrize("bad,needle", [
    ({"session": "u", "turn": 0, "arrival": 0, "output_len": 4}, "exactly one of prompt"),
    ({"session": "u", "turn": -1, "arrival": 0, "prompt": [1], "output_len": 4}, "turn"),
    ({"session": "u", "turn": 0, "arrival": "soon", "prompt": [1], "output_len": 4}, "arrival"),
    ({"session": "u", "turn": 0, "arrival": 0, "prompt": [1], "output_len": 4, "outptu": 1}, "outptu"),
    ({"session": "u", "turn": 0, "arrival": 0, "segments": [{"id": "a", "len": 0}], "output_len": 4}, "segments[0].len"),
    ("{not json", "not JSON"),
])
def test_trace_validator_names_the_bad_line(tmp_path, bad, needle):
    good = {"session": "u", "turn": 0, "arrival": 0, "prompt": [1, 2], "output_len": 4}
    p = _write(tmp_path, [good, bad])
    with pytest.raises(TraceError) as e:
        validate_trace(p)
    assert "t.jsonl:2" in str(e.value) and needle in str(e.value)
    assert validate_trace(_write(tmp_path, [good])) == 1   # negative control


def test_trace_through_the_command(tmp_path):
    p = _write(tmp_path, [{"session": i % 2, "turn": i // 2, "arrival": i * 0.1,
                           "segments": [{"id": "sys", "len": 600}, {"id": f"q{i}", "len": 50}], "output_len": 16}
                          for i in range(8)])
    out = _json(["model=gemma3_4b", f"trace={p}", "rules=vllm_hma", "--no-sweep"])
    assert out[0]["prefix_hit_rate"] > 0.5 and out[0]["simulated"] is True


@pytest.mark.slow
def test_module_entry_point_text():
    res = subprocess.run([sys.executable, "-m", "harness.whatif", "model=qwen3_5_35b_a3b", "gpu=h200"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert "[vllm_hma] vLLM 0.32.0" in res.stdout and "SIMULATED" in res.stdout


def test_parallel_simulations_give_the_serial_answer():
    """The simulations of one answer (a rule each, a knob value each) run in worker processes; the
    simulator is deterministic, so jobs=2 gives jobs=1's answer (sim_wall_s aside)."""
    argv = ["model=gemma3_4b", "gpu=h100", "workload=sessions", "num_requests=6", "engine.max_model_len=16384",
            "rules=vllm_hma,sglang_pools,jenga"]

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "sim_wall_s"}
        return [strip(x) for x in o] if isinstance(o, list) else o
    serial, parallel = strip(_json([*argv, "jobs=1"])), strip(_json([*argv, "jobs=2"]))
    assert serial == parallel
    assert serial[0]["prefix_hit_rate"] is not None and serial[0]["sweep"]


def test_simulations_start_longest_first(monkeypatch):
    """Workers take the simulations 1-token pages first, and among equal pages every rule's own run
    before the sweeps' variants (a long base run must not start last, behind the sweeps); each
    distinct simulation once. The order changes no answer (keyed results)."""
    a = w.parse_args(["model=gemma3_4b", "gpu=h100", "jobs=1", "sglang_pools.swa_full_tokens_ratio=0.5"])
    order = []
    monkeypatch.setattr(w, "_simulate_job", lambda job: order.append(job) or {"rule": job[0]})
    pools = {"swa_full_tokens_ratio": 0.5}
    jobs = [("jenga", {}), ("jenga", {"x": 1}), ("sglang_pools", pools), ("sglang_pools", {"swa_full_tokens_ratio": 1.0}),
            ("sglang_pools", pools), ("sglang_unified", {}), ("trtllm_pools", {})]
    out = w.run_simulations(a, None, [], jobs)
    assert order == [("sglang_pools", pools), ("sglang_unified", {}), ("sglang_pools", {"swa_full_tokens_ratio": 1.0}),
                     ("jenga", {}), ("jenga", {"x": 1}), ("trtllm_pools", {})]
    assert len(out) == 6 and out[w._job_key("sglang_unified", {})] == {"rule": "sglang_unified"}


def test_sglang_running_cap_reaches_the_scheduler():
    """SGLang's init_memory runs at most a third of its Mamba slots at once (the rest hold the radix
    cache's states): the simulated scheduler gets that cap; vLLM's rule keeps the cell's max_num_seqs."""
    from harness.backends.sim.engine import run_cell as sim_run
    a = w.parse_args(["model=qwen3_5_4b", "gpu=h100", "engine.max_model_len=4096", "engine.kv_cache_bytes=2000000000",
                      "--no-sweep"])
    prof = w.profile(a)
    reqs = ww.sessions(8, spec=ww.SessionsSpec(num_sessions=2, system_tokens=256, user_tokens=64, output_len=8))
    st = w.static_answer("sglang_pools", prof, 2_000_000_000, w.compose(a), {}, True)
    assert st["mamba_slots"] // 3 < 256 and st["max_concurrency"] <= st["mamba_slots"] // 3
    seqs = {}
    for rule in ("sglang_pools", "vllm_hma"):
        cfg = w.compose(a, rule, w.rule_options(rule, {}, 4096, prof, w.compose(a)), dataset="synthetic")
        cfg.engine.tokens_per_page = w.page_tokens(rule, 16)
        seqs[rule] = sim_run(cfg, prof, reqs).meta["scheduler"]["max_num_seqs"]
    assert seqs == {"sglang_pools": st["mamba_slots"] // 3, "vllm_hma": int(w.compose(a).engine.max_num_seqs)}


def test_tp_auto_takes_the_fewest_gpus_the_weights_leave_kv_memory_on():
    """tp=auto (the default): Qwen3-Next-80B's 148.4 GiB of weights leave no KV memory on one or
    two H100s (71.2 GiB usable each) and some on four; a model that fits one GPU stays on one
    (negative control); tp=<n> is kept as given."""
    answers = w.run(["model=qwen3_next_80b_a3b", "gpu=h100", "rules=vllm_hma", "--no-sweep"])
    assert [r["tp"] for r in answers] == [4] and answers[0]["kv_capacity_tokens"] > 0
    assert w.run(["model=gpt_oss_20b", "rules=vllm_hma", "--no-sweep"])[0]["tp"] == 1
    assert w.run(["model=qwen3_next_80b_a3b", "gpu=h100", "tp=8", "rules=vllm_hma", "--no-sweep"])[0]["tp"] == 8


def test_vllm_refuses_to_start_when_one_request_does_not_fit():
    """vLLM's check_enough_kv_cache_memory (tests/test_whatif_vllm.py checks it against vLLM's own):
    Gemma-4-31B with the hybrid manager off charges all 60 layers at full length, so on one H100 a
    32,768-token max_model_len cannot start (it names 14,336 as the longest that would); with the
    manager on, or at 8,192 tokens, it starts (negative controls)."""
    off = w.run(["model=gemma4_31b", "engine.max_model_len=32768", "rules=vllm_hma_off,vllm_hma", "--no-sweep"])
    assert "vLLM refuses to start" in off[0]["error"] and "estimated maximum model length is 14336" in off[0]["error"]
    assert "error" not in off[1] and off[1]["max_concurrency"] > 1
    ok = w.run(["model=gemma4_31b", "engine.max_model_len=8192", "rules=vllm_hma_off", "--no-sweep"])
    assert "error" not in ok[0] and ok[0]["max_concurrency"] >= 1


def test_rule_options_go_over_the_systems_defaults():
    """A knob (``jenga.<option>=`` or a sweep value) is set over the system's own defaults
    (harness/conf/system/jenga.yaml: sliding retention 192) -- it used to replace them, so Jenga's
    sweep values also lost the retention; a rule with no defaults gets just the knob (control)."""
    a = w.parse_args(["model=gemma3_12b", "--no-sweep"])
    opts = w.compose(a, "jenga", {"stale_pages_first": False}).system.options
    assert opts["stale_pages_first"] is False and opts["sliding_retention_tokens"] == 192
    assert dict(w.compose(a, "vllm_hma", {"max_model_len": 4096}).system.options) == {"max_model_len": 4096}


def test_dataset_workload_is_capped_at_the_context_asked_about():
    """arXiv-QA's longest articles (~157k tokens) exceed Gemma-3's 131,072-token context: the
    what-if caps the dataset at the context it answers for (the model's, or engine.max_model_len),
    as the study cells cap theirs, instead of a traceback."""
    a = w.parse_args(["model=gemma3_12b", "workload=arxiv_qa", "num_requests=32"])
    prof = w.profile(a)
    reqs = w.build_requests(a, prof)
    assert reqs and max(r.total_len for r in reqs) <= prof.max_model_len
    a = w.parse_args(["model=gemma3_12b", "workload=arxiv_qa", "num_requests=8", "engine.max_model_len=32768"])
    assert max(r.total_len for r in w.build_requests(a, prof)) <= 32768


def test_workload_error_is_one_error_line(monkeypatch, capsys):
    """A dataset request the workload builder refuses is one ``error:`` line naming the workload."""
    from harness.workloads.twins import WorkloadError

    def refuse(cfg):
        raise WorkloadError("request x-1: prompt 9 + output 1 = 10 tokens exceeds max_model_len=8")

    monkeypatch.setattr(w, "build_workload", refuse)
    assert w.main(["model=gemma3_12b", "workload=arxiv_qa", "num_requests=2", "--no-sweep"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: workload=arxiv_qa:") and "max_model_len" in err and "\n" not in err
