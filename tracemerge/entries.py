"""What a file's layout keeps of a thread while the file is read: columns, in the order read.

Sources append entries ``(start, -dur, kind, ordinal, body)`` to a thread's
:class:`ThreadEntries` (a list, so that appending costs one C call) and flow points ``(ts, phase,
ordinal, key, bind_next)`` to its :class:`ThreadPoints`. Once many have gathered, or memory is
short, the tuples are sealed into a :class:`Block` of numpy columns (the bodies joined into one
bytes object beside them), and blocks spill to the file's :class:`~tracemerge.spill.RunStore` as
plain bytes, the columns apart from the bodies: the walk reads a thread's columns whole and its
bodies one block at a time, in the order they were read. Nothing is sorted here; storage order is
the order of reading, which the walk relies on (see :mod:`tracemerge.layout`).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import numpy as np

from tracemerge.spill import RunStore

# Tuples gathered on a thread before they are sealed into a block (fewer: at the next spill).
SEAL_AT = 4096

Schema = tuple[tuple[str, type], ...]
ENTRY_SCHEMA: Schema = (
    ("starts", np.int64),
    ("negdurs", np.int64),
    ("ordinals", np.int64),
    ("lengths", np.int64),
    ("kinds", np.int8),
)
# Flow points: ``pairs`` numbers the (cat, name) of the key, ``fids`` holds an id that is an int64
# (``fid_kinds`` 0) or the number of another id (1), both given by a :class:`PointKeys`.
POINT_SCHEMA: Schema = (
    ("ts", np.int64),
    ("ordinals", np.int64),
    ("fids", np.int64),
    ("pairs", np.int32),
    ("phases", np.int8),
    ("bind_next", np.int8),
    ("fid_kinds", np.int8),
)


class Block:
    """Columns of ``n`` rows (and, for entries, the rows' bodies joined), in memory or spilled."""

    __slots__ = ("at", "bodies", "bodies_at", "cols", "n", "schema")

    def __init__(self, schema: Schema, cols: dict[str, np.ndarray], bodies: bytes | None = None) -> None:
        self.schema = schema
        self.cols: dict[str, np.ndarray] | None = cols
        self.n = len(cols[schema[0][0]])
        self.bodies = bodies
        self.at: tuple[int, int] | None = None
        self.bodies_at: tuple[int, int] | None = None

    @property
    def held(self) -> int:
        """Rows held in memory."""
        return self.n if self.cols is not None else 0

    def spill(self, store: RunStore) -> None:
        if self.cols is None:
            return
        cols = self.cols
        self.at = store.put(b"".join(np.ascontiguousarray(cols[name], dtype).tobytes() for name, dtype in self.schema))
        if self.bodies is not None:
            self.bodies_at = store.put(self.bodies)
        self.cols = self.bodies = None

    def columns(self, store: RunStore) -> dict[str, np.ndarray]:
        if self.cols is not None:
            return self.cols
        assert self.at is not None
        data = store.get(*self.at)
        found, offset = {}, 0
        for name, dtype in self.schema:
            found[name] = np.frombuffer(data, dtype, self.n, offset)
            offset += self.n * np.dtype(dtype).itemsize
        return found

    def body_bytes(self, store: RunStore) -> bytes:
        if self.bodies is not None:
            return self.bodies
        return store.get(*self.bodies_at) if self.bodies_at is not None else b""


def concatenated(blocks: list[Block], store: RunStore, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Some columns of ``blocks``, joined in order."""
    parts = [block.columns(store) for block in blocks]
    return {name: np.concatenate([p[name] for p in parts]) if parts else np.empty(0, np.int64) for name in names}


class _Columnar(list):
    """Tuples appended by sources, and the blocks sealed from the ones before them."""

    __slots__ = ("blocks", "held_in_blocks")
    schema: Schema = ()

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[Block] = []
        self.held_in_blocks = 0

    @property
    def total(self) -> int:
        return len(self) + sum(block.n for block in self.blocks)

    @property
    def held(self) -> int:
        """Rows held in memory, as tuples or in blocks."""
        return len(self) + self.held_in_blocks

    def add_block(self, block: Block) -> None:
        """A block made elsewhere (a source's columns), after what was appended before it."""
        self._seal_tuples()
        self.blocks.append(block)
        self.held_in_blocks += block.held

    def spill(self, store: RunStore) -> None:
        self._seal_tuples()
        for block in self.blocks:
            block.spill(store)
        self.held_in_blocks = 0

    def discard(self) -> None:
        self.clear()
        self.blocks.clear()
        self.held_in_blocks = 0

    def absorb(self, other: _Columnar) -> None:
        """Takes ``other``'s rows, after its own (both must use the same store)."""
        self._seal_tuples()
        other._seal_tuples()
        self.blocks.extend(other.blocks)
        self.held_in_blocks += other.held_in_blocks

    def sealed(self) -> list[Block]:
        """Every block, the tuples appended last sealed into one."""
        self._seal_tuples()
        return self.blocks

    def maybe_seal(self) -> None:
        if len(self) >= SEAL_AT:
            self._seal_tuples()

    def _seal_tuples(self) -> None:
        if not self:
            return
        block = self._block(list(self))
        self.clear()
        self.blocks.append(block)
        self.held_in_blocks += block.n

    def _block(self, items: list[tuple]) -> Block:
        raise NotImplementedError


class ThreadEntries(_Columnar):
    """A thread's slices and instants; sources append ``(start, -dur, kind, ordinal, body)``."""

    __slots__ = ()
    schema = ENTRY_SCHEMA

    def _block(self, items: list[tuple]) -> Block:
        return entry_block(items)

    def keys(self, store: RunStore) -> dict[str, np.ndarray]:
        """Every entry's start, negated duration, kind and ordinal, in storage order."""
        return concatenated(self.sealed(), store, ("starts", "negdurs", "kinds", "ordinals"))


def entry_block(items: list[tuple]) -> Block:
    n = len(items)
    bodies = list(map(_body, items))
    cols = {
        "starts": np.fromiter(map(_first, items), np.int64, n),
        "negdurs": np.fromiter(map(_second, items), np.int64, n),
        "kinds": np.fromiter(map(_third, items), np.int8, n),
        "ordinals": np.fromiter(map(_fourth, items), np.int64, n),
        "lengths": np.fromiter(map(len, bodies), np.int64, n),
    }
    return Block(ENTRY_SCHEMA, cols, b"".join(bodies))


class PointKeys:
    """Numbers for what flow points carry besides their times: each (cat, name) a pair number,
    each id that is not an int64 a number of its own (the ids themselves kept for ordering)."""

    def __init__(self) -> None:
        self.pairs: dict[tuple[Any, Any], int] = {}
        self.pair_list: list[tuple[Any, Any]] = []
        self.ids: dict[Any, int] = {}
        self.id_list: list[Any] = []

    def pair(self, cat: Any, name: Any) -> int:
        found = self.pairs.get((cat, name))
        if found is None:
            found = self.pairs[(cat, name)] = len(self.pair_list)
            self.pair_list.append((cat, name))
        return found

    def other_id(self, fid: Any) -> int:
        found = self.ids.get(fid)
        if found is None:
            found = self.ids[fid] = len(self.id_list)
            self.id_list.append(fid)
        return found


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class ThreadPoints(_Columnar):
    """A thread's flow points; sources append ``(ts, phase, ordinal, key, bind_next)`` where the
    key is ``(cat, name, id)`` (or an id alone)."""

    __slots__ = ("keys",)
    schema = POINT_SCHEMA

    def __init__(self, keys: PointKeys) -> None:
        super().__init__()
        self.keys = keys

    def _block(self, items: list[tuple]) -> Block:
        n = len(items)
        pairs = np.empty(n, np.int32)
        fids = np.empty(n, np.int64)
        fid_kinds = np.zeros(n, np.int8)
        pair, other_id = self.keys.pair, self.keys.other_id
        for i, key in enumerate(map(_fourth, items)):
            cat, name, fid = key if type(key) is tuple and len(key) == 3 else ("", "", key)
            pairs[i] = pair(cat, name)
            if type(fid) is int and _INT64_MIN <= fid <= _INT64_MAX:
                fids[i] = fid
            else:
                fids[i] = other_id(fid)
                fid_kinds[i] = 1
        cols = {
            "ts": np.fromiter(map(_first, items), np.int64, n),
            "ordinals": np.fromiter(map(_third, items), np.int64, n),
            "fids": fids,
            "pairs": pairs,
            "phases": np.fromiter(map(_second, items), np.int8, n),
            "bind_next": np.fromiter(map(_fifth, items), np.int8, n),
            "fid_kinds": fid_kinds,
        }
        return Block(POINT_SCHEMA, cols)

    def columns(self, store: RunStore) -> dict[str, np.ndarray]:
        return concatenated(self.sealed(), store, (name for name, _ in POINT_SCHEMA))


def ranks(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[0] - 1, 0, 1, ... counts[1] - 1, ... joined."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def gathered(data: bytes | np.ndarray, begins: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges [begin, begin + length) of ``data``, joined."""
    total = int(lengths.sum())
    if not total:
        return b""
    index = np.repeat(begins - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)
    source = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    return source[index].tobytes()


_first, _second, _third, _fourth, _fifth = (itemgetter(i) for i in range(5))
_body = itemgetter(4)
