"""Lay one file's events out on the merged trace's tracks and feed them to a writer's encoder.

Sources hand events to a :class:`FileLayout` while they read: each slice or instant becomes an
entry ``(start, -dur, kind, ordinal, body)`` on its (origin, thread) buffer, where ``body`` is
the writer's encoding of the event's name, category and args (made once, while the strings are at
hand). Flow points and counter samples are kept beside them. :meth:`FileLayout.finish` then walks
each buffer in (start, longer first, file order) order and calls the encoder with a well-nested,
time-ordered stream per track: slice ENDs before BEGINs at equal timestamps, children inside
parents. Slices that overlap a sibling without nesting are moved to an overlap lane beside their
thread (Perfetto would otherwise re-nest or drop them). Flow points are bound to the slice they
belong to and numbered into ids unique across the whole trace.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import orjson

from tracemerge.model import NO_ORIGIN, Event, FlowPhase, Identity, Kind, OriginKey, ThreadKey
from tracemerge.plan import CounterTrack, ThreadTrack, lane_track
from tracemerge.report import EventCounts

# A flow attached to a slice: (trace-wide flow id, its phase at this slice).
Flow = tuple[int, FlowPhase]
SLICE, INSTANT = int(Kind.SLICE), int(Kind.INSTANT)
_FLUSH_AT = 1 << 16  # packets an encoder collects before encoding them
START, STEP, END = int(FlowPhase.START), int(FlowPhase.STEP), int(FlowPhase.END)


class Encoder(Protocol):
    """What a writer implements to receive one file's laid-out events.

    What a slice or instant says is encoded once, when the event is read: ``prefix`` encodes a
    name and category (the layout caches it per pair), ``args`` an args object given as JSON
    text; an event's body is the two concatenated. An encoder may set ``flows_per_slice`` when
    its format binds only so many flows to a slice; flows beyond that are dropped whole, and
    counted.
    """

    def prefix(self, name: str, cat: str) -> bytes: ...

    def args(self, text: bytes) -> bytes: ...

    # ``args_heads[len(text)] + text`` encodes args text that ``args`` would not need to change.
    args_heads: tuple[bytes, ...]

    def slice_begin(self, track: ThreadTrack, ts: int, dur: int, body: bytes, flows: list[Flow] | None) -> None: ...

    def slice_end(self, track: ThreadTrack, ts: int) -> None: ...

    def instant(self, track: ThreadTrack, ts: int, body: bytes) -> None: ...

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None: ...


class Tracks(Protocol):
    """Where a file's (identity, thread) keys land in the merged trace."""

    def thread(self, ident: Identity, key: ThreadKey) -> ThreadTrack: ...

    def counter(self, ident: Identity, key: ThreadKey, name: str) -> CounterTrack: ...


@dataclass
class LayoutResult:
    """What laying out one file produced: counts read and written, lanes opened, losses."""

    read: dict[Identity, EventCounts] = field(default_factory=lambda: defaultdict(EventCounts))
    written: dict[Identity, EventCounts] = field(default_factory=lambda: defaultdict(EventCounts))
    threads: dict[Identity, set[ThreadKey]] = field(default_factory=lambda: defaultdict(set))
    counter_series: dict[Identity, set[tuple[ThreadKey, str]]] = field(default_factory=lambda: defaultdict(set))
    lanes: list[ThreadTrack] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    moved_to_lanes: int = 0
    reversed_flows: int = 0
    ts_min: int | None = None  # in the file's own clock
    ts_max: int | None = None


