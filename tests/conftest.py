"""Shared test doubles: the stub request every allocator test builds (anything with
``request_id``, ``prompt_token_ids``, ``output_token_ids``, ``images`` is a ``RequestView``).

Test modules import them (``from conftest import Req, req``: pytest puts tests/ on the path, as
for ``sim_fakes``); the ``make_req`` fixture gives the same factory to tests that prefer one."""

from __future__ import annotations

import numpy as np
import pytest

from jenga.testing import StubRequest

Req = StubRequest   # a minimal jenga.interface.RequestView


def req(rid: str, tokens, images=()) -> Req:
    """A request with prompt ``tokens`` (as int32) and ``images`` (``jenga.ImageSpan``s)."""
    return Req(rid, np.asarray(tokens, dtype=np.int32), tuple(images))


@pytest.fixture
def make_req():
    return req


def rehit_sliding_bytes(m) -> int:
    """r1 computes tokens 1..10 and is freed; r2 (the same 10 tokens + one) hits all 10 and
    allocates its one new token: the bytes r2 then holds for the sliding type ``sw``."""
    from jenga.testing import check_invariants

    r1 = req("r1", list(range(1, 11)))
    assert m.allocate(r1, 10)
    m.free(r1)
    r2 = req("r2", list(range(1, 11)) + [50])
    assert m.lookup_prefix(r2) == 10
    assert m.allocate(r2, 1)
    check_invariants(m)
    return m.usage().per_type_allocated_bytes["sw"]
