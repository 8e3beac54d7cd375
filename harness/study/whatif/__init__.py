"""The what-if lab's studies: users' reported hybrid-KV symptoms as studies, one module per study (``<name>.py`` with
``run(study: dict, out: Path) -> list[dict]`` and ``report(study, rows, out) -> str``), each driven by
``experiments/whatif/<name>.yaml`` (which holds the user's reported numbers with their source).

    python -m harness.study.whatif experiments/whatif/<name>.yaml [...] [--out results/whatif]

Each study writes ``results/whatif/<name>/summary.csv``, ``<name>.png`` + ``.pdf`` (via
``harness.plots.save``) and ``REPORT.md``: the user's number beside ours and the setting that fixes
it. Every throughput / TTFT / hit rate here comes from the CPU simulator and is labelled SIMULATED;
capacities and block sizes are the engines' arithmetic (exact against vLLM 0.32's own code in
tests/test_whatif_vllm.py). They drive the allocators directly on their own request streams and count
hits per request, so they are not cached cells of :mod:`harness.study.plan`; they live in the study
package beside its kinds, with their own driver (``__main__``).
"""

from __future__ import annotations

from harness.study.kinds import KINDS

# The what-if kinds of the one registry of kinds (harness.study.kinds).
STUDIES = tuple(k.name for k in KINDS.values() if k.runner == "whatif")
