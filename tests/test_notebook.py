"""notebooks/analysis.ipynb executes on smoke-mode results it finds in a temp dir and redraws
every study's figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.studies import mamba_prefix, micro, specdec, vlm_embed

ROOT = Path(__file__).resolve().parents[1]
STUDIES = {"micro": micro, "specdec": specdec, "vlm_embed": vlm_embed, "mamba_prefix": mamba_prefix}


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("nb")
    for name, mod in STUDIES.items():
        rc = mod.main([str(ROOT / "experiments" / f"{name}.yaml"), "mode=smoke", "seeds=0", "--jobs", "1",
                       "--out", str(tmp / "results" / name), f"out_dir={tmp / 'runs'}"])
        assert rc == 0, name
    return tmp


def test_studies_write_smoke_summaries(smoke_results):
    for name in STUDIES:
        d = smoke_results / "results" / name
        assert (d / "summary_smoke.csv").exists() and (d / f"{name}_smoke.png").exists()
        means = pd.read_csv(d / "summary_mean_smoke.csv")
        assert (means["n_seeds"] == 1).all()


def test_notebook_executes_and_redraws(smoke_results):
    papermill = pytest.importorskip("papermill")
    figs = smoke_results / "figs"
    out = smoke_results / "analysis.out.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "analysis.ipynb"), str(out), kernel_name="python3",
                               parameters={"RESULTS_DIR": str(smoke_results / "results"), "SUFFIX": "_smoke",
                                           "FIG_DIR": str(figs)}, cwd=str(ROOT / "notebooks"), progress_bar=False)
    assert sorted(p.name for p in figs.glob("*.png")) == sorted(f"{n}_smoke.png" for n in STUDIES)
    assert "figures redrawn" in out.read_text()
