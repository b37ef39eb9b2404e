"""A thread's flow points cut into parts apart in time, for threads with more of them than are
bound at once (a Kineto launch thread or GPU stream has one per kernel).

The thread's points are cut at times into parts of about :data:`POINTS_AT_ONCE` each (a point
goes to the part whose cut is the latest at or before its time; the first takes any earlier), the
cuts chosen from a sample of the points' times. One pass over the thread's blocks writes each
block's points of each part to the run file; a part's points are then read back together, in
the order they were stored, and bound against the runs of entries (:meth:`ThreadEntries.chunks`)
its time meets.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracemerge.store.entries import POINT_SCHEMA, ThreadPoints, distinct, grouped_rows
from tracemerge.store.spill import RunStore

# Points of one thread bound at once: a thread with more is bound a group of its runs at a time.
POINTS_AT_ONCE = 1 << 18


def time_cuts(pts: ThreadPoints, store: RunStore, at_once: int) -> list[int]:
    """Times that cut the thread's points into parts of about ``at_once`` each (a part: the points
    from one cut to the next), from every so many of each block's times; points at one time are
    never cut apart."""
    step = max(1, at_once // 16)
    # Copied: a strided view would keep each block's columns read from the store alive.
    samples = [block.columns(store)["ts"][::step].copy() for block in pts.sealed() if block.n]
    times = np.sort(np.concatenate(samples)) if samples else np.empty(0, np.int64)
    return distinct(times[at_once // step :: max(1, at_once // step)]).tolist()


def grouped_points(pts: ThreadPoints, cuts: list[int], store: RunStore) -> Iterator[dict[str, np.ndarray]]:
    """The points of each part :func:`time_cuts` makes, as the columns of
    :meth:`ThreadPoints.columns`, in storage order."""
    earliest = np.array(cuts, np.int64)
    groups = range(len(cuts) + 1)
    pieces: list[list[tuple[int, int]]] = [[] for _ in groups]
    for block in pts.sealed():
        if not block.n:
            continue
        cols = block.columns(store)
        for group, rows in grouped_rows(np.searchsorted(earliest, cols["ts"], "right"), len(groups)):
            data = b"".join(np.ascontiguousarray(cols[name][rows], dtype).tobytes() for name, dtype in POINT_SCHEMA)
            pieces[group].append((store.put(data)[0], len(rows)))
        del cols
    for group_pieces in pieces:
        yield _read(group_pieces, store)
        group_pieces.clear()


def _read(pieces: list[tuple[int, int]], store: RunStore) -> dict[str, np.ndarray]:
    """The columns of some pieces written by :func:`grouped_points`, joined."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name, _ in POINT_SCHEMA}
    for offset, n in pieces:
        size = sum(np.dtype(dtype).itemsize for _, dtype in POINT_SCHEMA) * n
        data, at = store.get(offset, size), 0
        for name, dtype in POINT_SCHEMA:
            parts[name].append(np.frombuffer(data, dtype, n, at))
            at += n * np.dtype(dtype).itemsize
    return {
        name: np.concatenate(values) if values else np.empty(0, dtype)
        for (name, dtype), values in zip(POINT_SCHEMA, parts.values(), strict=True)
    }
