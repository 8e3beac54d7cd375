"""Real loaders (``dataset.source=hf``): HF ``datasets`` following the Jenga artifact's recipes.

``dataset.hf_id`` is a hub id or a local copy (a ``save_to_disk`` folder, a parquet/JSONL file or a
folder of them; see :mod:`harness.workloads.sources`). Every request is derived from the loaded
rows: prompt and output lengths from tokenising their text, arXiv article ids from the rows present,
MMMU-pro image tiles from each image's size. The offline twin's statistics are never read (arXiv-QA
reads only the artifact's published recipe from ``datasets/arxiv_qa.yaml``: its article-id groups
and question texts).

Tokenisation: ``dataset.tokenizer`` (see :mod:`harness.workloads.tokenizer`), or a ``tokenize``
callable passed to :func:`load`. The hub being unreachable gives one error naming the offline twin;
a bad local path or schema gives one error naming the key and the path. Nothing falls back to the
twin silently. (The gated MMLU-pro hub source falls back to ``TIGER-Lab/MMLU-Pro`` with a warning;
that fallback is still real data. A local ``hf_id`` never falls back.)
"""

from __future__ import annotations

import base64
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from harness.workloads import twins
from harness.workloads.request import Request
from harness.workloads.sources import Rows, _hub_error, local_path, open_rows
from harness.workloads.tokenizer import Tokenize, make_tokenizer
from harness.workloads.twins import Shape, WorkloadError
from jenga.interface import ImageSpan

MMMU_PROMPT = ("Answer with the option letter from the given choices directly. The last line of your "
               "response should be of the following format: 'Answer: $LETTER' (without quotes) where "
               "LETTER is one of options.")

# Schemas the loaders read (only these columns; the rest of each row is ignored).
MMLU_DETAILS = ("input_final_prompts", "output_prediction_text")   # Meta's evals `__details` (AE mmlu())
MMLU_TIGER = ("question", "options")                               # TIGER-Lab/MMLU-Pro (fallback)
MMLU_SCHEMA = ("expected Meta's evals details (input_final_prompts, output_prediction_text: lists of one "
               "string) or TIGER-Lab/MMLU-Pro (question, options)")
MMMU_SCHEMA = "expected MMMU/MMMU_Pro's `vision` config (id, image, answer, subject)"
ARXIV_SCHEMA = "expected liyucheng/arxiv-march-2023 (one article per row in a `text` column)"


def load(cfg: DictConfig, shape: Shape, tokenize: Tokenize | None = None) -> list[Request]:
    """Requests of the real dataset ``cfg.dataset.name`` (see the module docstring)."""
    name = cfg.dataset.name
    loaders = {"mmlu_pro": _mmlu_pro, "mmmu_pro": _mmmu_pro, "arxiv_qa": _arxiv_qa, "sharegpt": _sharegpt}
    if name not in loaders:
        raise WorkloadError(f"dataset {name!r} has no real loader; real loaders: {sorted(loaders)}")
    if name == "mmmu_pro" and cfg.model.vision is None:
        raise WorkloadError(f"dataset mmmu_pro needs a vision model; model {cfg.model.name} has none")
    # Resolve the tokenizer first: a missing one is reported before any data is read.
    tok = tokenize or make_tokenizer(cfg.dataset.tokenizer, name)
    return loaders[name](cfg, shape, tok)


def _enough(out: list[Request], shape: Shape, rows: Rows, what: str) -> list[Request]:
    if len(out) < shape.num_requests:
        raise WorkloadError(f"dataset {rows.dataset}: {rows.where} gives only {len(out)} requests ({what}); "
                            f"dataset.num_requests={shape.num_requests}: lower it or load more rows")
    return out


def _one_text(row: dict, col: str, rows: Rows, i: int) -> str:
    """The single string of a list-of-one-string column (the AE asserts ``len(...) == 1``)."""
    v = row.get(col)
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and len(v) >= 1 and isinstance(v[0], str):
        return v[0]
    raise WorkloadError(f"dataset {rows.dataset}: {rows.where}, row {i}: column {col!r} holds "
                        f"{type(v).__name__}, not a list of one string; {MMLU_SCHEMA}")


