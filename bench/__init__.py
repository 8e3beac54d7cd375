"""Benchmarks (not tests): ``python -m bench.allocator``."""
