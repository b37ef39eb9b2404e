"""Lay one file's events out on the merged trace's tracks and feed them to a writer.

Contract: ``lay_out(data, plan, encoder)`` calls the encoder with, per track, a well-nested,
time-ordered stream: slice ENDs before BEGINs at equal timestamps, children inside parents.
Slices that overlap a sibling without nesting are moved to an overlap lane beside their thread
(Perfetto would otherwise re-nest or drop them). Flow points are bound to the slice they belong
to and renumbered into ids unique across the whole trace.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from tracemerge.model import Event, FlowPhase, Identity, Kind, SourceData
from tracemerge.plan import CounterTrack, ThreadTrack, UnitPlan, flow_chains, stable_id
from tracemerge.report import EventCounts

# A flow attached to a slice: (trace-wide flow id, its phase at this slice).
Flow = tuple[int, FlowPhase]


class Encoder(Protocol):
    """What a writer implements to receive one file's laid-out events.

    An encoder may also set ``flows_per_slice`` when its format binds only so many flows to a
    slice; flows beyond that are then dropped whole, and counted, before anything is emitted.
    """

    def slice_begin(self, track: ThreadTrack, ts: int, ev: Event, flows: list[Flow] | None) -> None: ...

    def slice_end(self, track: ThreadTrack, ts: int) -> None: ...

    def instant(self, track: ThreadTrack, ts: int, ev: Event) -> None: ...

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None: ...


@dataclass
class UnitResult:
    """What encoding one file produced: lane tracks it opened, counts written, losses."""

    lanes: list[ThreadTrack] = field(default_factory=list)
    written: dict[Identity, EventCounts] = field(default_factory=lambda: defaultdict(EventCounts))
    dropped: Counter[str] = field(default_factory=Counter)
    moved_to_lanes: int = 0
    reversed_flows: int = 0


def lay_out(data: SourceData, plan: UnitPlan, enc: Encoder) -> UnitResult:
    result = UnitResult()
    shift = plan.shift_ns
    identity_of = plan.identities

    by_thread: dict[tuple[Identity, tuple], list[Event]] = defaultdict(list)
    points: dict[tuple[Identity, tuple], list[Event]] = defaultdict(list)
    counters: dict[CounterTrack, list[Event]] = defaultdict(list)
    for ev in data.events:
        ident = identity_of[ev.origin]
        kind = ev.kind
        if kind == Kind.COUNTER:
            counters[plan.counters[(ident, ev.thread, ev.name)]].append(ev)
        elif kind == Kind.FLOW:
            points[(ident, ev.thread)].append(ev)
        else:
            by_thread[(ident, ev.thread)].append(ev)

    for group in by_thread.values():
        # Parents before children: earlier start first, then longer first; slices before instants.
        group.sort(key=lambda e: (e.ts, -e.dur, e.kind))

    flows = _bind_flows(data.events, by_thread, points, plan, result, getattr(enc, "flows_per_slice", None))

    for (ident, thread), group in by_thread.items():
        track = plan.threads[(ident, thread)]
        _walk(group, track, flows, shift, enc, result, result.written[ident])

    for track, samples in counters.items():
        samples.sort(key=lambda e: e.ts)
        for ev in samples:
            enc.counter(track, ev.ts + shift, ev.value)
        result.written[identity_of[samples[0].origin]].counters += len(samples)
    return result


def _bind_flows(
    events: list[Event],
    by_thread: dict[tuple[Identity, tuple], list[Event]],
    points: dict[tuple[Identity, tuple], list[Event]],
    plan: UnitPlan,
    result: UnitResult,
    limit: int | None,
) -> dict[int, list[Flow]]:
    """Map ``id(slice event)`` to the flows attached to it (at most ``limit`` per slice, if set)."""
    bound_to: dict[int, Event] = {}  # id(flow point) -> slice it binds to
    for key, pts in points.items():
        slices = [e for e in by_thread.get(key, ()) if e.kind == Kind.SLICE]
        starts = [e.ts for e in slices]
        pts.sort(key=lambda e: e.ts)
        stack: list[Event] = []
        i = 0
        for p in pts:
            if p.flow_next:
                j = bisect_left(starts, p.ts)
                if j < len(slices):
                    bound_to[id(p)] = slices[j]
                continue
            while i < len(slices) and slices[i].ts <= p.ts:
                stack.append(slices[i])
                i += 1
            while stack and stack[-1].ts + stack[-1].dur < p.ts:
                stack.pop()
            if stack:
                bound_to[id(p)] = stack[-1]

    chains, _ = flow_chains(events)  # losses here were counted when the file was scanned
    attached: dict[int, list[Flow]] = defaultdict(list)
    next_id = plan.flow_id_base
    for chain in chains:
        kept = [p for p in chain if id(p) in bound_to]
        if len(kept) < len(chain):
            result.dropped["flow point outside any slice on its thread"] += len(chain) - len(kept)
        if len(kept) < 2:
            if kept:
                result.dropped["flow left with one endpoint after binding"] += 1
            continue
        # Perfetto links flow points in time order; a flow whose end is stamped before its start
        # (clock skew between host and device) is drawn from the earlier slice, and counted.
        slices = sorted((bound_to[id(p)] for p in kept), key=lambda e: e.ts)
        if limit is not None and any(len(attached[id(target)]) >= limit for target in slices):
            result.dropped[f"flows beyond {limit} on one slice (the output format binds {limit})"] += 1
            continue
        next_id += 1
        if slices[0] is not bound_to[id(kept[0])]:
            result.reversed_flows += 1
        for n, target in enumerate(slices):
            phase = FlowPhase.START if n == 0 else FlowPhase.END if n == len(slices) - 1 else FlowPhase.STEP
            attached[id(target)].append((next_id, phase))
        result.written[plan.identities[chain[0].origin]].flows += len(kept) - 1
    return attached


def _walk(
    group: list[Event],
    track: ThreadTrack,
    flows: dict[int, list[Flow]],
    shift: int,
    enc: Encoder,
    result: UnitResult,
    counts: EventCounts,
) -> None:
    """Emit one thread's slices and instants, opening overlap lanes where nesting breaks."""
    lanes: list[ThreadTrack] = [track]
    stacks: list[list[int]] = [[]]  # per lane: end timestamps of the open slices
    for ev in group:
        start = ev.ts
        if ev.kind == Kind.INSTANT:
            _close_until(stacks[0], start, track, shift, enc)
            enc.instant(track, start + shift, ev)
            counts.instants += 1
            continue
        end = start + ev.dur
        for n, stack in enumerate(stacks):
            _close_until(stack, start, lanes[n], shift, enc)
            if not stack or stack[-1] >= end:
                break
        else:
            n = len(stacks)
            stacks.append([])
            lane = _lane(track, n)
            lanes.append(lane)
            result.lanes.append(lane)
        if n:
            result.moved_to_lanes += 1
        stacks[n].append(end)
        enc.slice_begin(lanes[n], start + shift, ev, flows.get(id(ev)))
        counts.slices += 1
    for n, stack in enumerate(stacks):
        while stack:
            enc.slice_end(lanes[n], stack.pop() + shift)


def _close_until(stack: list[int], ts: int, track: ThreadTrack, shift: int, enc: Encoder) -> None:
    while stack and stack[-1] <= ts:
        enc.slice_end(track, stack.pop() + shift)


def _lane(track: ThreadTrack, n: int) -> ThreadTrack:
    # Chrome JSON has no child tracks, so a lane there is a thread of its own: its tid is drawn
    # from the upper half of the uint32 range, away from the planned tids.
    tid = (1 << 31) | (stable_id("lane-tid", track.uuid, n) & 0x7FFFFFFF)
    return ThreadTrack(
        uuid=stable_id("lane", track.uuid, n),
        pid=track.pid,
        tid=tid,
        name=f"{track.name} (overlap {n})",
        order=track.order,
        process_uuid=track.process_uuid,
        lane=n,
        parent_uuid=track.uuid,
    )