def _mmlu_pro(cfg: DictConfig, shape: Shape, tok: Tokenize) -> list[Request]:
    """Meta's pre-rendered prompts; output = token length of Meta's recorded answer (AE ``mmlu()``)."""
    ds = cfg.dataset
    details = True
    try:
        rows = open_rows(ds.name, ds.hf_id, ds.hf_subset, ds.hf_split)
    except WorkloadError as primary:
        if not ds.hf_fallback_id or local_path(ds.hf_id or "") is not None:
            raise
        warnings.warn(f"{primary}; trying the public fallback {ds.hf_fallback_id}", stacklevel=2)
        rows = open_rows(ds.name, ds.hf_fallback_id, None, "test")
        details = False
    cols = rows.columns()
    if cols is not None:      # a local copy may hold either schema: the columns decide
        details = all(c in cols for c in MMLU_DETAILS) or not all(c in cols for c in MMLU_TIGER)
        rows.require(*(MMLU_DETAILS if details else MMLU_TIGER), schema=MMLU_SCHEMA)
    out: list[Request] = []
    seen = 0
    for row in rows.shuffled(shape.seed):
        if len(out) == shape.num_requests:
            break
        if details:
            prompt = _one_text(row, "input_final_prompts", rows, seen)
            answer = _one_text(row, "output_prediction_text", rows, seen)
        else:  # TIGER-Lab: question + options as the prompt, the CoT (or the letter) as the answer
            prompt = row["question"] + "\n" + "\n".join(row["options"])
            answer = row.get("cot_content") or row.get("answer") or ""
        seen += 1
        ids = tok(prompt)
        olen = shape.output_len if shape.output_len is not None else len(tok(answer))
        if shape.max_len is not None and len(ids) + olen > shape.max_len:
            continue
        out.append(Request(f"mmlu_pro-{len(out)}", 0.0, ids, max(1, olen)))
    return _enough(out, shape, rows, f"{seen} rows read, dataset.max_len={shape.max_len}")


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


def image_size(value: Any, rows: Rows, i: int) -> tuple[int, int]:
    """(width, height) of one ``image`` cell, reading only the image header. Accepts what the
    formats hold: a PIL image, HF's ``{"bytes", "path"}`` struct (parquet, ``save_to_disk``), raw
    bytes, a ``data:image/...;base64,`` URI or a file path (relative to the dataset's folder)."""
    import PIL.Image

    if isinstance(value, PIL.Image.Image):
        return value.size
    raw, path = None, None
    if isinstance(value, dict):
        raw, path = value.get("bytes"), value.get("path")
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif isinstance(value, str):
        if value.startswith("data:") and ";base64," in value:
            raw = base64.b64decode(value.split(";base64,", 1)[1])
        else:
            path = value.removeprefix("file://")
    where = f"dataset {rows.dataset}: {rows.where}, row {i}: column 'image'"
    try:
        if raw:
            with PIL.Image.open(io.BytesIO(raw)) as im:
                return im.size
        if path:
            p = Path(path)
            if not p.is_absolute() and rows.base_dir is not None:
                p = rows.base_dir / p
            with PIL.Image.open(p) as im:
                return im.size
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{where}: cannot read the image ({type(exc).__name__}: {exc})") from exc
    raise WorkloadError(f"{where} holds no image ({type(value).__name__}); {MMMU_SCHEMA}")


def _mmmu_pro(cfg: DictConfig, shape: Shape, tok: Tokenize) -> list[Request]:
    """One image + the fixed instruction per request, output fixed (AE ``mmmu_vision()``); the image's
    token count from its own size (mllama tiles) for cross-attention models."""
    ds, vis = cfg.dataset, cfg.model.vision
    rows = open_rows(ds.name, ds.hf_id, ds.hf_subset, ds.hf_split)
    rows.require("image", schema=MMMU_SCHEMA)
    features = getattr(rows.data, "features", None)
    if features is not None and type(features.get("image")).__name__ == "Image":
        from datasets import Image

        # Header-only size reads instead of decoding every image to pixels.
        rows.data = rows.data.cast_column("image", Image(decode=False))
    text = tok(MMMU_PROMPT)
    out = []
    for i, row in enumerate(rows.shuffled(shape.seed)):
        if len(out) == shape.num_requests:
            break
        w, h = image_size(row.get("image"), rows, i)
        tiles = mllama_tiles(w, h, max_tiles=vis.max_tiles) if vis.kind == "cross" else vis.max_tiles
        n_img = tiles * vis.tokens_per_tile
        img = ImageSpan(image_id=(shape.seed << 32) | len(out), num_tokens=n_img, offset=1)
        prompt = text if vis.kind == "cross" else np.concatenate(
            [text[:1], np.full(n_img, vis.image_token_index or 0, dtype=np.int32), text[1:]])
        out.append(Request(f"mmmu_pro-{len(out)}", 0.0, prompt, shape.output_len or 200, images=(img,)))
    return _enough(out, shape, rows, "one per row")


