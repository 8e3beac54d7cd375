"""The simulator's variants as ordinary cells (issue 10 item 2): speculative decoding with a draft
model, the vision-encoder re-run baseline, Marconi's checkpoints — each a config of one cell
through ``harness.run.run_overrides``, with its extra metrics in the record; bad input is one
error naming the key before any work; the three studies plan as cached cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError, compose_cell
from harness.run import run_overrides

EXP = Path(__file__).resolve().parents[1] / "experiments"
SMALL = ["mode=smoke", "dataset.num_requests=4"]


def _run(tmp_path, *ov):
    rec = run_overrides([*SMALL, *ov, f"out_dir={tmp_path}"])
    assert rec["status"] == "ok", rec.get("error")
    return rec


def test_spec_decode_cell_emits_several_tokens_per_decode_step(tmp_path):
    spec = ["model=llama3_1_8b", "dataset=synthetic", "engine.draft_model=llama3_2_1b_fp8",
            "engine.num_speculative_tokens=3"]
    rec = _run(tmp_path, *spec, "engine.spec_acceptance_rate=0.7", "system=per_model_split")
    assert rec["tokens_per_decode_step"] > 1.0 and 0 < rec["accepted_per_proposal"] <= 1.0
    assert "speculative_decoding" in rec["meta"]["variants"]
    # Negative control: every proposal rejected -> exactly one token per decode step.
    none = _run(tmp_path, *spec, "engine.spec_acceptance_rate=0.0", "system=jenga")
    assert none["tokens_per_decode_step"] == 1.0 and none["accepted_per_proposal"] == 0.0
    # A plain cell carries no spec-decode metrics.
    assert "tokens_per_decode_step" not in _run(tmp_path, "model=llama3_1_8b", "dataset=synthetic")


def test_encoder_cache_off_reruns_the_vision_encoder_per_chunk(tmp_path):
    vlm = ["model=internvl2_8b", "dataset=mmmu_pro", "engine.enable_chunked_prefill=true",
           "engine.max_num_batched_tokens=256"]
    once = _run(tmp_path, *vlm, "system=jenga")
    again = _run(tmp_path, *vlm, "system=vllm", "engine.encoder_cache=false")
    assert once["encoder_runs_per_image_token"] == 1.0 and once["image_tokens"] > 0
    assert again["encoder_runs_per_image_token"] > 1.0 and again["encoder_tokens"] > once["encoder_tokens"]
    assert again["peak_allocated_gib"] > 0
    keep = _run(tmp_path, *vlm, "system=keep_embeddings")
    assert keep["encoder_runs_per_image_token"] == 1.0 and keep["allocator"] == "KeepEmbeddingManager"


def test_marconi_cell_records_checkpoints_and_takes_its_flops_from_the_cost_model(tmp_path):
    jamba = ["model=jamba_1_5_mini", "dataset=arxiv_qa", "dataset.questions_per_article=2",
             "engine.enable_prefix_caching=true", "gpu.count=4"]
    rec = _run(tmp_path, *jamba, "system=marconi", "system.options.flop_alpha=0.5")
    assert rec["checkpoints_admitted"] >= 1 and rec["mean_cached_gib"] >= 0
    assert "marconi_cost_options" in rec["meta"]["variants"]
    jenga = _run(tmp_path, *jamba, "system=jenga", "model.mamba.checkpoint_interval=512")
    assert jenga["checkpoints_admitted"] >= 1 and "marconi_cost_options" not in jenga["meta"]["variants"]


@pytest.mark.parametrize("overrides,key", [
    (["engine.draft_model=no_such_model", "engine.num_speculative_tokens=3", "engine.spec_acceptance_rate=0.7"],
     "engine.draft_model"),
    (["engine.draft_model=llama3_2_1b_fp8", "engine.num_speculative_tokens=3", "engine.spec_acceptance_rate=0.7",
      "backend=vllm_sched"], "engine.draft_model"),
    (["engine.draft_model=llama3_2_1b_fp8", "engine.num_speculative_tokens=3"], "engine.spec_acceptance_rate"),
    (["engine.draft_model=llama3_2_1b_fp8"], "engine.num_speculative_tokens"),
    (["system=per_model_split"], "engine.draft_model"),
    (["system=keep_embeddings", "backend=vllm_sched"], "system.name"),
    (["system=marconi"], "model.mamba"),
    (["engine.encoder_cache=false"], "engine.encoder_cache"),
    (["model=internvl2_8b", "engine.encoder_cache=false", "backend=vllm_sched"], "engine.encoder_cache"),
])
def test_bad_variant_input_is_one_error_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as e:
        compose_cell(["model=llama3_1_8b", *overrides])
    assert key in str(e.value)


def test_spec_decode_without_a_draft_is_refused_not_ignored(tmp_path):
    rec = run_overrides([*SMALL, "model=llama3_1_8b", "dataset=synthetic", "engine.num_speculative_tokens=3",
                         f"out_dir={tmp_path}"])
    assert rec["status"] == "failed" and "engine.draft_model" in rec["error"]


def test_studies_plan_their_variants_as_cells():
    from harness.study.plan import plan

    p = plan(EXP / "vlm_embed.yaml", ["mode=smoke"])
    assert len(p.runs) == 18 and {r.params["request_rate"] for r in p.runs} == {float("inf"), 2.0}
    by_variant = {r.params["variant"]: r for r in p.runs}
    assert {v: r.system for v, r in by_variant.items()} == {"reencode": "vllm", "keep": "keep_embeddings",
                                                           "jenga": "jenga"}
    assert "engine.encoder_cache=false" in by_variant["reencode"].overrides
    assert not any("encoder_cache" in o for o in by_variant["jenga"].overrides)
    m = plan(EXP / "mamba_prefix.yaml", [])
    assert len(m.runs) == 5 * 4 * 3
    marconi = [r for r in m.runs if r.params["variant"] == "marconi_lru"]
    assert {r.system for r in marconi} == {"marconi"} and "system.options.flop_alpha=0.0" in marconi[0].overrides
    s = plan(EXP / "specdec.yaml", [])
    assert len(s.runs) == 4 * 3 * 3 and "engine.draft_model=gemma2_2b" in s.runs[0].overrides
