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

Given a folder (the run's work folder), a union of more than :data:`SPILL_AT` spans lives on disk
(:mod:`tracemerge.evidence.span_runs`): its in-memory blocks are written out as a run whenever
they hold that many, runs out of order are merged as a stream, and its passes (:meth:`chunks`,
:meth:`covered`) read it a chunk at a time; moved to another clock (:meth:`absorb` with a
shift) it points at the same columns. It travels to another process as where they lie.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from tracemerge.evidence import column_file
from tracemerge.evidence.span_runs import EMPTY, Columns, Run, loaded, merge_runs, merged_columns, write_run

# Spans noted one at a time are merged into the columns this many at a time.
BLOCK = 1 << 16
_EMPTY = EMPTY
# Runs on disk out of order merged into one once there are more than this many (a merge holds a
# chunk of each).
MAX_RUNS = 4


class SpanUnion:
    """The union of the spans added to it (:meth:`add`, :meth:`add_columns`, :meth:`absorb`),
    read as sorted, disjoint int64 columns (:meth:`columns`, or :meth:`chunks` a part at a time)
    or as ``(start, end)`` tuples (iteration, equality with a list of them). With a ``folder``,
    past :data:`SPILL_AT` spans it lives there. Times beyond int64 raise OverflowError."""

    __slots__ = (
        "_blocks",
        "_cache",
        "_folder",
        "_held",
        "_in_order",
        "_index",
        "_merged_size",
        "_runs",
        "_tail_ends",
        "_tail_starts",
    )

    def __init__(
        self, starts: np.ndarray | None = None, ends: np.ndarray | None = None, folder: Path | None = None
    ) -> None:
        self._blocks: list[Columns] = []  # each merged; in order when _in_order
        self._in_order = True  # every block starts after the one before it ends
        self._merged_size = 0  # spans in the union at its last merge of blocks out of order
        self._held = 0  # spans in the blocks
        self._tail_starts, self._tail_ends = array("q"), array("q")
        self._folder = folder  # where it may spill; None: always in memory
        self._runs: list[Run] = []  # on disk, each in order; one once settled
        self._cache: tuple[int, Columns] | None = None  # the chunk covered() read last
        self._index: tuple[list[int], list[int]] | None = None  # the run's chunks' first starts and last ends
        if starts is not None and ends is not None:
            self.add_columns(starts, ends)

    @classmethod
    def of(cls, spans: Iterable[tuple[int, int]]) -> SpanUnion:
        """The union of ``spans`` (a union already, or tuples in any order)."""
        if isinstance(spans, SpanUnion):
            return spans
        pairs = np.array(list(spans), np.int64).reshape(-1, 2)
        return cls(pairs[:, 0], pairs[:, 1])

    @property
    def folder(self) -> Path | None:
        return self._folder

    @property
    def on_disk(self) -> bool:
        """Whether its spans (some of them, until :meth:`settle`) are on disk."""
        self._flush()
        return bool(self._runs)

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
        """Adds every span of ``other``, each moved by ``shift`` (its spans on disk are not
        copied: this union points at them, moved); takes its folder when it has none."""
        self._flush()
        other._flush()
        if self._folder is None:
            self._folder = other._folder
        for run in other._runs:
            self._add_run([chunk.moved(shift) for chunk in run] if shift else run)
        for starts, ends in other._blocks:
            self._push(starts + shift if shift else starts, ends + shift if shift else ends)

    def shifted(self, shift: int) -> SpanUnion:
        """A new union of these spans, each moved by ``shift``."""
        out = SpanUnion(folder=self._folder)
        out.absorb(self, shift)
        return out

    def settle(self) -> None:
        """Merges every span added into one pair of columns, or one run on disk."""
        self._flush()
        if self._runs:
            self._spill()
            if len(self._runs) > 1:
                self._merge_runs()
        elif len(self._blocks) > 1:
            self._merge_blocks()

    def columns(self) -> Columns:
        """The union's spans: their starts and their ends, sorted, disjoint and not touching (read
        whole from disk when it is there: :meth:`chunks` reads it a part at a time)."""
        self.settle()
        if self._runs:
            parts = list(loaded(self._runs[0]))
            return np.concatenate([s for s, _ in parts]), np.concatenate([e for _, e in parts])
        return self._blocks[0] if self._blocks else (_EMPTY, _EMPTY)

    def chunks(self) -> Iterator[Columns]:
        """The union's columns a part at a time, in order: the whole in memory, a chunk of at
        most :data:`SPILL_AT` spans at a time from disk."""
        self.settle()
        if self._runs:
            return loaded(self._runs[0])
        return iter(self._blocks[:1])

    def outer(self) -> list[tuple[int, int]]:
        """The first and the last span (one, or none, when it holds fewer)."""
        self.settle()
        if self._runs:
            run = self._runs[0]
            (first_starts, first_ends), (last_starts, last_ends) = run[0].load(), run[-1].load()
            spans = [(int(first_starts[0]), int(first_ends[0])), (int(last_starts[-1]), int(last_ends[-1]))]
            return spans[:1] if len(run) == 1 and run[0].size == 1 else spans
        starts, ends = self.columns()
        return [(int(starts[k]), int(ends[k])) for k in sorted({0, len(starts) - 1})] if len(starts) else []

    def covered(self, lo: int, hi: int) -> int:
        """How much of [lo, hi) the union covers (from disk, the chunks it meets)."""
        self.settle()
        if not self._runs:
            return _covered_in(*self.columns(), lo, hi)
        run = self._runs[0]
        if self._index is None:
            self._index = [c.first for c in run], [c.last for c in run]
        firsts, lasts = self._index
        first = bisect.bisect_right(lasts, lo)  # the first chunk ending after lo
        stop = bisect.bisect_left(firsts, hi)  # the first starting at or after hi
        total = 0
        for k in range(first, stop):
            if self._cache is None or self._cache[0] != k:
                self._cache = (k, run[k].load())
            total += _covered_in(*self._cache[1], lo, hi)
        return total

    def __len__(self) -> int:
        self.settle()
        if self._runs:
            return sum(chunk.size for chunk in self._runs[0])
        return len(self.columns()[0])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for starts, ends in self.chunks():
            yield from zip(starts.tolist(), ends.tolist(), strict=True)

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
        """Travels as its columns, or, on disk, as where they lie (the folder is shared)."""
        self.settle()
        if self._runs:
            return (_on_disk, (self._folder, self._runs[0]))
        return (SpanUnion, (*self.columns(), self._folder))

    def _flush(self) -> None:
        """Merges the spans noted one at a time into the blocks."""
        if self._tail_starts:
            starts = np.frombuffer(self._tail_starts, np.int64).copy()
            ends = np.frombuffer(self._tail_ends, np.int64).copy()
            self._tail_starts, self._tail_ends = array("q"), array("q")
            self._push(*merged_columns(starts, ends))

    def _push(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Adds a merged block: after the others when it starts after they end; else kept apart
        until the blocks out of order hold as many spans as the union did at its last merge.
        Blocks of more than SPILL_AT spans go to disk when there is a folder."""
        if not len(starts):
            return
        if self._blocks and starts[0] <= self._blocks[-1][1][-1]:
            self._in_order = False
        self._blocks.append((starts, ends))
        self._held += len(starts)
        if not self._in_order and self._held >= 2 * self._merged_size + BLOCK:
            self._merge_blocks()
        if self._folder is not None and self._held > column_file.SPILL_AT:
            self._spill()

    def _merge_blocks(self) -> None:
        starts = np.concatenate([s for s, _ in self._blocks])
        ends = np.concatenate([e for _, e in self._blocks])
        self._blocks = [(starts, ends)] if self._in_order else [merged_columns(starts, ends)]
        self._in_order = True
        self._merged_size = self._held = len(self._blocks[0][0])

    def _spill(self) -> None:
        """The blocks, merged, written out as a run."""
        if not self._blocks:
            return
        assert self._folder is not None
        if len(self._blocks) > 1:
            self._merge_blocks()
        starts, ends = self._blocks[0]
        self._blocks, self._held, self._merged_size, self._in_order = [], 0, 0, True
        self._add_run(write_run(self._folder, starts, ends))

    def _add_run(self, run: Run) -> None:
        """A run on disk: joined to the last when it starts after that one ends, else kept apart
        (merged with the others once there are more than MAX_RUNS)."""
        if not run:
            return
        self._cache = self._index = None
        if self._runs and run[0].first > self._runs[-1][-1].last:
            self._runs[-1] = [*self._runs[-1], *run]
        else:
            self._runs.append(list(run))
        if len(self._runs) > MAX_RUNS:
            self._merge_runs()

    def _merge_runs(self) -> None:
        """The runs on disk merged into one (a stream, a chunk of each at a time)."""
        assert self._folder is not None  # runs are only ever written to a folder
        self._runs = [merge_runs(self._runs, self._folder)]
        self._cache = self._index = None


def _on_disk(folder: Path, run: Run) -> SpanUnion:
    """A union whose spans are the run ``run`` in ``folder`` (how one on disk travels)."""
    out = SpanUnion(folder=folder)
    out._add_run(run)
    return out


def _covered_in(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """How much of [lo, hi) sorted, disjoint columns cover."""
    if hi <= lo or not len(starts):
        return 0
    first = int(np.searchsorted(ends, lo, "right"))  # the first span ending after lo
    stop = int(np.searchsorted(starts, hi, "left"))  # the first starting at or after hi
    if first >= stop:
        return 0
    inside = np.minimum(ends[first:stop], hi) - np.maximum(starts[first:stop], lo)
    return int(inside.sum())
