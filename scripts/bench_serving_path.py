"""Micro-benchmark of the artifact's serving path: what the OpenAI API server costs per token.

The artifact measured Fig. 14 with ``benchmark_serving.py`` against
``python3 -m vllm.entrypoints.openai.api_server`` (heheda12345/Jenga-SOSP25-AE, ``figure14.md``):
every request streams (``backend_request_func.py``: ``"stream": True``), so the server produces one
output per running sequence per step. ``docs/fidelity/serving_path.md`` walks the code path; this
script times, as **thread CPU time** (the host is shared; wall time is inflated), loops equivalent
to each part on the CPU it runs on:

- ``detok_per_seq``: vLLM v0's ``Detokenizer.decode_sequence_inplace`` runs
  ``detokenize_incrementally`` for every sequence every step (``vllm/transformers_utils/
  detokenizer.py`` in both v0 forks). vLLM 0.32 ships the same function
  (``vllm.tokenizers.detokenizer_utils.detokenize_incrementally``), which we call on a
  byte-level BPE fast tokenizer (Llama-3's pre-tokenizer/decoder family) trained here on local
  text, because the real tokenizers are not on this offline host.
- ``request_output_per_seq``: ``RequestOutput`` + ``CompletionOutput`` built per sequence per step
  (``RequestOutputFactory.create`` → ``RequestOutput.from_seq_group``, DELTA mode for streaming).
- ``pickle_per_seq``: ``MQLLMEngine._send_outputs`` pickles the step's list of ``RequestOutput``s
  (``vllm/engine/multiprocessing/engine.py``) before the ZMQ send.
- ``stats_per_seq``: the benchmark does not pass ``--disable-log-stats``, so v0's
  ``LLMEngine.do_log_stats`` → ``_get_stats`` collects one inter-token latency per decoding sequence
  per step and ``PrometheusStatLogger._log_histogram`` observes each one
  (``histogram.labels(**labels).observe(datum)``, ``vllm/engine/metrics.py``).
- ``sse_chunk_per_seq`` (front-end process, off the engine's critical path): unpickle, the
  chat-completion stream chunk (pydantic ``ChatCompletionStreamResponse`` →
  ``model_dump_json``), and the client's ``json.loads`` of the ``data:`` line.
- ``tokenize_per_token``: encoding a long prompt (the API server tokenizes each request in the
  front-end before the engine sees it).

Run with the vLLM venv (needs ``tokenizers``, ``transformers``, ``vllm``, ``pydantic``):
``/work/main/.venv-vllm/bin/python scripts/bench_serving_path.py`` (about 30 s: most of it trains the
tokenizer). Prints microseconds per unit (median of repeats) as JSON.
"""

from __future__ import annotations

import json
import pickle
import platform
import random
import statistics
import sys
import time
from pathlib import Path