class FileLayout:
    """Collects one file's events by track while the source reads, then emits them in order."""

    def __init__(self, enc: Encoder) -> None:
        self.enc = enc
        self.prefixes: dict[tuple[str, str], bytes] = {}
        self.ordinal = itertools.count().__next__
        self.entries: dict[tuple[OriginKey, ThreadKey], list[tuple]] = {}
        self.points: dict[tuple[OriginKey, ThreadKey], list[tuple]] = defaultdict(list)
        self.samples: dict[tuple[OriginKey, ThreadKey, str], list[tuple[int, Any]]] = defaultdict(list)

    def prefix(self, name: str, cat: str) -> bytes:
        """The encoded name and category (cached: names repeat)."""
        found = self.prefixes.get((name, cat))
        if found is None:
            found = self.prefixes[(name, cat)] = self.enc.prefix(name, cat)
        return found

    def describe(self, name: str, cat: str, args: Any) -> bytes:
        """An event's encoded body; ``args`` is a dict, its raw JSON text, or None."""
        prefix = self.prefix(name, cat)
        if not args:
            return prefix
        if type(args) is msgspec.Raw:
            text = bytes(args)
        elif type(args) is dict:
            text = orjson.dumps(args, default=str, option=orjson.OPT_NON_STR_KEYS)
        else:
            return prefix
        return prefix + self.enc.args(text) if text != b"{}" else prefix

    def reset(self) -> None:
        """Forget every event handed over so far (the source reads the file again)."""
        self.entries.clear()
        self.points.clear()
        self.samples.clear()

    def buffer(self, origin: OriginKey, thread: ThreadKey) -> list[tuple]:
        """The entry list of one (origin, thread); sources append ``(start, -dur, kind, ordinal, body)``."""
        key = (origin, thread)
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = []
        return found

    def flow_point(
        self, origin: OriginKey, thread: ThreadKey, ts: int, phase: FlowPhase, flow_key: Any, bind_next: bool
    ) -> None:
        """A flow point; ``bind_next`` binds it to the next slice starting on its thread."""
        self.points[(origin, thread)].append((ts, int(phase), self.ordinal(), flow_key, bind_next))

    def add_event(self, ev: Event) -> None:
        """One :class:`~tracemerge.model.Event` (sources that build them: span logs, Ascend DBs)."""
        kind = ev.kind
        if kind == Kind.COUNTER:
            self.samples[(ev.origin, ev.thread, ev.name)].append((ev.ts, ev.value))
        elif kind == Kind.FLOW:
            self.flow_point(ev.origin, ev.thread, ev.ts, ev.flow_phase, ev.flow_id, ev.flow_next)
        else:
            body = self.describe(ev.name, ev.cat, ev.args)
            self.buffer(ev.origin, ev.thread).append((ev.ts, -ev.dur, int(kind), self.ordinal(), body))

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key events whose origin is only known once the whole file is read (per-pid roles)."""
        entries: dict[tuple[OriginKey, ThreadKey], list[tuple]] = {}
        for (origin, thread), items in self.entries.items():
            entries.setdefault((origin_of(origin, thread), thread), []).extend(items)
        self.entries = entries
        points: dict[tuple[OriginKey, ThreadKey], list[tuple]] = defaultdict(list)
        for (origin, thread), items in self.points.items():
            points[(origin_of(origin, thread), thread)].extend(items)
        self.points = points
        samples: dict[tuple[OriginKey, ThreadKey, str], list[tuple[int, Any]]] = defaultdict(list)
        for (origin, thread, name), items in self.samples.items():
            samples[(origin_of(origin, thread), thread, name)].extend(items)
        self.samples = samples

    # -- the walk ------------------------------------------------------------------------------

    def finish(
        self,
        identity_of: Callable[[OriginKey], Identity],
        tracks: Tracks,
        ts_shift: int | None,
        flow_id_base: int,
    ) -> LayoutResult:
        """Emit every track in order; timestamps are written as ``ts + ts_shift``.

        ``ts_shift`` None writes them relative to the file's earliest timestamp (``ts_min``).
        """
        result = LayoutResult()
        idents: dict[OriginKey, Identity] = {}

        def ident(origin: OriginKey) -> Identity:
            found = idents.get(origin)
            if found is None:
                found = idents[origin] = identity_of(origin)
            return found

        for items in self.entries.values():
            items.sort()
        for samples in self.samples.values():
            samples.sort(key=_first)
        firsts = [items[0][0] for items in self.entries.values() if items]
        firsts += [samples[0][0] for samples in self.samples.values() if samples]
        if not firsts:
            return result
        result.ts_min = min(firsts)
        shift = -result.ts_min if ts_shift is None else ts_shift
        flows = self._bind_flows(ident, result, flow_id_base)
        hi = result.ts_min
        for (origin, thread), items in self.entries.items():
            if not items:
                continue
            who = ident(origin)
            result.threads[who].add(thread)
            track = tracks.thread(who, thread)
            hi = max(hi, self._walk(items, track, flows, shift, result, result.written[who]))
        counter = self.enc.counter
        for (origin, thread, name), samples in self.samples.items():
            who = ident(origin)
            result.counter_series[who].add((thread, name))
            track = tracks.counter(who, thread, name)
            for ts, value in samples:
                counter(track, ts + shift, value)
            result.written[who].counters += len(samples)
            hi = max(hi, samples[-1][0])
        for who, counts in result.written.items():
            read = result.read[who]
            read.slices, read.instants, read.counters = counts.slices, counts.instants, counts.counters
        result.ts_max = hi
        return result

    def _walk(
        self,
        items: list[tuple],
        track: ThreadTrack,
        flows: dict[int, list[Flow]],
        shift: int,
        result: LayoutResult,
        counts: EventCounts,
    ) -> int:
        """Emit one thread's slices and instants, opening overlap lanes where nesting breaks;
        returns the latest time on the thread.

        Encoders that collect packets in lists (``packets``) get the thread's own slices appended
        directly: this loop runs once per input slice.
        """
        enc = self.enc
        begin, end_slice, instant = enc.slice_begin, enc.slice_end, enc.instant
        lanes: list[ThreadTrack] = [track]
        stack: list[int] = []  # end timestamps of the open slices on the thread itself
        stacks: list[list[int]] = [stack]
        get_flows = flows.get if flows else None
        hi = items[0][0]
        slices = instants = 0
        packets = getattr(enc, "packets", None)
        if packets is not None:
            times, events, begin_tail, end_event = packets(track)
            add_time, add_event = times.append, events.append
        for start, negdur, kind, ordinal, body in items:
            if packets is not None and kind == SLICE:
                while stack and stack[-1] <= start:
                    add_time(stack.pop() + shift)
                    add_event(end_event)
                end = start - negdur
                if not stack or stack[-1] >= end:
                    flow = get_flows(ordinal) if get_flows else None
                    if flow is None:
                        stack.append(end)
                        add_time(start + shift)
                        add_event(body + begin_tail)
                        slices += 1
                        if end > hi:
                            hi = end
                        if len(times) >= _FLUSH_AT:
                            enc.flush()
                        continue
            while stack and stack[-1] <= start:
                end_slice(track, stack.pop() + shift)
            if kind == INSTANT:
                instant(track, start + shift, body)
                instants += 1
                continue
            end = start - negdur
            if end > hi:
                hi = end
            n = 0
            if stack and stack[-1] < end:
                n = self._lane_for(stacks, lanes, start, end, shift, result)
                result.moved_to_lanes += 1
            stacks[n].append(end)
            begin(lanes[n], start + shift, -negdur, body, get_flows(ordinal) if get_flows else None)
            slices += 1
        for n, lane_stack in enumerate(stacks):
            while lane_stack:
                end_slice(lanes[n], lane_stack.pop() + shift)
        counts.slices += slices
        counts.instants += instants
        return max(hi, items[-1][0])

    def _lane_for(
        self, stacks: list[list[int]], lanes: list[ThreadTrack], start: int, end: int, shift: int, result: LayoutResult
    ) -> int:
        """The first overlap lane where a slice [start, end] nests; a new lane when none does."""
        for n in range(1, len(stacks)):
            lane_stack = stacks[n]
            while lane_stack and lane_stack[-1] <= start:
                self.enc.slice_end(lanes[n], lane_stack.pop() + shift)
            if not lane_stack or lane_stack[-1] >= end:
                return n
        n = len(stacks)
        stacks.append([])
        lane = lane_track(lanes[0], n)
        lanes.append(lane)
        result.lanes.append(lane)
        return n

    def _bind_flows(
        self, ident: Callable[[OriginKey], Identity], result: LayoutResult, flow_id_base: int
    ) -> dict[int, list[Flow]]:
        """Map each slice's ordinal to the flows attached to it.

        A point binds to the innermost slice enclosing it on its thread (or, for a Chrome ``f``
        without ``bp: "e"``, to the next slice starting there). Points are grouped into chains
        (s, t..., f) by source id: an id with a single start is one flow whatever the timestamps
        say (a device task can be stamped before the host call that launched it), and every end
        beyond the first fans out from that start (one launch, two kernels). Ids reused for
        several flows are paired in time order.
        """
        if not self.points:
            return {}
        bound: dict[int, tuple[int, int]] = {}  # point ordinal -> (slice ordinal, slice start)
        by_id: dict[tuple, list[tuple]] = {}
        for (origin, thread), pts in self.points.items():
            pts.sort()
            items = [e for e in self.entries.get((origin, thread), ()) if e[2] == SLICE]
            n_items = len(items)
            stack: list[tuple] = []
            i = 0
            starts: list[int] | None = None
            for p in pts:
                ts = p[0]
                key = (origin, p[3])
                group = by_id.get(key)
                if group is None:
                    by_id[key] = [p]
                else:
                    group.append(p)
                if p[4]:
                    if starts is None:
                        starts = [e[0] for e in items]
                    j = bisect_left(starts, ts)
                    if j < n_items:
                        bound[p[2]] = (items[j][3], items[j][0])
                    continue
                while i < n_items and items[i][0] <= ts:
                    stack.append(items[i])
                    i += 1
                while stack and stack[-1][0] - stack[-1][1] < ts:
                    stack.pop()
                if stack:
                    bound[p[2]] = (stack[-1][3], stack[-1][0])

        limit = getattr(self.enc, "flows_per_slice", None)
        attached: dict[int, list[Flow]] = defaultdict(list)
        next_id = flow_id_base
        dropped = result.dropped
        for (origin, _), points in by_id.items():
            who = ident(origin)
            if len(points) == 2 and points[0][1] != points[1][1] and points[0][1] + points[1][1] == END:  # s, f
                chains = [points] if points[0][1] == START else [[points[1], points[0]]]
            else:
                chains = _chains(points, dropped)
            read, written = result.read[who], result.written[who]
            for chain in chains:
                read.flows += len(chain) - 1
                targets = [bound.get(p[2]) for p in chain]
                if None in targets:
                    kept = [t for t in targets if t is not None]
                    dropped["flow point outside any slice on its thread"] += len(chain) - len(kept)
                    if len(kept) < 2:
                        if kept:
                            dropped["flow left with one endpoint after binding"] += 1
                        continue
                    first = kept[0]
                else:
                    kept = targets
                    first = targets[0]
                # Perfetto links flow points in time order; a flow whose end is stamped before its
                # start (clock skew between host and device) is drawn from the earlier slice.
                kept.sort(key=_second)
                if limit is not None and any(len(attached[t[0]]) >= limit for t in kept):
                    dropped[f"flows beyond {limit} on one slice (the output format binds {limit})"] += 1
                    continue
                next_id += 1
                if kept[0][0] != first[0]:
                    result.reversed_flows += 1
                last = len(kept) - 1
                for n, (slice_ordinal, _) in enumerate(kept):
                    attached[slice_ordinal].append((next_id, START if n == 0 else END if n == last else STEP))
                written.flows += last
        return attached


def _second(item: tuple) -> Any:
    return item[1]


def _first(item: tuple) -> Any:
    return item[0]


def _chains(points: list[tuple], dropped: Counter[str]) -> list[list[tuple]]:
    """Group one id's flow points ``(ts, phase, ordinal, key, bind_next)`` into chains."""
    points.sort()
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


__all__ = ["NO_ORIGIN", "Encoder", "FileLayout", "Flow", "LayoutResult", "Tracks"]
