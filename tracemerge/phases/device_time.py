"""Where each rank's device time went in each step: compute, exposed communication, compute
overlapped with communication, free time, the time before the step's first device work and after
its last; and each rank's wait in its collectives.

Within a step's window W = [a, b) of one process: C is the union of its compute activity (kernels,
memory copies and sets on its device streams that are not a collective's; on Ascend the compute
tasks, not the copies: :func:`tracemerge.evidence.anchors.ascend_task_tag`), M the union of its
collective device work (NCCL, HCCL), D = (C ∪ M) ∩ W its device work, from its first start f to
its last end l. Then ``compute = |C ∩ W|``, ``overlapped = |C ∩ M ∩ W|``, ``communication =
|(M \\ C) ∩ W|`` (exposed), ``preparing = f − a`` (torch_npu's Preparing: the step's start to its
first device work), ``closing = b − l`` (after its last), and ``free = (l − f) − |D|``, the device's
idle time between (torch_npu's Free, within its Stage ``l − f``): compute + communication + free +
preparing + closing = wall, to the nanosecond. A step without device work is free throughout. A
rank's wait in a collective is the time from its start to the start of the last rank of its role
to enter the same collective (the k-th of a kind in each rank's step); its ``wait`` in a step is
the sum over the collectives starting in the step.

Device activity is noted while the files are read, as unions of spans per thread (marks under
``"device compute"`` and ``"device comm"``, each a :class:`~tracemerge.evidence.span_union.SpanUnion`:
int64 columns kept merged), joined per process when a file's scan is made: memory is 16 bytes
per span of the union, and time linear in the events, never pairwise. The functions here take
such a union or a sorted list of ``(start, end)`` tuples alike: :func:`covered` measures a list as
it is (a process's idle time is one), the others measure the union a list makes
(:meth:`~tracemerge.evidence.span_union.SpanUnion.of`), on its columns.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import defaultdict
from collections.abc import Iterable

import msgspec
import numpy as np

from tracemerge.core.model import Identity
from tracemerge.evidence.span_runs import side_by_side
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.store.entries import ranks

Spans = list[tuple[int, int]] | SpanUnion

_START, _END = operator.itemgetter(0), operator.itemgetter(1)


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, those that touch or overlap joined."""
    if _already_merged(spans):  # as a file's scan leaves its unions: checked at C speed
        return list(spans)
    return _joined(spans)


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """:func:`merged`, the spans sorted and joined one by one."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _already_merged(spans: list[tuple[int, int]]) -> bool:
    """Each span ends at or after its start, and the next starts after it ends."""
    if not spans:
        return True
    starts, ends = _columns(spans)
    return all(map(operator.le, starts, ends)) and all(map(operator.gt, itertools.islice(starts, 1, None), ends))


def _columns(spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The spans' starts and their ends."""
    return list(map(_START, spans)), list(map(_END, spans))


def covered(spans: Spans, lo: int, hi: int) -> int:
    """How much of [lo, hi) the sorted, disjoint ``spans`` cover."""
    if hi <= lo:
        return 0
    if isinstance(spans, SpanUnion):
        return spans.covered(lo, hi)
    k = max(0, bisect.bisect_right(spans, (lo,)) - 1)
    total = 0
    while k < len(spans) and spans[k][0] < hi:
        a, b = spans[k]
        total += max(0, min(b, hi) - max(a, lo))
        k += 1
    return total


class Coverage:
    """:func:`covered` of many windows over one union of spans: each window in two binary searches
    over the spans' starts and ends and a running total of their lengths, however many spans it
    holds, the searches of all the windows at once on int64 columns (:func:`covered` window by
    window when a window's time is beyond int64, which no trace's is). A union on disk is read a
    chunk at a time, each window's figures summed over the chunks."""

    __slots__ = ("parts", "spans")

    def __init__(self, spans: Spans) -> None:
        self.spans = SpanUnion.of(spans)
        # Per part of the union: its starts, ends and running lengths (None: read from disk).
        self.parts = None if self.spans.on_disk else [_with_lengths(*self.spans.columns())]

    def _parts(self) -> Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self.parts is not None:
            return self.parts
        return (_with_lengths(starts, ends) for starts, ends in self.spans.chunks())

    def within_all(self, lo: list[int], hi: list[int]) -> list[int]:
        """How much of each window [lo[k], hi[k]) the spans cover."""
        try:
            los, his = np.array(lo, np.int64), np.array(hi, np.int64)
        except OverflowError:
            spans = list(self.spans)  # measured as Python ints
            return [covered(spans, a, b) for a, b in zip(lo, hi, strict=True)]
        total = np.zeros(len(los), np.int64)
        for starts, ends, before in self._parts():
            total += _within(starts, ends, before, los, his)
        return total.tolist()

    def bounds_all(self, lo: list[int], hi: list[int]) -> tuple[list[int | None], list[int | None]]:
        """Per window [lo[k], hi[k]): where the spans' cover of it starts and where it ends (None
        for a window they do not reach); two binary searches per window, as :meth:`within_all`."""
        try:
            los, his = np.array(lo, np.int64), np.array(hi, np.int64)
        except OverflowError:
            return self._bounds_one_by_one(lo, hi)
        met_any = np.zeros(len(lo), bool)
        firsts = lasts = np.zeros(len(lo), np.int64)
        for starts, ends, _ in self._parts():
            if not len(starts):
                continue
            met, first, last = _reach(starts, ends, los, his)
            firsts = np.where(met & ~met_any, first, firsts)  # from the first part that meets the window
            lasts = np.where(met, last, lasts)  # to the last
            met_any = met_any | met
        return (
            [int(a) if ok else None for a, ok in zip(firsts.tolist(), met_any.tolist(), strict=True)],
            [int(b) if ok else None for b, ok in zip(lasts.tolist(), met_any.tolist(), strict=True)],
        )

    def _bounds_one_by_one(self, lo: list[int], hi: list[int]) -> tuple[list[int | None], list[int | None]]:
        """:meth:`bounds_all` window by window (a window's time beyond int64)."""
        spans = list(self.spans)
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        firsts: list[int | None] = []
        lasts: list[int | None] = []
        for a, b in zip(lo, hi, strict=True):
            i, j = bisect.bisect_right(ends, a), bisect.bisect_left(starts, b) - 1
            met = b > a and i < len(starts) and j >= i
            firsts.append(max(starts[i], a) if met else None)
            lasts.append(min(ends[j], b) if met else None)
        return firsts, lasts


