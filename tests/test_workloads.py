"""Workloads: seeded twins reproduce each dataset's shape; context check; real loaders fail clearly."""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config import compose_cell
from harness.workloads import WorkloadError, build_workload
from harness.workloads.hf import mllama_tiles

REPO = Path(__file__).resolve().parent.parent
_BASE: dict[tuple[str, ...], object] = {}


def cell(*overrides: str, **fields):
    """A composed cell (cached per override set), then ``section.key=value`` edits applied."""
    key = tuple(overrides)
    if key not in _BASE:
        _BASE[key] = compose_cell(list(overrides))
    cfg = copy.deepcopy(_BASE[key])
    for dotted, value in fields.items():
        section, name = dotted.split("__")
        cfg[section][name] = value
    return cfg


def _same(a, b):
    return [(r.request_id, r.prompt_token_ids.tobytes(), r.output_len, r.images) for r in a] == \
        [(r.request_id, r.prompt_token_ids.tobytes(), r.output_len, r.images) for r in b]


@pytest.mark.parametrize("overrides", [
    ("dataset=mmlu_pro",), ("dataset=mmmu_pro", "model=llama3_2_11b_vision"), ("dataset=arxiv_qa",),
    ("dataset=sharegpt",), ("dataset=microbench", "model=ministral_8b"), ("dataset=synthetic",)])
def test_same_seed_same_tokens_other_seed_differs(overrides):
    small = {"dataset__num_requests": 8, "dataset__max_len": 80000} if "dataset=arxiv_qa" in overrides \
        else {"dataset__num_requests": 8}
    a = build_workload(cell(*overrides, **small))
    b = build_workload(cell(*overrides, **small))
    assert _same(a, b)
    other = cell(*overrides, **small)
    other.seed = 1
    c = build_workload(other)
    assert not _same(a, c)
    assert all(r.prompt_token_ids.dtype == np.int32 for r in a)


def test_mmmu_pro_shape_for_mllama():
    reqs = build_workload(cell("dataset=mmmu_pro", "model=llama3_2_11b_vision", dataset__num_requests=2000))
    assert {r.prompt_len for r in reqs} == {43}
    assert {r.output_len for r in reqs} == {200}
    assert {r.num_image_tokens for r in reqs} <= {3 * 1601, 4 * 1601}
    assert np.mean([r.num_image_tokens for r in reqs]) == pytest.approx(6193, rel=0.01)  # paper §3.2
    assert len({r.images[0].image_id for r in reqs}) == len(reqs)
    # the fixed instruction: identical text for every request
    assert len({r.prompt_token_ids.tobytes() for r in reqs}) == 1


def test_mmmu_pro_decoder_only_vlm_puts_image_tokens_in_the_prompt():
    reqs = build_workload(cell("dataset=mmmu_pro", "model=paligemma2_10b", dataset__num_requests=4))
    for r in reqs:
        (img,) = r.images
        assert img.num_tokens == 4096 and r.prompt_len == 43 + 4096
        assert (r.prompt_token_ids[img.offset:img.offset + img.num_tokens] == 257152).all()


def test_mmmu_pro_needs_a_vision_model():
    with pytest.raises(WorkloadError, match="needs a vision model"):
        build_workload(cell("dataset=mmmu_pro", "model=llama3_1_8b"))


def test_arxiv_groups_share_the_articles_as_exact_prefix():
    reqs = build_workload(cell("dataset=arxiv_qa", "model=ministral_8b", dataset__max_len=80000))
    assert len(reqs) == 32 and {r.output_len for r in reqs} == {150}
    groups: dict[str, list] = {}
    for r in reqs:
        assert r.total_len <= 80000
        groups.setdefault(r.prefix_group, []).append(r)
    assert len(groups) == 8 and all(len(g) == 4 for g in groups.values())
    for g in groups.values():
        prefix = g[0].prompt_token_ids[: g[0].prompt_len - 8]  # the first 4 questions are 8 tokens
        for r in g:
            assert np.array_equal(r.prompt_token_ids[: len(prefix)], prefix)
        assert len({r.prompt_token_ids.tobytes() for r in g}) == 4  # different questions
    # requests are shuffled across groups (the AE shuffles them)
    assert [r.prefix_group for r in reqs] != sorted(r.prefix_group for r in reqs)


def test_arxiv_uncapped_mean_matches_the_published_length():
    """No cap (Llama-4's command): mean request ~92,408 tokens (arXiv v1 §7.2), within 15%."""
    reqs = build_workload(cell("dataset=arxiv_qa", "model=llama4_scout", dataset__num_requests=160))
    assert np.mean([r.prompt_len for r in reqs]) == pytest.approx(92408, rel=0.15)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**20), cap=st.integers(20000, 120000), n=st.integers(1, 24))
def test_arxiv_respects_max_len_for_any_seed(seed, cap, n):
    cfg = cell("dataset=arxiv_qa", "model=ministral_8b", dataset__max_len=cap, dataset__num_requests=n)
    cfg.seed = seed
    reqs = build_workload(cfg)
    assert len(reqs) == n
    assert all(r.total_len <= cap for r in reqs)


def test_gemma2_subset_uses_single_articles():
    reqs = build_workload(cell("dataset=arxiv_qa", "model=gemma2_27b", dataset__subset="gemma2",
                               dataset__max_len=8192, dataset__num_requests=8))
    assert all(r.total_len <= 8192 for r in reqs)
    assert len({r.prefix_group for r in reqs}) == 2


def test_sharegpt_filters_and_published_means():
    reqs = build_workload(cell("dataset=sharegpt", dataset__num_requests=2000))
    p = np.array([r.prompt_len for r in reqs])
    o = np.array([r.output_len for r in reqs])
    assert p.min() >= 4 and o.min() >= 4 and p.max() <= 1024 and (p + o).max() <= 2048
    assert p.mean() == pytest.approx(229.7, rel=0.15) and o.mean() == pytest.approx(203.1, rel=0.15)


