"""notebooks/analysis.ipynb executes on smoke-mode results it finds in a temp dir and redraws
every study's figure."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from harness.study import cli
from harness.study.kinds import mamba_prefix, micro, specdec, vlm_embed

ROOT = Path(__file__).resolve().parents[1]
# Runs four whole studies (~35 s on 2 cores): `make test-slow`, not `make test`.
pytestmark = pytest.mark.slow

STUDIES = {"micro": micro, "specdec": specdec, "vlm_embed": vlm_embed, "mamba_prefix": mamba_prefix}


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("nb")
    for name in STUDIES:
        rc = cli.main([str(ROOT / "experiments" / f"{name}.yaml"), "mode=smoke", "seeds=0", "--jobs", "1",
                          "--out", str(tmp / "results" / name), f"out_dir={tmp / 'runs'}", "--no-progress"])
        assert rc == 0, name
    return tmp


def test_studies_write_smoke_summaries(smoke_results):
    for name in STUDIES:
        d = smoke_results / "results" / name
        assert (d / "summary_smoke.csv").exists() and (d / f"{name}_smoke.png").exists()
        means = pd.read_csv(d / "summary_mean_smoke.csv")
        assert (means["seeds"] == 1).all()


def test_notebook_executes_and_redraws(smoke_results):
    papermill = pytest.importorskip("papermill")
    figs = smoke_results / "figs"
    out = smoke_results / "analysis.out.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "analysis.ipynb"), str(out), kernel_name="python3",
                               parameters={"RESULTS_DIR": str(smoke_results / "results"), "SUFFIX": "_smoke",
                                           "FIG_DIR": str(figs)}, cwd=str(ROOT / "notebooks"), progress_bar=False)
    assert sorted(p.name for p in figs.glob("*.png")) == sorted(f"{n}_smoke.png" for n in STUDIES)
    text = out.read_text()
    assert "figures redrawn" in text
    # Every per-seed table shows its seed column (header line: identifying columns, then `seed`).
    for header in ("part system  x  seed", "target draft system  seed", "model variant  request_rate  seed",
                   "workload variant  seed"):
        assert re.search(r"\b" + r"\s+".join(map(re.escape, header.split())) + r"\b", text), header


def _code_cells():
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_notebook_swallows_no_exception():
    for src in _code_cells():
        tree = ast.parse(src)
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Try)], src
        assert "suppress(" not in src, src


def test_notebook_output_folder_is_git_ignored():
    params = next(src for src in _code_cells() if "FIG_DIR" in src)
    fig_dir = ast.literal_eval(re.search(r"FIG_DIR\s*=\s*(\S+)", params).group(1))
    folder = (ROOT / "notebooks" / fig_dir).resolve().relative_to(ROOT)
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = (folder / "fig13.png").as_posix()
    rc = subprocess.run(["git", "check-ignore", "-q", "--no-index", probe], cwd=ROOT, check=False).returncode
    assert rc == 0, f"{probe} is not git-ignored"
