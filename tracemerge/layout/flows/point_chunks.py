"""A thread's flow points cut into parts apart in time, for threads with more of them than are
bound at once (a Kineto launch thread or GPU stream has one per kernel).

The cuts follow the thread's runs of entries (:meth:`ThreadEntries.chunks`): consecutive runs are
grouped so that each group's points number about :data:`POINTS_AT_ONCE`, and a point goes to the
group whose earliest start is the latest at or before its time (the first takes any earlier).
One pass over the thread's blocks writes each block's points of each group to the run file; a
group's points are then read back together, in the order they were stored.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracemerge.store.entries import POINT_SCHEMA, ThreadPoints
from tracemerge.store.spill import RunStore

# Points of one thread bound at once: a thread with more is bound a group of its runs at a time.
POINTS_AT_ONCE = 1 << 18

# An entry run: (first row, end row, earliest start).
Run = tuple[int, int, int]


def run_groups(pts: ThreadPoints, runs: list[Run], store: RunStore, at_once: int) -> list[tuple[int, int]]:
    """Consecutive runs [first, end) grouped to about ``at_once`` points each (a run's points:
    those from its earliest start to the next run's)."""
    earliest = np.array([start for _, _, start in runs[1:]], np.int64)
    counts = np.zeros(len(runs), np.int64)
    for block in pts.sealed():
        if block.n:
            where = np.searchsorted(earliest, block.columns(store)["ts"], "right")
            counts += np.bincount(where, minlength=len(runs))
    groups: list[tuple[int, int]] = []
    first, held = 0, 0
    for k, count in enumerate(counts.tolist()):
        if held and held + count > at_once:
            groups.append((first, k))
            first, held = k, 0
        held += count
    groups.append((first, len(runs)))
    return groups


def grouped_points(
    pts: ThreadPoints, runs: list[Run], groups: list[tuple[int, int]], store: RunStore
) -> Iterator[dict[str, np.ndarray]]:
    """Each group's points, as the columns of :meth:`ThreadPoints.columns`, in storage order."""
    earliest = np.array([runs[first][2] for first, _ in groups[1:]], np.int64)
    pieces: list[list[tuple[int, int]]] = [[] for _ in groups]
    for block in pts.sealed():
        if not block.n:
            continue
        cols = block.columns(store)
        where = np.searchsorted(earliest, cols["ts"], "right")
        order = np.argsort(where, kind="stable")  # each group's rows in storage order
        ends = np.cumsum(np.bincount(where, minlength=len(groups))).tolist()
        for group, (lo, hi) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
            if hi > lo:
                rows = order[lo:hi]
                data = b"".join(np.ascontiguousarray(cols[name][rows], dtype).tobytes() for name, dtype in POINT_SCHEMA)
                pieces[group].append((store.put(data)[0], hi - lo))
        del cols, where, order
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
