"""Real loaders on local copies (``dataset.source=hf``, ``dataset.hf_id=<path>``).

Each test builds a small dataset with HF ``datasets`` in the real schema of what the paper serves
(MMLU-pro as Meta's ``Llama-3.1-405B-evals__mmlu_pro__details``, MMMU-pro's ``vision`` config,
arXiv-QA's ``liyucheng/arxiv-march-2023``), saves it as parquet, JSONL and ``save_to_disk``, and
checks that every request is derived from those rows (lengths from the text, tiles from the image
size, article ids from the rows present), that the three formats give the same requests, and that bad
input is one error naming the key and the path (never the hub). Tokenizer: the built-in ``bytes``
one, so no tokenizer download is needed.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import numpy as np
import pytest

from harness.config import compose_cell
from harness.workloads import WorkloadError, build_workload
from harness.workloads.hf import MMMU_PROMPT, mllama_tiles

datasets = pytest.importorskip("datasets")
PIL_Image = pytest.importorskip("PIL.Image")

FORMATS = ("parquet", "jsonl", "disk")
_BASE: dict[str, object] = {}


@pytest.fixture(autouse=True)
def _private_hf_cache(tmp_path, monkeypatch):
    # load_dataset("parquet"/"json") converts to Arrow in the datasets cache: keep it out of ~/.cache.
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def cell(dataset: str, hf_id: Path | str, model: str = "llama3_1_8b", **fields):
    if (dataset, model) not in _BASE:
        _BASE[dataset, model] = compose_cell([f"dataset={dataset}", f"model={model}", "dataset.source=hf",
                                              "dataset.tokenizer=bytes"])
    cfg = copy.deepcopy(_BASE[dataset, model])
    cfg.dataset.hf_id = str(hf_id)
    for k, v in fields.items():
        cfg.dataset[k] = v
    return cfg


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _save(ds, root: Path, name: str, jsonl_rows: list[dict] | None = None) -> dict[str, Path]:
    """The dataset as one parquet file, one JSONL file and one save_to_disk folder."""
    root.mkdir(parents=True, exist_ok=True)
    paths = {"parquet": root / f"{name}.parquet", "jsonl": root / f"{name}.jsonl", "disk": root / f"{name}_disk"}
    ds.to_parquet(str(paths["parquet"]))
    if jsonl_rows is None:
        ds.to_json(str(paths["jsonl"]), lines=True)
    else:
        paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in jsonl_rows))
    ds.save_to_disk(str(paths["disk"]))
    return paths


def _same_requests(a, b) -> bool:
    return [(r.request_id, r.prompt_token_ids.tobytes(), r.output_len, r.images) for r in a] == \
        [(r.request_id, r.prompt_token_ids.tobytes(), r.output_len, r.images) for r in b]


# --------------------------------------------------------------------------------------- MMLU-pro
# Columns of Meta's evals `__details` subsets (the dataset card's column list; the AE reads
# input_final_prompts[0] and output_prediction_text[0], each a list of exactly one string).
def _mmlu_details_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        question = f"Question {i}: which option is right?" + " Consider it carefully." * i
        choices = {letter: f"choice {letter}{i}" for letter in "ABCDEFGHIJ"}
        prompt = ("<|start_header_id|>user<|end_header_id|>\n\nGiven the following question and candidate "
                  f"answers, choose the best answer.\n{question}\n" + "\n".join(f"{k}. {v}" for k, v in choices.items()))
        answer = "Let's think step by step." + " Step." * (3 * i) + f" The best answer is {'ABCD'[i % 4]}."
        rows.append({
            "task_type": "Generative", "task_name": "mmlu_pro", "subtask_name": ["math", "law", "physics"][i % 3],
            "input_question": question, "input_choice_list": choices, "input_final_prompts": [prompt],
            "input_correct_responses": [f"best answer is {'ABCD'[i % 4]}"], "output_prediction_text": [answer],
            "output_parsed_answer": "ABCD"[i % 4], "output_choice_completions": None,
            "output_choice_negative_log_likelihoods": None, "output_metrics": {"acc": 1.0, "correct_format": 1.0},
            "is_correct": True, "input_question_hash": f"{i:064x}", "input_final_prompts_hash": [f"{i:064x}"],
            "benchmark_label": "MMLU-Pro",
            "eval_config": {"max_gen_len": "1024", "max_prompt_len": "3840", "num_few_shot": "5",
                            "num_generations": "1", "return_logprobs": "false", "seed": "42",
                            "temperature": "0.0", "top_k": "0", "top_p": "0"}})
    return rows


@pytest.fixture(scope="module")
def mmlu(tmp_path_factory):
    rows = _mmlu_details_rows(12)
    ds = datasets.Dataset.from_list(rows)
    return rows, _save(ds, tmp_path_factory.mktemp("mmlu"), "mmlu_pro_details")


@pytest.mark.parametrize("fmt", FORMATS)
def test_mmlu_pro_details_local(mmlu, fmt):
    rows, paths = mmlu
    reqs = build_workload(cell("mmlu_pro", paths[fmt], num_requests=10))
    assert len(reqs) == 10
    by_prompt = {_nbytes(r["input_final_prompts"][0]): _nbytes(r["output_prediction_text"][0]) for r in rows}
    assert len(by_prompt) == len(rows)            # prompt lengths identify rows (all distinct)
    for r in reqs:                                 # lengths come from the rows' own text
        assert r.output_len == by_prompt[r.prompt_len]
    assert len({r.prompt_len for r in reqs}) == 10
    # The order is seeded and the same in every format; another seed picks another order.
    assert _same_requests(reqs, build_workload(cell("mmlu_pro", paths["parquet"], num_requests=10)))
    other = build_workload(cell("mmlu_pro", paths[fmt], num_requests=10, output_len=None))
    assert _same_requests(reqs, other)


def test_mmlu_pro_seed_max_len_and_count(mmlu):
    rows, paths = mmlu
    cfg = cell("mmlu_pro", paths["parquet"], num_requests=12)
    a = build_workload(cfg)
    # The order is the one datasets' own Dataset.shuffle(seed) gives (without its indices file).
    order = datasets.Dataset.from_list(rows).shuffle(seed=int(cfg.seed), keep_in_memory=True)
    assert [r.prompt_len for r in a] == [_nbytes(p[0]) for p in order["input_final_prompts"]]
    cfg.seed = 1
    assert [r.prompt_len for r in build_workload(cfg)] != [r.prompt_len for r in a]
    totals = sorted(_nbytes(r["input_final_prompts"][0]) + _nbytes(r["output_prediction_text"][0]) for r in rows)
    cap = totals[5]                               # exactly 6 rows fit
    fit = build_workload(cell("mmlu_pro", paths["disk"], num_requests=6, max_len=cap))
    assert len(fit) == 6 and all(r.total_len <= cap for r in fit)
    with pytest.raises(WorkloadError, match=r"gives only 6 requests.*dataset.num_requests=7") as e:
        build_workload(cell("mmlu_pro", paths["disk"], num_requests=7, max_len=cap))
    assert str(paths["disk"]) in str(e.value)


def test_mmlu_pro_wrong_schema_names_key_and_path(tmp_path):
    path = tmp_path / "arxiv_like.parquet"
    datasets.Dataset.from_dict({"text": ["an article"]}).to_parquet(str(path))
    with pytest.raises(WorkloadError) as e:
        build_workload(cell("mmlu_pro", path, num_requests=1))
    msg = str(e.value)
    assert f"dataset.hf_id={path}" in msg and "input_final_prompts" in msg and "['text']" in msg
    assert "hub" not in msg.lower() and "\n" not in msg


# --------------------------------------------------------------------------------------- MMMU-pro
# MMMU/MMMU_Pro config `vision`, split `test`: id, image, answer, subject (dataset card).
SIZES = [(560, 560), (1120, 560), (1120, 1120), (4000, 3000), (300, 1000), (800, 600)]


def _png(w: int, h: int) -> bytes:
    b = io.BytesIO()
    PIL_Image.new("L", (w, h)).save(b, format="PNG")
    return b.getvalue()


@pytest.fixture(scope="module")
def mmmu(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmmu")
    feats = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image(),
                               "answer": datasets.Value("string"), "subject": datasets.Value("string")})
    rows = [{"id": f"test_Art_{i}", "image": {"bytes": _png(w, h), "path": None}, "answer": "ABCD"[i % 4],
             "subject": "Art"} for i, (w, h) in enumerate(SIZES)]
    ds = datasets.Dataset.from_list(rows, features=feats)
    # JSONL cannot hold image bytes: rows name PNG files relative to the JSONL's folder.
    (root / "images").mkdir()
    jsonl = []
    for i, (w, h) in enumerate(SIZES):
        (root / "images" / f"{i}.png").write_bytes(_png(w, h))
        jsonl.append({"id": f"test_Art_{i}", "image": f"images/{i}.png", "answer": "ABCD"[i % 4], "subject": "Art"})
    paths = _save(ds, root, "mmmu_pro_vision", jsonl)
    # A hub snapshot's layout: <config>/<split>-*.parquet; another config with another schema beside it.
    snap = root / "snapshot"
    (snap / "vision").mkdir(parents=True)
    (snap / "standard (10 options)").mkdir()
    ds.to_parquet(str(snap / "vision" / "test-00000-of-00001.parquet"))
    datasets.Dataset.from_dict({"id": ["x"], "question": ["q"]}).to_parquet(
        str(snap / "standard (10 options)" / "test-00000-of-00001.parquet"))
    paths["snapshot"] = snap
    return paths


@pytest.mark.parametrize("fmt", [*FORMATS, "snapshot"])
def test_mmmu_pro_local_tiles_from_image_size(mmmu, fmt):
    cfg = cell("mmmu_pro", mmmu[fmt], model="llama3_2_11b_vision", num_requests=len(SIZES))
    reqs = build_workload(cfg)
    vis = cfg.model.vision
    want = sorted(mllama_tiles(w, h, max_tiles=vis.max_tiles) * vis.tokens_per_tile for w, h in SIZES)
    assert sorted(r.num_image_tokens for r in reqs) == want
    assert len(set(want)) >= 3                     # the sizes really span several tile counts
    text = np.frombuffer(MMMU_PROMPT.encode(), dtype=np.uint8)
    assert all(np.array_equal(r.prompt_token_ids, text) and r.output_len == 200 for r in reqs)
    assert _same_requests(reqs, build_workload(cell("mmmu_pro", mmmu["parquet"], model="llama3_2_11b_vision",
                                                    num_requests=len(SIZES))))


def test_mmmu_pro_local_leaves_the_saved_folder_untouched(mmmu):
    before = sorted((p.name, p.stat().st_size) for p in mmmu["disk"].iterdir())
    build_workload(cell("mmmu_pro", mmmu["disk"], model="llama3_2_11b_vision", num_requests=3))
    assert sorted((p.name, p.stat().st_size) for p in mmmu["disk"].iterdir()) == before


def test_mmmu_pro_missing_image_file_names_key_path_and_row(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"id": "a", "image": "images/missing.png", "answer": "A", "subject": "Art"}) + "\n")
    with pytest.raises(WorkloadError, match=r"dataset.hf_id=.*broken.jsonl, row 0: column 'image': cannot read"):
        build_workload(cell("mmmu_pro", path, model="llama3_2_11b_vision", num_requests=1))


# --------------------------------------------------------------------------------------- arXiv-QA
# liyucheng/arxiv-march-2023, split `train`: one paper per row; the AE reads only `text`.
N_ARTICLES = 12


@pytest.fixture(scope="module")
def arxiv(tmp_path_factory):
    rows = [{"entry_id": f"http://arxiv.org/abs/2303.{i:05d}v1", "published": "20230301000000",
             "title": f"Paper {i}", "authors": ["A. Author", "B. Author"], "primary_category": "cs.CL",
             "categories": ["cs.CL"], "text": f"Article {i}. " + "Words of the paper. " * (20 + 7 * i)}
            for i in range(N_ARTICLES)]
    return rows, _save(datasets.Dataset.from_list(rows), tmp_path_factory.mktemp("arxiv"), "arxiv_march_2023")


@pytest.mark.parametrize("fmt", FORMATS)
def test_arxiv_qa_local_smaller_than_the_artifact_ids(arxiv, fmt):
    """12 articles: the AE's first ministral groups are [0..8] and [9..13]; ids >= 12 are cut (this
    raised IndexError when article ids came from the twin's statistics)."""
    rows, paths = arxiv
    with pytest.warns(UserWarning, match="12 articles"):
        reqs = build_workload(cell("arxiv_qa", paths[fmt], num_requests=8))
    questions = ["What is the author of the paper?", "What is the title of the paper?",
                 "What is the abstract of the paper?", "What is the introduction of the paper?"]
    want = set()
    for grp in (range(9), range(9, 12)):
        prefix = "".join(rows[a]["text"] for a in grp)
        want |= {(prefix + q).encode() for q in questions}
    assert {r.prompt_token_ids.astype(np.uint8).tobytes() for r in reqs} == want
    assert {r.prefix_group for r in reqs} == {"arxiv_qa/g0", "arxiv_qa/g1"}
    assert all(r.output_len == 150 for r in reqs)


