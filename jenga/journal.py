"""Undo log that makes a failed ``allocate`` change nothing (the facade's contract).

Why an undo log and not a check before mutating: an allocation first releases the pages no layer
reads any more (out-of-window pages, last step's Mamba checkpoints) and those pages are often the
very room the new pages take; the LCM pool's answer then depends on which large pages are
request-owned, evictable or partly free, in LRU order, through two attempts (request-aware, then
"tight"). Predicting that without running it would be a second copy of the pool's algorithm that
must agree with the first on every path. Instead the manager runs the allocation as it always did
and, when it fails, replays this log backwards. The log is only kept when the allocation *can* fail
(``PagedManager._sure_fit`` says when it cannot), so the common path records nothing; and one the
pool can tell must fail (``PagedManager._pool_verdict``: a flat pool's exact count, the LCM pool's
``cannot_fit`` bound) returns at once, since trying it would change nothing either.

Entries are ``(fn, a, b, c)``: undo calls ``fn(a, b, c)``, newest first, so an item written twice
gets its oldest value back.
"""

from __future__ import annotations

from copy import copy

MISSING = object()


def _restore_item(container, key, old) -> None:
    if old is MISSING:
        container.pop(key, None)
    else:
        container[key] = old


def _restore_contents(obj, saved, _) -> None:
    if isinstance(obj, list):
        obj[:] = saved
    else:  # dict or set: same object, same contents, same insertion order
        obj.clear()
        obj.update(saved)


def _restore_attr(obj, name, old) -> None:
    setattr(obj, name, old)


class Journal:
    """What one allocation changed, to be undone if it fails."""

    __slots__ = ("_kept", "entries")

    def __init__(self) -> None:
        self.entries: list[tuple] = []
        self._kept: set[int] = set()

    def item(self, container, key) -> None:
        """Before ``container[key]`` (a dict entry, or a list slot) is set or deleted."""
        old = container.get(key, MISSING) if isinstance(container, dict) else container[key]
        self.entries.append((_restore_item, container, key, old))

    def contents(self, obj) -> None:
        """Before ``obj`` (a list, dict or set whose order matters) changes in place: a copy, once."""
        if id(obj) not in self._kept:  # the entry holds obj, so its id is not reused meanwhile
            self._kept.add(id(obj))
            self.entries.append((_restore_contents, obj, copy(obj), None))

    def attr(self, obj, name: str) -> None:
        """Before ``obj.name`` is reassigned."""
        self.entries.append((_restore_attr, obj, name, getattr(obj, name)))

    def call(self, fn, a=None, b=None, c=None) -> None:
        """Undo by calling ``fn(a, b, c)``."""
        self.entries.append((fn, a, b, c))

    def undo(self) -> None:
        for fn, a, b, c in reversed(self.entries):
            fn(a, b, c)
        self.entries.clear()
        self._kept.clear()


def journal_flat_pool(pool, j: Journal | None) -> None:
    """``begin`` of a pool with per-type ``used`` / ``cached`` lists and ``path_counts`` (the flat,
    partitioned and exact pools): log every change into ``j`` until ``j`` is None."""
    pool._j = j
    if pool.evictor is not None:
        pool.evictor._j = j
    if j is not None:
        for x in (pool.used, pool.cached, pool.path_counts):
            j.contents(x)
