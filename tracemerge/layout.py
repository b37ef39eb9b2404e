"""Lay one file's events out on the merged trace's tracks and feed them to a writer's encoder.

Sources hand events to a :class:`FileLayout` while they read: each slice or instant becomes an
entry ``(start, -dur, kind, ordinal, body)`` on its (origin, thread) buffer, where ``body`` is
the writer's encoding of the event's name, category and args (made once, while the strings are at
hand). Flow points and counter samples are kept beside them. :meth:`FileLayout.finish` then walks
each buffer in (start, longer first, file order) order and calls the encoder with a well-nested,
time-ordered stream per track: slice ENDs before BEGINs at equal timestamps, children inside
parents. Slices that overlap a sibling without nesting are moved to an overlap lane beside their
thread (Perfetto would otherwise re-nest or drop them). Flow points are bound to the slice they
belong to by :mod:`tracemerge.flows`.
"""

from __future__ import annotations

import itertools
import operator
import pickle
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

import msgspec
import orjson

from tracemerge.anchors import MAX_MARKS, MAX_PHASE_MARKS, PHASE, STEP
from tracemerge.flows import ThreadAttachments, bind_flows
from tracemerge.laminar import closed_stretches, walk_laminar
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.model import Event, FlowPhase, Identity, Kind, OriginKey, ThreadKey
from tracemerge.plan import CounterTrack, ThreadTrack, lane_track
from tracemerge.report import EventCounts
from tracemerge.select import TimeFilter
from tracemerge.spill import RunStore, SortedBuffer, spill_over

# A flow attached to a slice: (trace-wide flow id, its phase at this slice).
Flow = tuple[int, FlowPhase]
SLICE, INSTANT = int(Kind.SLICE), int(Kind.INSTANT)
# Items a file's buffers may hold in memory (about 200 bytes each) before they spill to disk.
DEFAULT_BUDGET = 400_000
FILTERED_TIME = "events outside --window"
FILTERED_SHORT = "slices shorter than --min-dur"


