"""Where a real dataset's rows come from (``dataset.source=hf``): the Hugging Face hub or a local copy.

``dataset.hf_id`` is what HF ``datasets.load_dataset`` calls ``path``: a hub id (``owner/name``) or
a local path. A local path is one of

- a ``save_to_disk`` folder (``dataset_dict.json`` or ``state.json`` inside): ``load_from_disk``;
- a ``.parquet``, ``.jsonl`` or ``.json`` file: ``load_dataset("parquet"/"json", data_files=...)``;
- a folder of such files, e.g. a hub snapshot: files under ``<dataset.hf_subset>/`` are used when
  that subfolder exists, and of those the ones whose name contains ``<dataset.hf_split>`` (``test-
  00000-of-00004.parquet``) when any does; one format per folder.

A ``DatasetDict`` gives its ``dataset.hf_split`` split, or its only split (a local file loads as
``train``). Nothing local is ever looked up on the hub, and local errors name the key and the path,
never the hub; hub errors name the offline twin. Local data is read map-style and never written to
(no indices or cache files inside a ``save_to_disk`` folder).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.workloads.twins import WorkloadError

LOCAL_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
_DISK_MARKERS = ("dataset_dict.json", "state.json")


@dataclass
class Rows:
    """A loaded dataset and where it came from (for messages and relative image paths)."""

    data: Any                 # datasets.Dataset (local, map-style) or IterableDataset (hub, streamed)
    where: str                # "dataset.hf_id=<path or id>", used in every message
    local: Path | None        # the local path, None for the hub
    dataset: str              # cfg.dataset.name

    @property
    def base_dir(self) -> Path | None:
        """The folder that relative file names inside rows (image paths) resolve against."""
        if self.local is None:
            return None
        return self.local if self.local.is_dir() else self.local.parent

    def columns(self) -> list[str] | None:
        names = getattr(self.data, "column_names", None)
        return list(names) if names is not None else None

    def require(self, *columns: str, schema: str) -> None:
        """One error naming the key, the path and the missing columns, before any row is read."""
        have = self.columns()
        if have is None:      # a streamed hub dataset without declared features: checked per row
            return
        missing = [c for c in columns if c not in have]
        if missing:
            raise WorkloadError(f"dataset {self.dataset}: {self.where} has no column(s) {missing} "
                                f"(its columns: {have}); {schema}")

    def __len__(self) -> int:
        return len(self.data)

    def shuffled(self, seed: int) -> Iterator[dict]:
        """Rows in a seeded order. A streamed hub dataset uses ``IterableDataset.shuffle(seed)``
        (the artifact's ``sample_hf_requests``); a local one uses the permutation that
        ``datasets.Dataset.shuffle(seed)`` draws (``np.random.default_rng(seed).permutation``), read
        row by row so nothing is written next to the user's data."""
        if self.local is None:
            yield from self.data.shuffle(seed=seed)
            return
        for i in np.random.default_rng(seed).permutation(len(self.data)):
            yield self.data[int(i)]


def _hub_error(name: str, hf_id: str, exc: BaseException) -> WorkloadError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return WorkloadError(
        f"dataset {name}: cannot load {hf_id!r} from the Hugging Face hub ({type(exc).__name__}: {first}). "
        "Use the offline twin instead: dataset.source=twin (statistics in datasets/, card in "
        "datasets/README.md), or a local copy: dataset.hf_id=<folder, .parquet or .jsonl file>.")


def local_path(hf_id: str) -> Path | None:
    """``hf_id`` as a local path if it is one (exists, or is written as a path), else None (hub id)."""
    p = Path(hf_id).expanduser()
    if p.exists() or hf_id.startswith(("/", "./", "../", "~")) or p.suffix in LOCAL_FORMATS:
        return p
    return None


def _split_of(obj: Any, split: str | None, where: str, name: str) -> Any:
    """A DatasetDict's requested split, or its only one; a Dataset as is."""
    from datasets import DatasetDict

    if not isinstance(obj, DatasetDict):
        return obj
    if split in obj:
        return obj[split]
    if len(obj) == 1:
        return next(iter(obj.values()))
    raise WorkloadError(f"dataset {name}: {where} has splits {sorted(obj)}, not dataset.hf_split={split!r}; "
                        "set dataset.hf_split to one of them")


def _data_files(root: Path, subset: str | None, split: str | None, where: str, name: str) -> tuple[str, list[str]]:
    """(builder, files) of a folder of parquet/JSON files (see the module docstring)."""
    if subset and (root / subset).is_dir():
        root = root / subset
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in LOCAL_FORMATS
             and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    builders = {LOCAL_FORMATS[p.suffix] for p in files}
    if not files:
        raise WorkloadError(f"dataset {name}: {where} is a folder with no .parquet/.jsonl/.json file and no "
                            f"save_to_disk dataset ({' or '.join(_DISK_MARKERS)})")
    if len(builders) > 1:
        raise WorkloadError(f"dataset {name}: {where} mixes parquet and JSON files; point dataset.hf_id at "
                            "one file or a folder of one format")
    if split:
        token = re.compile(rf"(^|[^A-Za-z0-9]){re.escape(split)}([^A-Za-z0-9]|$)")
        named = [p for p in files if token.search(p.name)]
        files = named or files
    return builders.pop(), [str(p) for p in files]


def _load_local(path: Path, subset: str | None, split: str | None, where: str, name: str) -> Any:
    from datasets import load_dataset, load_from_disk

    if not path.exists():
        raise WorkloadError(f"dataset {name}: {where}: no such file or folder")
    try:
        if path.is_dir() and any((path / m).exists() for m in _DISK_MARKERS):
            obj = load_from_disk(str(path))
        elif path.is_file():
            if path.suffix not in LOCAL_FORMATS:
                raise WorkloadError(f"dataset {name}: {where}: unsupported file type {path.suffix!r}; "
                                    f"use {sorted(LOCAL_FORMATS)} or a save_to_disk folder")
            obj = load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path))
        else:
            builder, files = _data_files(path, subset, split, where, name)
            obj = load_dataset(builder, data_files=files)
    except WorkloadError:
        raise
    except Exception as exc:  # a corrupt or unreadable local file: one line naming the key and path
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise WorkloadError(f"dataset {name}: cannot read {where} ({type(exc).__name__}: {first})") from exc
    return _split_of(obj, split, where, name)


def open_rows(name: str, hf_id: str | None, subset: str | None, split: str | None, *,
              streaming: bool = True) -> Rows:
    """The rows of ``hf_id`` (hub id or local path, see the module docstring)."""
    if not hf_id:
        raise WorkloadError(f"dataset {name}: source=hf needs dataset.hf_id=<hub id or local path>")
    where = f"dataset.hf_id={hf_id}"
    path = local_path(hf_id)
    if path is not None:
        return Rows(_load_local(path, subset, split, where, name), where, path, name)
    from datasets import load_dataset

    try:
        data = load_dataset(hf_id, name=subset, split=split, streaming=streaming)
    except Exception as exc:  # any hub/network/cache failure: one message naming the twin
        raise _hub_error(name, hf_id, exc) from exc
    return Rows(data, where, None, name)


__all__ = ["LOCAL_FORMATS", "Rows", "local_path", "open_rows"]
