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
