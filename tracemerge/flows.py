"""Flows: bind each flow point to its slice and number the flows across the trace.

A point binds to the innermost slice enclosing it on its thread (or, for a Chrome ``f`` without
``bp: "e"``, to the next slice starting there). Points are grouped into chains (s, t..., f) by
source id. The result, per thread, is the attachments ``(start, -dur, kind, ordinal, flow id,
phase)`` of its slices, sorted like the thread's entries so that the layout's walk meets them in
order. Everything here may spill to disk (:mod:`tracemerge.spill`).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from tracemerge.model import FlowPhase, Identity, Kind, OriginKey, ThreadKey
from tracemerge.report import EventCounts
from tracemerge.select import TimeFilter
from tracemerge.spill import SortedBuffer, spill_over

if TYPE_CHECKING:
    from tracemerge.layout import FileLayout, LayoutResult

SLICE = int(Kind.SLICE)
START, STEP, END = int(FlowPhase.START), int(FlowPhase.STEP), int(FlowPhase.END)
FILTERED_FLOW = "flows with an end left out by --window/--min-dur"


def bind_flows(
    layout: FileLayout,
    ident: Callable[[OriginKey], Identity],
    result: LayoutResult,
    flow_id_base: int,
    times: TimeFilter | None,
    limit: int | None,
) -> dict[tuple[OriginKey, ThreadKey], SortedBuffer]:
    """Bind ``layout``'s flow points to its slices and number the flows from ``flow_id_base``;
    returns, per thread, the attachments of its slices. ``limit`` is how many flows the output
    format binds to one slice (None: any number); ``times`` drops flows with an end it leaves out.

    An id with a single start is one flow whatever the timestamps say (a device task can be
    stamped before the host call that launched it), and every end beyond the first fans out from
    that start (one launch, two kernels). Ids reused for several flows are paired in time order.
    """
    if not any(buf.total for buf in layout.points.values()):
        return {}
    store = layout.store
    # Every point with its binding, sortable by source id: (namespace, id type, int id, other
    # id, ts, phase, ordinal, thread, slice entry or None), where a namespace numbers an
    # (origin, cat, name). Ordinals are unique: nothing after them is ever compared.
    namespaces: dict[tuple, int] = {}
    origins: list[OriginKey] = []
    bound = SortedBuffer()
    add = bound.append
    for (origin, thread), pts in layout.points.items():
        if not pts.total:
            continue
        entries = layout.entries.get((origin, thread))
        slices = iter(entries.ordered(store)) if entries is not None else iter(())
        stack: list[tuple] = []
        upcoming = next(slices, None)
        while upcoming is not None and upcoming[2] != SLICE:
            upcoming = next(slices, None)
        for ts, phase, ordinal, key, bind_next in pts.ordered(store):
            # The stack holds the slices open at ``ts``, outermost first (a slice that ended
            # before the next one starts leaves it, so it stays as deep as the nesting).
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

    per_slice: Counter[int] = Counter()
    attached: dict[tuple[OriginKey, ThreadKey], SortedBuffer] = defaultdict(SortedBuffer)
    next_id = flow_id_base
    dropped = result.dropped
    counts: dict[int, tuple[EventCounts, EventCounts]] = {}
    fast = limit is None and times is None
    for (ns, *_), group in itertools.groupby(bound.ordered(store), key=_id_of):
        origin = origins[ns]
        found = counts.get(ns)
        if found is None:
            who = ident(origin)
            found = counts[ns] = (result.read[who], result.written[who])
        read, written = found
        records = list(group)
        if fast and len(records) == 2:
            # The common case, one start and one end (Kineto's ac2g): no chain to assemble.
            a, b = records
            if a[5] == START and b[5] == END:
                start_rec, end_rec = a, b
            elif b[5] == START and a[5] == END:
                start_rec, end_rec = b, a
            else:
                start_rec = None
            if start_rec is not None and start_rec[8] is not None and end_rec[8] is not None:
                read.flows += 1
                written.flows += 1
                next_id += 1
                source, target = start_rec[8], end_rec[8]
                if target[0] < source[0]:  # drawn from the earlier slice (host/device clock skew)
                    result.reversed_flows += 1
                    start_rec, end_rec, source, target = end_rec, start_rec, target, source
                attached[(origin, start_rec[7])].append((*source, next_id, START))
                attached[(origin, end_rec[7])].append((*target, next_id, END))
                if next_id & 0x3FFF == 0:
                    spill_over(attached.values(), layout.budget // 4, store)
                continue
        points = [(r[4], r[5], r[6], (r[7], r[8])) for r in records]  # ts, phase, ordinal, (thread, target)
        chains = _chains(points, dropped)
        for chain in chains:
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
            if limit is not None:
                if any(per_slice[t[1][3]] >= limit for t in kept):
                    dropped[f"flows beyond {limit} on one slice (the output format binds {limit})"] += 1
                    continue
                per_slice.update(t[1][3] for t in kept)
            next_id += 1
            if kept[0] is not first and kept[0][1][3] != first[1][3]:
                result.reversed_flows += 1
            last = len(kept) - 1
            for n, (thread, entry) in enumerate(kept):
                phase = START if n == 0 else END if n == last else STEP
                attached[(origin, thread)].append((*entry, next_id, phase))
            if next_id & 0x3FFF == 0:
                spill_over(attached.values(), layout.budget // 4, store)
            written.flows += last
    return attached


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
