"""Results a caller lets the model reuse: one `Memo` per sweep worker, validate run or benchmark, passed down to
the simulator and the cost model. Nothing in `cost/` or `sim/` keeps results between calls on its own, so a test
or a calibration that changes a parameter gets fresh numbers by using a fresh memo.

Each table is keyed by everything its value depends on; a full table is emptied rather than grown without bound.
Objects that are expensive to hash (hardware profiles, pydantic specs) are keyed by identity with the object kept
alongside, so a recycled `id()` never returns another object's key.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
_MISS = object()


class Memo:
    def __init__(self, limit_per_table: int = 16384) -> None:
        self.limit = limit_per_table
        self._tables: dict[str, dict[Hashable, Any]] = {}
        self._interned: dict[Hashable, int] = {}
        self._ids = itertools.count()

    def get(self, table: str, key: Hashable, compute: Callable[[], T]) -> T:
        t = self._tables.get(table)
        if t is None:
            t = self._tables[table] = {}
        hit = t.get(key, _MISS)
        if hit is _MISS:
            if len(t) >= self.limit:
                t.clear()
            hit = t[key] = compute()
        return hit

    def by_identity(self, table: str, obj: object, compute: Callable[[], T]) -> T:
        """A value derived from `obj` alone (a key tuple of a profile or spec), remembered per object."""
        t = self._tables.setdefault(table, {})
        hit = t.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        if len(t) >= self.limit:
            t.clear()
        value = compute()
        t[id(obj)] = (obj, value)
        return value

    def intern(self, key: Hashable) -> int:
        """A small int standing for `key`, cheap to hash inside other keys: equal keys get equal ints, and an int
        is never given to another key, even after the table is emptied."""
        hit = self._interned.get(key)
        if hit is None:
            if len(self._interned) >= self.limit:
                self._interned.clear()
            hit = self._interned[key] = next(self._ids)
        return hit

    def size(self, table: str) -> int:
        return len(self._tables.get(table, ()))
