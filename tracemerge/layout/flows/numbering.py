"""Flows: bind each flow point to its slice and number the flows across the trace.

A point binds to the innermost slice enclosing it on its thread (or, for a Chrome ``f`` without
``bp: "e"``, to the next slice starting there): :mod:`tracemerge.layout.flows.binding`. Points are then
grouped by source id, on columns: an id with one start and one end (Kineto's ac2g) is a flow at
once; any other id's points are assembled into chains (s, t..., f) one by one. The result, per
thread, is the attachments of its slices: the slice's ordinal, the flow's trace-wide id and the
point's phase.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

import numpy as np

from tracemerge.core.model import FlowPhase, Identity, OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.layout.flows.attachments import Attachments, AttachmentsOnDisk, Part, ThreadAttachments, joined
from tracemerge.layout.flows.binding import Points, PointsInOrder, bound_points, bound_threads
from tracemerge.layout.flows.point_runs import PointRuns, one_key
from tracemerge.layout.nesting import SLICE
from tracemerge.layout.types import LayoutResult
from tracemerge.report.run_report import EventCounts
from tracemerge.select import TimeFilter
from tracemerge.store.entries import PointKeys, ThreadEntries, distinct, equal_runs
from tracemerge.store.spill import RunStore

START, STEP, END = int(FlowPhase.START), int(FlowPhase.STEP), int(FlowPhase.END)


Attached = Mapping[tuple[OriginKey, ThreadKey], ThreadAttachments]

# Flow points numbered at once: a file with more binds each thread's points to the run file and
# numbers them a range of ids at a time, its attachments kept there until their thread is walked.
FLOW_POINTS_IN_MEMORY = 1 << 20


def bind_flows(
    threads: PointsInOrder,
    entries: dict[tuple[OriginKey, ThreadKey], ThreadEntries],
    point_keys: PointKeys,
    runs: RunStore,
    ident: Callable[[OriginKey], Identity],
    result: LayoutResult,
    flow_id_base: int,
    times: TimeFilter | None,
) -> Attached:
    """Bind each thread's flow points to its slices (``entries``, their spilled parts in ``runs``)
    and number the flows from ``flow_id_base``; returns, per thread, the attachments of its
    slices. ``times`` drops flows with an end it leaves out.

    An id with a single start is one flow whatever the timestamps say (a device task can be
    stamped before the host call that launched it), and every end beyond the first fans out from
    that start (one launch, two kernels). Ids reused for several flows are paired in time order.
    """

    def numbering_of(found: Points) -> _Numbering:
        return _Numbering(ident, result, flow_id_base, times, found.origins, found.threads)

    with_durations = times is not None
    if sum(pts.total for _, pts in threads) > FLOW_POINTS_IN_MEMORY:
        return _bind_on_disk(threads, entries, point_keys, runs, with_durations, numbering_of)
    points = bound_points(threads, entries, point_keys, runs, with_durations)
    if points is None:
        return {}
    numbering = numbering_of(points)
    numbering.number(points)
    return numbering.attachments()


def _bind_on_disk(
    threads: PointsInOrder,
    entries: dict[tuple[OriginKey, ThreadKey], ThreadEntries],
    point_keys: PointKeys,
    runs: RunStore,
    with_durations: bool,
    numbering_of: Callable[[Points], _Numbering],
) -> Attached:
    """:func:`bind_flows` with each thread's points bound to ``runs`` and numbered a range of ids
    at a time, in the order of the ids (the flows numbered as all at once would)."""
    for _, pts in threads:  # every id that is not an int64 numbered before any is ranked by its text
        pts.sealed()
    found = Points()
    spilled = PointRuns(runs, point_keys, FLOW_POINTS_IN_MEMORY)
    for columns in bound_threads(threads, entries, point_keys, runs, with_durations, found):
        spilled.add(columns)
    if not found.threads:
        return {}
    numbering = numbering_of(found)
    if not spilled.fits:  # ids beyond one int64 key: numbered all at once, as they are rare
        numbering.number(spilled.load_all())
        return numbering.attachments()
    for space in range(len(found.origins)):  # each namespace's counts made in order
        numbering.counts_of(space)
    on_disk = AttachmentsOnDisk(runs, found.threads)
    for lo, hi in spilled.ranges():
        points = spilled.load(lo, hi)
        if points is not None:
            numbering.number(points)
            for thread, kind, part in numbering.parts():
                on_disk.add(thread, kind, part)
    return on_disk


def _id_keys(points: Points) -> list[np.ndarray]:
    """Sort keys of the points' ids, least significant first: namespace, kind of id and id as
    one int64 where they fit in it, else apart."""
    fid, kind, ns = (points.take(name, keep=True) for name in ("fid", "fid_kind", "ns"))
    key = one_key(fid, kind, ns)
    return [fid, kind, ns] if key is None else [key]


class _Numbering:
    """Turns groups of points sharing an id into numbered flows attached to their slices."""

    def __init__(
        self,
        ident: Callable[[OriginKey], Identity],
        result: LayoutResult,
        flow_id_base: int,
        times: TimeFilter | None,
        origins: list[OriginKey],
        threads: list[tuple[OriginKey, ThreadKey]],
    ) -> None:
        self.ident, self.result = ident, result
        self.times = times
        self.next_id = flow_id_base
        self.origins = origins  # per namespace
        self.threads = threads
        self.counts: dict[int, tuple[EventCounts, EventCounts]] = {}
        # Attachments made one at a time, per thread: (slice ordinal, flow id, phase).
        self.singles: dict[tuple[OriginKey, ThreadKey], list[tuple[int, int, int]]] = defaultdict(list)
        self.columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def counts_of(self, ns: int) -> tuple[EventCounts, EventCounts]:
        """The read and written counts of a namespace's process."""
        found = self.counts.get(ns)
        if found is None:
            who = self.ident(self.origins[ns])
            found = self.counts[ns] = (self.result.read[who], self.result.written[who])
        return found

    def number(self, points: Points) -> None:
        """Every id's points, sorted by id: each pair of one start and one end numbered and
        attached at once, every other id through :meth:`group` in its turn (its points in time
        order). Only the ids and phases are sorted; the rest is looked up through the order."""
        keys = _id_keys(points)
        order = np.argsort(keys[0], kind="stable") if len(keys) == 1 else np.lexsort(keys)
        new = np.zeros(len(order), bool)
        new[:1] = True
        for key in keys:
            ordered = key[order]
            new[1:] |= ordered[1:] != ordered[:-1]
        del keys, ordered
        cols = {name: points.take(name) for name in list(points.parts)}
        phase, ns, target = cols["phase"], cols["ns"], cols["target"]
        n = len(order)
        firsts = np.flatnonzero(new)
        del new
        sizes = np.diff(np.append(firsts, n))
        a, b = order[firsts], order[np.minimum(firsts + 1, n - 1)]  # each id's first two points
        a_starts = (phase[a] == START) & (phase[b] == END)
        b_starts = (phase[b] == START) & (phase[a] == END)
        paired = (sizes == 2) & (a_starts | b_starts) & (target[a] >= 0) & (target[b] >= 0)
        if self.times is not None:
            paired[:] = False  # flows with an end the selection leaves out go through the chains
        for space in distinct(ns).tolist():  # each namespace's counts made in order
            self.counts_of(space)
        extra, others = self._number_others(firsts, sizes, paired, order, cols)
        src = np.where(a_starts, a, b)[paired]
        dst = np.where(a_starts, b, a)[paired]
        del a, b, a_starts, b_starts, order
        t_start = cols["target_start"]
        drawn_back = t_start[dst] < t_start[src]  # host/device clock skew
        src, dst = np.where(drawn_back, dst, src), np.where(drawn_back, src, dst)
        self.result.reversed_flows += int(drawn_back.sum())
        ids = self.next_id + np.arange(1, len(src) + 1) + extra[paired]
        for space, count in enumerate(np.bincount(ns[src]).tolist()):
            if count:
                read, written = self.counts_of(space)
                read.flows += count
                written.flows += count
        thread = cols["thread"]
        for ends, phase_there in ((src, START), (dst, END)):
            self.columns.append((thread[ends], target[ends], ids, np.full(len(ends), phase_there, np.int8)))
        self.next_id += len(src) + others  # the next range of ids numbers on from here

    def _number_others(
        self, firsts: np.ndarray, sizes: np.ndarray, paired: np.ndarray, order: np.ndarray, cols: dict
    ) -> tuple[np.ndarray, int]:
        """Runs every id that is not a simple pair through :meth:`group`, in order, each numbered
        after the pairs and others before it; returns, per id, how many flow ids the others
        before it took, and how many they took in all."""
        base = self.next_id
        pairs_before = np.cumsum(paired) - paired
        took = np.zeros(len(firsts), np.int64)
        taken = 0
        names = ("ns", "ts", "phase", "thread", "target", "target_start")
        for g in np.flatnonzero(~paired).tolist():
            self.next_id = base + int(pairs_before[g]) + taken
            rows = order[int(firsts[g]) : int(firsts[g] + sizes[g])]
            ns, ts, phase, thread, target, t_start = (cols[name][rows].tolist() for name in names)
            negdurs = cols["target_negdur"][rows].tolist() if "target_negdur" in cols else [0] * len(rows)
            # In time order, then phase; points tied in both stay in the order of their threads.
            records = sorted(
                (
                    (
                        ns[i],
                        ts[i],
                        phase[i],
                        i,
                        thread[i],
                        (t_start[i], negdurs[i], SLICE, target[i]) if target[i] >= 0 else None,
                    )
                    for i in range(len(rows))
                ),
                key=_time_and_phase,
            )
            self.group(ns[0], records)
            took[g] = self.next_id - base - int(pairs_before[g]) - taken
            taken += int(took[g])
        self.next_id = base
        return np.cumsum(took) - took, taken

    def group(self, ns: int, records: list[tuple]) -> None:
        """One id's records ``(ns, ts, phase, place, thread, target)``, in time order (``place``
        orders records tied in time and phase)."""
        dropped, times = self.result.dropped, self.times
        read, written = self.counts_of(ns)
        points = [(r[1], r[2], r[3], (r[4], r[5])) for r in records]  # ts, phase, ordinal, (thread, target)
        for chain in _chains(points, dropped):
            read.flows += len(chain) - 1
            kept = [p[3] for p in chain if p[3][1] is not None]
            if len(kept) < len(chain):
                dropped.add(Stat.FLOW_UNBOUND, len(chain) - len(kept), "flow point outside any slice on its thread")
                if len(kept) < 2:
                    if kept:
                        dropped.add(Stat.FLOW_UNBOUND, 1, "flow left with one endpoint after binding")
                    continue
            if times is not None and not all(times.keeps_slice(t[1][0], -t[1][1]) for t in kept):
                self.result.filtered[Stat.FILTERED_FLOW_END] += 1
                continue
            first = kept[0]
            # Perfetto links flow points in time order; a flow whose end is stamped before its
            # start (clock skew between host and device) is drawn from the earlier slice.
            kept.sort(key=_slice_start)
            self.next_id += 1
            if kept[0] is not first and kept[0][1][3] != first[1][3]:
                self.result.reversed_flows += 1
            last = len(kept) - 1
            for n, (thread, entry) in enumerate(kept):
                phase = START if n == 0 else END if n == last else STEP
                self.singles[self.threads[thread]].append((entry[3], self.next_id, phase))
            written.flows += last

    def parts(self) -> list[tuple[int, int, Part]]:
        """Every attachment made since last asked, per thread index: the pairs' starts (kind 0),
        their ends (1) and those made one at a time (2), each in the order numbered."""
        found: list[tuple[int, int, Part]] = []
        for kind, (thread, target, ids, phases) in enumerate(self.columns):
            order = np.argsort(thread, kind="stable")
            thread, target, ids, phases = thread[order], target[order], ids[order], phases[order]
            for lo, hi in equal_runs(thread):
                found.append((int(thread[lo]), kind, (target[lo:hi], ids[lo:hi], phases[lo:hi])))
        index = {key: n for n, key in enumerate(self.threads)}
        for key, singles in self.singles.items():
            columns = np.array(singles, np.int64).reshape(-1, 3).T
            found.append((index[key], 2, (columns[0], columns[1], columns[2].astype(np.int8))))
        self.columns.clear()
        self.singles.clear()
        return found

    def attachments(self) -> Attached:
        """Per thread, every attachment made, in (slice ordinal, flow id, phase) order."""
        per_thread: dict[int, list[Part]] = defaultdict(list)
        for thread, _, part in self.parts():
            per_thread[thread].append(part)
        found: dict[tuple[OriginKey, ThreadKey], Attachments] = {}
        for n, parts in per_thread.items():
            # One part: pairs in id order, one phase, or singles in the order made.
            found[self.threads[n]] = joined(parts, len(parts) == 1)
            del parts[:]
        return found


def _time_and_phase(record: tuple) -> tuple[int, int, int]:
    return record[1], record[2], record[3]


def _slice_start(target: tuple) -> int:
    return target[1][0]


def _chains(points: list[tuple], dropped: Losses) -> list[list[tuple]]:
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
                dropped.add(Stat.FLOW_END_WITHOUT_START, 1, "flow step/end without a start")
        if current is not None:
            chains.append(current)
    kept = []
    for chain in chains:
        if len(chain) < 2:
            dropped.add(Stat.FLOW_START_WITHOUT_END, 1, "flow start without an end")
        else:
            kept.append(chain)
    return kept
