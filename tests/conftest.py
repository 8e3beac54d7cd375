"""Shared test doubles: the stub request every allocator test builds (anything with
``request_id``, ``prompt_token_ids``, ``output_token_ids``, ``images`` is a ``RequestView``).

Test modules import them (``from conftest import Req, req``: pytest puts tests/ on the path, as
for ``sim_fakes``); the ``make_req`` fixture gives the same factory to tests that prefer one."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest


@dataclass
class Req:
    """A minimal ``jenga.interface.RequestView``."""

    request_id: str
    prompt_token_ids: np.ndarray
    images: tuple = ()
    output_token_ids: list = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


def req(rid: str, tokens, images=()) -> Req:
    """A request with prompt ``tokens`` (as int32) and ``images`` (``jenga.ImageSpan``s)."""
    return Req(rid, np.asarray(tokens, dtype=np.int32), tuple(images))


@pytest.fixture
def make_req():
    return req
