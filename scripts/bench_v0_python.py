"""Micro-benchmark of vLLM v0's per-step Python work that grows with what a step holds.

The sim's v0 step-time overhead (``harness/backends/cost/model.py``, ``V0_PYTHON``) charges CPU time per
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

- ``running_seq``: work the ``vllm-v0-jenga`` scheduler does every step for every *running*
  sequence, scheduled or not (also in prefill-only steps while the running set waits):
  ``Scheduler.schedule`` calls ``block_manager.free_skipped_blocks`` per running group
  (``PerlayerBlockSpaceManager`` → ``CustomBlockManager.free_skipped_blocks``: one call per KV
  group through the ``kv_cache_config`` property; ``LinearAttentionManager.free_skipped_blocks``
  reads the computed-token count, fetches the null block, computes ``len(blocks) - 3`` and walks an
  empty range; ``SelfAttentionManager``'s is ``pass``), ``_schedule_default`` adds every running
  group to the budget (``budget.add_num_seqs``), and ``free_finished_seq_groups`` checks
  ``is_finished`` per running group. Emulated with Jamba's three groups (attention, conv, SSM);
  prints nanoseconds per running sequence per step for the two loops of both v0 forks
  (``running_seq_ns``) and for ``free_skipped_blocks`` per running sequence and KV group
  (``running_seq_group_ns``).

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


def running_seq(seqs: int = 1000) -> tuple[float, float]:
    """Per running sequence per step (see the module docstring), Jamba's three KV groups:
    (budget + finished check per sequence, ``free_skipped_blocks`` per sequence and KV group)."""

    def require_init(fn):
        def wrapper(self, *a, **k):
            assert self._initialized
            return fn(self, *a, **k)
        return wrapper

    class Data:
        def __init__(self):
            self._num_computed_tokens = 1900

        def get_num_computed_tokens(self):
            return self._num_computed_tokens

    class Seq:
        def __init__(self, i):
            self.seq_id, self.data, self.status = i, Data(), "RUNNING"

        def is_finished(self):
            return self.status.startswith("FINISHED")

    class Group:
        def __init__(self, i):
            self.request_id, self.seqs = str(i), [Seq(i)]

        def is_finished(self):
            return all(s.is_finished() for s in self.seqs)

        def get_max_num_running_seqs(self):
            return len(self.seqs)

    class Alloc:
        _null_block = object()

        def allocate_or_get_null_block(self):
            return self._null_block

    class Table:
        def __init__(self):
            self._blocks, self._allocator, self.free_start = [1, 2], Alloc(), 0

    class SelfAttn:
        def free_skipped_blocks(self, seq, table, tracker):
            pass

    class Linear:
        def free_skipped_blocks(self, seq, table, tracker):
            seq.data.get_num_computed_tokens()
            null = table._allocator.allocate_or_get_null_block()
            end = max(len(table._blocks) - 3, 0)
            for idx in range(table.free_start, end):
                if table._blocks[idx] is not null:
                    pass
            table.free_start = end

    class Config:
        def __init__(self):
            self.block_table_sharing = {"self_attention_32768": ["4"], "linear_attention_8192": ["0-conv"],
                                        "linear_attention_32768": ["0-ssm"]}

    class Custom:
        _initialized = True

        def __init__(self):
            self._kv = Config()
            self._app_aware_managers = {"4": SelfAttn(), "0-conv": Linear(), "0-ssm": Linear()}
            self._tracker = None

        @property
        @require_init
        def kv_cache_config(self):
            return self._kv

        @require_init
        def free_skipped_blocks(self, seq, block_table):
            for group_id in self.kv_cache_config.block_table_sharing.keys():  # noqa: SIM118 (as the fork)
                manager = self._app_aware_managers[self.kv_cache_config.block_table_sharing[group_id][0]]
                assert group_id in block_table
                manager.free_skipped_blocks(seq, block_table[group_id], self._tracker)

    class PerLayer:
        def __init__(self, n):
            self.custom = Custom()
            self.block_tables = {i: {g: Table() for g in Config().block_table_sharing} for i in range(n)}

        def free_skipped_blocks(self, seq):
            self.custom.free_skipped_blocks(seq, self.block_tables[seq.seq_id])

    class Budget:
        def __init__(self):
            self._ids, self._num = set(), 0

        def add_num_seqs(self, req_id, n):
            if req_id in self._ids:
                return
            self._ids.add(req_id)
            self._num += n

    bm = PerLayer(seqs)
    running = [Group(i) for i in range(seqs)]

    def skipped():                             # Scheduler.schedule (vllm-v0-jenga only)
        for g in running:
            bm.free_skipped_blocks(g.seqs[0])

    def common():                              # both v0 forks
        budget = Budget()                      # _schedule_default
        for g in running:
            budget.add_num_seqs(g.request_id, g.get_max_num_running_seqs())
        remaining = []                         # free_finished_seq_groups
        for g in running:
            if not g.is_finished():
                remaining.append(g)

    groups = len(Config().block_table_sharing)
    return _time(common, seqs), _time(skipped, seqs * groups)


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
    seq_ns, group_ns = running_seq()
    print(f"running_seq_ns: {seq_ns:.1f}")
    print(f"running_seq_group_ns: {group_ns:.1f}")


if __name__ == "__main__":
    main()