def _arxiv_qa(cfg: DictConfig, shape: Shape, tok: Tokenize) -> list[Request]:
    """Article groups x questions sharing the articles as prefix (AE ``generate_arxiv_requests``).
    Article ids index the loaded rows; the artifact's groups are clipped to the rows present."""
    ds = cfg.dataset
    rows = open_rows(ds.name, ds.hf_id, ds.hf_subset, ds.hf_split, streaming=False)
    rows.require("text", schema=ARXIV_SCHEMA)
    recipe = twins.load_stats(ds.stats)       # the AE's published id groups and question texts only
    questions = [q["text"] for q in recipe["questions"]]
    if not 1 <= ds.questions_per_article <= len(questions):
        raise WorkloadError(f"arxiv_qa: dataset.questions_per_article must be in [1, {len(questions)}]")
    n = len(rows)
    groups = twins.arxiv_groups(recipe, ds.subset, ds.articles_per_group, num_articles=n)
    clipped = [[a for a in g if a < n] for g in groups]
    if any(len(c) < len(g) for c, g in zip(clipped, groups)):
        warnings.warn(f"arxiv_qa: {rows.where} has {n} articles; the artifact's {ds.subset} groups use ids "
                      f"up to {max(max(g) for g in groups)}, so groups are cut to the ids present", stacklevel=2)
    groups = [c for c in clipped if c]
    cache: dict[int, np.ndarray] = {}

    def article(a: int) -> np.ndarray:
        if a not in cache:
            text = rows.data[a]["text"]
            if not isinstance(text, str):
                raise WorkloadError(f"dataset arxiv_qa: {rows.where}, row {a}: column 'text' holds "
                                    f"{type(text).__name__}, not a string; {ARXIV_SCHEMA}")
            cache[a] = tok(text, special=False)
        return cache[a]

    # The AE tokenises the concatenated text once: special tokens (BOS) lead the prompt once.
    return twins.assemble_arxiv(groups, shape.num_requests, ds.questions_per_article, article,
                                lambda k: tok(questions[k], special=False), shape.output_len or 150,
                                shape.max_len, twins.rng(shape.seed, 6), head=tok("", special=True),
                                where=rows.where)


def _sharegpt(cfg: DictConfig, shape: Shape, tok: Tokenize) -> list[Request]:
    """First two turns; vLLM's filters (prompt/output >= 4, prompt <= 1024, total <= 2048)."""
    ds = cfg.dataset
    if local_path(ds.hf_id or "") is not None:
        rows = open_rows(ds.name, ds.hf_id, ds.hf_subset, ds.hf_split, streaming=False)
        rows.require("conversations", schema="expected ShareGPT (a `conversations` list per row)")
        convs = [c for c in rows.data["conversations"] if c is not None and len(c) >= 2]
    else:
        import json

        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(ds.hf_id, "ShareGPT_V3_unfiltered_cleaned_split.json", repo_type="dataset")
        except Exception as exc:
            raise _hub_error(ds.name, ds.hf_id, exc) from exc
        with open(path, encoding="utf-8") as f:
            convs = [c["conversations"] for c in json.load(f) if len(c.get("conversations", [])) >= 2]
        rows = Rows(None, f"dataset.hf_id={ds.hf_id}", None, ds.name)
    order = twins.rng(shape.seed, 6).permutation(len(convs))
    out = []
    for i in order:
        if len(out) == shape.num_requests:
            break
        p, o = tok(convs[i][0]["value"]), len(tok(convs[i][1]["value"]))
        o = shape.output_len if shape.output_len is not None else o
        if len(p) < 4 or o < 4 or len(p) > 1024 or len(p) + o > 2048:
            continue
        out.append(Request(f"sharegpt-{len(out)}", 0.0, p, o))
    return _enough(out, shape, rows, f"{len(convs)} conversations, after vLLM's length filters")


__all__ = ["MMMU_PROMPT", "image_size", "load", "mllama_tiles"]
