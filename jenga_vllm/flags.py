"""The plugin's switches, read from the environment each time (a process may set them late):
``JENGA_VLLM=1`` enables the plugin, ``JENGA_VLLM_BROKEN_LAYOUT=1`` is the negative control (every
layer of a type writes the same slice)."""

from __future__ import annotations

import os

ENV = "JENGA_VLLM"
ENV_BROKEN = "JENGA_VLLM_BROKEN_LAYOUT"


def enabled() -> bool:
    return os.environ.get(ENV, "0") == "1"


def broken_layout() -> bool:
    return os.environ.get(ENV_BROKEN, "0") == "1"
