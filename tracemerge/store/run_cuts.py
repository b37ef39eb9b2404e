"""Where a thread's entries cut into runs apart in time, so that the layout works out, and binds
flows on, one run of about ``chunk`` entries at a time.

A run is a range of time, [T, next T): it holds the entries that start in it, wherever they lie
in the order read (torch.profiler writes a thread's operators in time order and then its runtime
calls in time order again, so a run's entries come from two places). T is a place to cut when
every entry starting before it ends no later than T, and, if one ends at T, a slice starts at T:
then no entry of one run nests in, overlaps or ties with one of another, and a flow point at T
binds in the later run to what it binds to in the whole thread (the slice started last at or
before it).

A few long slices may stay open across T (a Python stack's outermost frames, an NVTX range
around the whole loop: the *spine*), when every entry starting from T while one of them is open
ends no later than it: then the spine bears on the later run's nesting as a thread's own first
slices do, not at all. It is handed to the later run's flow binding (a point may bind to it) and
emitted with the run it starts in.

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
# Slices a cut may leave open (the spine); entries crossing a window's bound kept at most, a window.
SPINE = 8
CROSSING_PER_WINDOW = 64

# A run: the first and the end of its range of start times, and its earliest start.
Run = tuple[int, int, int]
# The slices open across a cut: their starts, negated durations and ordinals, in the walk's order.
Spine = tuple[np.ndarray, np.ndarray, np.ndarray]
_COLUMNS = ("starts", "ends", "slices", "ordinals")


def time_runs(blocks: list[Block], store: RunStore, chunk: int) -> tuple[list[Run], dict[int, Spine]]:
    """The thread's runs in time order (one run, all of time, when it does not cut), and the
    spine left open across each cut that leaves one, by the cut's time."""
    blocks = [block for block in blocks if block.n]
    earliest = min(block.lo for block in blocks)
    bounds, disorder = _window_bounds(blocks, store, chunk)
    cuts: list[int] = []
    spines: dict[int, Spine] = {}
    if len(bounds) and disorder <= DISORDER * (len(bounds) + 1):
        seen = _WindowFacts(blocks, store, bounds)
        for i in range(1, len(bounds) + 1):
            lo, hi = int(bounds[i - 1]), int(bounds[i]) if i < len(bounds) else TOP
            opened, reach = seen.open_across(i - 1)
            holds = seen.latest_from(i, opened["ends"]) <= opened["ends"]
            cut, left_open = first_cut(_window(blocks, store, lo, hi), reach, earliest, opened, holds)
            if cut is not None:
                cuts.append(cut)
                spine = _spine(opened, left_open)
                if spine is not None:
                    spines[cut] = spine
    edges = [BOTTOM, *cuts, TOP]
    firsts = [earliest, *cuts]
    return [(edges[k], edges[k + 1], firsts[k]) for k in range(len(firsts))], spines


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


class _WindowFacts:
    """What one pass over the blocks learns of the windows (window w: the entries starting from
    bound w - 1 to bound w): the latest end of each window's entries, whether an entry ends on each
    bound, and the entries that cross a bound (start before it, end after it), unless there are
    more than :data:`CROSSING_PER_WINDOW` a window."""

    def __init__(self, blocks: list[Block], store: RunStore, bounds: np.ndarray) -> None:
        self.bounds = bounds
        self.latest = np.full(len(bounds) + 1, BOTTOM, np.int64)
        self.ends_on = np.zeros(len(bounds), bool)
        crossing: list[dict[str, np.ndarray]] | None = []
        count, cap = 0, CROSSING_PER_WINDOW * (len(bounds) + 1)
        for block in blocks:
            cols = block.columns(store)
            starts = cols["starts"]
            ends = starts - cols["negdurs"]
            window = np.searchsorted(bounds, starts, "right")
            np.maximum.at(self.latest, window, ends)
            on = np.searchsorted(bounds, ends, "left")  # the first bound not before each end
            hit = (on < len(bounds)) & (starts < ends)
            hit[hit] = bounds[on[hit]] == ends[hit]
            self.ends_on[on[hit]] = True
            rows = np.flatnonzero(on > window)  # past a bound: crossing it
            count += len(rows)
            if crossing is not None and count <= cap:
                crossing.append(
                    {
                        "starts": starts[rows],
                        "ends": ends[rows],
                        "slices": cols["kinds"][rows] == SLICE,
                        "ordinals": cols["ordinals"][rows],
                    }
                )
            else:
                crossing = None
        self.reach = np.maximum.accumulate(self.latest)
        self.crossing = None if crossing is None else {k: np.concatenate([c[k] for c in crossing]) for k in _COLUMNS}

    def open_across(self, bound: int) -> tuple[dict[str, np.ndarray], int]:
        """The entries crossing bound ``bound``, and the latest end of the other entries starting
        before it. With too many crossings to keep, none: every entry before it is in the reach."""
        if self.crossing is None:
            empty = np.empty(0, np.int64)
            return {"starts": empty, "ends": empty, "slices": np.empty(0, bool), "ordinals": empty}, int(
                self.reach[bound]
            )
        at = int(self.bounds[bound])
        rows = np.flatnonzero((self.crossing["starts"] < at) & (self.crossing["ends"] > at))
        # The others end by the bound: at it exactly, or before (their latest end then matters not).
        return {k: v[rows] for k, v in self.crossing.items()}, at if self.ends_on[bound] else BOTTOM

    def latest_from(self, window: int, until: np.ndarray) -> np.ndarray:
        """For each time in ``until``, the latest end of the entries of the windows from
        ``window`` to the one holding the instant before that time (the earliest end of none)."""
        last = np.searchsorted(self.bounds, until - 1, "right")
        tail = np.maximum.accumulate(self.latest[window:]) if window < len(self.latest) else self.latest[:0]
        found = np.full(len(until), BOTTOM, np.int64)
        some = last >= window
        found[some] = tail[last[some] - window]
        return found


