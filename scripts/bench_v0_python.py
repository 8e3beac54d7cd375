"""Micro-benchmark of vLLM v0's per-step Python work that grows with what a step holds.

The sim's v0 step-time overhead (``harness/backends/sim/cost.py``, ``V0_PYTHON``) charges CPU time per
block-table entry and per prefill token. Those constants come from this script: it times, on the
CPU it runs on, loops equivalent to the artifact forks' code (read in heheda12345/Jenga-SOSP25-AE,
nothing copied; vLLM is not imported):

- ``uniform_entry``: ``vllm-v0-baseline`` ``CommonMetadataBuilder._add_seq_group`` takes each
  decode sequence's block table (``block_tables[seq_id][-curr_sliding_window_block:]``, a list copy)
  and ``build`` writes it into the CUDA-graph table (``input_block_tables[i, :len(bt)] = bt``) or
  ``make_tensor_with_pad`` (eager): one list copy and one list → numpy row per entry.
- ``per_layer_entry``: ``vllm-v0-jenga``'s same function, per KV group (one attention-metadata
  builder per group, ``ModelInputForGPUBuilder`` in ``vllm/worker/model_runner.py``), builds
  ``[2 * x for x in block_table]`` twice per sequence (block table and slot mapping) before the
  same numpy write: two Python list comprehensions and one numpy row per entry.
- ``prefill_token``: ``ModelInputForGPUBuilder.build`` flattens input tokens and positions into
  Python lists and ``async_tensor_h2d`` turns them into tensors (``torch.tensor(list)``).
- ``slot_token``: ``compute_slot_mapping`` (numpy path for >= 256 tokens) extends the Python list
  ``slot_mapping`` with a numpy array (one numpy scalar per token) and ``build`` converts that list
  with ``torch.tensor`` — per token and, in the per-layer manager, per group.

- ``--mm``: ``ModelInputForGPUBuilder._compute_multi_modal_input`` runs mllama's default input
  mapper (``vllm/multimodal/image.py`` ``ImagePlugin._default_input_mapper``), i.e. the HF
  ``MllamaImageProcessor.preprocess``, per image prefill. Needs the artifact's
  ``transformers==4.45.2`` (``environment.md``; the numpy processor) with ``numpy<2`` and pillow,
  e.g. in a throw-away venv: ``python -m venv /tmp/tf && /tmp/tf/bin/pip install
  transformers==4.45.2 'numpy<2' pillow && /tmp/tf/bin/python scripts/bench_v0_python.py --mm``.
  Prints milliseconds per 560-px tile on random RGB images of several sizes.

Run: ``python scripts/bench_v0_python.py`` (a few seconds). Prints thread CPU nanoseconds per unit
(median of repeats; CPU time, because a shared host inflates wall time). CPU-speed dependent: the
artifact's host (an H100 server) is likely faster per core than a shared cloud vCPU, so these are
upper-side estimates for it.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time

import numpy as np

BLOCK = 16


def _time(fn, units: int, repeats: int = 7) -> float:
    """Median nanoseconds per unit of ``fn()``."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        fn()
        out.append((time.thread_time_ns() - t0) / units)
    return statistics.median(out)


def uniform_entry(seqs: int = 32, blocks: int = 2000) -> float:
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(seqs)]
    graph = np.zeros((seqs, blocks), dtype=np.int32)

    def run():
        picked = [bt[-0:] for bt in tables]
        for i, bt in enumerate(picked):
            graph[i, :len(bt)] = bt
    return _time(run, seqs * blocks)


def per_layer_entry(seqs: int = 32, blocks: int = 2000) -> float:
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(seqs)]
    graph = np.zeros((seqs, blocks), dtype=np.int32)

    def run():
        picked = []
        for bt in tables:
            picked.append([2 * x for x in bt])   # block table
            _ = [2 * x for x in bt]              # slot mapping's copy
        for i, bt in enumerate(picked):
            graph[i, :len(bt)] = bt
    return _time(run, seqs * blocks)


def prefill_token(tokens: int = 200_000) -> float:
    import torch

    prompt = list(range(tokens))

    def run():
        input_tokens: list[int] = []
        input_tokens.extend(prompt)
        positions: list[int] = []
        positions.extend(range(tokens))
        torch.tensor(input_tokens, dtype=torch.long)
        torch.tensor(positions, dtype=torch.long)
    return _time(run, tokens)


def slot_token(tokens: int = 200_000) -> float:
    import torch

    table = list(range(tokens // BLOCK + 1))

    def run():
        slot_mapping: list = []
        arr = np.array(table)
        idx = np.arange(0, tokens)
        off = idx % BLOCK
        idx //= BLOCK
        s = arr[idx]
        s *= BLOCK
        s += off
        slot_mapping.extend(s)
        torch.tensor(slot_mapping, dtype=torch.long)
    return _time(run, tokens)


def mm_tile_ms() -> None:
    """HF MllamaImageProcessor (transformers 4.45.2) per tile, Llama-3.2-Vision's preprocessor
    settings (560-px tiles, at most 4, bilinear, CLIP mean/std)."""
    from PIL import Image
    from transformers.models.mllama.image_processing_mllama import MllamaImageProcessor

    proc = MllamaImageProcessor(size={"height": 560, "width": 560}, resample=2, rescale_factor=1 / 255,
                                image_mean=[0.48145466, 0.4578275, 0.40821073],
                                image_std=[0.26862954, 0.26130258, 0.27577711], max_image_tiles=4)
    rng = np.random.default_rng(0)
    for w, h in ((560, 560), (1120, 560), (1680, 560), (1120, 1120), (1280, 960), (1920, 1080)):
        img = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        tiles = proc.preprocess(img, return_tensors="np")["num_tiles"][0][0]
        ms = _time(lambda img=img: proc.preprocess(img, return_tensors="np"), tiles * 10**6, repeats=9)
        print(f"mm_{w}x{h}_tiles{tiles}_ms_per_tile: {ms:.2f}")


def main() -> None:
    if "--mm" in sys.argv:
        mm_tile_ms()
        return
    import torch

    torch.set_num_threads(1)
    print(f"# {platform.machine()} python {platform.python_version()} "
          f"numpy {np.__version__} torch {torch.__version__}")
    for name, fn in (("uniform_entry", uniform_entry), ("per_layer_entry", per_layer_entry),
                     ("prefill_token", prefill_token), ("slot_token", slot_token)):
        print(f"{name}_ns: {fn():.1f}")


if __name__ == "__main__":
    main()
