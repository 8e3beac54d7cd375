"""results/paper/README.md cites its sources without pointing at files outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "results" / "paper" / "README.md"


def test_paper_readme_points_only_inside_the_repository():
    text = README.read_text()
    without_urls = re.sub(r"https?://\S+", "", text)
    assert not re.search(r"(?<![\w.])/(work|home|tmp|data|root)/", without_urls), "absolute path outside the repo"
    assert "paper_facts.md" not in text
    for name in re.findall(r"`([\w./-]+\.csv)`", text):
        if "/" not in name:                       # a file of this folder must exist here
            assert (README.parent / name).exists(), name
    assert "github.com/heheda12345/Jenga-SOSP25-AE" in text        # the primary source is named
