"""The kinds of study, keyed by the study file's ``kind:`` — the one registry of kinds.

A kind is a module ``harness.study.kinds.<name>`` holding only what differs between studies: its
``report(plan, records, out) -> summary`` (summary table and figure) and, optionally,
``check(plan)`` (refuses a malformed plan before any cell runs; ``checks=True`` in its registry line,
so that the command loads no other kind's module, matplotlib and all, before the cells start);
what a report needs beyond the
records is a named input (``inputs``, computed by :mod:`harness.study.inputs`). Planning
(:mod:`harness.study.plan`), checking, running and caching (:mod:`harness.study.run`) and the
command line (:mod:`harness.study.cli`) are shared.

Adding a kind: write ``kinds/<name>.py`` and add one :class:`Kind` line below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Kind:
    name: str
    make: str                      # the make target that runs its committed study file
    partial_ok: bool = False       # exit status 0 when some (not all) cells ran: figures show OOM/failed bars
    inputs: tuple[str, ...] = ()   # report inputs the runner computes (harness.study.inputs), keywords of report()
    # "cells": planned into cached cells (harness.study.plan); "whatif": a what-if lab study that drives
    # the allocators on its own request streams (harness.study.whatif.run)
    runner: str = "cells"
    checks: bool = False           # its module has check(plan)

    @property
    def module(self) -> str:
        return f"harness.study.whatif.{self.name}" if self.runner == "whatif" else f"{__name__}.{self.name}"

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("figure", "make reproduce-fig13 / reproduce-fig14", partial_ok=True),
    Kind("window", "make sweep-window"),
    Kind("mix", "make sweep-mix", inputs=("analytic_curves",)),
    Kind("ablation", "make ablation"),
    Kind("lcm", "make lcm-churn", inputs=("zoo_geometry",)),
    Kind("micro", "make micro", checks=True),
    Kind("specdec", "make specdec"),
    Kind("vlm_embed", "make vlm-embed"),
    Kind("mamba_prefix", "make mamba-prefix"),
    # the what-if lab (users' reported hybrid-KV symptoms): experiments/whatif/<name>.yaml
    *(Kind(name, "make whatif", runner="whatif") for name in
      ("hf_mem_70", "vllm_45238", "vllm_42317", "vllm_48435", "sglang_26907", "vllm_ascend_16270",
       "sglang_34441", "summary")),
)}
DEFAULT_KIND = "figure"   # a file without ``kind:`` is a figure experiment (contract §3: cells × systems)