def _with_lengths(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns, and the length of the spans before each (made in one column: a union may
    hold millions)."""
    before = np.zeros(len(starts) + 1, np.int64)
    np.subtract(ends, starts, out=before[1:])
    np.cumsum(before[1:], out=before[1:])
    return starts, ends, before


def _within(starts: np.ndarray, ends: np.ndarray, before: np.ndarray, los: np.ndarray, his: np.ndarray) -> np.ndarray:
    """How much of each window the columns cover (``before``: :func:`_with_lengths`)."""
    count = len(starts)
    first = np.searchsorted(ends, los, "right")  # the first span ending after lo
    stop = np.searchsorted(starts, his, "left")  # the first span starting at or after hi
    total = before[stop] - before[first]
    if count:
        total -= np.maximum(los - starts[np.minimum(first, count - 1)], 0)  # only the first begins before lo
        total -= np.maximum(ends[np.maximum(stop - 1, 0)] - his, 0)  # only the last ends after hi
    return np.where((his > los) & (first < stop), total, 0)


def _reach(
    starts: np.ndarray, ends: np.ndarray, los: np.ndarray, his: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window: whether the (non-empty) columns meet it, where their cover of it starts and
    where it ends."""
    count = len(starts)
    first = np.searchsorted(ends, los, "right")  # the first span ending after lo
    last = np.searchsorted(starts, his, "left") - 1  # the last starting before hi
    met = (his > los) & (first < count) & (last >= first)
    return met, np.maximum(starts[np.minimum(first, count - 1)], los), np.minimum(ends[np.maximum(last, 0)], his)


def intersection(x: Spans, y: Spans) -> SpanUnion:
    """The intersection of two unions of spans, in order.

    Each span of ``x`` meets the spans of ``y`` from the first ending after it starts to the last
    starting before it ends (two binary searches, their ends and starts being sorted alike); every
    such pair that overlaps is a span of the intersection. Done on columns: a merge in Python
    took a second a run of 64 ranks × 1,000 steps. Unions on disk are taken a chunk of each at a
    time, into a union that may spill too."""
    x, y = SpanUnion.of(x), SpanUnion.of(y)
    if x.on_disk or y.on_disk:
        out = SpanUnion(folder=x.folder or y.folder)
        for starts, ends in side_by_side(x.chunks(), y.chunks(), _intersected_pair):
            out.add_columns(starts, ends)
        return out
    (xs, xe), (ys, ye) = sorted((x.columns(), y.columns()), key=lambda c: len(c[0]))
    return SpanUnion(*_intersected(xs, xe, ys, ye))  # the search's columns as long as the shorter


def _intersected_pair(
    x: tuple[np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_intersected` of two chunks, searched from the shorter (the same spans, in order)."""
    return _intersected(*x, *y) if len(x[0]) <= len(y[0]) else _intersected(*y, *x)


def _intersected(xs: np.ndarray, xe: np.ndarray, ys: np.ndarray, ye: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans both sorted, disjoint column pairs cover: their starts and ends, in order."""
    if not len(xs) or not len(ys):
        return xs[:0], xs[:0]
    first = np.searchsorted(ye, xs, "right")
    counts = np.maximum(np.searchsorted(ys, xe, "left") - first, 0)
    xi = np.repeat(np.arange(len(xs)), counts)
    yi = np.repeat(first, counts) + ranks(counts)
    a, b = np.maximum(xs[xi], ys[yi]), np.minimum(xe[xi], ye[yi])
    keep = a < b
    return a[keep], b[keep]


class Breakdown(msgspec.Struct, frozen=True):
    """One process's numbers in one step (ns)."""

    wall: int
    compute: int
    communication: int
    overlapped: int
    free: int
    wait: int = 0
    preparing: int = 0
    closing: int = 0


def step_breakdowns(
    windows: list[tuple[int, int]], compute: Coverage, comm: Coverage, both: Coverage, waited: list[int]
) -> list[Breakdown]:
    """The numbers of each window (with its wait), of the unions of compute, communication and
    their intersection."""
    lo, hi = [a for a, _ in windows], [b for _, b in windows]
    found = zip(compute.within_all(lo, hi), comm.within_all(lo, hi), both.within_all(lo, hi), strict=True)
    reach = zip(*compute.bounds_all(lo, hi), *comm.bounds_all(lo, hi), strict=True)
    out = []
    for (a, b), (c, m, cm), wait, (fc, lc, fm, lm) in zip(windows, found, waited, reach, strict=True):
        busy = c + m - cm
        firsts, lasts = [x for x in (fc, fm) if x is not None], [x for x in (lc, lm) if x is not None]
        first, last = (min(firsts), max(lasts)) if firsts else (b, b)  # no device work: all free
        preparing, closing = (first - a, b - last) if firsts else (0, 0)
        out.append(Breakdown(b - a, c, m - cm, cm, (b - a) - busy - preparing - closing, wait, preparing, closing))
    return out


def waits(
    windows: dict[Identity, list[tuple[int, int, int]]], collectives: dict[Identity, list[tuple[int, int, str]]]
) -> dict[Identity, list[int]]:
    """Per process, per step window (``windows``: (step, start, end)), in order: the time from each
    of its collectives' start to the start of the last process of its role to enter the same
    collective (the k-th of a kind starting in each process's window of the step), summed. A step
    number a process has twice (two captures) is matched to the others' by its order."""
    out = {ident: [0] * len(found) for ident, found in windows.items()}
    # per collective: the start of each process in it, and where its wait is added (its list, its step)
    starts: dict[tuple, list[tuple[int, list[int], int]]] = defaultdict(list)
    for ident, found in windows.items():
        mine, waited, role = collectives.get(ident, []), out[ident], ident.role
        seen_steps: dict[int, int] = defaultdict(int)
        for w, (step, lo, hi) in enumerate(found):
            k = bisect.bisect_left(mine, (lo,))
            capture = seen_steps[step]
            seen: dict[str, int] = defaultdict(int)
            while k < len(mine) and mine[k][0] < hi:
                a, _, kind = mine[k]
                starts[(step, capture, role, kind, seen[kind])].append((a, waited, w))
                seen[kind] += 1
                k += 1
            seen_steps[step] += 1
    for members in starts.values():
        last = max(members, key=_START)[0]
        for a, waited, w in members:
            waited[w] += last - a
    return out


def worst(by_process: dict[Identity, list[tuple[int, Breakdown]]]) -> dict[str, Identity]:
    """Per role of two ranks or more, its worst rank: the one with the most time not computing
    (exposed communication, free, preparing and closing time) over its steps (the lowest rank on
    a tie)."""
    roles: dict[str, list[Identity]] = defaultdict(list)
    for ident in by_process:
        roles[ident.role].append(ident)
    out = {}
    for role, found in roles.items():
        if len(found) > 1:
            lost = {i: sum(b.wall - b.compute for _, b in by_process[i]) for i in found}
            out[role] = min(found, key=lambda i: (-lost[i], -1 if i.rank is None else i.rank, i.tag))
    return out


def whole_breakdowns(
    devices: dict[Identity, tuple[Spans, Spans]],
    scans: Iterable[object],
    offsets: dict,
) -> dict[Identity, Breakdown]:
    """Per process with device activity (``devices``: its compute and communication unions) and no
    steps: its numbers over its whole profiled time, from the first event of its files to the last
    (on the aligned timeline; widened to its device work where that reaches beyond)."""
    spans: dict[Identity, tuple[int, int]] = {}
    for s in scans:
        lo = getattr(s, "ts_min", None)
        if lo is None:
            continue
        shift = offsets.get(getattr(s, "path", None), 0)
        lo, hi = lo + shift, (getattr(s, "ts_max", None) or lo - shift) + shift
        for ident in {*(getattr(s, "counts", None) or {}), *(getattr(s, "threads", None) or {})} & devices.keys():
            a, b = spans.get(ident, (lo, hi))
            spans[ident] = (min(a, lo), max(b, hi))
    out = {}
    for ident, (compute_spans, comm_spans) in devices.items():
        compute, comm = SpanUnion.of(compute_spans), SpanUnion.of(comm_spans)
        work = [span for span in (*compute.outer(), *comm.outer()) if span[1] > span[0]]
        if not work:
            continue
        lo, hi = spans.get(ident, (min(a for a, _ in work), max(b for _, b in work)))
        window = (min(lo, *(a for a, _ in work)), max(hi, *(b for _, b in work)))
        unions = Coverage(compute), Coverage(comm), Coverage(intersection(compute, comm))
        out[ident] = step_breakdowns([window], *unions, [0])[0]
    return out
