"""A span union's columns on disk (:mod:`tracemerge.evidence.column_file`): runs of chunks, each run
sorted, disjoint and not touching, merged into one as a stream, a chunk of each at a time.

A :class:`Chunk` is one slice of a run: its starts and its ends on disk, and a shift added to
both as they are read (a union moved to another clock points at the same columns). Merging runs
(:func:`merge_runs`) or walking two unions side by side (:func:`side_by_side`) holds a chunk of
each at a time, whatever their length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tracemerge.evidence import column_file
from tracemerge.evidence.column_file import Piece, read_column, write_column

EMPTY = np.zeros(0, np.int64)
Columns = tuple[np.ndarray, np.ndarray]


def merged_columns(starts: np.ndarray, ends: np.ndarray) -> Columns:
    """The union of the spans ``starts[k], ends[k]`` (any order) as sorted, disjoint columns whose
    spans neither overlap nor touch; spans that cover nothing left out."""
    kept = ends > starts
    if not kept.all():
        starts, ends = starts[kept], ends[kept]
    if not len(starts):
        return EMPTY, EMPTY
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


class Chunk(NamedTuple):
    """Spans of a run on disk: their starts and ends, read with ``shift`` added; the first
    start and the last end (shift included) say where it lies without reading it."""

    starts: Piece
    ends: Piece
    shift: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.starts.size

    def load(self) -> Columns:
        starts, ends = read_column(self.starts), read_column(self.ends)
        if self.shift:
            starts += self.shift
            ends += self.shift
        return starts, ends

    def moved(self, shift: int) -> Chunk:
        return self._replace(shift=self.shift + shift, first=self.first + shift, last=self.last + shift)


Run = list[Chunk]  # in order: each chunk starts after the one before it ends


class RunWriter:
    """Writes a run: spans put in order (each after those before, neither overlapping nor
    touching them) go to ``folder`` a chunk of about :data:`SPILL_AT` at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.chunks: Run = []
        self._starts: list[np.ndarray] = []
        self._ends: list[np.ndarray] = []
        self._held = 0

    def put(self, starts: np.ndarray, ends: np.ndarray) -> None:
        if not len(starts):
            return
        self._starts.append(starts)
        self._ends.append(ends)
        self._held += len(starts)
        if self._held >= column_file.SPILL_AT:
            self._write()

    def run(self) -> Run:
        """Every span put, on disk."""
        self._write()
        return self.chunks

    def _write(self) -> None:
        if not self._held:
            return
        starts, ends = np.concatenate(self._starts), np.concatenate(self._ends)
        self._starts, self._ends, self._held = [], [], 0
        for at in range(0, len(starts), column_file.SPILL_AT):
            s, e = starts[at : at + column_file.SPILL_AT], ends[at : at + column_file.SPILL_AT]
            pieces = write_column(self.folder, s), write_column(self.folder, e)
            self.chunks.append(Chunk(*pieces, 0, int(s[0]), int(e[-1])))


def write_run(folder: Path, starts: np.ndarray, ends: np.ndarray) -> Run:
    """Sorted, disjoint columns whose spans do not touch, written as a run."""
    out = RunWriter(folder)
    out.put(starts, ends)
    return out.run()


def loaded(run: Run) -> Iterator[Columns]:
    """The run's chunks, read one at a time."""
    return (chunk.load() for chunk in run)


def merge_runs(runs: list[Run], folder: Path) -> Run:
    """The union of ``runs`` (each sorted and disjoint; they may overlap one another) as one run,
    a chunk of each read at a time.

    Each round takes from every run the spans that start by a cutoff no span to come starts by
    (the earliest, over the runs, of the start of the ``share``-th span at hand: at most that many
    of each, a chunk's worth in all) and merges them with the last span of the round before, the
    only one that what comes may still join: it is held back, the others written. The union is
    the one :func:`merged_columns` makes of all the spans at once."""
    sources = [iter(run) for run in runs]
    at_hand: list[Columns | None] = [_next(source) for source in sources]
    out = RunWriter(folder)
    held: Columns = (EMPTY, EMPTY)
    share = max(column_file.SPILL_AT // max(len(runs), 1), 1)
    while True:
        live = {k: found for k, found in enumerate(at_hand) if found is not None}
        if not live:
            break
        cutoff = min(int(s[min(share, len(s)) - 1]) for s, _ in live.values())
        starts, ends = [held[0]], [held[1]]
        for k, (s, e) in live.items():
            cut = int(np.searchsorted(s, cutoff, "right"))
            starts.append(s[:cut])
            ends.append(e[:cut])
            at_hand[k] = _next(sources[k]) if cut == len(s) else (s[cut:], e[cut:])
        union_starts, union_ends = merged_columns(np.concatenate(starts), np.concatenate(ends))
        out.put(union_starts[:-1], union_ends[:-1])
        held = union_starts[-1:], union_ends[-1:]
    out.put(*held)
    return out.run()


def _next(source: Iterator[Chunk]) -> Columns | None:
    chunk = next(source, None)
    return None if chunk is None else chunk.load()


def side_by_side(
    x: Iterable[Columns], y: Iterable[Columns], pair: Callable[[Columns, Columns], Columns]
) -> Iterator[Columns]:
    """``pair`` of every span of the sorted, disjoint ``x`` with the spans of ``y`` that may
    overlap it (and of every span of ``y`` with those of ``x``), a chunk of each at a time; what
    ``pair`` returns (the two chunks' intersection, say), in order.

    Of the two chunks at hand, the one ending first is paired whole with the other (every span
    of the other that starts before it ends is at hand) and let go; of the other, the spans
    ending after it are kept for the next chunk of the first. Each overlapping pair of spans
    meets once."""
    xs, ys = iter(x), iter(y)
    a, b = next(xs, None), next(ys, None)
    while a is not None and b is not None:
        if not len(a[0]):
            a = next(xs, None)
            continue
        if not len(b[0]):
            b = next(ys, None)
            continue
        a_end, b_end = int(a[1][-1]), int(b[1][-1])
        if a_end <= b_end:
            yield pair(a, b)
            keep = int(np.searchsorted(b[1], a_end, "right"))  # b's spans ending after a does
            a, b = next(xs, None), (b[0][keep:], b[1][keep:])
        else:
            yield pair(b, a)
            keep = int(np.searchsorted(a[1], b_end, "right"))
            a, b = (a[0][keep:], a[1][keep:]), next(ys, None)
