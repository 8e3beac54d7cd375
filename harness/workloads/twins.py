"""Offline twins: seeded generators that reproduce each dataset's published shape.

Statistics come from the top-level ``datasets/<name>.yaml`` files (each number marked PUBLISHED,
INFERRED or ASSUMED there, with its source in ``datasets/README.md``). Token ids are drawn from a
numpy Generator seeded by ``(seed, stream, index)``: the same seed gives the same requests token for
token, and requests that share a prefix (an arXiv article group, an MMLU-pro few-shot block) share
those exact ids, so content hashing finds the shared blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from harness.workloads.request import Request
from jenga.interface import ImageSpan

DATASETS_DIR = Path(__file__).resolve().parents[2] / "datasets"

# Independent random streams (never Python's salted hash()).
_ARTICLE, _QUESTION, _PREFIX, _SUFFIX, _TEXT, _MAIN = 1, 2, 3, 4, 5, 6


class WorkloadError(ValueError):
    """A workload cannot be built; the message names the dataset/request and what to change."""


@dataclass(frozen=True)
class Shape:
    """Everything a generator reads besides the dataset statistics."""

    num_requests: int
    seed: int
    vocab_size: int
    output_len: int | None        # fixed output length (null = the dataset's own)
    max_len: int | None           # cap on prompt + output
    length_scale: float
    max_output_len: int | None
    model_name: str


def load_stats(name: str) -> dict:
    """The twin statistics file ``datasets/<name>``."""
    path = DATASETS_DIR / name
    if not path.exists():
        raise WorkloadError(f"dataset statistics file {path} not found")
    # libyaml's safe loader when the wheel has it (the same documents, ~10x faster; every cell loads one)
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


def token_ids(seed: int, stream: int, index: int, n: int, vocab: int) -> np.ndarray:
    """``n`` deterministic token ids in ``[0, vocab)`` for one (stream, index) item."""
    return rng(seed, stream, index).integers(0, vocab, size=int(n), dtype=np.int32)


def _lognormal(g: np.random.Generator, median: float, sigma: float) -> float:
    return float(g.lognormal(math.log(median), sigma))


def _scaled(n: float, shape: Shape, floor: int = 1) -> int:
    return max(floor, round(n * shape.length_scale))


def _out(n: int, shape: Shape) -> int:
    n = shape.output_len if shape.output_len is not None else n
    return max(1, min(n, shape.max_output_len) if shape.max_output_len else n)


def mmlu_pro(shape: Shape, stats: dict) -> list[Request]:
    """5-shot-CoT-style prompts: a per-category exemplar block (shared prefix) + a question."""
    cats = list(stats["categories"])
    weights = np.array([stats["categories"][c] for c in cats], dtype=float)
    pl, sl, ol = stats["prefix_len"], stats["suffix_len"], stats["output_len"]
    prefix_len = {c: _scaled(rng(shape.seed, _PREFIX, k).integers(pl["min"], pl["max"] + 1), shape)
                  for k, c in enumerate(cats)}
    max_prompt = _scaled(stats["max_prompt_len"], shape)
    p = weights / weights.sum()
    prefixes: dict[int, np.ndarray] = {}     # a category's exemplar tokens, drawn once (its own stream)
    g = rng(shape.seed, _MAIN)
    out: list[Request] = []
    attempts = 0
    while len(out) < shape.num_requests:
        attempts += 1
        if attempts > 100 * shape.num_requests + 1000:
            raise WorkloadError(f"mmlu_pro: cannot draw {shape.num_requests} requests with "
                                f"prompt + output <= max_len={shape.max_len}; raise dataset.max_len")
        k = int(g.choice(len(cats), p=p))
        suffix = max(_scaled(sl["min"], shape), _scaled(_lognormal(g, sl["median"], sl["sigma"]), shape))
        suffix = max(1, min(suffix, max_prompt - prefix_len[cats[k]]))
        olen = _out(int(min(max(round(_lognormal(g, ol["median"], ol["sigma"])), ol["min"]), ol["max"])), shape)
        if shape.max_len is not None and prefix_len[cats[k]] + suffix + olen > shape.max_len:
            continue
        i = len(out)
        if k not in prefixes:
            prefixes[k] = token_ids(shape.seed, _PREFIX, k, prefix_len[cats[k]], shape.vocab_size)
        prompt = np.concatenate([prefixes[k], token_ids(shape.seed, _SUFFIX, i, suffix, shape.vocab_size)])
        out.append(Request(f"mmlu_pro-{i}", 0.0, prompt, olen, prefix_group=f"mmlu_pro/{cats[k]}"))
    return out


def mmmu_pro(shape: Shape, stats: dict, vision: dict | None, image_token: int) -> list[Request]:
    """One image + the artifact's fixed instruction per request (output 200)."""
    if not vision:
        raise WorkloadError(f"dataset mmmu_pro needs a vision model; model {shape.model_name} has no "
                            "vision section (use e.g. model=llama3_2_11b_vision)")
    tiles = sorted(stats["tiles"].items())
    probs = np.array([p for _, p in tiles], dtype=float)
    text = token_ids(shape.seed, _TEXT, 0, stats["text_tokens"], shape.vocab_size)
    off = int(stats["image_offset"])
    g = rng(shape.seed, _MAIN)
    out = []
    for i in range(shape.num_requests):
        t = int(tiles[int(g.choice(len(tiles), p=probs / probs.sum()))][0])
        if vision["kind"] == "cross":
            n_img = t * vision["tokens_per_tile"]
            prompt = text  # image tokens live only in cross-attention (mllama)
        else:
            # Decoder-only VLM: map the tile fraction onto the model's own tile budget.
            n_tiles = max(1, round(t / 4 * vision["max_tiles"]))
            n_img = n_tiles * vision["tokens_per_tile"]
            prompt = np.concatenate([text[:off], np.full(n_img, image_token, dtype=np.int32), text[off:]])
        img = ImageSpan(image_id=(shape.seed << 32) | i, num_tokens=int(n_img), offset=off)
        out.append(Request(f"mmmu_pro-{i}", 0.0, prompt, _out(stats["output_len"], shape), images=(img,)))
    return out


