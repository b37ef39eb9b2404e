"""What a file's layout keeps of a thread while the file is read: columns, in the order read.

Sources append entries ``(start, -dur, kind, ordinal, body)`` to a thread's
:class:`ThreadEntries` (a list, so that appending costs one C call) and flow points ``(ts, phase,
ordinal, key, bind_next)`` to its :class:`ThreadPoints`. Once many have gathered, or memory is
short, the tuples are sealed into a :class:`Block` of numpy columns (the bodies joined into one
bytes object beside them), and blocks spill to the file's :class:`~tracemerge.store.spill.RunStore` as
plain bytes, the columns apart from the bodies: the walk reads a run's columns (the entries that
start in a range of time, :mod:`tracemerge.store.run_cuts`) and then its bodies one block at a
time, in the order they were read. Nothing is sorted here; storage order is the order of reading,
which the walk relies on (see :mod:`tracemerge.store.file_layout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from tracemerge.store.column_blocks import Block, Columnar, Schema, concatenated
from tracemerge.store.run_cuts import BOTTOM, TOP, Run, Spine, time_runs
from tracemerge.store.spill import RunStore

# Rows a thread is worked out in at least, when it cuts apart in time (see ThreadEntries.chunks).
CHUNK = 1 << 18

ENTRY_SCHEMA: Schema = (
    ("starts", np.int64),
    ("negdurs", np.int64),
    ("ordinals", np.int64),
    ("lengths", np.int32),
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


class ThreadEntries(Columnar):
    """A thread's slices and instants; sources append ``(start, -dur, kind, ordinal, body)``."""

    __slots__ = ("found_runs",)
    schema = ENTRY_SCHEMA

    def _block(self, items: list[tuple]) -> Block:
        return entry_block(items)

    def keys(
        self, store: RunStore, times: tuple[int, int] | None = None, sizes: list[int] | None = None
    ) -> dict[str, np.ndarray]:
        """The start, negated duration, kind and ordinal of every entry (of those starting in
        [``times[0]``, ``times[1]``) when given), in storage order; ``sizes`` gets how many of
        them each block gave."""
        names = ("starts", "negdurs", "kinds", "ordinals")
        if times is None:
            return concatenated(self.sealed(), store, names)
        parts = [
            {name: cols[name] if rows is None else cols[name][rows] for name in names}
            for cols, rows in self.pieces(store, times)
        ]
        if sizes is not None:
            sizes += [len(part["starts"]) for part in parts]
        if not parts:
            return {name: np.empty(0, dtype) for name, dtype in ENTRY_SCHEMA if name in names}
        return {name: np.concatenate([part[name] for part in parts]) for name in names}

    def pieces(
        self, store: RunStore, times: tuple[int, int], bodies: bool = False
    ) -> Iterator[tuple[Any, np.ndarray | None]]:
        """The blocks holding entries that start in [``times[0]``, ``times[1]``), each as (its
        columns, or (columns, bodies, block) with ``bodies``, and its rows that do, None for
        all), read from the store one at a time as they are asked for (a run of a thread spans
        blocks of megabytes each)."""
        lo, hi = times
        for block in self.sealed():
            if not block.n or block.lo >= hi or block.hi < lo:
                continue
            cols = block.columns(store)
            rows = None
            if block.lo < lo or block.hi >= hi:  # some of its entries may start outside
                starts = cols["starts"]
                rows = np.flatnonzero((starts >= lo) & (starts < hi))
                if not len(rows):
                    continue
                if len(rows) == block.n:
                    rows = None
            yield ((cols, block.body_bytes(store), block) if bodies else cols), rows

    def chunks(self, store: RunStore) -> list[Run]:
        """The entries as runs apart in time, each (first start, end of its starts, earliest
        start), as :mod:`tracemerge.store.run_cuts` finds them: each nests, ties and binds flows
        on its own. A thread of at most CHUNK entries is one run."""
        total = self.total
        if not total:
            return []
        if total <= CHUNK:
            return [(BOTTOM, TOP, self.span()[0])]
        return self._found(store)[0]

    def spine(self, store: RunStore, start: int) -> Spine | None:
        """The slices left open across the cut at ``start`` (a run's first start), if any."""
        if self.total <= CHUNK:
            return None
        return self._found(store)[1].get(start)

    def _found(self, store: RunStore) -> tuple[list[Run], dict[int, Spine]]:
        # Found once for the binding of flows and the walk (the entries are all read by then).
        found = getattr(self, "found_runs", None)
        if found is None or found[0] != (self.total, CHUNK):
            found = self.found_runs = ((self.total, CHUNK), time_runs(self.sealed(), store, CHUNK))
        return found[1]

    def span(self) -> tuple[int, int]:
        """The earliest start and the latest end of the entries (there must be some)."""
        blocks = [block for block in self.sealed() if block.n]
        return min(block.lo for block in blocks), max(block.hi for block in blocks)


