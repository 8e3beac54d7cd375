"""A short deterministic slice of ``make fuzz`` (``jenga/fuzz.py``): seeded random streams over
every system and layer mix, every invariant checked after every operation, failed allocates and
double frees checked to change nothing."""

from __future__ import annotations

import pytest

import jenga
from jenga.fuzz import MIXES, run_seeds, run_stream


def test_fuzz_slice():
    failures = run_seeds(range(24), num_ops=40)
    assert not failures, "\n".join(f.line() for f in failures)


def test_fuzz_slice_covers_every_system_and_mix():
    """Negative control against a vacuous slice: the seeds above draw every system, and the
    generator can build every mix on every system."""
    import random

    drawn = {random.Random(s).choice(jenga.SYSTEM_NAMES) for s in range(24)}
    assert drawn == set(jenga.SYSTEM_NAMES)
    for i, mix in enumerate(sorted(MIXES)):
        assert run_stream(1000 + i, num_ops=6, system=jenga.SYSTEM_NAMES[i % len(jenga.SYSTEM_NAMES)], mix=mix) is None


def test_fuzz_reports_a_broken_allocator(monkeypatch):
    """The checks can fail: an allocator that leaks a page on free is caught."""
    from jenga.manager_base import PagedManager

    orig = PagedManager.free

    def leaky_free(self, request):
        rs = self.reqs.get(request.request_id)
        if rs is not None and any(rs.pages):
            t = next(t for t, p in enumerate(rs.pages) if p)
            rs.pages[t].pop(next(iter(rs.pages[t])))  # forget one page: refcounts no longer match
        orig(self, request)

    monkeypatch.setattr(PagedManager, "free", leaky_free)
    assert run_seeds(range(6), num_ops=30, system="jenga")


@pytest.mark.parametrize("argv, flag, says", [
    (["--seeds", "x"], "--seeds", "LO:HI with 0 <= LO < HI"),          # was a ValueError traceback, rc 1
    (["--seeds", "5:2"], "--seeds", "empty range"),                    # was 0 streams and rc 0
    (["--seeds", "3:3"], "--seeds", "empty range"),
    (["--seeds", "-1"], "--seeds", "seeds are >= 0"),                  # was accepted
    (["--seeds=-1:4"], "--seeds", "seeds are >= 0"),                 # ("--seeds -1:4": argparse takes -1:4 for a flag)
    (["--seeds", "5:"], "--seeds", "one seed >= 0"),
    (["--seeds", "1:2:3"], "--seeds", "LO:HI"),
    (["--ops", "0"], "--ops", "integer >= 1"),
    (["--ops", "-3"], "--ops", "integer >= 1"),
    (["--ops", "x"], "--ops", "integer >= 1"),
])
def test_fuzz_cli_rejects_bad_numbers_before_running(argv, flag, says, capsys, monkeypatch):
    """One argparse error line naming the flag, exit 2, and no stream run."""
    from jenga import fuzz

    monkeypatch.setattr(fuzz, "run_stream", lambda *a, **k: pytest.fail("a stream ran"))
    with pytest.raises(SystemExit) as e:
        fuzz.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert f"argument {flag}:" in last and says in last and "Traceback" not in err


def test_fuzz_cli_accepts_the_documented_seed_forms(capsys, monkeypatch):
    """Negative control for the test above: LO:HI and one seed still run exactly those streams."""
    from jenga import fuzz

    ran = []
    monkeypatch.setattr(fuzz, "run_stream", lambda s, *a, **k: ran.append(s))
    assert fuzz.main(["--seeds", "3:6", "--ops", "1"]) == 0
    assert fuzz.main(["--seeds", "0"]) == 0
    assert ran == [3, 4, 5, 0]
    assert "fuzz: 1 streams x 60 ops, 0 failed" in capsys.readouterr().out


def test_fuzz_slice_every_registry_system():
    """``--all-systems``: the study variants and the what-if rules (SGLang's pools and arena,
    vLLM 0.32's manager, TensorRT-LLM's pools, Marconi, ...) under the same checks; a stream
    whose system refuses its mix at start-up is skipped."""
    failures = run_seeds(range(60), num_ops=40, all_systems=True)
    assert not failures, "\n".join(f.line() for f in failures)


def test_every_registry_system_starts_on_some_mix():
    """Negative control against a vacuous slice: every registry system runs streams (a system that
    refused every mix would be skipped silently)."""
    import jenga.registry
    from jenga.fuzz import Refused

    for i, name in enumerate(jenga.registry.ALL_SYSTEM_NAMES):
        ran = 0
        for k, mix in enumerate(sorted(MIXES)):
            try:
                assert run_stream(2000 + 31 * i + k, num_ops=6, system=name, mix=mix) is None
                ran += 1
            except Refused:
                pass
        assert ran >= 1, f"{name} refused every mix"


@pytest.mark.parametrize("seed, system, mix", [
    (4, "sglang_unified", "full+swa"),   # a failed allocate left the arena's layout cache rebuilt: a cache, not state
    (3, "sglang_pools", "mamba"),        # a prompt end inside a page (tokens_per_page 8): no radix node for its state
    (3, "sglang_unified", "full+mamba"),
    (0, "marconi", "full"),              # a refused admission kept its checkpoint plan
])
def test_streams_that_failed_on_the_study_and_whatif_systems(seed, system, mix):
    assert run_stream(seed, num_ops=40, system=system, mix=mix) is None
