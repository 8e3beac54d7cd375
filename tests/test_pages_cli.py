"""`python -m harness.tools.pages` and `python -m harness.tools.waste`: geometry and analytic waste, exact values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import compose_cell
from harness.models import load_profile
from harness.tools import pages, waste

REPO = Path(__file__).resolve().parent.parent


def _profile(name):
    return load_profile(compose_cell([f"model={name}"]).model)


def test_pages_one_model(capsys):
    assert pages.main(["model=llama3_2_11b_vision"]) == 0
    out = capsys.readouterr().out
    assert "LCM large page: 2097152 bytes (2 MiB)" in out
    # cross: 8 layers x 4 KiB x 16 tokens = 512 KiB small page, 4 per large page; MAX page: 64 tokens
    cross = next(line for line in out.splitlines() if line.startswith("cross"))
    assert cross.split()[-3:] == ["524288", "4x", "64"]


def test_pages_character_shows_kv_sharing(capsys):
    assert pages.main(["model=character_70b_fp8", "tokens_per_page=16"]) == 0
    out = capsys.readouterr().out
    assert "7/13" in out and "40/67" in out and "largest large/small ratio 40x" in out


def test_pages_jamba_reports_both_layouts(capsys):
    assert pages.main(["model=jamba_1_5_mini"]) == 0
    out = capsys.readouterr().out
    assert "largest large/small ratio 133x" in out
    assert "ratio 84x (a large page = 1344 attention tokens)" in out


@pytest.mark.slow
def test_pages_zoo_table_via_module():
    res = subprocess.run([sys.executable, "-m", "harness.tools.pages"], capture_output=True, text=True, cwd=REPO,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    rows = {(line.split()[0], line.split()[1]): line.split() for line in lines[1:] if len(line.split()) == 10}
    assert rows[("llama3_1_8b", "full")][-2:] == ["1x", "16"]
    assert rows[("jamba_1_5_mini", "full")][-2:] == ["133x", "532"]
    assert rows[("llama3_2_11b_vision", "cross")][3:6] == ["8", "32768", "524288"]
    # Nemotron-Nano-9B-v2's Mamba-2 state (27 x 5,316,608 B, fp32 as vLLM keeps it) against a 16-token
    # attention page of its 4 attention layers: LCM = 4.28 GiB (issue 22's what-if zoo; Jamba's 133x
    # was the largest before); Nemotron-H-56B's 54 x 16.9 MB states against its 10 attention layers'
    # 16-token page now top it: 34 GiB large pages, 55,701 small pages each
    assert "nemotron_nano_9b_v2     full            full                   4       16384      262144    4.28 GiB      17523x" \
        in res.stdout
    assert "largest large/small ratio in the zoo: 55701x (nemotron_h_56b)" in res.stdout
    assert "attention ratio is 84x = 1344 tokens per large page" in res.stdout
    # every model of the zoo has rows
    assert {m for m, _ in rows} == {p.stem for p in (REPO / "harness/conf/model").glob("*.yaml")}


def test_pages_bad_arguments(capsys):
    assert pages.main(["model=nope"]) == 2
    assert "valid model names" in capsys.readouterr().err
    assert pages.main(["colour=red"]) == 2
    assert "allowed: ['model', 'tokens_per_page']" in capsys.readouterr().err


def test_geometry_tokens_per_page_scales_small_pages():
    p = _profile("gemma3_12b")
    g1, g2 = pages.geometry(p, 16), pages.geometry(p, 32)
    assert g2.large_page_bytes == 2 * g1.large_page_bytes
    assert {r.name: r.ratio for r in g1.rows} == {"full": 5, "sliding": 1}


def test_mllama_waste_is_the_papers_79_6_percent():
    w = waste.analytic_waste(_profile("llama3_2_11b_vision"), 43, 6193)
    e = 2 * 8 * 128 * 2
    assert w.uniform_bytes == (43 + 6193) * 40 * e
    assert w.ideal_bytes == (43 * 32 + 6193 * 8) * e
    assert w.waste_fraction == pytest.approx(1 - (43 * 32 + 6193 * 8) / (6236 * 40))
    assert round(100 * w.waste_fraction, 1) == 79.6


def test_sliding_window_waste_upper_bounds():
    # Gemma-2 at its 8192 context: half the layers keep window-1 = 4095 tokens (the paper's ~25%).
    g = waste.analytic_waste(_profile("gemma2_9b"), 8192)
    assert g.waste_fraction == pytest.approx(1 - (21 * 8192 + 21 * 4095) / (42 * 8192))
    # Ministral at 128k: 3/4 of the layers keep 32767 tokens (the paper's ~56.25%).
    m = waste.analytic_waste(_profile("ministral_8b"), 131072)
    assert m.waste_fraction == pytest.approx(1 - (9 * 131072 + 27 * 32767) / (36 * 131072))


def test_waste_context_and_full_attention():
    assert waste.analytic_waste(_profile("llama3_1_8b"), 5000).waste_fraction == 0.0
    g = waste.analytic_waste(_profile("gemma3_12b"), 100, context=1000)
    assert g.waste_fraction == pytest.approx(1 - (8 * 1000 + 40 * 1000) / (48 * 1000))  # inside window


def test_waste_cli(capsys):
    assert waste.main(["model=llama3_2_11b_vision", "text_tokens=43", "image_tokens=6193"]) == 0
    assert "waste of uniform paging: 79.59%" in capsys.readouterr().out
    assert waste.main(["model=llama3_1_8b"]) == 2
    assert "text_tokens" in capsys.readouterr().err
    assert waste.main(["model=llama3_1_8b", "text_tokens=-3"]) == 2
