"""Flows: bind each flow point to its slice and number the flows across the trace.

A point binds to the innermost slice enclosing it on its thread (or, for a Chrome ``f`` without
``bp: "e"``, to the next slice starting there: :mod:`tracemerge.flow_targets`). Points are
grouped into chains (s, t..., f) by source id. The result, per thread, is the attachments
``(start, -dur, kind, ordinal, flow id, phase)`` of its slices, sorted like the thread's entries
so that the layout's walk meets them in order. Everything here may spill to disk
(:mod:`tracemerge.spill`); a file held in memory whose flows have integer ids is bound and
numbered column-wise (:func:`_bind_columns`), with the same result.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from tracemerge.flow_targets import bound_points, searched_targets, slice_entries, slice_times, starts_of
from tracemerge.model import FlowPhase, Identity, Kind, OriginKey, ThreadKey
from tracemerge.report import EventCounts
from tracemerge.select import TimeFilter
from tracemerge.spill import RunStore, SortedBuffer, spill_over

if TYPE_CHECKING:
    from tracemerge.layout import FileLayout, LayoutResult

SLICE = int(Kind.SLICE)
START, STEP, END = int(FlowPhase.START), int(FlowPhase.STEP), int(FlowPhase.END)
FILTERED_FLOW = "flows with an end left out by --window/--min-dur"


class ThreadAttachments:
    """One thread's flow attachments as the column-wise binding leaves them: per attachment, the
    position of its slice in ``slices`` (the thread's slices, in order), its flow id and its phase,
    in the walk's order; with the slices' starts and negated durations. :meth:`ordered` gives the
    attachment tuples; the laminar walk takes the columns as they are."""

    __slots__ = ("at", "ids", "negdurs", "phases", "slices", "starts")

    def __init__(
        self,
        slices: list[tuple],
        starts: np.ndarray,
        negdurs: np.ndarray,
        at: np.ndarray,
        ids: np.ndarray,
        phases: np.ndarray,
    ) -> None:
        self.slices, self.starts, self.negdurs = slices, starts, negdurs
        self.at, self.ids, self.phases = at, ids, phases

    @property
    def total(self) -> int:
        return len(self.at)

    def ordered(self, store: RunStore | None = None) -> list[tuple]:
        """The attachments ``(start, -dur, kind, ordinal, flow id, phase)``, in order."""
        chosen = list(map(self.slices.__getitem__, self.at.tolist()))
        return list(
            zip(
                map(_start, chosen),
                map(_negdur, chosen),
                map(_kind, chosen),
                map(_entry_ordinal, chosen),
                self.ids.tolist(),
                self.phases.tolist(),
                strict=True,
            )
        )


Attached = dict[tuple[OriginKey, ThreadKey], "SortedBuffer | ThreadAttachments"]


def bind_flows(
    layout: FileLayout,
    ident: Callable[[OriginKey], Identity],
    result: LayoutResult,
    flow_id_base: int,
    times: TimeFilter | None,
) -> Attached:
    """Bind ``layout``'s flow points to its slices and number the flows from ``flow_id_base``;
    returns, per thread, the attachments of its slices. ``times`` drops flows with an end it
    leaves out.

    An id with a single start is one flow whatever the timestamps say (a device task can be
    stamped before the host call that launched it), and every end beyond the first fans out from
    that start (one launch, two kernels). Ids reused for several flows are paired in time order.
    """
    if not any(buf.total for buf in layout.points.values()):
        return {}
    numbering = _Numbering(layout, ident, result, flow_id_base, times)
    if times is None:  # with a selection, flows with an end left out go point by point
        columns = _columns(layout)
        if columns is not None:
            _bind_columns(numbering, columns)
            return numbering.attached
    store = layout.store
    # Every point with its binding, sortable by source id: (namespace, id type, int id, other
    # id, ts, phase, ordinal, thread, slice entry or None), where a namespace numbers an
    # (origin, cat, name). Ordinals are unique: nothing after them is ever compared.
    namespaces: dict[tuple, int] = {}
    origins = numbering.origins
    bound = SortedBuffer()
    add = bound.append
    for (origin, thread), pts in layout.points.items():
        if not pts.total:
            continue
        entries = layout.entries.get((origin, thread))
        for (ts, phase, ordinal, key, _), target in bound_points(entries, pts, store, layout.budget):
            cat, name, fid = key if type(key) is tuple and len(key) == 3 else ("", "", key)
            ns = namespaces.get((origin, cat, name))
            if ns is None:
                ns = namespaces[(origin, cat, name)] = len(origins)
                origins.append(origin)
            if type(fid) is int:
                add((ns, 0, fid, "", ts, phase, ordinal, thread, target and target[:4]))
            else:
                add((ns, 1, 0, repr(fid), ts, phase, ordinal, thread, target and target[:4]))
            if len(bound) > layout.budget // 4:
                bound.spill(store)
    for (ns, *_), group in itertools.groupby(bound.ordered(store), key=_id_of):
        numbering.group(ns, list(group))
    return numbering.attached


class _Numbering:
    """Turns groups of points sharing an id into numbered flows attached to their slices."""

    def __init__(
        self,
        layout: FileLayout,
        ident: Callable[[OriginKey], Identity],
        result: LayoutResult,
        flow_id_base: int,
        times: TimeFilter | None,
    ) -> None:
        self.layout, self.ident, self.result = layout, ident, result
        self.times = times
        self.next_id = flow_id_base
        self.origins: list[OriginKey] = []  # per namespace
        self.counts: dict[int, tuple[EventCounts, EventCounts]] = {}
        self.attached: Attached = defaultdict(SortedBuffer)

    def counts_of(self, ns: int) -> tuple[EventCounts, EventCounts]:
        """The read and written counts of a namespace's process."""
        found = self.counts.get(ns)
        if found is None:
            who = self.ident(self.origins[ns])
            found = self.counts[ns] = (self.result.read[who], self.result.written[who])
        return found

    def _spill(self) -> None:
        if self.next_id & 0x3FFF == 0:
            spill_over(self.attached.values(), self.layout.budget // 4, self.layout.store)

    def group(self, ns: int, records: list[tuple]) -> None:
        """One id's records ``(ns, id type, int id, other id, ts, phase, ordinal, thread, slice)``."""
        if self.times is None and len(records) == 2 and self._pair(ns, *records):
            return
        self._chains(ns, records)

    def _pair(self, ns: int, a: tuple, b: tuple) -> bool:
        """The common case, one start and one end (Kineto's ac2g): no chain to assemble."""
        if a[5] == START and b[5] == END:
            start_rec, end_rec = a, b
        elif b[5] == START and a[5] == END:
            start_rec, end_rec = b, a
        else:
            return False
        if start_rec[8] is None or end_rec[8] is None:
            return False
        read, written = self.counts_of(ns)
        read.flows += 1
        written.flows += 1
        self.next_id += 1
        source, target = start_rec[8], end_rec[8]
        if target[0] < source[0]:  # drawn from the earlier slice (host/device clock skew)
            self.result.reversed_flows += 1
            start_rec, end_rec, source, target = end_rec, start_rec, target, source
        origin = self.origins[ns]
        self.attached[(origin, start_rec[7])].append((*source, self.next_id, START))
        self.attached[(origin, end_rec[7])].append((*target, self.next_id, END))
        self._spill()
        return True

    def _chains(self, ns: int, records: list[tuple]) -> None:
        origin = self.origins[ns]
        read, written = self.counts_of(ns)
        result, dropped, times = self.result, self.result.dropped, self.times
        points = [(r[4], r[5], r[6], (r[7], r[8])) for r in records]  # ts, phase, ordinal, (thread, target)
        for chain in _chains(points, dropped):
            read.flows += len(chain) - 1
            kept = [p[3] for p in chain if p[3][1] is not None]
            if len(kept) < len(chain):
                dropped["flow point outside any slice on its thread"] += len(chain) - len(kept)
                if len(kept) < 2:
                    if kept:
                        dropped["flow left with one endpoint after binding"] += 1
                    continue
            if times is not None and not all(times.keeps_slice(t[1][0], -t[1][1]) for t in kept):
                result.filtered[FILTERED_FLOW] += 1
                continue
            first = kept[0]
            # Perfetto links flow points in time order; a flow whose end is stamped before its
            # start (clock skew between host and device) is drawn from the earlier slice.
            kept.sort(key=_slice_start)
            self.next_id += 1
            if kept[0] is not first and kept[0][1][3] != first[1][3]:
                result.reversed_flows += 1
            last = len(kept) - 1
            for n, (thread, entry) in enumerate(kept):
                phase = START if n == 0 else END if n == last else STEP
                self.attached[(origin, thread)].append((*entry, self.next_id, phase))
            self._spill()
            written.flows += last


def _id_of(record: tuple) -> tuple:
    return record[:4]


def _slice_start(target: tuple) -> int:
    return target[1][0]


def _chains(points: list[tuple], dropped: Counter[str]) -> list[list[tuple]]:
    """Group one id's flow points ``(ts, phase, ordinal, ...)``, in time order, into chains."""
    chains: list[list[tuple]] = []
    starts = [p for p in points if p[1] == START]
    if len(starts) == 1:
        start = starts[0]
        steps = [p for p in points if p[1] == STEP]
        ends = [p for p in points if p[1] == END]
        chains.append([start, *steps, *ends[:1]])
        chains.extend([start, e] for e in ends[1:])
    else:
        current: list[tuple] | None = None
        last_start: tuple | None = None
        for p in points:
            if p[1] == START:
                if current is not None:
                    chains.append(current)
                current, last_start = [p], p
            elif current is not None:
                current.append(p)
                if p[1] == END:
                    chains.append(current)
                    current = None
            elif last_start is not None and p[1] == END:
                chains.append([last_start, p])
            else:
                dropped["flow step/end without a start"] += 1
        if current is not None:
            chains.append(current)
    kept = []
    for chain in chains:
        if len(chain) < 2:
            dropped["flow start without an end"] += 1
        else:
            kept.append(chain)
    return kept


_kind, _start, _negdur, _phase, _ordinal, _key = (itemgetter(i) for i in (2, 0, 1, 1, 2, 3))
_cat, _name, _fid, _pair_of = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(0, 1)


# -- the column-wise path -----------------------------------------------------------------------


class _Columns:
    """Every flow point of a file as columns, and the slices they bind to."""

    def __init__(self) -> None:
        self.threads: list[tuple[OriginKey, ThreadKey]] = []
        self.slices: list[tuple] = []  # what points bind to: their threads' slices, one list
        # Per thread: its slices, their starts and negated durations, and where they begin in ``slices``.
        self.thread_slices: list[tuple[list[tuple], np.ndarray, np.ndarray, int]] = []
        self.origins: list[OriginKey] = []  # per namespace
        self.parts: dict[str, list[np.ndarray]] = defaultdict(list)

    def add(self, name: str, values: np.ndarray) -> None:
        self.parts[name].append(values)

    def take(self, name: str) -> np.ndarray:
        """One column, whole; its parts are let go."""
        return np.concatenate(self.parts.pop(name))


def _columns(layout: FileLayout) -> _Columns | None:
    """The file's flow points as columns, or None when they cannot be: something spilled, an id
    that is not an int64, a key not ``(cat, name, id)``, a time beyond int64."""
    store = layout.store
    columns = _Columns()
    namespaces: dict[tuple, int] = {}
    try:
        for (origin, thread), pts in layout.points.items():
            if not pts.total:
                continue
            entries = layout.entries.get((origin, thread))
            if pts.runs or (entries is not None and entries.runs):
                return None
            points = pts.ordered(store)
            keys = list(map(_key, points))
            if set(map(type, keys)) != {tuple} or set(map(len, keys)) != {3}:
                return None
            fids = list(map(_fid, keys))
            if set(map(type, fids)) != {int}:
                return None
            slices = slice_entries(entries.ordered(store)) if entries is not None else []
            (starts, negdurs), ts = slice_times(slices), starts_of(points)
            found = searched_targets(slices, starts, negdurs, points, ts)
            columns.add("target", np.where(found < len(slices), found + len(columns.slices), -1))
            columns.thread_slices.append((slices, starts, negdurs, len(columns.slices)))
            columns.slices.extend(slices)
            n = len(points)
            columns.add("ns", _namespaces(namespaces, columns.origins, origin, keys))
            columns.add("fid", np.fromiter(fids, np.int64, n))
            columns.add("ts", ts)
            columns.add("phase", np.fromiter(map(_phase, points), np.int64, n))
            columns.add("ordinal", np.fromiter(map(_ordinal, points), np.int64, n))
            columns.add("thread", np.full(n, len(columns.threads), np.int64))
            columns.threads.append((origin, thread))
    except OverflowError:
        return None
    return columns


def _namespaces(
    namespaces: dict[tuple, int], origins: list[OriginKey], origin: OriginKey, keys: list[tuple]
) -> np.ndarray:
    """Each key's namespace, numbered in order of first appearance."""
    if len(set(map(_cat, keys))) == 1 and len(set(map(_name, keys))) == 1:  # one (cat, name) on the thread, as usual
        pairs = [keys[0][:2]]
    else:
        pairs = list(dict.fromkeys(map(_pair_of, keys)))
    local = {}
    for cat, name in pairs:
        ns = namespaces.get((origin, cat, name))
        if ns is None:
            ns = namespaces[(origin, cat, name)] = len(origins)
            origins.append(origin)
        local[(cat, name)] = ns
    if len(local) == 1:
        return np.full(len(keys), ns, np.int64)
    return np.fromiter(map(local.__getitem__, map(_pair_of, keys)), np.int64, len(keys))


def _bind_columns(numbering: _Numbering, columns: _Columns) -> None:
    """What :func:`bind_flows` does point by point, on columns: points sorted by id, each pair of
    one start and one end numbered and attached at once, every other id through
    :meth:`_Numbering.group` in its turn."""
    numbering.origins = columns.origins
    names = ("ns", "fid", "ts", "phase", "ordinal", "thread", "target")
    cols = [columns.take(name) for name in names]
    order = np.lexsort(cols[4::-1])  # by namespace, id, time, phase, ordinal
    ns, fid, ts, phase, ordinal, thread, target = (c[order] for c in cols)
    del cols, order  # the columns unsorted: not needed again
    n = len(ns)
    new = np.ones(n, bool)
    new[1:] = (ns[1:] != ns[:-1]) | (fid[1:] != fid[:-1])
    firsts = np.flatnonzero(new)
    sizes = np.diff(np.append(firsts, n))
    a, b = firsts, np.minimum(firsts + 1, n - 1)
    a_starts = (phase[a] == START) & (phase[b] == END)
    b_starts = (phase[b] == START) & (phase[a] == END)
    paired = (sizes == 2) & (a_starts | b_starts) & (target[a] >= 0) & (target[b] >= 0)
    for space in np.unique(ns).tolist():  # touched in the order the point-wise path touches them
        numbering.counts_of(space)
    extra = _number_others(numbering, columns, firsts, sizes, paired, (ns, fid, ts, phase, ordinal, thread, target))
    src = np.where(a_starts, a, b)[paired]
    dst = np.where(a_starts, b, a)[paired]
    slice_starts = np.concatenate([starts for _, starts, _, _ in columns.thread_slices])
    drawn_back = slice_starts[target[dst]] < slice_starts[target[src]]  # host/device clock skew
    src, dst = np.where(drawn_back, dst, src), np.where(drawn_back, src, dst)
    numbering.result.reversed_flows += int(drawn_back.sum())
    ids = numbering.next_id + np.arange(1, len(src) + 1) + extra[paired]
    for space, count in enumerate(np.bincount(ns[firsts[paired]]).tolist()):
        if count:
            read, written = numbering.counts_of(space)
            read.flows += count
            written.flows += count
    _attach(
        numbering.attached,
        columns,
        np.concatenate([thread[src], thread[dst]]),
        np.concatenate([target[src], target[dst]]),
        np.concatenate([ids, ids]),
        np.repeat(np.array([START, END], np.int64), len(src)),
    )


def _number_others(
    numbering: _Numbering,
    columns: _Columns,
    firsts: np.ndarray,
    sizes: np.ndarray,
    paired: np.ndarray,
    cols: tuple[np.ndarray, ...],
) -> np.ndarray:
    """Runs every id that is not a simple pair through :meth:`_Numbering.group`, in order, each
    numbered after the pairs and others before it; returns, per id, how many flow ids the
    others before it took."""
    base = numbering.next_id
    pairs_before = np.cumsum(paired) - paired
    took = np.zeros(len(firsts), np.int64)
    taken = 0
    slices, threads = columns.slices, columns.threads
    for g in np.flatnonzero(~paired).tolist():
        numbering.next_id = base + int(pairs_before[g]) + taken
        lo, hi = int(firsts[g]), int(firsts[g] + sizes[g])
        records = [
            (space, 0, flow_id, "", t, p, o, threads[th][1], slices[at][:4] if at >= 0 else None)
            for space, flow_id, t, p, o, th, at in zip(*(c[lo:hi].tolist() for c in cols), strict=True)
        ]
        numbering.group(records[0][0], records)
        took[g] = numbering.next_id - base - int(pairs_before[g]) - taken
        taken += int(took[g])
    numbering.next_id = base
    return np.cumsum(took) - took


def _attach(
    attached: Attached, columns: _Columns, thread: np.ndarray, target: np.ndarray, ids: np.ndarray, phase: np.ndarray
) -> None:
    """Adds attachments given as columns to each thread, in the thread's entry order: as
    :class:`ThreadAttachments`, or as tuples beside those the point-wise numbering added."""
    order = np.lexsort((phase, ids, target, thread))
    thread, target, ids, phase = thread[order], target[order], ids[order], phase[order]
    bounds = np.flatnonzero(np.diff(thread)) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(thread)], strict=True):
        if lo == hi:
            continue
        n = int(thread[lo])
        slices, starts, negdurs, first = columns.thread_slices[n]
        found = ThreadAttachments(slices, starts, negdurs, target[lo:hi] - first, ids[lo:hi], phase[lo:hi])
        key = columns.threads[n]
        if key in attached:
            attached[key].extend(found.ordered())
        else:
            attached[key] = found


_entry_ordinal = itemgetter(3)