def arxiv_groups(stats: dict, subset: str | None, articles_per_group: int | None,
                 num_articles: int | None = None) -> list[list[int]]:
    """Article-id groups: the AE's lists, or consecutive chunks of ``articles_per_group`` over
    ``num_articles`` articles (the real loader passes its row count; the twin its statistics')."""
    if articles_per_group:
        ids = list(range(stats["num_articles"] if num_articles is None else num_articles))
        return [ids[j:j + articles_per_group] for j in range(0, len(ids), articles_per_group)]
    if subset in (None, "ministral"):
        return [list(g) for g in stats["ministral_groups"]]
    if subset == "gemma2":
        return [[a] for a in stats["gemma2_articles"]]
    raise WorkloadError(f"arxiv_qa: dataset.subset={subset!r}; allowed: ['ministral', 'gemma2']")


def assemble_arxiv(groups: list[list[int]], num_requests: int, questions_per_article: int,
                   article: Callable[[int], np.ndarray], question: Callable[[int], np.ndarray],
                   output_len: int, max_len: int | None, g: np.random.Generator,
                   head: np.ndarray | None = None, where: str = "the twin") -> list[Request]:
    """The AE recipe: per group, concatenate its articles while prompt + output <= max_len; ask the
    first ``questions_per_article`` questions (prompt = articles + question); skip a group whose
    first article or questions do not fit; shuffle all requests. Shared by the twin and the real loader
    (which passes ``head``, the tokenizer's special tokens that lead every prompt once, and ``where``,
    the data's source for the error message)."""
    q = questions_per_article
    want_groups = math.ceil(num_requests / q)
    head = np.zeros(0, dtype=np.int32) if head is None else np.asarray(head, dtype=np.int32)
    reqs: list[Request] = []
    used = 0
    for j, grp in enumerate(groups):
        if used == want_groups:
            break
        parts, cur = [head], len(head)
        for a in grp:
            ids = article(a)
            if max_len is not None and cur + len(ids) + output_len > max_len:
                break
            parts.append(ids)
            cur += len(ids)
        if len(parts) == 1:
            # Not even the first article fits: skip the group (the AE would loop forever on a
            # too-long single article, or send question-only prompts for a too-long group head).
            continue
        prefix = np.concatenate(parts)
        qs = [question(k) for k in range(q)]
        if max_len is not None and any(cur + len(x) + output_len > max_len for x in qs):
            continue
        for k, x in enumerate(qs):
            reqs.append(Request(f"arxiv_qa-g{j}-q{k}", 0.0, np.concatenate([prefix, x]), output_len,
                                prefix_group=f"arxiv_qa/g{j}"))
        used += 1
    if used < want_groups:
        raise WorkloadError(f"arxiv_qa: only {used} of {len(groups)} article groups of {where} fit "
                            f"dataset.max_len={max_len}; {want_groups} needed for dataset.num_requests="
                            f"{num_requests} ({questions_per_article} questions per group)")
    order = g.permutation(len(reqs))
    return [reqs[i] for i in order][:num_requests]