def test_arxiv_qa_local_max_len_and_articles_per_group(arxiv):
    rows, paths = arxiv
    first = _nbytes(rows[0]["text"])
    cap = first + _nbytes(rows[1]["text"]) + 40 + 150   # the first two articles + a question fit
    with pytest.warns(UserWarning, match="groups are cut"):
        reqs = build_workload(cell("arxiv_qa", paths["disk"], num_requests=4, max_len=cap, subset="ministral"))
    assert all(r.total_len <= cap for r in reqs) and min(r.prompt_len for r in reqs) > first
    chunked = build_workload(cell("arxiv_qa", paths["parquet"], num_requests=12, articles_per_group=4))
    assert sorted({r.prefix_group for r in chunked}) == ["arxiv_qa/g0", "arxiv_qa/g1", "arxiv_qa/g2"]
    with pytest.raises(WorkloadError, match=r"only 3 of 3 article groups of dataset.hf_id=.*dataset.num_requests=16"):
        build_workload(cell("arxiv_qa", paths["parquet"], num_requests=16, articles_per_group=4))


# --------------------------------------------------------------------------------------- ShareGPT
def test_sharegpt_local_json_array(tmp_path):
    """ShareGPT_V3_unfiltered_cleaned_split.json is one JSON array of {id, conversations}."""
    convs = [{"id": str(i), "conversations": [{"from": "human", "value": "Hi there! " * (i + 1)},
                                              {"from": "gpt", "value": "Hello. " * (2 * i + 1)}]}
             for i in range(6)]
    convs.append({"id": "short", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(convs))
    reqs = build_workload(cell("sharegpt", path, num_requests=6))
    want = {(_nbytes(c["conversations"][0]["value"]), _nbytes(c["conversations"][1]["value"])) for c in convs[:6]}
    assert {(r.prompt_len, r.output_len) for r in reqs} == want       # vLLM's filter drops the 2-byte pair
    with pytest.raises(WorkloadError, match=r"gives only 6 requests \(7 conversations"):
        build_workload(cell("sharegpt", path, num_requests=7))


# ------------------------------------------------------------------------------ paths and formats
def test_bad_local_paths_name_the_key_and_the_path(tmp_path):
    cases = {tmp_path / "absent": "no such file or folder",
             tmp_path / "empty": "no .parquet/.jsonl/.json file",
             tmp_path / "data.csv": "unsupported file type '.csv'",
             tmp_path / "mixed": "mixes parquet and JSON"}
    (tmp_path / "empty").mkdir()
    (tmp_path / "data.csv").write_text("text\nx\n")
    (tmp_path / "mixed").mkdir()
    datasets.Dataset.from_dict({"text": ["x"]}).to_parquet(str(tmp_path / "mixed" / "a.parquet"))
    (tmp_path / "mixed" / "b.jsonl").write_text('{"text": "y"}\n')
    for path, why in cases.items():
        with pytest.raises(WorkloadError) as e:
            build_workload(cell("arxiv_qa", path, num_requests=4))
        msg = str(e.value)
        assert f"dataset.hf_id={path}" in msg and why in msg, msg
        assert "hub" not in msg.lower() and "\n" not in msg


def test_saved_dataset_dict_picks_the_split(tmp_path, arxiv):
    rows, _ = arxiv
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                               "test": datasets.Dataset.from_list(rows[:1])})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert len(build_workload(cell("arxiv_qa", tmp_path / "dd", num_requests=4, articles_per_group=2))) == 4
    with pytest.raises(WorkloadError, match=r"has splits \['test', 'train'\], not dataset.hf_split='latest'"):
        build_workload(cell("arxiv_qa", tmp_path / "dd", num_requests=4, hf_split="latest"))


