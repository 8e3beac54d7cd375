"""A simulated number does not depend on the process it was computed in: the same cell under
different string-hash seeds (PYTHONHASHSEED, which Python draws per process) gives the same
record. Jenga and vLLM's align mode stamp the Mamba checkpoints of a step's requests in turn at
the next step; they were kept in a set of request ids, whose order follows the hash seed, and a
Qwen3.5-35B-A3B long-document what-if read 12, 26 or 64 preemptions depending on the process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import json
from harness.study.whatif import summary as S
from harness.study.whatif import common as C
a, prof = C.args("qwen3_5_35b_a3b", "h100", 32768, tp=1)
reqs = S.workload_requests({"name": "longdoc", "dataset": "arxiv_qa"}, a, prof, 32)
out = {}
for rule in ("jenga", "vllm_hma"):
    m, hits = C.simulate(rule, a, prof, reqs)
    out[rule] = [m["prefix_hit_tokens"], m["throughput_req_s"], m["preemptions"], m["num_steps"]]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_same_cell_under_three_hash_seeds_gives_one_answer():
    outs = []
    for seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                             check=True)
        outs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] == outs[2], outs
    assert outs[0]["jenga"][2] > 0  # the checkpoints' order matters here: requests are preempted