def arxiv_qa(shape: Shape, stats: dict, subset: str | None, articles_per_group: int | None,
             questions_per_article: int) -> list[Request]:
    al = stats["article_len"]
    mu = math.log(al["mean"]) - al["sigma"] ** 2 / 2  # lognormal with the stated mean

    def article(a: int) -> np.ndarray:
        n = max(al["min"], rng(shape.seed, _ARTICLE, a, 0).lognormal(mu, al["sigma"]))
        return token_ids(shape.seed, _ARTICLE, a, _scaled(n, shape), shape.vocab_size)

    def question(k: int) -> np.ndarray:
        return token_ids(shape.seed, _QUESTION, k, stats["questions"][k]["tokens"], shape.vocab_size)

    if not 1 <= questions_per_article <= len(stats["questions"]):
        raise WorkloadError(f"arxiv_qa: questions_per_article must be in [1, {len(stats['questions'])}]")
    max_len = None if shape.max_len is None else _scaled(shape.max_len, shape)
    return assemble_arxiv(arxiv_groups(stats, subset, articles_per_group), shape.num_requests,
                          questions_per_article, article, question, _out(150, shape), max_len,
                          rng(shape.seed, _MAIN))


def sharegpt(shape: Shape, stats: dict) -> list[Request]:
    """Lognormal prompt/output lengths with vLLM's ShareGPT filter rules applied by rejection."""
    pl, ol, f = stats["prompt_len"], stats["output_len"], stats["filter"]
    g = rng(shape.seed, _MAIN)
    out = []
    while len(out) < shape.num_requests:
        p = round(_lognormal(g, pl["median"], pl["sigma"]))
        o = round(_lognormal(g, ol["median"], ol["sigma"]))
        o_eff = shape.output_len if shape.output_len is not None else o
        if p < f["min_len"] or (shape.output_len is None and o < f["min_len"]):
            continue
        if p > f["max_prompt"] or p + o_eff > f["max_total"]:
            continue
        i = len(out)
        out.append(Request(f"sharegpt-{i}", 0.0, token_ids(shape.seed, _SUFFIX, i, _scaled(p, shape),
                                                          shape.vocab_size), _out(o, shape)))
    return out


def uniform(shape: Shape, name: str, lo_in: int, hi_in: int, lo_out: int, hi_out: int) -> list[Request]:
    """Input and output lengths uniform in the inclusive ranges; random token ids."""
    if lo_in is None or hi_in is None or lo_out is None or hi_out is None or lo_in > hi_in or lo_out > hi_out:
        raise WorkloadError(f"dataset {name}: input_len_min/max and output_len_min/max must be set with "
                            f"min <= max, got input [{lo_in}, {hi_in}], output [{lo_out}, {hi_out}]")
    g = rng(shape.seed, _MAIN)
    out = []
    for i in range(shape.num_requests):
        p = _scaled(int(g.integers(lo_in, hi_in + 1)), shape)
        o = _out(int(g.integers(lo_out, hi_out + 1)), shape)
        out.append(Request(f"{name}-{i}", 0.0, token_ids(shape.seed, _SUFFIX, i, p, shape.vocab_size), o))
    return out