def test_a_local_sim_cell_runs_end_to_end(mmlu, tmp_path):
    from harness import run

    _, paths = mmlu
    cfg = cell("mmlu_pro", paths["jsonl"], num_requests=6)
    extra = compose_cell(["model=llama3_1_8b", "dataset=mmlu_pro", "gpu=h100", "system=jenga", "backend=sim",
                          "mode=smoke", f"out_dir={tmp_path / 'runs'}"])
    extra.dataset = cfg.dataset
    rec = run.run_cell(extra)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["num_requests"] == 6 and rec["simulated"] is True
    used = rec["provenance"]["config"]["dataset"]            # the record says which data and tokenizer
    assert used["hf_id"] == str(paths["jsonl"]) and used["tokenizer"] == "bytes" and used["source"] == "hf"


@pytest.mark.vllm   # needs `transformers` (the `hf` extra); the vLLM venv has it, the main one need not
def test_a_local_transformers_tokenizer_counts_as_the_artifact(tmp_path, arxiv):
    """dataset.tokenizer=<dir>: a word-level tokenizer saved with save_pretrained (no hub). The
    artifact tokenises the concatenated text, so BOS leads each arXiv prompt once."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    rows, paths = arxiv
    words = sorted({w for r in rows for w in r["text"].split()} | {"What", "is", "the", "of", "paper?"})
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(tmp_path / "tok"))
    reqs = build_workload(cell("arxiv_qa", paths["parquet"], num_requests=4, articles_per_group=2,
                               tokenizer=str(tmp_path / "tok")))
    prefix_words = sum(len(rows[a]["text"].split()) for a in (0, 1))
    for r in reqs:
        assert r.prompt_token_ids[0] == 0 and (r.prompt_token_ids == 0).sum() == 1      # one BOS
        assert prefix_words + 5 <= r.prompt_len - 1 <= prefix_words + 7             # + the question's words
