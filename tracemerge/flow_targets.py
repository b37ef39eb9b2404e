"""Which slice each flow point binds to, on its thread: the innermost slice open at the point's
time, or, for a point bound to the next slice (a Chrome ``f`` without ``bp: "e"``), the next one
starting there. Walked once over a thread's entries in order, or found by binary search on
columns of a thread held in memory, with the same result (:func:`searched_targets`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from operator import itemgetter

import numpy as np

from tracemerge.model import Kind
from tracemerge.spill import RunStore, SortedBuffer

SLICE = int(Kind.SLICE)


def bound_points(entries: SortedBuffer | None, pts: SortedBuffer, store: RunStore, budget: int) -> Iterable[tuple]:
    """Each of a thread's flow points, in order, with the slice entry it binds to (or None); a
    spilled thread whose entries and points fit in ``budget`` is read back and bound in memory."""
    if entries is not None and entries.total + pts.total <= budget:
        entries, pts = entries.loaded(store), pts.loaded(store)
    if entries is not None and not entries.runs and not pts.runs:
        slices, points = slice_entries(entries.ordered(store)), pts.ordered(store)
        try:
            starts, negdurs = slice_times(slices)
            found = searched_targets(slices, starts, negdurs, points, starts_of(points))
        except OverflowError:  # a time beyond int64: bind by walking instead
            pass
        else:
            return zip(points, map([*slices, None].__getitem__, found.tolist()), strict=True)
    slices_iter = iter(entries.ordered(store)) if entries is not None else iter(())
    points, walked = itertools.tee(pts.ordered(store))  # spilled runs read once
    return zip(points, walked_targets(slices_iter, walked), strict=True)


def walked_targets(slices: Iterator[tuple], points: Iterable[tuple]) -> Iterator[tuple | None]:
    """Binds points by walking the thread's entries once: a point binds to the innermost slice open
    at its time, a ``bind_next`` one to the next slice starting there."""
    stack: list[tuple] = []
    upcoming = next(slices, None)
    while upcoming is not None and upcoming[2] != SLICE:
        upcoming = next(slices, None)
    for point in points:
        ts, bind_next = point[0], point[4]
        # The stack holds the slices open at ``ts``, outermost first (a slice that ended before
        # the next one starts leaves it, so it stays as deep as the nesting).
        while upcoming is not None and (upcoming[0] < ts or (upcoming[0] == ts and not bind_next)):
            start = upcoming[0]
            while stack and stack[-1][0] - stack[-1][1] < start:
                stack.pop()
            stack.append(upcoming)
            upcoming = next(slices, None)
            while upcoming is not None and upcoming[2] != SLICE:
                upcoming = next(slices, None)
        target = None
        if bind_next:
            target = upcoming
        else:
            while stack and stack[-1][0] - stack[-1][1] < ts:
                stack.pop()
            if stack:
                target = stack[-1]
        yield target


def slice_entries(entries: list[tuple]) -> list[tuple]:
    """A thread's slice entries, in order (instants left out)."""
    if not any(map(_kind, entries)):  # SLICE is 0
        return entries
    return [entry for entry in entries if entry[2] == SLICE]


def starts_of(rows: list[tuple]) -> np.ndarray:
    """The first field of each row (a slice's start, a point's time)."""
    return np.fromiter(map(_start, rows), np.int64, len(rows))


def slice_times(slices: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """The starts and negated durations of entries ``(start, -dur, ...)``; OverflowError beyond int64."""
    return starts_of(slices), np.fromiter(map(_negdur, slices), np.int64, len(slices))


def searched_targets(
    slices: list[tuple], starts: np.ndarray, negdurs: np.ndarray, points: list[tuple], ts: np.ndarray
) -> np.ndarray:
    """The index in ``slices`` each point binds to (``len(slices)`` for none): what
    :func:`walked_targets` finds, by binary search where it can.

    The walk's innermost open slice is the last slice started at or before the point when that
    one has not ended; only points where it has ended are bound by walking (as far as they need:
    points the walk skips change nothing it finds later). A ``bind_next`` point binds to the first
    slice starting after it when a point before it at the same time, not ``bind_next``, already
    took the slices starting there, else to the first starting at or after it.
    """
    n = len(slices)
    ends = starts - negdurs
    bind_next = np.fromiter(map(_bind_next, points), bool, len(points))
    last = np.searchsorted(starts, ts, "right") - 1
    open_at = ends[np.maximum(last, 0)] >= ts if n else np.zeros(len(points), bool)
    taken = (~bind_next).astype(np.int64)
    before = np.cumsum(taken) - taken  # points not bind_next before each one
    after_taken = before - before[np.searchsorted(ts, ts, "left")] > 0
    upcoming = np.where(after_taken, last + 1, np.searchsorted(starts, ts, "left"))
    found = np.where(bind_next, upcoming, np.where(last >= 0, last, n))
    walked = np.flatnonzero(~bind_next & (last >= 0) & ~open_at)
    if len(walked):
        positions = {id(s): i for i, s in enumerate(slices)}
        targets = walked_targets(iter(slices), map(points.__getitem__, walked.tolist()))
        found[walked] = [n if t is None else positions[id(t)] for t in targets]
    return found


_kind, _start, _negdur, _bind_next = (itemgetter(i) for i in (2, 0, 1, 4))
