"""Where a thread's entries cut into runs apart in time, so that the layout works out, and binds
flows on, one run of about ``chunk`` entries at a time.

A run is a range of time, [T, next T): it holds the entries that start in it, wherever they lie
in the order read (torch.profiler writes a thread's operators in time order and then its runtime
calls in time order again, so a run's entries come from two places). T is a place to cut when
every entry starting before it ends no later than T, and, if one ends at T, a slice starts at T:
then no entry of one run nests in, overlaps or ties with one of another, and a flow point at T
binds in the later run to what it binds to in the whole thread (the slice started last at or
before it).

The cuts are looked for in windows of about ``chunk`` entries: the windows' bounds are every so
many of a sample of the starts (every ``stride``-th entry in the order read), and each window cuts
at its first place to cut, if it has one. All of it depends on the entries alone, never on how
they are cut into blocks, so the output does not depend on where a file spilled. The entries of a
window are read from the blocks whose time meets it; a thread read in so little order that this
would read each block over and over again (its sample jumps between windows more than
``DISORDER`` times as often as windows follow one another) is worked out whole.
"""

from __future__ import annotations

import numpy as np

from tracemerge.store.column_blocks import Block
from tracemerge.store.spill import RunStore

BOTTOM, TOP = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
SLICE = 0  # an entry's kind, as :mod:`tracemerge.core.model`'s Kind.SLICE
# A sample of one start in so many entries, about this many a window.
SAMPLES_PER_WINDOW = 64
DISORDER = 8

# A run: the first and the end of its range of start times, and its earliest start.
Run = tuple[int, int, int]


def time_runs(blocks: list[Block], store: RunStore, chunk: int) -> list[Run]:
    """The thread's runs in time order (one run, all of time, when it does not cut)."""
    blocks = [block for block in blocks if block.n]
    earliest = min(block.lo for block in blocks)
    bounds, disorder = _window_bounds(blocks, store, chunk)
    cuts: list[int] = []
    if len(bounds) and disorder <= DISORDER * (len(bounds) + 1):
        reach = _reach_before(blocks, store, bounds)
        for i in range(1, len(bounds) + 1):
            lo, hi = int(bounds[i - 1]), int(bounds[i]) if i < len(bounds) else TOP
            cut = first_cut(*_window(blocks, store, lo, hi), int(reach[i - 1]), earliest)
            if cut is not None:
                cuts.append(cut)
    edges = [BOTTOM, *cuts, TOP]
    firsts = [earliest, *cuts]
    return [(edges[k], edges[k + 1], firsts[k]) for k in range(len(firsts))]


def _window_bounds(blocks: list[Block], store: RunStore, chunk: int) -> tuple[np.ndarray, int]:
    """The windows' bounds (increasing), and how often the sample, in the order read, moves from
    one window to another."""
    stride = max(1, chunk // SAMPLES_PER_WINDOW)
    per_window = max(1, chunk // stride)
    sampled, first = [], 0
    for block in blocks:
        # Copied: a strided view would keep each block's columns read from the store alive.
        sampled.append(block.columns(store)["starts"][(-first) % stride :: stride].copy())
        first += block.n
    in_order = np.concatenate(sampled)
    bounds = np.unique(np.sort(in_order)[per_window::per_window])
    moves = np.count_nonzero(np.diff(np.searchsorted(bounds, in_order, "right")))
    return bounds, int(moves)


def _reach_before(blocks: list[Block], store: RunStore, bounds: np.ndarray) -> np.ndarray:
    """Per window, the latest end of the entries starting in it or in an earlier one."""
    latest = np.full(len(bounds) + 1, BOTTOM, np.int64)
    for block in blocks:
        cols = block.columns(store)
        starts = cols["starts"]
        np.maximum.at(latest, np.searchsorted(bounds, starts, "right"), starts - cols["negdurs"])
    return np.maximum.accumulate(latest)


def _window(blocks: list[Block], store: RunStore, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The starts, ends and slice flags of the entries starting in [lo, hi)."""
    parts = []
    for block in blocks:
        if block.lo >= hi or block.hi < lo:
            continue
        cols = block.columns(store)
        starts = cols["starts"]
        rows = np.flatnonzero((starts >= lo) & (starts < hi))
        parts.append((starts[rows], starts[rows] - cols["negdurs"][rows], cols["kinds"][rows] == SLICE))
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool)
    return tuple(np.concatenate([part[k] for part in parts]) for k in range(3))  # type: ignore[return-value]


def first_cut(starts: np.ndarray, ends: np.ndarray, slices: np.ndarray, reach: int, earliest: int) -> int | None:
    """The earliest start T of these entries, after the thread's ``earliest``, where a run may
    begin (``reach``: the latest end of the entries starting before them): every entry starting
    before T ends before it, or ends at it while a slice starts at T. None where there is none."""
    if not len(starts):
        return None
    order = np.argsort(starts, kind="stable")
    starts, ends, slices = starts[order], ends[order], slices[order]
    firsts = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1]])  # each distinct start's first
    latest = np.maximum.accumulate(np.maximum(ends, reach))
    before = np.r_[reach, latest[:-1]][firsts]  # the latest end of the entries starting earlier
    at = starts[firsts]
    slice_at = np.maximum.reduceat(slices, firsts)
    good = np.flatnonzero(((before < at) | ((before == at) & slice_at)) & (at > earliest))
    return int(at[good[0]]) if len(good) else None
