"""docs/ARCHITECTURE.md's worked examples ("where to add a system, a model, a dataset, a backend, a
study") are run here, so the document cannot drift from the code."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
EXAMPLES = dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", DOC, flags=re.DOTALL))


def test_every_kind_of_addition_has_an_example():
    assert set(EXAMPLES) >= {"system", "model", "dataset", "backend", "study"}


# The study example runs a whole smoke study (~8 s): slow.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "study" else n for n in sorted(EXAMPLES)])
def test_example_runs(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(EXAMPLES[name], f"ARCHITECTURE.md:{name}", "exec"), {"__name__": f"example_{name}"})  # noqa: S102 - running the documented examples is the test
