"""A simulated number does not depend on the process it was computed in: the same cell under
different string-hash seeds (PYTHONHASHSEED, which Python draws per process) gives the same
record. Jenga and vLLM's align mode stamp the Mamba checkpoints of a step's requests in turn at
the next step; they were kept in a set of request ids, whose order follows the hash seed, and a
Qwen3.5-35B-A3B long-document what-if read 12, 26 or 64 preemptions depending on the process.
(That cell no longer preempts since Jenga holds its latest checkpoints, so the order-sensitive case is
now a small scenario of its own, with the old set order as its negative control.)"""

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


# Eight requests write Mamba checkpoints in one step; at the next step each request's checkpoints
# join the cache stamped in turn (jenga_current: released at once; jenga: the older ones stale, the
# two latest held). Prints each request's cached checkpoints' eviction timestamps.
SCENARIO = """
import json, sys
if sys.argv[1] == "set":  # the old order: the one-step owners as a set of request ids
    from jenga.manager_base import PagedManager
    step = PagedManager.begin_step
    def begin_step(self):
        self._transient_owners = dict.fromkeys(set(self._transient_owners))
        return step(self)
    PagedManager.begin_step = begin_step
import jenga
from jenga.testing import StubRequest as Request
from jenga.spec import FullAttentionSpec, MambaSpec
specs = [FullAttentionSpec("full", num_layers=2, bytes_per_token_per_layer=64),
         MambaSpec("mamba", num_layers=4, bytes_per_token_per_layer=4096, state_bytes_per_layer=4096,
                   conv_bytes_per_layer=512, checkpoint_interval=64)]
out = {}
for system in ("jenga_current", "jenga"):
    mm = jenga.make_manager(system, specs, 64 * 18432, tokens_per_page=16, enable_prefix_cache=True)
    rs = [Request(f"r{i}", list(range(1000 * i, 1000 * i + 300)), ()) for i in range(8)]
    for r in rs:
        assert mm.allocate(r, 300)
    mm.begin_step()
    ev, idx = mm.pool.evictor, mm.index[1]
    out[system] = {r.request_id: [ev.timestamp(1, idx[h]) for h in map(mm.reqs[r.request_id].hasher.hash_at,
                                                                       (64, 128, 192, 256))
                                  if h in idx and ev.contains(1, idx[h])] for r in rs}
print(json.dumps(out))
"""


def _scenario(order: str, seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    res = subprocess.run([sys.executable, "-c", SCENARIO, order], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_checkpoints_of_one_step_are_stamped_in_request_order():
    outs = [_scenario("dict", seed) for seed in ("0", "1", "2")]
    assert outs[0] == outs[1] == outs[2], outs
    assert min(t for ts in outs[0]["jenga_current"].values() for t in ts) > 0   # stamped now, in turn
    # The negative control: the old set of request ids stamps them in a hash-seed order.
    olds = [_scenario("set", seed)["jenga_current"] for seed in ("0", "1", "2")]
    assert not (olds[0] == olds[1] == olds[2]), olds
