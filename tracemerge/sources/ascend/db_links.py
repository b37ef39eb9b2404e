"""The one-to-many joins of the Ascend DB reader (:mod:`tracemerge.sources.ascend.db`), kept small.

A DB export links its tables by integer ids: the device tasks of each ``connectionId``, the
connections of each ``CONNECTION_IDS`` id. A dict of lists of tuples holds about 200 bytes a
value (the dict's slot, the list, the tuple and its integers); :class:`Groups` holds the values
as int64 columns, 8 bytes each, sorted by key once every value is in, with a dict from each
distinct key to where its values start: a third of the memory, look-ups as fast. A key or value
that is not an int64 (a NULL, a text id) turns the whole map into the dict it stands for: the
answers are the same either way. :class:`TaskInfo` keeps a task detail table's rows as tuples.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from typing import Any

import numpy as np


class Groups:
    """Tuples of ``width`` values added under keys; :meth:`find` gives a key's in the order added.
    Add every value, then :meth:`seal`, then look up."""

    def __init__(self, width: int) -> None:
        assert width in (1, 2), "one or two values a key"
        self._keys = array("q")
        self._columns = [array("q") for _ in range(width)]
        self._dict: defaultdict[Any, list[tuple]] | None = None  # once anything is not an int64
        self._starts: dict[int, int] = {}  # where each key's values start, once sealed
        self._sealed = False

    def __len__(self) -> int:
        """How many values are held as int64 columns (0 once the map is a dict)."""
        return len(self._keys)

    @property
    def by_dict(self) -> bool:
        """Whether the map is a dict (something added was not an int64)."""
        return self._dict is not None

    def add(self, key: Any, *values: Any) -> None:
        assert not self._sealed and len(values) == len(self._columns), "before seal, a value a column"
        if self._dict is None:
            held = len(self._keys)
            try:  # an array takes no float, text or None (TypeError), nothing beyond 64 bits (OverflowError)
                self._keys.append(key)
                self._columns[0].append(values[0])
                if len(values) == 2:
                    self._columns[1].append(values[1])
                return
            except (TypeError, OverflowError):
                for column in (self._keys, *self._columns):
                    del column[held:]
                self._dict = self._as_dict()
        self._dict[key].append(values)

    def _as_dict(self) -> defaultdict[Any, list[tuple]]:
        found: defaultdict[Any, list[tuple]] = defaultdict(list)
        for key, *values in zip(self._keys, *self._columns, strict=True):
            found[key].append(tuple(values))
        self._keys, self._columns = array("q"), [array("q") for _ in self._columns]
        return found

    def seal(self) -> None:
        """Sorts the columns by key (keeping the order values were added in within a key) and
        indexes where each key's values start."""
        self._sealed = True
        if self._dict is not None or not len(self._keys):
            return
        keys = np.frombuffer(self._keys, np.int64)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        self._keys = array("q", keys.tobytes())
        self._columns = [array("q", np.frombuffer(c, np.int64)[order].tobytes()) for c in self._columns]
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        # A dict of the distinct keys (about 100 bytes each) answers a look-up at once, and as a
        # dict of the values would: 5.0 and True find 5 and 1.
        self._starts = dict(zip(keys[starts].tolist(), starts.tolist(), strict=True))

    def find(self, key: Any) -> tuple[int, list[tuple]] | None:
        """``key``'s values in the order added, with where they lie (a handle for :class:`Once`);
        None if it has none."""
        assert self._sealed, "seal first"
        if self._dict is not None:
            found = self._dict.get(key)
            return (0, found) if found else None
        lo = self._starts.get(key)
        if lo is None:
            return None
        keys, columns = self._keys, self._columns
        hi, last = lo + 1, len(keys)
        while hi < last and keys[hi] == keys[lo]:
            hi += 1
        if hi == lo + 1:  # most keys have one value
            return lo, [(columns[0][lo],) if len(columns) == 1 else (columns[0][lo], columns[1][lo])]
        return lo, list(zip(*(column[lo:hi] for column in columns), strict=True))


class Once:
    """Which keys of a :class:`Groups` were taken already: a byte per value, or a set of keys once
    the groups are a dict."""

    def __init__(self, groups: Groups) -> None:
        self._by_dict = groups.by_dict
        self._taken = bytearray(len(groups))
        self._keys: set[Any] = set()

    def take(self, key: Any, at: int) -> bool:
        """Whether ``key`` (whose values lie at ``at``, see :meth:`Groups.find`) is taken for the
        first time; it is taken now."""
        if self._by_dict:
            if key in self._keys:
                return False
            self._keys.add(key)
            return True
        if self._taken[at]:
            return False
        self._taken[at] = 1
        return True


class TaskInfo:
    """A task detail table's rows (tuples of its columns ``cols``) by globalTaskId, and where in
    a row its name, its plane and the columns a task's args show lie."""

    __slots__ = ("args", "name_at", "plane_at", "rows")

    def __init__(
        self, cols: list[str], rows: dict[Any, tuple], not_args: frozenset[str], texts: frozenset[str]
    ) -> None:
        self.rows = rows
        self.name_at = cols.index("name") if "name" in cols else None
        self.plane_at = cols.index("planeId") if "planeId" in cols else None
        # (position, column, whether it holds a STRING_IDS reference), in the table's order
        self.args = [(n, col, col in texts) for n, col in enumerate(cols) if col not in not_args]


__all__ = ["Groups", "Once", "TaskInfo"]
