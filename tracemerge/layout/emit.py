"""Lay one file's stored events out on the merged trace's tracks and feed them to its encoder.

:func:`lay_out` works each thread of an :class:`~tracemerge.store.event_store.EventStore` out on its
columns (:mod:`tracemerge.layout.nesting`): the walk's order (start, longer first, file order), the
overlap lanes of slices that do not nest (Perfetto would otherwise re-nest or drop them), and the
flows bound to each slice (:mod:`tracemerge.layout.flows.numbering`), and hands each thread to the encoder in the
three parts Perfetto's sort needs (:mod:`tracemerge.layout.thread_walk`); counter samples follow.
:func:`finish` is the end of a file's read: its events laid out, its run file closed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

from tracemerge.core.model import Identity, OriginKey
from tracemerge.core.stats import Stat
from tracemerge.layout.flows.numbering import Attached, bind_flows
from tracemerge.layout.thread_walk import ThreadWalk
from tracemerge.layout.types import Encoder, LayoutResult, Tracks
from tracemerge.select import TimeFilter
from tracemerge.store.event_store import EventStore, threads_in_order

Ident = Callable[[OriginKey], Identity]


def lay_out(
    events: EventStore,
    identity_of: Ident,
    tracks: Tracks,
    ts_shift: int | None,
    flow_id_base: int,
    keep: Callable[[Identity], bool] | None = None,
    times: TimeFilter | None = None,
    summary_only: bool = False,
) -> LayoutResult:
    """Emit every track of ``events`` in order; timestamps are written as ``ts + ts_shift``.

    ``ts_shift`` None writes them relative to the file's earliest timestamp (``ts_min``).
    Processes ``keep`` rejects and events ``times`` rejects are left out and counted in
    ``result.filtered``. ``summary_only`` emits nothing and says only which tracks there are
    and the time range (what a plan needs).
    """
    result = LayoutResult()
    ident = _cached(identity_of)
    spans = [entries.span() for entries in events.entries.values() if entries.total]
    firsts = [lo for lo, _ in spans] + [
        earliest[0] for buf in events.samples.values() if buf.total and (earliest := buf.smallest()) is not None
    ]
    if not firsts:
        return result
    result.ts_min = min(firsts)
    shift = -result.ts_min if ts_shift is None else ts_shift
    if keep is not None:
        _leave_out(events, ident, keep, result)
    if summary_only:
        return _summary(events, ident, result)
    if events.store.size or events.parts_taken:  # too large to hold: what is still held goes too, to make room
        events.check_memory(0)
    attached = bind_flows(
        threads_in_order(events.points),
        events.entries,
        events.point_keys,
        events.store,
        ident,
        result,
        flow_id_base,
        times,
    )
    hi = _threads(events, ident, tracks, attached, shift, result, times)
    hi = max(hi, _counters(events, ident, tracks, shift, result, times))
    for who, counts in result.written.items():
        read = result.read[who]  # holds what the selection left out so far
        read.slices += counts.slices
        read.instants += counts.instants
        read.counters += counts.counters
    result.ts_max = hi
    return result


def finish(
    events: EventStore,
    identity_of: Ident,
    tracks: Tracks,
    ts_shift: int | None,
    flow_id_base: int,
    keep: Callable[[Identity], bool] | None = None,
    times: TimeFilter | None = None,
    summary_only: bool = False,
) -> LayoutResult:
    """Lay a file's events out (:func:`lay_out`), then close its run file."""
    try:
        return lay_out(events, identity_of, tracks, ts_shift, flow_id_base, keep, times, summary_only)
    finally:
        events.store.close()


def _cached(identity_of: Ident) -> Ident:
    """``identity_of``, asked once per origin."""
    idents: dict[OriginKey, Identity] = {}

    def ident(origin: OriginKey) -> Identity:
        found = idents.get(origin)
        if found is None:
            found = idents[origin] = identity_of(origin)
        return found

    return ident


def _threads(
    events: EventStore,
    ident: Ident,
    tracks: Tracks,
    attached: Attached,
    shift: int,
    result: LayoutResult,
    times: TimeFilter | None,
) -> int:
    """Every thread's slices and instants, in the order the threads were first met; returns the
    latest time (at least ``result.ts_min``)."""
    enc = cast(Encoder, events.enc)  # a store laid out was filled through the writer's encoder
    in_order = threads_in_order(events.entries)
    busiest = max(in_order, key=lambda item: item[1].total, default=None)
    if busiest is not None and busiest[1].total:
        (origin, thread), _ = busiest
        enc.default_track(tracks.thread(ident(origin), thread).uuid)
    assert result.ts_min is not None
    hi = result.ts_min
    for (origin, thread), entries in in_order:
        if not entries.total:
            continue
        who = ident(origin)
        result.threads[who].add(thread)
        track = tracks.thread(who, thread)
        # Read once the walk needs them: a thread's attachments (on the run file for a file of many
        # flows) need not be held while its first run's lanes are worked out.
        attachments = partial(attached.get, (origin, thread))
        walk = ThreadWalk(enc, events.store, events.part_prefixes, entries, track, attachments, shift, result, who)
        hi = max(hi, walk.run(times))
    return hi


def _counters(
    events: EventStore, ident: Ident, tracks: Tracks, shift: int, result: LayoutResult, times: TimeFilter | None
) -> int:
    """Every counter series' samples; returns the latest time (at least ``result.ts_min``)."""
    counter = cast(Encoder, events.enc).counter
    store = events.store
    assert result.ts_min is not None
    hi = result.ts_min
    for (origin, thread, name), samples in events.samples.items():
        if not samples.total:
            continue
        who = ident(origin)
        result.counter_series[who].add((thread, name))
        track = tracks.counter(who, thread, name)
        ts = written = 0
        for ts, _, value in samples.ordered(store):
            if times is not None and not times.keeps_point(ts):
                result.filtered[Stat.FILTERED_OUTSIDE_WINDOW] += 1
                result.read[who].counters += 1
                continue
            counter(track, ts + shift, value)
            written += 1
        result.written[who].counters += written
        hi = max(hi, ts)
    return hi


def _summary(events: EventStore, ident: Ident, result: LayoutResult) -> LayoutResult:
    """The tracks and the time range, without laying anything out."""
    assert result.ts_min is not None
    hi = result.ts_min
    for (origin, thread), entries in threads_in_order(events.entries):
        if entries.total:
            result.threads[ident(origin)].add(thread)
            hi = max(hi, entries.span()[1])
    for (origin, thread, name), samples in events.samples.items():
        if samples.total:
            result.counter_series[ident(origin)].add((thread, name))
            hi = max(hi, max(ts for ts, *_ in samples.ordered(events.store)))
    result.ts_max = hi
    return result


def _leave_out(events: EventStore, ident: Ident, keep: Callable[[Identity], bool], result: LayoutResult) -> None:
    """Drops the buffers of processes the selection leaves out, counting their events."""
    # Each kind's buffers, by (origin, thread) or (origin, thread, name).
    kinds: tuple[tuple[dict, Stat], ...] = (
        (events.entries, Stat.FILTERED_PROCESS_SLICES),
        (events.points, Stat.FILTERED_PROCESS_FLOW_POINTS),
        (events.samples, Stat.FILTERED_PROCESS_COUNTER_VALUES),
    )
    for buffers, stat in kinds:
        for key in [k for k in buffers if not keep(ident(k[0]))]:
            result.filtered[stat] += buffers.pop(key).total
