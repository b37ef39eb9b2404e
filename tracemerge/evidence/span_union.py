"""A union of time spans ``[start, end)`` held as int64 columns: the device activity of a thread
or a process (kernels, copies, collectives' device work), which the device-time breakdown and the
critical path measure windows against.

A span costs 16 bytes here (two int64), whatever the source; as a list of tuples of Python ints
it cost about 130, and each stage (the read's notes, the file's scan, the derivation) held its
own copy. Spans noted one at a time wait in two ``array('q')`` columns (16 bytes each too) and
are merged into the union a block of :data:`BLOCK` at a time; a block that starts after the
union ends (a stream's kernels, read in time order) is appended as it is, and blocks that do
not are merged into the rest only once they hold as many spans as the union did at its last
merge: each span is sorted O(log n) times over all, never once per block.

Spans that cover nothing (``end <= start``) are left out: a union's figures (what it covers of a
window, its intersection with another) are the same with or without them. Spans that touch
(``next start == end``) are joined, as :func:`tracemerge.phases.device_time.merged` joins them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

import numpy as np

# Spans noted one at a time are merged into the columns this many at a time.
BLOCK = 1 << 16
_EMPTY = np.zeros(0, np.int64)


def merged_columns(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the spans ``starts[k], ends[k]`` (any order) as sorted, disjoint columns whose
    spans neither overlap nor touch; spans that cover nothing left out."""
    kept = ends > starts
    if not kept.all():
        starts, ends = starts[kept], ends[kept]
    if not len(starts):
        return _EMPTY, _EMPTY
    if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)  # the end of the union so far, at each span
    breaks = np.flatnonzero(starts[1:] > reach[:-1]) + 1  # a span that starts after it: a new one
    if len(breaks) == len(starts) - 1:
        return starts, ends  # nothing to join (reach is ends: each span ends before the next)
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
    return starts[firsts], reach[lasts]


class SpanUnion:
    """The union of the spans added to it (:meth:`add`, :meth:`add_columns`, :meth:`absorb`),
    read as sorted, disjoint int64 columns (:meth:`columns`) or as ``(start, end)`` tuples
    (iteration, equality with a list of them). Times beyond int64 raise OverflowError."""

    __slots__ = ("_blocks", "_in_order", "_merged_size", "_tail_ends", "_tail_starts")

    def __init__(self, starts: np.ndarray | None = None, ends: np.ndarray | None = None) -> None:
        self._blocks: list[tuple[np.ndarray, np.ndarray]] = []  # each merged; in order when _in_order
        self._in_order = True  # every block starts after the one before it ends
        self._merged_size = 0  # spans in the union at its last merge of blocks out of order
        self._tail_starts, self._tail_ends = array("q"), array("q")
        if starts is not None and ends is not None:
            self.add_columns(starts, ends)

    @classmethod
    def of(cls, spans: Iterable[tuple[int, int]]) -> SpanUnion:
        """The union of ``spans`` (a union already, or tuples in any order)."""
        if isinstance(spans, SpanUnion):
            return spans
        pairs = np.array(list(spans), np.int64).reshape(-1, 2)
        return cls(pairs[:, 0], pairs[:, 1])

    def add(self, start: int, end: int) -> None:
        """Adds [start, end): joined to the last span noted when it goes on from it."""
        tail_ends = self._tail_ends
        if tail_ends and self._tail_starts[-1] <= start <= tail_ends[-1]:
            if end > tail_ends[-1]:
                tail_ends[-1] = end
            return
        if end <= start:
            return
        self._tail_starts.append(start)
        tail_ends.append(end)
        if len(tail_ends) >= BLOCK:
            self._flush()

    def add_columns(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Adds the spans ``starts[k], ends[k]`` (any order)."""
        self._flush()
        self._push(*merged_columns(np.asarray(starts, np.int64), np.asarray(ends, np.int64)))

    def absorb(self, other: SpanUnion, shift: int = 0) -> None:
        """Adds every span of ``other``, each moved by ``shift``."""
        self._flush()
        other._flush()
        for starts, ends in other._blocks:
            self._push(starts + shift if shift else starts, ends + shift if shift else ends)

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The union's spans: their starts and their ends, sorted, disjoint and not touching."""
        self._flush()
        if len(self._blocks) > 1:
            self._merge_blocks()
        return self._blocks[0] if self._blocks else (_EMPTY, _EMPTY)

    def covered(self, lo: int, hi: int) -> int:
        """How much of [lo, hi) the union covers."""
        starts, ends = self.columns()
        if hi <= lo or not len(starts):
            return 0
        first = int(np.searchsorted(ends, lo, "right"))  # the first span ending after lo
        stop = int(np.searchsorted(starts, hi, "left"))  # the first starting at or after hi
        if first >= stop:
            return 0
        inside = np.minimum(ends[first:stop], hi) - np.maximum(starts[first:stop], lo)
        return int(inside.sum())

    def __len__(self) -> int:
        return len(self.columns()[0])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        starts, ends = self.columns()
        return zip(starts.tolist(), ends.tolist(), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpanUnion):
            mine, theirs = self.columns(), other.columns()
            return all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpanUnion({list(self)!r})"

    def __reduce__(self) -> tuple:
        return (SpanUnion, self.columns())

    def _flush(self) -> None:
        """Merges the spans noted one at a time into the blocks."""
        if self._tail_starts:
            starts = np.frombuffer(self._tail_starts, np.int64).copy()
            ends = np.frombuffer(self._tail_ends, np.int64).copy()
            self._tail_starts, self._tail_ends = array("q"), array("q")
            self._push(*merged_columns(starts, ends))

    def _push(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Adds a merged block: after the others when it starts after they end; else kept apart
        until the blocks out of order hold as many spans as the union did at its last merge."""
        if not len(starts):
            return
        if self._blocks and starts[0] <= self._blocks[-1][1][-1]:
            self._in_order = False
        self._blocks.append((starts, ends))
        if not self._in_order:
            count = sum(len(s) for s, _ in self._blocks)
            if count >= 2 * self._merged_size + BLOCK:
                self._merge_blocks()

    def _merge_blocks(self) -> None:
        starts = np.concatenate([s for s, _ in self._blocks])
        ends = np.concatenate([e for _, e in self._blocks])
        self._blocks = [(starts, ends)] if self._in_order else [merged_columns(starts, ends)]
        self._in_order = True
        self._merged_size = len(self._blocks[0][0])