def _window(blocks: list[Block], store: RunStore, lo: int, hi: int) -> dict[str, np.ndarray]:
    """The starts, ends and slice flags of the entries starting in [lo, hi), in time order."""
    parts = []
    for block in blocks:
        if block.lo >= hi or block.hi < lo:
            continue
        cols = block.columns(store)
        starts = cols["starts"]
        rows = np.flatnonzero((starts >= lo) & (starts < hi))
        parts.append((starts[rows], starts[rows] - cols["negdurs"][rows], cols["kinds"][rows] == SLICE))
    if not parts:
        return {"starts": np.empty(0, np.int64), "ends": np.empty(0, np.int64), "slices": np.empty(0, bool)}
    starts, ends, slices = (np.concatenate([part[k] for part in parts]) for k in range(3))
    order = np.argsort(starts, kind="stable")
    return {"starts": starts[order], "ends": ends[order], "slices": slices[order]}


def first_cut(
    window: dict[str, np.ndarray], reach: int, earliest: int, opened: dict[str, np.ndarray], holds: np.ndarray
) -> tuple[int | None, np.ndarray]:
    """The earliest start T of the window's entries (in time order), after the thread's
    ``earliest``, where a run may begin, and which of the slices ``opened`` stay open across it.

    ``reach``: the latest end of the entries starting before the window, those ``opened`` left
    out; ``opened``: the slices crossing the window's first bound that may stay open across T
    (the spine: at most :data:`SPINE`), ``holds``: whether each holds every entry of the later
    windows it spans. Every other entry starting before T ends before it, or ends at it while a
    slice starts at T; every entry starting from T while a spine slice is open ends no later than
    it (checked, conservatively, on the rest of the window)."""
    starts, ends, slices = window["starts"], window["ends"], window["slices"]
    none = np.zeros(len(opened["ends"]), bool)
    if not len(starts):
        return None, none
    firsts = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1]])  # each distinct start's first
    at = starts[firsts]
    latest = np.maximum.accumulate(np.maximum(ends, reach))
    before = np.r_[reach, latest[:-1]][firsts]  # the latest end of the entries starting earlier
    by_end = np.sort(opened["ends"])
    still = len(by_end) - np.searchsorted(by_end, at, "right")  # spine slices open across each T
    touching = (before == at) | np.isin(at, by_end)
    failing = np.sort(opened["ends"][~holds])
    any_failing = len(failing) - np.searchsorted(failing, at, "right") > 0
    after = np.maximum.accumulate(ends[::-1])[::-1][firsts]  # the window's latest end from T on
    nearest = np.r_[by_end, TOP][np.searchsorted(by_end, at, "right")]  # the first of them to end
    nests = (still == 0) | ((after <= nearest) & ~any_failing)
    slice_at = np.maximum.reduceat(slices, firsts)
    good = np.flatnonzero((before <= at) & (~touching | slice_at) & (still <= SPINE) & nests & (at > earliest))
    if not len(good):
        return None, none
    cut = int(at[good[0]])
    return cut, opened["ends"] > cut


def _spine(opened: dict[str, np.ndarray], left_open: np.ndarray) -> Spine | None:
    """The slices of ``opened`` left open across a cut, in the walk's order (None for none)."""
    if not left_open.any():
        return None
    starts, ends, ordinals = (opened[k][left_open] for k in ("starts", "ends", "ordinals"))
    order = np.lexsort((ordinals, starts - ends, starts))
    return starts[order], (starts - ends)[order], ordinals[order]
