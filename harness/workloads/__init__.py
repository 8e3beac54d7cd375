"""Workloads: the Request type, real HF loaders and offline synthetic twins."""
from harness.workloads.request import Request

__all__ = ["Request"]
