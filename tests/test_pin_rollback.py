"""A failed attempt's pins come off exactly (``PagedManager._rollback``), including the batches
the C-level branches of ``_try_alloc`` log as one entry (a hit on pages running requests hold,
and the cached pages a hit takes). Every attempt of a random stream first pins its hit alone and
rolls it back, and the whole state must be what it was; then it runs for real, so the streams go
on. (Fresh pages given back to the pool need not land where they were: the undo journal, not
_rollback, restores the pool's layout where that matters.)"""

from __future__ import annotations

import random

import pytest

from jenga.fuzz import _new_request, admit_or_free, make_stream_manager
from jenga.manager_base import PagedManager
from jenga.testing import check_invariants, state_fingerprint


@pytest.fixture
def tried_first(monkeypatch):
    """Make every ``_try_alloc`` pin its hit alone first and roll that back (the state checked
    unchanged), then run for real. Returns the count of rolled-back attempts, and of those that
    logged a batch."""
    seen = {"attempts": 0, "batches": 0}
    real = PagedManager._try_alloc

    def twice(self, rs, plans, hits, T, tight, pins, done):
        before = state_fingerprint(self)
        pages_before = [dict(p) for p in rs.pages]
        p2, d2 = [], []
        real(self, rs, [None] * len(plans), hits, T, tight, p2, d2)
        seen["attempts"] += 1
        seen["batches"] += any(type(x[1]) is list for x in p2)
        self._rollback(rs, hits, p2, d2)
        assert state_fingerprint(self) == before
        assert [dict(p) for p in rs.pages] == pages_before
        return real(self, rs, plans, hits, T, tight, pins, done)

    monkeypatch.setattr(PagedManager, "_try_alloc", twice)
    return seen


@pytest.mark.parametrize("mix", ["full", "full+swa", "full+chunked", "self+cross", "full+mamba"])
def test_an_attempt_rolled_back_leaves_the_state_as_it_was(mix, tried_first):
    for seed in range(10):
        system = ("jenga", "static_partition", "max_page", "vllm")[seed % 4]
        m, *_ = make_stream_manager(random.Random(seed), system, mix)
        admit_or_free(m, random.Random(seed + 3), mix, 80, 0.6)
        check_invariants(m)
    assert tried_first["attempts"] > 50


def test_batches_are_rolled_back(tried_first):
    """Non-vacuity: the streams above log batch pins (shared hits and cached hits taken at once)."""
    for seed in range(10):
        m, *_ = make_stream_manager(random.Random(seed), "jenga", "full")
        rng = random.Random(seed + 3)
        running = []
        for i in range(80):
            r = _new_request(rng, i, "full")
            hit = m.lookup_prefix(r)
            if m.allocate(r, len(r.prompt_token_ids) - hit):
                running.append(r)
            else:
                m.free(r)
            if len(running) > 3:
                m.free(running.pop(0))
    assert tried_first["batches"] > 10, tried_first
