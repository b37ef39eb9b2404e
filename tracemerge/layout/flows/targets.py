"""Which slice each flow point binds to, on its thread: the innermost slice open at the point's
time, or, for a point bound to the next slice (a Chrome ``f`` without ``bp: "e"``), the next one
starting there. Found by binary search on the thread's columns; the few points that need more
go up the slices' parents (a thread that nests) or are walked (one that does not).
"""

from __future__ import annotations

import numpy as np


def targets(
    starts: np.ndarray, ends: np.ndarray, parent: np.ndarray | None, ts: np.ndarray, bind_next: np.ndarray
) -> np.ndarray:
    """The index of the slice each point binds to (``len(starts)`` for none).

    ``starts`` and ``ends`` are the thread's slices in the walk's order, ``parent`` their parents
    when the thread nests throughout (None when it does not); the points are in (time, phase,
    ordinal) order. A walk over the slices pushes each slice that starts before the point (or
    with it, unless the point binds to the next slice), after popping those that ended before
    the pushed one starts; the point binds to the top once those that ended before it are
    popped. The top is the last slice started at or before the point when that one has not
    ended; only the others need more. A ``bind_next`` point binds to the first slice starting
    after it when a point before it at the same time, not ``bind_next``, already took the slices
    starting there, else to the first starting at or after it.
    """
    n = len(starts)
    last = np.searchsorted(starts, ts, "right") - 1
    open_at = ends[np.maximum(last, 0)] >= ts if n else np.zeros(len(ts), bool)
    taken = (bind_next == 0).astype(np.int64)
    before = np.cumsum(taken) - taken  # points not bind_next before each one
    after_taken = before - before[np.searchsorted(ts, ts, "left")] > 0
    upcoming = np.where(after_taken, last + 1, np.searchsorted(starts, ts, "left"))
    found = np.where(bind_next != 0, upcoming, np.where(last >= 0, last, n))
    rest = np.flatnonzero((bind_next == 0) & (last >= 0) & ~open_at)
    if len(rest):
        if parent is not None:
            found[rest] = _up_parents(ends, parent, last[rest], ts[rest], n)
        else:
            found[rest] = _walked(starts, ends, ts[rest], n)
    return found


def _up_parents(ends: np.ndarray, parent: np.ndarray, at: np.ndarray, ts: np.ndarray, n: int) -> np.ndarray:
    """From the slice each point's search found, up its parents to the first that has not ended."""
    at = at.copy()
    todo = np.arange(len(at))
    while len(todo):
        todo = todo[ends[at[todo]] < ts[todo]]
        at[todo] = parent[at[todo]]
        todo = todo[at[todo] >= 0]
    return np.where(at >= 0, at, n)


def _walked(starts: np.ndarray, ends: np.ndarray, ts: np.ndarray, n: int) -> list[int]:
    """The walk of :func:`targets` for points (none ``bind_next``) in time order."""
    limit = int(np.searchsorted(starts, ts[-1], "right"))
    starts_list, ends_list = starts[:limit].tolist(), ends[:limit].tolist()
    stack: list[int] = []
    k = 0
    found = []
    for t in ts.tolist():
        while k < limit and starts_list[k] <= t:
            start = starts_list[k]
            while stack and ends_list[stack[-1]] < start:
                stack.pop()
            stack.append(k)
            k += 1
        while stack and ends_list[stack[-1]] < t:
            stack.pop()
        found.append(stack[-1] if stack else n)
    return found