def test_microbench_matches_paper_ranges():
    reqs = build_workload(cell("dataset=microbench", "model=ministral_8b"))
    assert len(reqs) == 20 and all(r.arrival_time == 0.0 for r in reqs)
    assert all(55000 <= r.prompt_len <= 110000 and 50 <= r.output_len <= 100 for r in reqs)


def test_mmlu_pro_shape():
    reqs = build_workload(cell("dataset=mmlu_pro", dataset__num_requests=500))
    assert max(r.prompt_len for r in reqs) <= 3076  # published maximum
    assert len({r.prefix_group for r in reqs}) == 14
    by_cat: dict[str, list] = {}
    for r in reqs:
        by_cat.setdefault(r.prefix_group, []).append(r)
    for g in by_cat.values():  # same category -> same few-shot block
        n = min(r.prompt_len for r in g) - 200
        assert len({r.prompt_token_ids[:max(n, 1)].tobytes() for r in g}) == 1


def test_mmlu_pro_outputs_respect_the_pretrained_eval_cap():
    # The artifact reads Llama-3.1-405B-evals (pre-trained): Meta generated at most 512 tokens there
    # (llama-models eval_details.md); the AE's len(tokenizer(completion).input_ids) adds the BOS: 513.
    reqs = build_workload(cell("dataset=mmlu_pro", dataset__num_requests=2000))
    outs = [r.output_len for r in reqs]
    assert max(outs) == 513          # the lognormal's tail reaches the cap at this many draws
    assert min(outs) >= 16


def test_smoke_mode_caps_requests_outputs_and_lengths():
    full = build_workload(cell("dataset=arxiv_qa", "model=ministral_8b", dataset__max_len=80000))
    smoke = build_workload(cell("dataset=arxiv_qa", "model=ministral_8b", "mode=smoke", dataset__max_len=80000))
    assert len(smoke) == 8 and all(r.output_len == 16 for r in smoke)
    assert max(r.prompt_len for r in smoke) <= 0.25 * 80000
    assert np.mean([r.prompt_len for r in smoke]) < np.mean([r.prompt_len for r in full])


def test_request_longer_than_context_is_rejected_with_its_id():
    cfg = cell("dataset=microbench", "model=ministral_8b", engine__max_model_len=60000)
    with pytest.raises(WorkloadError, match=r"request microbench-\d+: prompt \d+ \+ output \d+ .* "
                                            r"exceeds max_model_len=60000 of model ministral_8b"):
        build_workload(cfg)


def test_poisson_arrivals_are_seeded():
    cfg = cell("dataset=synthetic", engine__request_rate=2.0)
    a = [r.arrival_time for r in build_workload(cfg)]
    assert a == [r.arrival_time for r in build_workload(cfg)]
    assert a[0] == 0.0 and all(x < y for x, y in itertools.pairwise(a))
    assert np.mean(np.diff(a)) == pytest.approx(0.5, rel=0.3)


def test_mllama_tile_choice():
    assert mllama_tiles(560, 560) == 1
    assert mllama_tiles(1120, 560) == 2
    assert mllama_tiles(1120, 1120) == 4
    assert mllama_tiles(4000, 3000) == 4       # large photo: least downscaling, 2x2
    assert mllama_tiles(300, 1000) == 2        # tall: 1x2 and 2x2 both upscale least (x1.12); smaller wins


REAL_DATASETS = ["mmlu_pro", "mmmu_pro", "arxiv_qa", "sharegpt"]


@pytest.fixture(scope="module")
def hubless_errors(tmp_path_factory) -> dict[str, str]:
    """Each real loader's first output line in a fresh interpreter with an empty HF_HOME and the hub
    offline (``datasets`` reads both at import); one interpreter for all four (each costs seconds)."""
    code = ("from harness.config import compose_cell\nfrom harness.workloads import build_workload\n"
            f"for dataset in {REAL_DATASETS!r}:\n"
            "    cfg = compose_cell([f'dataset={dataset}', 'dataset.source=hf', 'dataset.tokenizer=bytes', "
            "'model=llama3_2_11b_vision'])\n"
            "    try:\n        build_workload(cfg)\n        print(dataset, 'LOADED')\n"
            "    except Exception as e:\n        print(dataset, type(e).__name__ + ': ' + str(e).replace('\\n', ' '))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path_factory.mktemp("hf-empty"))}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=240, check=False).stdout
    lines = [line.split(" ", 1) for line in out.splitlines() if line.split(" ", 1)[0] in REAL_DATASETS]
    return {name: rest for name, rest in lines}


@pytest.mark.parametrize("dataset", REAL_DATASETS)
def test_real_loader_without_hub_names_the_twin(dataset, hubless_errors):
    out = hubless_errors.get(dataset, "")
    assert out.startswith("WorkloadError"), out
    assert "Hugging Face hub" in out and "dataset.source=twin" in out and dataset in out


def test_real_loader_needs_a_local_tokenizer_before_reading_data(tmp_path):
    cfg = cell("dataset=mmlu_pro", dataset__source="hf", dataset__hf_id=str(tmp_path / "absent.parquet"))
    with pytest.raises(WorkloadError, match="dataset.tokenizer") as e:
        build_workload(cfg)
    assert "absent" not in str(e.value)            # checked before the data is looked at
    cfg.dataset.tokenizer = str(tmp_path / "no-such-tokenizer")
    with pytest.raises(WorkloadError, match=r"dataset.tokenizer=.*no-such-tokenizer: no such directory"):
        build_workload(cfg)
