"""Tokenisers for real datasets (``dataset.source=hf``), chosen by ``dataset.tokenizer``.

- a local tokenizer directory (the model's own, e.g. a ``save_pretrained`` copy): HF
  ``transformers.AutoTokenizer`` with ``local_files_only=True``, as the artifact's
  ``benchmark_serving.py`` counts tokens (``tokenizer(text).input_ids``). Needs the optional
  ``transformers`` package: ``pip install -e '.[hf]'``. Nothing is downloaded.
- ``bytes``: UTF-8 bytes as token ids (0..255). No vocabulary, no package, no files: for tests and
  offline smoke runs only; token counts are several times a BPE tokenizer's, so numbers made with it
  are not comparable to the paper's.

A :data:`Tokenize` maps text to an int32 id array; ``special=False`` leaves out BOS/EOS (used for
pieces concatenated after the first, as the artifact concatenates text before tokenising).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.workloads.twins import WorkloadError

Tokenize = Callable[..., np.ndarray]     # (text, special=True) -> int32 ids

BUILTIN = ("bytes",)


def utf8_bytes(text: str, special: bool = True) -> np.ndarray:
    """The ``bytes`` tokenizer: one token per UTF-8 byte (no special tokens)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)


def _transformers(path: Path, spec: str) -> Tokenize:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise WorkloadError(f"dataset.tokenizer={spec} needs the optional `transformers` package "
                            "(pip install -e '.[hf]'); or dataset.tokenizer=bytes for a smoke run, or "
                            "dataset.source=twin") from exc
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # not a tokenizer folder: one line naming the key and the path
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise WorkloadError(f"dataset.tokenizer={spec}: cannot load a tokenizer from {path} "
                            f"({type(exc).__name__}: {first})") from exc

    def tokenize(text: str, special: bool = True) -> np.ndarray:
        return np.asarray(tok(text, add_special_tokens=special).input_ids, dtype=np.int32)

    return tokenize


def make_tokenizer(spec: str | None, dataset: str) -> Tokenize:
    """The tokenizer ``dataset.tokenizer=spec`` names (see the module docstring)."""
    if not spec:
        raise WorkloadError(f"dataset {dataset}: source=hf needs dataset.tokenizer=<local tokenizer "
                            f"directory> (nothing is downloaded) or dataset.tokenizer=bytes (smoke runs "
                            "only); or use dataset.source=twin")
    if spec == "bytes":
        return utf8_bytes
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise WorkloadError(f"dataset.tokenizer={spec}: no such directory (give a local tokenizer "
                            f"directory, or one of {list(BUILTIN)})")
    return _transformers(path, spec)


__all__ = ["BUILTIN", "Tokenize", "make_tokenizer", "utf8_bytes"]