def _time(fn, units: int, repeats: int = 7) -> float:
    """Median microseconds of thread CPU time per unit of ``fn()``."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        fn()
        out.append((time.thread_time_ns() - t0) / units / 1e3)
    return statistics.median(out)


def _corpus(max_bytes: int = 6_000_000) -> list[str]:
    """Local English-ish text: Python sources and docs of the installed packages."""
    root = Path(sys.prefix) / "lib"
    texts, size = [], 0
    for p in sorted(root.rglob("*.py")):
        try:
            t = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(t)
        size += len(t)
        if size >= max_bytes:
            break
    return texts


def build_tokenizer(vocab_size: int = 32000, max_bytes: int = 6_000_000):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = _corpus(max_bytes)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    return fast, texts


def bench_detok(tokenizer, texts, seqs: int = 64, steps: int = 150) -> float:
    """Incremental detokenization, one new token per sequence per step (v0 ``decode_sequence_inplace``)."""
    from vllm.tokenizers.detokenizer_utils import convert_prompt_ids_to_tokens, detokenize_incrementally

    rng = random.Random(0)
    streams = []
    for i in range(seqs):
        ids = tokenizer(texts[i % len(texts)][:20000]).input_ids
        start = rng.randrange(0, max(1, len(ids) - 400))
        prompt, out = ids[start:start + 200], ids[start + 200:start + 200 + steps]
        streams.append((prompt, out))

    def run():
        for prompt, out in streams:
            all_ids = list(prompt)
            tokens, prefix, read = convert_prompt_ids_to_tokens(tokenizer, prompt)
            text = ""
            for t in out:
                all_ids.append(t)
                new_tokens, new_text, prefix, read = detokenize_incrementally(
                    tokenizer, all_ids, tokens, prefix, read,
                    skip_special_tokens=True, spaces_between_special_tokens=True)
                tokens.extend(new_tokens)
                text += new_text

    return _time(run, seqs * steps, repeats=5)


def _outputs(seqs: int):
    from vllm.outputs import CompletionOutput, RequestOutput

    return [RequestOutput(request_id=f"chatcmpl-{i:032x}", prompt=None, prompt_token_ids=None,
                          prompt_logprobs=None,
                          outputs=[CompletionOutput(index=0, text=" word", token_ids=[1234],
                                                    cumulative_logprob=None, logprobs=None,
                                                    finish_reason=None)],
                          finished=False)
            for i in range(seqs)]


def bench_request_output(seqs: int = 64, steps: int = 100) -> float:
    def run():
        for _ in range(steps):
            _outputs(seqs)
    return _time(run, seqs * steps)


def bench_pickle(seqs: int = 64, steps: int = 100) -> float:
    outs = _outputs(seqs)

    def run():
        for _ in range(steps):
            pickle.dumps(outs)
    return _time(run, seqs * steps)


def bench_stats(seqs: int = 64, steps: int = 200) -> float:
    from prometheus_client import CollectorRegistry, Histogram

    hist = Histogram("tpot", "time per output token", labelnames=["model_name"],
                     buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5],
                     registry=CollectorRegistry())
    labels = {"model_name": "m"}
    last = [time.time()] * seqs

    def run():
        for _ in range(steps):
            now = time.time()
            lat = []
            for i in range(seqs):
                lat.append(now - last[i])
                last[i] = now
            for d in lat:
                hist.labels(**labels).observe(d)
    return _time(run, seqs * steps)


def bench_sse_chunk(seqs: int = 64, steps: int = 50) -> float:
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice,
        ChatCompletionStreamResponse,
        DeltaMessage,
    )

    blob = pickle.dumps(_outputs(seqs))

    def run():
        for _ in range(steps):
            for o in pickle.loads(blob):
                chunk = ChatCompletionStreamResponse(
                    id=o.request_id, created=0, model="m",
                    choices=[ChatCompletionResponseStreamChoice(
                        index=0, delta=DeltaMessage(content=o.outputs[0].text), logprobs=None,
                        finish_reason=None)])
                line = f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"
                json.loads(line[len("data: "):].strip())  # the client (backend_request_func.py)
    return _time(run, seqs * steps)


def bench_tokenize(tokenizer, texts) -> float:
    text = "\n".join(texts)[:400_000]
    n = len(tokenizer(text).input_ids)
    return _time(lambda: tokenizer(text), n, repeats=5)


def _import_protocol_ok() -> bool:
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionStreamResponse  # noqa: F401
        return True
    except ImportError:
        return False


def main() -> None:
    t0 = time.thread_time()
    tokenizer, texts = build_tokenizer()
    res = {
        "host": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "unit": "microseconds of thread CPU time per unit (median)",
        "tokenizer": f"byte-level BPE, vocab {tokenizer.vocab_size}, trained on local text",
        "tokenizer_train_cpu_s": round(time.thread_time() - t0, 1),
        "detok_per_seq": bench_detok(tokenizer, texts),
        "request_output_per_seq": bench_request_output(),
        "pickle_per_seq": bench_pickle(),
        "stats_per_seq": bench_stats(),
        "tokenize_per_token": bench_tokenize(tokenizer, texts),
    }
    if _import_protocol_ok():
        res["sse_chunk_per_seq"] = bench_sse_chunk()
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}, indent=1))


if __name__ == "__main__":
    main()