class Encoder(Protocol):
    """What a writer implements to receive one file's laid-out events.

    What a slice or instant says is encoded once, when the event is read: ``prefix`` encodes a
    name and category (the layout caches it per pair), ``args`` an args object given as JSON
    text; an event's body is the two concatenated.
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
    filtered: Counter[str] = field(default_factory=Counter)  # left out on request: not a loss
    moved_to_lanes: int = 0
    reversed_flows: int = 0
    ts_min: int | None = None  # in the file's own clock
    ts_max: int | None = None


class FileLayout:
    """Collects one file's events by track while the source reads, then emits them in order.

    Memory is bounded: when the buffers hold more than ``budget`` items, they are written to a
    temporary file as sorted runs (:mod:`tracemerge.spill`) and merged back when emitted.
    Sources call :meth:`check_memory` between batches.
    """

    def __init__(
        self,
        enc: Encoder,
        budget: int = DEFAULT_BUDGET,
        spill_dir: Path | None = None,
        watch: Callable[[str], tuple[str, ...]] | None = None,
        store_path: Path | None = None,
        metrics_map: MetricsMap = NO_MAP,
    ) -> None:
        self.enc = enc
        self.metrics_map = metrics_map  # where metric series go (metric sources read it)
        self.budget = budget
        self.store = RunStore(spill_dir, store_path)
        # Encoded names, cached; names ``watch`` tags as clock evidence are never cached, so
        # that every source meets them on its slow path and notes them (see :meth:`note`).
        self.prefixes: dict[tuple[str, str], bytes] = {}
        self.watch = watch
        self.tags: dict[str, tuple[str, ...]] = {}
        self.marks: dict[tuple[str, OriginKey, ThreadKey], list[tuple[int, int]]] = {}
        self.marks_over: Counter[str] = Counter()  # per kind of evidence, marks beyond the cap
        self.ordinal = itertools.count().__next__
        self.entries: dict[tuple[OriginKey, ThreadKey], SortedBuffer] = {}
        self.points: dict[tuple[OriginKey, ThreadKey], SortedBuffer] = defaultdict(SortedBuffer)
        self.samples: dict[tuple[OriginKey, ThreadKey, str], SortedBuffer] = defaultdict(SortedBuffer)

    def prefix(self, name: str, cat: str) -> bytes:
        """The encoded name and category (cached: names repeat)."""
        found = self.prefixes.get((name, cat))
        if found is None:
            found = self.enc.prefix(name, cat)
            if not self.tag(name):
                self.prefixes[(name, cat)] = found
        return found

    def tag(self, name: str) -> tuple[str, ...]:
        """The evidence tags of events named ``name`` (see :mod:`tracemerge.anchors`)."""
        try:
            return self.tags[name]
        except KeyError:
            found = self.tags[name] = self.watch(name) if self.watch is not None else ()
            return found

    def note(self, name: str, origin: OriginKey, thread: ThreadKey, start: int, dur: int) -> None:
        """Keep a slice as evidence when its name is watched."""
        for tag in self.tag(name):
            self.mark(tag, origin, thread, start, start + dur)

    def mark(self, tag: str, origin: OriginKey, thread: ThreadKey, start: int, end: int) -> None:
        """Clock evidence: an instant range under ``tag``, in the file's own timestamps."""
        found = self.marks.get((tag, origin, thread))
        if found is None:
            found = self.marks[(tag, origin, thread)] = []
        limit = MAX_PHASE_MARKS if tag.startswith((PHASE, STEP)) else MAX_MARKS
        if len(found) < limit:
            found.append((start, end))
        else:
            self.marks_over[tag.partition(" ")[0]] += 1

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

    def save(self, path: Path) -> None:
        """Keep the laid-out events for a second pass (:meth:`load`): every buffer is spilled to
        the named run file, and what indexes it is written to ``path``."""
        self.check_memory(0)
        state = (self.store.path, self.store.size, self.entries, dict(self.points), dict(self.samples))
        path.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        self.store.close()

    @classmethod
    def load(cls, path: Path, enc: Encoder, budget: int = DEFAULT_BUDGET) -> FileLayout:
        """The layout :meth:`save` kept, encoding with ``enc`` (its bodies were made by the same writer)."""
        store_path, size, entries, points, samples = pickle.loads(path.read_bytes())
        layout = cls(enc, budget)
        layout.store = RunStore(store_path.parent, store_path, size)
        layout.entries = entries
        layout.points = defaultdict(SortedBuffer, points)
        layout.samples = defaultdict(SortedBuffer, samples)
        return layout

    def reset(self) -> None:
        """Forget every event handed over so far (the source reads the file again)."""
        for buf in self._buffers():
            buf.discard()
        self.marks.clear()

    def _buffers(self) -> list[SortedBuffer]:
        """Every buffer of the file: slices and instants, flow points, counter samples."""
        return [*self.entries.values(), *self.points.values(), *self.samples.values()]

    def buffer(self, origin: OriginKey, thread: ThreadKey) -> SortedBuffer:
        """The entry list of one (origin, thread); sources append ``(start, -dur, kind, ordinal, body)``."""
        key = (origin, thread)
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = SortedBuffer()
        return found

    def flow_point(
        self, origin: OriginKey, thread: ThreadKey, ts: int, phase: FlowPhase, flow_key: Any, bind_next: bool
    ) -> None:
        """A flow point; ``bind_next`` binds it to the next slice starting on its thread."""
        self.points[(origin, thread)].append((ts, int(phase), self.ordinal(), flow_key, bind_next))

    def counter_sample(self, origin: OriginKey, thread: ThreadKey, series: str, ts: int, value: Any) -> None:
        self.samples[(origin, thread, series)].append((ts, self.ordinal(), value))

    def add_event(self, ev: Event, note: bool = True) -> None:
        """One :class:`~tracemerge.model.Event` (sources that build them: span logs, Ascend DBs);
        ``note`` False keeps it from being taken as evidence whatever its name."""
        kind = ev.kind
        if kind == Kind.COUNTER:
            self.counter_sample(ev.origin, ev.thread, ev.name, ev.ts, ev.value)
        elif kind == Kind.FLOW:
            self.flow_point(ev.origin, ev.thread, ev.ts, ev.flow_phase, ev.flow_id, ev.flow_next)
        else:
            body = self.describe(ev.name, ev.cat, ev.args)
            self.buffer(ev.origin, ev.thread).append((ev.ts, -ev.dur, int(kind), self.ordinal(), body))
            if note and kind == Kind.SLICE and self.tags.get(ev.name):
                self.note(ev.name, ev.origin, ev.thread, ev.ts, ev.dur)

    def check_memory(self, limit: int | None = None) -> None:
        """Spill every buffer to disk when together they hold more than ``limit`` (the budget)."""
        spill_over(self._buffers(), self.budget if limit is None else limit, self.store)

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key events whose origin is only known once the whole file is read (per-pid roles)."""
        self.entries = _regrouped(self.entries, lambda k: (origin_of(k[0], k[1]), k[1]))
        self.points = defaultdict(SortedBuffer, _regrouped(self.points, lambda k: (origin_of(k[0], k[1]), k[1])))
        self.samples = defaultdict(
            SortedBuffer, _regrouped(self.samples, lambda k: (origin_of(k[0], k[1]), k[1], k[2]))
        )
        marks: dict[tuple[str, OriginKey, ThreadKey], list[tuple[int, int]]] = {}
        for (tag, origin, thread), found in self.marks.items():
            marks.setdefault((tag, origin_of(origin, thread), thread), []).extend(found)
        self.marks = marks

    # -- the walk ------------------------------------------------------------------------------

    def finish(
        self,
        identity_of: Callable[[OriginKey], Identity],
        tracks: Tracks,
        ts_shift: int | None,
        flow_id_base: int,
        keep: Callable[[Identity], bool] | None = None,
        times: TimeFilter | None = None,
        summary_only: bool = False,
    ) -> LayoutResult:
        """Emit every track in order; timestamps are written as ``ts + ts_shift``.

        ``ts_shift`` None writes them relative to the file's earliest timestamp (``ts_min``).
        Processes ``keep`` rejects and events ``times`` rejects are left out and counted in
        ``result.filtered``. ``summary_only`` emits nothing and says only which tracks there are
        and the time range (what a plan needs).
        """
        try:
            return self._finish(identity_of, tracks, ts_shift, flow_id_base, keep, times, summary_only)
        finally:
            self.store.close()

    def _finish(
        self,
        identity_of: Callable[[OriginKey], Identity],
        tracks: Tracks,
        ts_shift: int | None,
        flow_id_base: int,
        keep: Callable[[Identity], bool] | None,
        times: TimeFilter | None,
        summary_only: bool,
    ) -> LayoutResult:
        result = LayoutResult()
        idents: dict[OriginKey, Identity] = {}

        def ident(origin: OriginKey) -> Identity:
            found = idents.get(origin)
            if found is None:
                found = idents[origin] = identity_of(origin)
            return found

        # A spilled file (one too large while it was read, or a layout kept for a second pass,
        # see save) that fits in the budget is read back, where the column-wise paths run; one
        # that does not spills the rest too: the bindings and the walk below need room of their own.
        buffers = self._buffers()
        if any(buf.runs for buf in buffers):
            if sum(buf.total for buf in buffers) <= self.budget:
                for held in (self.entries, self.points, self.samples):
                    for key, buf in held.items():
                        held[key] = buf.loaded(self.store)
            else:
                self.check_memory(0)
        firsts = [buf.smallest() for buf in (*self.entries.values(), *self.samples.values()) if buf.total]
        if not firsts:
            return result
        result.ts_min = min(first[0] for first in firsts if first is not None)
        shift = -result.ts_min if ts_shift is None else ts_shift
        if keep is not None:
            self._leave_out(ident, keep, result)
        if summary_only:
            return self._summary(ident, result)
        attached = bind_flows(self, ident, result, flow_id_base, times)
        hi = result.ts_min
        store = self.store
        for (origin, thread), items in self.entries.items():
            if not items.total:
                continue
            who = ident(origin)
            result.threads[who].add(thread)
            flows = attached.get((origin, thread))
            if items.runs and items.total + (flows.total if flows is not None else 0) <= self.budget:
                # A spilled file's thread that fits in the budget on its own is walked in memory.
                items = items.loaded(store)
                flows = flows.loaded(store) if isinstance(flows, SortedBuffer) else flows
            ordered = items.ordered(store)
            if times is not None:
                ordered = _kept_entries(ordered, times, result.filtered, result.read[who])
            track = tracks.thread(who, thread)
            hi = max(hi, self._walk(ordered, track, flows, shift, result, result.written[who]))
        counter = self.enc.counter
        for (origin, thread, name), samples in self.samples.items():
            if not samples.total:
                continue
            who = ident(origin)
            result.counter_series[who].add((thread, name))
            track = tracks.counter(who, thread, name)
            ts = written = 0
            for ts, _, value in samples.ordered(store):
                if times is not None and not times.keeps_point(ts):
                    result.filtered[FILTERED_TIME] += 1
                    result.read[who].counters += 1
                    continue
                counter(track, ts + shift, value)
                written += 1
            result.written[who].counters += written
            hi = max(hi, ts)
        for who, counts in result.written.items():
            read = result.read[who]  # holds what the selection left out so far
            read.slices += counts.slices
            read.instants += counts.instants
            read.counters += counts.counters
        result.ts_max = hi
        return result

    def _summary(self, ident: Callable[[OriginKey], Identity], result: LayoutResult) -> LayoutResult:
        """The tracks and the time range, without laying anything out."""
        hi = result.ts_min
        for (origin, thread), items in self.entries.items():
            if items.total:
                result.threads[ident(origin)].add(thread)
                hi = max(hi, _latest_end(items.ordered(self.store)))
        for (origin, thread, name), samples in self.samples.items():
            if samples.total:
                result.counter_series[ident(origin)].add((thread, name))
                hi = max(hi, max(ts for ts, *_ in samples.ordered(self.store)))
        result.ts_max = hi
        return result

    def _leave_out(
        self, ident: Callable[[OriginKey], Identity], keep: Callable[[Identity], bool], result: LayoutResult
    ) -> None:
        """Drops the buffers of processes the selection leaves out, counting their events."""
        for buffers, what in (
            (self.entries, "slices and instants"),
            (self.points, "flow points"),
            (self.samples, "counter values"),
        ):
            for key in [k for k in buffers if not keep(ident(k[0]))]:
                result.filtered[f"{what} of processes outside --roles/--ranks"] += buffers.pop(key).total

    def _walk(
        self,
        items: Iterable[tuple],
        track: ThreadTrack,
        attached: SortedBuffer | ThreadAttachments | None,
        shift: int,
        result: LayoutResult,
        counts: EventCounts,
    ) -> int:
        """Emit one thread's slices and instants, opening overlap lanes where nesting breaks;
        returns the latest time on the thread.

        ``attached`` holds the thread's flow attachments ``(start, -dur, kind, ordinal, flow id,
        phase)``, met in the order of the entries. Encoders that take a thread's slices at once
        (``add_slices``) get well-nested stretches of the thread laid out in numpy
        (:func:`~tracemerge.laminar.walk_laminar`): the whole thread when it is held in memory and
        nests, else each stretch between two instants where every earlier entry has ended
        (:func:`~tracemerge.laminar.closed_stretches`), spilled or not. What the point-wise walk
        writes does not depend on where it is cut at such instants, so the bytes are the same.
        """
        enc, store = self.enc, self.store
        lanes: list[ThreadTrack] = [track]
        if not hasattr(enc, "add_slices"):
            flows_of = iter(attached.ordered(store) if attached is not None else ())
            return self._walk_points(items, flows_of, lanes, shift, result, counts)
        found = walk_laminar(enc, items, track, attached, store, shift)
        if found is not None:
            counts.slices += found[0]
            return found[1]
        flows_of = iter(attached.ordered(store) if attached is not None else ())
        pending = next(flows_of, None)
        hi = -(1 << 63)
        size = max(self.budget // 16, 1)
        for stretch in closed_stretches(items, size, 4 * size):
            if type(stretch) is not list:  # no cut within reach: the rest point by point
                rest = flows_of if pending is None else itertools.chain((pending,), flows_of)
                return max(hi, self._walk_points(stretch, rest, lanes, shift, result, counts))
            last = stretch[-1][:4]
            mine = SortedBuffer()
            while pending is not None and pending[:4] <= last:
                mine.append(pending)
                pending = next(flows_of, None)
            found = walk_laminar(enc, stretch, track, mine or None, store, shift)
            if found is not None:
                counts.slices += found[0]
                hi = max(hi, found[1])
            else:
                hi = max(hi, self._walk_points(stretch, iter(mine), lanes, shift, result, counts))
        return hi

    def _walk_points(
        self,
        items: Iterable[tuple],
        flows_of: Iterator[tuple],
        lanes: list[ThreadTrack],
        shift: int,
        result: LayoutResult,
        counts: EventCounts,
    ) -> int:
        """The point-wise walk of :meth:`_walk` over ``items`` (``lanes``: the thread's track and
        the overlap lanes it has so far, all closed; the walk adds to them and closes them all).

        Encoders that collect packets in lists (``packets``, flushed at ``batch`` packets) get
        the thread's own slices appended directly: this loop runs once per input slice. Where
        every entry so far has ended, the lanes are closed, as a walk starting there finds them.
        """
        enc = self.enc
        begin, end_slice, instant = enc.slice_begin, enc.slice_end, enc.instant
        track = lanes[0]
        stack: list[int] = []  # end timestamps of the open slices on the thread itself
        stacks: list[list[int]] = [stack] + [[] for _ in lanes[1:]]
        pending = next(flows_of, None)
        hi = -(1 << 63)
        laned = False  # a lane holds open slices
        slices = instants = 0
        packets = getattr(enc, "packets", None)
        if packets is not None:
            times, events, begin_tail, end_event = packets(track)
            add_time, add_event = times.append, events.append
            flow_fields, flush_at = enc.flow_fields, enc.batch
        for start, negdur, kind, ordinal, body in items:
            if laned and start >= hi:
                self._close(stacks, lanes, shift)
                laned = False
            flows: list[Flow] | None = None
            if pending is not None and pending[3] == ordinal:
                flows = []
                while pending is not None and pending[3] == ordinal:
                    flows.append((pending[4], pending[5]))
                    pending = next(flows_of, None)
            if packets is not None and kind == SLICE:
                while stack and stack[-1] <= start:
                    add_time(stack.pop() + shift)
                    add_event(end_event)
                end = start - negdur
                if not stack or stack[-1] >= end:
                    stack.append(end)
                    add_time(start + shift)
                    add_event(body + begin_tail + flow_fields(flows) if flows else body + begin_tail)
                    slices += 1
                    if end > hi:
                        hi = end
                    if len(times) >= flush_at:
                        enc.flush()
                    continue
            while stack and stack[-1] <= start:
                end_slice(track, stack.pop() + shift)
            if kind == INSTANT:
                instant(track, start + shift, body)
                instants += 1
                if start > hi:
                    hi = start
                continue
            end = start - negdur
            if end > hi:
                hi = end
            n = 0
            if stack and stack[-1] < end:
                n = self._lane_for(stacks, lanes, start, end, shift, result)
                result.moved_to_lanes += 1
                laned = True
            stacks[n].append(end)
            begin(lanes[n], start + shift, -negdur, body, flows)
            slices += 1
        self._close(stacks, lanes, shift)
        counts.slices += slices
        counts.instants += instants
        return hi

    def _close(self, stacks: list[list[int]], lanes: list[ThreadTrack], shift: int) -> None:
        """Ends every open slice, the thread's own innermost first, then each lane's."""
        for n, lane_stack in enumerate(stacks):
            while lane_stack:
                self.enc.slice_end(lanes[n], lane_stack.pop() + shift)

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


def _kept_entries(
    items: Iterable[tuple], times: TimeFilter, filtered: Counter[str], left_out: EventCounts
) -> Iterator[tuple]:
    keeps_slice, keeps_point = times.keeps_slice, times.keeps_point
    for item in items:
        if item[2] == SLICE:
            if keeps_slice(item[0], -item[1]):
                yield item
                continue
            filtered[FILTERED_SHORT if -item[1] < times.min_dur else FILTERED_TIME] += 1
            left_out.slices += 1
        elif keeps_point(item[0]):
            yield item
        else:
            filtered[FILTERED_TIME] += 1
            left_out.instants += 1


def _latest_end(items: Iterable[tuple]) -> int:
    """The latest end of entries ``(start, -dur, ...)``."""
    if isinstance(items, list):
        return max(map(operator.sub, map(_start, items), map(_negdur, items)))
    return max(start - negdur for start, negdur, *_ in items)


_start, _negdur = itemgetter(0), itemgetter(1)


def _regrouped(buffers: dict, rekey: Callable[[tuple], tuple]) -> dict:
    out: dict[tuple, SortedBuffer] = {}
    for key, buf in buffers.items():
        target = out.get(rekey(key))
        if target is None:
            out[rekey(key)] = buf
        else:
            target.absorb(buf)
    return out


__all__ = ["Encoder", "FileLayout", "Flow", "LayoutResult", "Tracks"]