def entry_block(items: list[tuple]) -> Block:
    n = len(items)
    bodies = list(map(_fifth, items))
    cols: dict[str, np.ndarray] = {
        "starts": np.fromiter(map(_first, items), np.int64, n),
        "negdurs": np.fromiter(map(_second, items), np.int64, n),
        "kinds": np.fromiter(map(_third, items), np.int8, n),
        "ordinals": np.fromiter(map(_fourth, items), np.int64, n),
        "lengths": np.fromiter(map(len, bodies), np.int32, n),
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


class ThreadPoints(Columnar):
    """A thread's flow points; sources append ``(ts, phase, ordinal, key, bind_next)`` where the
    key is ``(cat, name, id)`` (or an id alone)."""

    __slots__ = ("keys",)
    schema = POINT_SCHEMA
    _ordinal = staticmethod(itemgetter(2))

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
        cols: dict[str, np.ndarray] = {
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


def byte_table(items: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte strings as one table: their bytes joined, where each begins and how long each is (item
    ``k`` of some positions is then ``gathered(blob, begins[k], lengths[k])``)."""
    lengths = np.fromiter(map(len, items), np.int64, len(items))
    return np.frombuffer(b"".join(items), np.uint8), np.cumsum(lengths) - lengths, lengths


def grouped_rows(groups: np.ndarray, count: int) -> Iterator[tuple[int, np.ndarray]]:
    """For each of ``count`` groups that has rows, the group and its rows (where ``groups`` names
    it), in order."""
    order = np.argsort(groups, kind="stable")
    ends = np.cumsum(np.bincount(groups, minlength=count)).tolist()
    for group, (lo, hi) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        if hi > lo:
            yield group, order[lo:hi]


def equal_runs(values: np.ndarray) -> list[tuple[int, int]]:
    """The (first, end) positions of each run of equal values (``values`` sorted or grouped)."""
    cuts = (np.flatnonzero(values[1:] != values[:-1]) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, len(values)], strict=True)) if len(values) else []


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: ``np.unique(values)`` without its masked-array check, which
    imports numpy.ma (15 ms of every run's start-up)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


# Bytes gathered by one index: the index costs 8 bytes (and its making 24 more) per byte
# gathered, so ranges are taken this many bytes at a time (a block's names can run to 10 MB).
GATHER_AT_ONCE = 1 << 20


def gathered(data: bytes | np.ndarray, begins: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges [begin, begin + length) of ``data``, joined."""
    total = int(lengths.sum())
    if not total:
        return b""
    source = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    if total <= GATHER_AT_ONCE:
        return source[_byte_index(begins, lengths, total)].tobytes()
    ends = np.cumsum(lengths)
    out = np.empty(total, np.uint8)
    row = at = 0
    while row < len(lengths):
        # the rows ending within the next GATHER_AT_ONCE bytes (a longer row alone, as a slice)
        stop = max(int(np.searchsorted(ends, at + GATHER_AT_ONCE, "right")), row + 1)
        size = int(ends[stop - 1]) - at
        if stop == row + 1:
            begin = int(begins[row])
            out[at : at + size] = source[begin : begin + size]
        else:
            out[at : at + size] = source[_byte_index(begins[row:stop], lengths[row:stop], size)]
        row, at = stop, at + size
    return out.tobytes()


def _byte_index(begins: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """The position in the source of each byte of the ranges, in order."""
    return np.repeat(begins - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)


_first, _second, _third, _fourth, _fifth = (itemgetter(i) for i in range(5))


def interleaved(sizes: list[np.ndarray], parts: list[np.ndarray | bytes]) -> np.ndarray:
    """Per row, each part's share (``sizes[k][row]`` bytes of ``parts[k]``, in order), joined."""
    count = len(sizes[0])
    which = np.repeat(np.tile(np.arange(len(parts), dtype=np.uint8), count), np.stack(sizes, axis=1).ravel())
    out = np.empty(len(which), np.uint8)
    for k, data in enumerate(parts):
        if len(data):
            out[which == k] = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    return out


PLACEHOLDER = 4  # bytes: 0xff, then the index of a name and category (24 bits, little-endian)


def with_prefixes(
    bodies: bytes, lengths: np.ndarray, prefixes: np.ndarray, table: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[bytes, np.ndarray]:
    """Bodies that begin with a placeholder, each with it replaced: placeholder ``i`` by the
    prefix ``prefixes[i]`` of ``table`` (its bytes joined, where each begins, how long each is)."""
    if not len(lengths):
        return b"", lengths
    data = np.frombuffer(bodies, np.uint8)
    begins = np.cumsum(lengths) - lengths
    local = (
        data[begins + 1].astype(np.int64)
        | data[begins + 2].astype(np.int64) << 8
        | data[begins + 3].astype(np.int64) << 16
    )
    chosen = prefixes[local]
    blob, starts, sizes = table
    heads, rests = sizes[chosen], lengths - PLACEHOLDER
    # What follows the placeholders is the bodies' bytes less theirs: taken by a mask, at a third
    # of the cost of gathering the ranges by index (their bytes are most of the file's).
    outside = np.ones(int(lengths.sum()), bool)
    for k in range(PLACEHOLDER):
        outside[begins + k] = False
    joined = interleaved([heads, rests], [gathered(blob, starts[chosen], heads), data[: len(outside)][outside]])
    return joined.tobytes(), heads + rests


def walk_order(starts: np.ndarray, negdurs: np.ndarray, kinds: np.ndarray, ordinals: np.ndarray) -> np.ndarray:
    """The positions of the entries in the walk's order: by start, longer first, slices first,
    then by ordinal."""
    # A stable sort by start alone is fast on times read nearly in order; entries sharing a
    # start are then put in order among themselves.
    order: np.ndarray = np.argsort(starts, kind="stable").astype(index_type(len(starts)))
    first = starts[order]
    tie = first[1:] == first[:-1]
    if tie.any():
        tied = np.zeros(len(order), bool)
        tied[1:] = tie
        tied[:-1] |= tie
        at = np.flatnonzero(tied)
        some = order[at]
        order[at] = some[np.lexsort((ordinals[some], kinds[some], negdurs[some], first[at]))]
    return order


def index_type(n: int) -> type[np.signedinteger]:
    """The integer type positions among ``n`` rows are kept in (int32 while they fit)."""
    return np.int32 if n < 1 << 31 else np.int64
