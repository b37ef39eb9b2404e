"""The busiest kernels and ops of each process: the names that took the most device time.

The reads total each name's device time and count per process (:mod:`tracemerge.evidence.kernel_tally`:
the kernels, copies and sets, the collectives' device work and Ascend's tasks that the breakdown's
compute and communication are made of). Here each process keeps its :data:`TOP` names by total
device time, each with its share of the process's device busy time (the union of its compute and
communication), over its whole profiled time (:func:`busiest`) and in each of its steps
(:func:`busiest_per_step`, from each kernel's start and length). Kernels run at once on several
streams can make the shares add up to more than 100%.
"""

from __future__ import annotations

import msgspec
import numpy as np

from tracemerge.analysis.device_time import Spans, intersection, merged
from tracemerge.core.model import Identity
from tracemerge.evidence.kernel_tally import KernelTimes
from tracemerge.evidence.span_union import SpanUnion

TOP = 10  # names kept per process


class Busiest(msgspec.Struct, frozen=True):
    """A process's busiest kernels and ops: (name, total device time in ns, count), the longest
    first; its device busy time and how many names it ran in all."""

    busy_ns: int
    top: list[tuple[str, int, int]]
    names: int


def busiest(
    kernels: dict[Identity, dict[str, tuple[int, int]]],
    units: dict[Identity, tuple[Spans, Spans]],
    top: int = TOP,
) -> dict[Identity, Busiest]:
    """Per process with a tally: its ``top`` names by total device time (then by name), and its
    busy time, the length of the union of its compute and communication (``units``)."""
    out = {}
    for ident, names in kernels.items():
        compute, comm = units.get(ident, ([], []))
        busy = _busy(compute, comm)
        ranked = sorted(names.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        out[ident] = Busiest(busy, [(name, total, count) for name, (total, count) in ranked], len(names))
    return out


def _busy(compute: Spans, comm: Spans) -> int:
    """The length of the union of two unions: |C| + |M| - |C ∩ M| from their columns when they
    are :class:`SpanUnion` (neither copied into a list of tuples nor into one joined union)."""
    if type(compute) is SpanUnion and type(comm) is SpanUnion:
        return _length(compute) + _length(comm) - _length(intersection(compute, comm))
    return sum(b - a for a, b in merged([*compute, *comm]) if b > a)


def _length(union: SpanUnion) -> int:
    """How much time the union covers (a chunk at a time when it is on disk)."""
    return sum(int((ends - starts).sum()) for starts, ends in union.chunks())


STEP_TOP = 5  # names kept per process and step
CHUNK = 1 << 20  # kernels taken at once: the passes' columns stay tens of MB whatever the count

# Per window index, per kernel name: [device time in the window, kernels with time in it].
WindowTotals = dict[int, dict[str, list[int]]]


def busiest_per_step(
    times: dict[Identity, list[tuple[KernelTimes, int]]],
    windows: dict[Identity, list[tuple[int, int, int]]],
    busy: dict[Identity, list[int]],
    top: int = STEP_TOP,
) -> dict[Identity, list[tuple[int, Busiest]]]:
    """Per process with kernels and steps, per step window ((step, start, end), in order): its
    ``top`` names by device time in the window (a kernel running across a window's edge counts
    its part inside; the count is of the kernels with time in the window) and the step's device
    busy time (``busy``, the breakdown's compute and communication, window by window). A process's
    kernels come as columns (one per stream and file), each with the shift that puts its starts
    on the windows' timeline; none is copied whole."""
    out = {}
    for ident, found in windows.items():
        if not found or not times.get(ident):
            continue
        totals: WindowTotals = {}
        for kernels, shift in times[ident]:
            add_window_totals(totals, kernels, [(lo - shift, hi - shift) for _, lo, hi in found])
        rows = []
        spent = busy.get(ident, [])
        for w, (step, _, _) in enumerate(found):
            names = totals.get(w, {})
            ranked = sorted(names.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
            top_names = [(n, t, c) for n, (t, c) in ranked]
            rows.append((step, Busiest(spent[w] if w < len(spent) else 0, top_names, len(names))))
        out[ident] = rows
    return out


def add_window_totals(totals: WindowTotals, kernels: KernelTimes, windows: list[tuple[int, int]]) -> None:
    """Adds to ``totals`` the kernels' time in each window (windows in ``kernels``' own times), a
    chunk of :data:`CHUNK` kernels at a time (those on disk read a chunk at a time). Windows in
    start order that do not overlap are taken in one vectorised pass (a kernel in two windows,
    rare, one by one); overlapping ones (a step captured twice) window by window."""
    lo = np.array([a for a, _ in windows], np.int64)
    hi = np.array([b for _, b in windows], np.int64)
    disjoint = len(windows) < 2 or bool(np.all(lo[1:] >= hi[:-1]) and np.all(hi >= lo))
    for all_starts, all_durs, all_codes in kernels.chunks():
        for at in range(0, len(all_starts), CHUNK):
            starts, codes = all_starts[at : at + CHUNK], all_codes[at : at + CHUNK]
            ends = starts + all_durs[at : at + CHUNK]
            if disjoint:
                _disjoint(totals, kernels.names, starts, ends, codes, lo, hi)
            else:
                _each_window(totals, kernels.names, starts, ends, codes, windows)


def _disjoint(
    totals: WindowTotals,
    names: list[str],
    starts: np.ndarray,
    ends: np.ndarray,
    codes: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> None:
    """:func:`add_window_totals` over disjoint windows in start order (``lo``, ``hi``)."""
    first = np.searchsorted(hi, starts, side="right")  # the first window ending after the start
    last = np.searchsorted(lo, ends, side="left") - 1  # the last window starting before the end
    instant = ends == starts  # a kernel of no length: in the window it starts in
    if instant.any():
        last[instant] = np.searchsorted(lo, starts[instant], side="right") - 1
    one = (first == last) & (first < len(lo))
    w = first[one]
    if len(w):
        inside = np.minimum(ends[one], hi[w]) - np.maximum(starts[one], lo[w])
        keys = w.astype(np.int64) * len(names) + codes[one]
        unique, inverse = np.unique(keys, return_inverse=True)
        sums = np.rint(np.bincount(inverse, weights=inside)).astype(np.int64)
        counts = np.bincount(inverse)
        for key, total, count in zip(unique.tolist(), sums.tolist(), counts.tolist(), strict=True):
            win, code = divmod(key, len(names))
            _add(totals, win, names[code], total, count)
    for k in np.flatnonzero(last > first).tolist():  # across a window's edge
        a, b, name = int(starts[k]), int(ends[k]), names[int(codes[k])]
        for win in range(int(first[k]), min(int(last[k]), len(lo) - 1) + 1):
            _add(totals, win, name, min(b, int(hi[win])) - max(a, int(lo[win])), 1)


def _each_window(
    totals: WindowTotals,
    names: list[str],
    starts: np.ndarray,
    ends: np.ndarray,
    codes: np.ndarray,
    windows: list[tuple[int, int]],
) -> None:
    """:func:`add_window_totals` window by window (windows that overlap)."""
    for win, (a, b) in enumerate(windows):
        inside = np.minimum(ends, b) - np.maximum(starts, a)
        keep = (inside > 0) | ((inside == 0) & (starts >= a) & (starts < b))
        for code, part in zip(codes[keep].tolist(), inside[keep].tolist(), strict=True):
            _add(totals, win, names[code], part, 1)


def _add(totals: WindowTotals, win: int, name: str, total: int, count: int) -> None:
    found = totals.setdefault(win, {}).setdefault(name, [0, 0])
    found[0] += total
    found[1] += count
