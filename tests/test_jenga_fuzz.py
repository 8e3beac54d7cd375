"""A short deterministic slice of ``make fuzz`` (``jenga/fuzz.py``): seeded random streams over
every system and layer mix, every invariant checked after every operation, failed allocates and
double frees checked to change nothing."""

from __future__ import annotations

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
