"""Real loaders (``dataset.source=hf``): HF ``datasets`` following the Jenga artifact's recipes.

Tokenisation: no tokenizer can be downloaded on an offline machine, so a real load needs
``dataset.tokenizer`` = a local tokenizer directory and the ``transformers`` package; either missing
gives one clear error. The hub being unreachable gives one error naming the offline twin; nothing
falls back to the twin silently. (The gated MMLU-pro source falls back to ``TIGER-Lab/MMLU-Pro``
with a warning, as the issue asks; that fallback is still real data.)
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
from omegaconf import DictConfig

from harness.workloads import twins
from harness.workloads.request import Request
from harness.workloads.twins import Shape, WorkloadError
from jenga.interface import ImageSpan

MMMU_PROMPT = ("Answer with the option letter from the given choices directly. The last line of your "
               "response should be of the following format: 'Answer: $LETTER' (without quotes) where "
               "LETTER is one of options.")


def _hub_error(name: str, hf_id: str, exc: BaseException) -> WorkloadError:
    return WorkloadError(
        f"dataset {name}: cannot load {hf_id!r} from the Hugging Face hub ({type(exc).__name__}: "
        f"{str(exc).splitlines()[0] if str(exc) else ''}). Use the offline twin instead: "
        f"dataset.source=twin (statistics in datasets/, card in datasets/README.md).")


def _load(dataset: str, hf_id: str, **kw: Any) -> Any:
    from datasets import load_dataset

    try:
        return load_dataset(hf_id, **kw)
    except Exception as exc:  # any hub/network/cache failure: one message naming the twin
        raise _hub_error(dataset, hf_id, exc) from exc


def _tokenizer(cfg: DictConfig) -> Any:
    path = cfg.dataset.tokenizer
    if not path:
        raise WorkloadError(f"dataset {cfg.dataset.name}: source=hf needs dataset.tokenizer=<local "
                            "tokenizer directory> (no tokenizer is downloaded); or use dataset.source=twin")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise WorkloadError("dataset.source=hf needs the `transformers` package to tokenise "
                            "(pip install transformers); or use dataset.source=twin") from exc
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _ids(tok: Any, text: str) -> np.ndarray:
    return np.asarray(tok(text).input_ids, dtype=np.int32)


def load(cfg: DictConfig, shape: Shape) -> list[Request]:
    """Requests of the real dataset ``cfg.dataset.name`` (see the module docstring)."""
    name = cfg.dataset.name
    loaders = {"mmlu_pro": _mmlu_pro, "mmmu_pro": _mmmu_pro, "arxiv_qa": _arxiv_qa, "sharegpt": _sharegpt}
    if name not in loaders:
        raise WorkloadError(f"dataset {name!r} has no real loader; real loaders: {sorted(loaders)}")
    return loaders[name](cfg, shape)


def _mmlu_pro(cfg: DictConfig, shape: Shape) -> list[Request]:
    """Meta's pre-rendered prompts; output = token length of Meta's recorded answer (AE ``mmlu()``)."""
    ds = cfg.dataset
    try:
        data = _load(ds.name, ds.hf_id, name=ds.hf_subset, split=ds.hf_split, streaming=True)
        rows = ((r["input_final_prompts"][0], r["output_prediction_text"][0])
                for r in data.shuffle(seed=shape.seed))
    except WorkloadError as primary:
        if not ds.hf_fallback_id:
            raise
        warnings.warn(f"{primary}; trying the public fallback {ds.hf_fallback_id}", stacklevel=2)
        data = _load(ds.name, ds.hf_fallback_id, split="test", streaming=True)
        rows = ((r["question"] + "\n" + "\n".join(r["options"]), r.get("cot_content") or r["answer"])
                for r in data.shuffle(seed=shape.seed))
    tok = _tokenizer(cfg)
    out = []
    for prompt, answer in rows:
        if len(out) == shape.num_requests:
            break
        ids = _ids(tok, prompt)
        olen = shape.output_len if shape.output_len is not None else len(_ids(tok, answer))
        if shape.max_len is not None and len(ids) + olen > shape.max_len:
            continue
        out.append(Request(f"mmlu_pro-{len(out)}", 0.0, ids, max(1, olen)))
    return out


def mllama_tiles(width: int, height: int, tile: int = 560, max_tiles: int = 4) -> int:
    """Tiles Llama-3.2-Vision's processor uses for an image: among canvases of a x b tiles
    (a·b <= max_tiles), the one needing the least upscaling if any canvas needs upscaling, else the
    least downscaling; ties go to the smaller canvas."""
    options = []
    for a in range(1, max_tiles + 1):
        for b in range(1, max_tiles // a + 1):
            scale = min(a * tile / width, b * tile / height)
            options.append((scale, a * b))
    ups = [o for o in options if o[0] >= 1.0]
    if ups:
        best = min(o[0] for o in ups)
        return min(n for s, n in ups if s == best)
    best = max(o[0] for o in options)
    return min(n for s, n in options if s == best)


def _mmmu_pro(cfg: DictConfig, shape: Shape) -> list[Request]:
    """One image + the fixed instruction per request, output fixed (AE ``mmmu_vision()``)."""
    ds, vis = cfg.dataset, cfg.model.vision
    if vis is None:
        raise WorkloadError(f"dataset mmmu_pro needs a vision model; model {cfg.model.name} has none")
    data = _load(ds.name, ds.hf_id, name=ds.hf_subset, split=ds.hf_split, streaming=True)
    tok = _tokenizer(cfg)
    text = _ids(tok, MMMU_PROMPT)
    out = []
    for row in data.shuffle(seed=shape.seed):
        if len(out) == shape.num_requests:
            break
        w, h = row["image"].size
        tiles = mllama_tiles(w, h, max_tiles=vis.max_tiles) if vis.kind == "cross" else vis.max_tiles
        n_img = tiles * vis.tokens_per_tile
        img = ImageSpan(image_id=(shape.seed << 32) | len(out), num_tokens=n_img, offset=1)
        prompt = text if vis.kind == "cross" else np.concatenate(
            [text[:1], np.full(n_img, vis.image_token_index or 0, dtype=np.int32), text[1:]])
        out.append(Request(f"mmmu_pro-{len(out)}", 0.0, prompt, shape.output_len or 200, images=(img,)))
    return out


def _arxiv_qa(cfg: DictConfig, shape: Shape) -> list[Request]:
    """Article groups x questions sharing the articles as prefix (AE ``generate_arxiv_requests``)."""
    ds = cfg.dataset
    data = _load(ds.name, ds.hf_id, split=ds.hf_split)
    tok = _tokenizer(cfg)
    stats = twins.load_stats(ds.stats)
    cache: dict[int, np.ndarray] = {}

    def article(a: int) -> np.ndarray:
        if a not in cache:
            cache[a] = _ids(tok, data[a]["text"])
        return cache[a]

    def question(k: int) -> np.ndarray:
        return _ids(tok, stats["questions"][k]["text"])

    groups = twins.arxiv_groups(stats, ds.subset, ds.articles_per_group)
    return twins.assemble_arxiv(groups, shape.num_requests, ds.questions_per_article, article, question,
                                shape.output_len or 150, shape.max_len, twins.rng(shape.seed, 6))


def _sharegpt(cfg: DictConfig, shape: Shape) -> list[Request]:
    """First two turns; vLLM's filters (prompt/output >= 4, prompt <= 1024, total <= 2048)."""
    ds = cfg.dataset
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(ds.hf_id, "ShareGPT_V3_unfiltered_cleaned_split.json", repo_type="dataset")
    except Exception as exc:
        raise _hub_error(ds.name, ds.hf_id, exc) from exc
    tok = _tokenizer(cfg)
    with open(path, encoding="utf-8") as f:
        convs = [c["conversations"] for c in json.load(f) if len(c.get("conversations", [])) >= 2]
    order = twins.rng(shape.seed, 6).permutation(len(convs))
    out = []
    for i in order:
        if len(out) == shape.num_requests:
            break
        p, o = _ids(tok, convs[i][0]["value"]), len(_ids(tok, convs[i][1]["value"]))
        o = shape.output_len if shape.output_len is not None else o
        if len(p) < 4 or o < 4 or len(p) > 1024 or len(p) + o > 2048:
            continue
        out.append(Request(f"sharegpt-{len(out)}", 0.0, p, o))
    return out


__all__ = ["load", "mllama_tiles"]
