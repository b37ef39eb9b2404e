"""Lay one file's events out on the merged trace's tracks and feed them to a writer's encoder.

Sources hand events to a :class:`FileLayout` while they read: each slice or instant becomes an
entry ``(start, -dur, kind, ordinal, body)`` of its (origin, thread), where ``body`` is the
writer's encoding of the event's name, category and args (made once, while the strings are at
hand); flow points and counter samples are kept beside them. The entries are kept as columns in
the order they were read (:mod:`tracemerge.entries`), spilling to disk past a budget.

:meth:`FileLayout.finish` then works each thread out on its columns (:mod:`tracemerge.nesting`):
the walk's order (start, longer first, file order), the overlap lanes of slices that do not nest
(Perfetto would otherwise re-nest or drop them), and the flows bound to each slice
(:mod:`tracemerge.flows`), and hands each thread to the encoder in the three parts Perfetto's
sort needs (:mod:`tracemerge.thread_walk`).
"""

from __future__ import annotations

import itertools
import json
import pickle
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from tracemerge.anchors import DEVICE, MAX_MARKS, MAX_PHASE_MARKS, PHASE, STEP
from tracemerge.breakdown import add_span
from tracemerge.entries import Block, PointKeys, ThreadEntries, ThreadPoints, byte_table
from tracemerge.flows import bind_flows
from tracemerge.layout_types import Encoder, Items, LayoutResult, Tracks
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.model import Event, FlowPhase, Identity, Kind, OriginKey, ThreadKey
from tracemerge.nesting import walk_order
from tracemerge.select import TimeFilter
from tracemerge.spill import RunStore, SortedBuffer
from tracemerge.thread_walk import FILTERED_TIME, ThreadWalk

# Events a file's layout may hold in memory before it spills to disk (about 100 bytes each once
# sealed into columns).
DEFAULT_BUDGET = 500_000


class PlaceholderEncoder:
    """The encoder of a part of a file read apart (:mod:`tracemerge.sources.json_segments`): a
    name and category become a placeholder of PLACEHOLDER bytes numbered in order of first use
    (``table``), the file's own layout puts the writer's encoding in its place once every part
    is read; args are encoded by the writer's class, which keeps no state for them."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.args_heads = kind.args_heads
        self.table: list[tuple[str, str]] = []
        self._numbers: dict[tuple[str, str], bytes] = {}

    def prefix(self, name: str, cat: str) -> bytes:
        found = self._numbers.get((name, cat))
        if found is None:
            if len(self.table) >= 1 << 24:
                raise OverflowError("more names than placeholders")
            found = self._numbers[(name, cat)] = b"\xff" + len(self.table).to_bytes(3, "little")
            self.table.append((name, cat))
        return found

    def args(self, text: bytes) -> bytes:
        return self.kind.args(self, text)


class FileLayout:
    """Collects one file's events by track while the source reads, then emits them in order.

    Memory is bounded: when the buffers hold more than ``budget`` events, they are written to a
    temporary file (:mod:`tracemerge.entries`, :mod:`tracemerge.spill`) and read back when
    emitted. Sources call :meth:`check_memory` between batches.
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
        # Encoded names, cached; names ``watch`` tags as evidence are never cached, so that a
        # source's lookup misses them and it notes the slices (see :meth:`note`).
        self.prefixes: dict[tuple[str, str], bytes] = {}
        self.watch = watch
        self.tags: dict[str, tuple[str, ...]] = {}
        self.marks: dict[tuple[str, OriginKey, ThreadKey], list[tuple[int, int]]] = {}
        self.marks_over: Counter[str] = Counter()  # per kind of evidence, marks beyond the cap
        self._merged_sizes: dict = {}  # device marks: each union's length when last merged
        self._ordinals = itertools.count()
        self.ordinal = self._ordinals.__next__
        self.helpers = 0  # processes besides this one that may read parts of a large file
        self.keep_zero_counters = False  # --keep-zero-counters: sources keep counter series of zeros
        # Read in parts: every part's name and category, in order, and their encodings by this
        # layout's writer (placeholders in bodies are replaced with these when emitted).
        self.part_names: dict[tuple[str, str], int] = {}
        self.part_prefixes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._parts = 0
        self.point_keys = PointKeys()
        self.entries: dict[tuple[OriginKey, ThreadKey], ThreadEntries] = {}
        self.points: dict[tuple[OriginKey, ThreadKey], ThreadPoints] = _PointsByThread(self.point_keys)
        self.samples: dict[tuple[OriginKey, ThreadKey, str], SortedBuffer] = defaultdict(SortedBuffer)

    def reserve(self, count: int) -> int:
        """The first of ``count`` ordinals given out at once (to a batch's events, by position)."""
        first = self.ordinal()
        if count > 1:
            next(itertools.islice(self._ordinals, count - 2, None))
        return first

    def take_ordinal(self, ordinal: int | None) -> None:
        """Until called again with None, every ordinal asked for is ``ordinal`` (one reserved
        for an event that hands over its parts one by one)."""
        self.ordinal = self._ordinals.__next__ if ordinal is None else itertools.repeat(ordinal).__next__

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
        if tag.startswith(DEVICE):  # device activity: a union of spans, merged as they come
            add_span(found, start, end, self._merged_sizes, (tag, origin, thread))
            return
        limit = MAX_PHASE_MARKS if tag.startswith((PHASE, STEP)) else MAX_MARKS
        if len(found) < limit:
            found.append((start, end))
        else:
            self.marks_over[tag.partition(" ")[0]] += 1

    def mark_device(self, tag: str, origin: OriginKey, thread: ThreadKey, starts: np.ndarray, ends: np.ndarray) -> None:
        """Device activity of a batch of one thread's rows (``tag``: compute or comm), merged in
        numpy first: only the batch's union is handed to :meth:`mark`."""
        if not len(starts):
            return
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        breaks = np.flatnonzero(starts[1:] > ends[:-1]) + 1
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
        for a, b in zip(starts[firsts].tolist(), ends[lasts].tolist(), strict=True):
            self.mark(tag, origin, thread, a, b)

    def describe(self, name: str, cat: str, args: Any) -> bytes:
        """An event's encoded body; ``args`` is a dict, its raw JSON text, or None."""
        prefix = self.prefix(name, cat)
        if not args:
            return prefix
        if type(args) is msgspec.Raw:
            text = bytes(args)
        elif type(args) is dict:
            try:
                text = orjson.dumps(args, default=str, option=orjson.OPT_NON_STR_KEYS)
            except TypeError:  # an integer beyond 64 bits (a rank of 10**22): written exactly
                text = json.dumps(args, default=str, ensure_ascii=False, separators=(",", ":")).encode()
        else:
            return prefix
        return prefix + self.enc.args(text) if text != b"{}" else prefix

    def save(self, path: Path) -> None:
        """Keep the laid-out events for a second pass (:meth:`load`): every buffer is spilled to
        the named run file, and what indexes it is written to ``path``."""
        self.check_memory(0)
        points = {key: pts for key, pts in self.points.items()}
        state = (
            self.store.path,
            self.store.size,
            self.entries,
            points,
            dict(self.samples),
            self.point_keys,
            self.part_prefixes,
        )
        path.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        self.store.close()

    @classmethod
    def load(cls, path: Path, enc: Encoder, budget: int = DEFAULT_BUDGET) -> FileLayout:
        """The layout :meth:`save` kept, encoding with ``enc`` (its bodies were made by the same writer)."""
        store_path, size, entries, points, samples, point_keys, part_prefixes = pickle.loads(path.read_bytes())
        layout = cls(enc, budget)
        layout.store = RunStore(store_path.parent, store_path, size)
        layout.entries = entries
        layout.point_keys = point_keys
        layout.points = _PointsByThread(point_keys, points)
        layout.samples = defaultdict(SortedBuffer, samples)
        layout.part_prefixes = part_prefixes
        return layout

    # -- a file read in parts (tracemerge.sources.json_segments) -------------------------------

    def part_recipe(self, path: Path) -> dict[str, Any] | None:
        """What a process needs to lay out a part of ``path`` as this layout would (None: parts
        cannot be kept, there is no directory to spill them to)."""
        if self.store.directory is None:
            return None
        enc = self.enc
        return {
            "path": path,
            "kind": type(enc),
            "budget": self.budget,
            "directory": self.store.directory,
            "name": f".tracemerge-part-{id(self):x}",
            "watch": self.watch,
            "metrics_map": self.metrics_map,
        }

    @classmethod
    def for_part(cls, recipe: dict[str, Any], index: int) -> FileLayout:
        """The layout of part ``index``: placeholders for names, ordinals from ``index << 44`` on
        (each part's after the ones before it), spilled to a run file of its own."""
        store = recipe["directory"] / f"{recipe['name']}.{index}.runs"
        layout = cls(
            PlaceholderEncoder(recipe["kind"]), recipe["budget"], None, recipe["watch"], store, recipe["metrics_map"]
        )
        layout._ordinals = itertools.count(index << 44)
        layout.ordinal = layout._ordinals.__next__
        return layout

    def part_state(self) -> dict[str, Any]:
        """What another process needs of this part's layout: every buffer spilled, and indexed."""
        self.check_memory(0)
        self.store.close()
        assert isinstance(self.enc, PlaceholderEncoder)
        return {
            "entries": self.entries,
            "points": dict(self.points),
            "samples": dict(self.samples),
            "marks": self.marks,
            "marks_over": self.marks_over,
            "point_keys": self.point_keys,
            "names": self.enc.table,
            "store": self.store,
        }

    def absorb_part(self, index: int, part: dict[str, Any]) -> None:
        """Takes the buffers of the file's next part (see :meth:`part_state`), after those before."""
        numbers = np.array([self.part_names.setdefault(pair, len(self.part_names)) for pair in part["names"]], np.int64)
        for key, entries in part["entries"].items():
            for block in entries.sealed():
                block.prefixes = numbers
            mine = self.entries.get(key)
            if mine is None:
                self.entries[key] = entries
            else:
                mine.absorb(entries)
        store, keys = part["store"], part["point_keys"]
        renumbered = (
            np.array([self.point_keys.pair(cat, name) for cat, name in keys.pair_list] or [0], np.int32),
            np.array([self.point_keys.other_id(fid) for fid in keys.id_list] or [0], np.int64),
        )
        for key, points in part["points"].items():
            for block in points.sealed():
                block.renumbered = renumbered
            self.points[key].absorb(points)
        for key, samples in part["samples"].items():
            self.samples[key].extend(samples.loaded(store))
        for (tag, origin, thread), found in part["marks"].items():
            for start, end in found:
                self.mark(tag, origin, thread, start, end)
        self.marks_over.update(part["marks_over"])
        self._parts = max(self._parts, index + 1)

    def intern_parts(self) -> None:
        """Once every part is in: the names of all, encoded by this layout's writer in order of
        first appearance (as a read of the whole file encodes them); ordinals go on after the
        parts'."""
        self.part_prefixes = byte_table([self.prefix(name, cat) for name, cat in self.part_names])
        self._ordinals = itertools.count(self._parts << 44)
        self.ordinal = self._ordinals.__next__

    def discard_parts(self, recipe: dict[str, Any], count: int) -> None:
        """The run files of parts not taken (the file is read whole instead)."""
        for index in range(count):
            (recipe["directory"] / f"{recipe['name']}.{index}.runs").unlink(missing_ok=True)

    def reset(self) -> None:
        """Forget every event handed over so far (the source reads the file again)."""
        for buf in self._buffers():
            buf.discard()
        self.marks.clear()
        self._merged_sizes.clear()

    def _buffers(self) -> list[Any]:
        """Every buffer of the file: slices and instants, flow points, counter samples."""
        return [*self.entries.values(), *self.points.values(), *self.samples.values()]

    def buffer(self, origin: OriginKey, thread: ThreadKey) -> ThreadEntries:
        """The entry list of one (origin, thread); sources append ``(start, -dur, kind, ordinal, body)``."""
        key = (origin, thread)
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = ThreadEntries()
        return found

    def add_entries(self, origin: OriginKey, thread: ThreadKey, block: Block) -> None:
        """Entries given as columns (see :func:`tracemerge.entries.entry_block`)."""
        self.buffer(origin, thread).add_block(block)

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
        buffers = self._buffers()
        if sum(buf.held if hasattr(buf, "held") else len(buf) for buf in buffers) > (
            self.budget if limit is None else limit
        ):
            for buf in buffers:
                buf.spill(self.store)
            return
        for buf in buffers:
            if hasattr(buf, "maybe_seal"):
                buf.maybe_seal()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key events whose origin is only known once the whole file is read (per-pid roles)."""
        self.entries = _regrouped(self.entries, lambda k: (origin_of(k[0], k[1]), k[1]))
        self.points = _PointsByThread(self.point_keys, _regrouped(self.points, lambda k: (origin_of(k[0], k[1]), k[1])))
        self.samples = defaultdict(
            SortedBuffer, _regrouped(self.samples, lambda k: (origin_of(k[0], k[1]), k[1], k[2]))
        )
        marks: dict[tuple[str, OriginKey, ThreadKey], list[tuple[int, int]]] = {}
        for (tag, origin, thread), found in self.marks.items():
            marks.setdefault((tag, origin_of(origin, thread), thread), []).extend(found)
        self.marks = marks

    def sorted_starts(self, origin: OriginKey, thread: ThreadKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A thread's entries in the walk's order, as (starts, kinds, ordinals)."""
        keys = self.buffer(origin, thread).keys(self.store)
        order = walk_order(keys["starts"], keys["negdurs"], keys["kinds"], keys["ordinals"])
        return keys["starts"][order], keys["kinds"][order], keys["ordinals"][order]

    def threads_in_order(self, buffers: dict) -> list[tuple[tuple[OriginKey, ThreadKey], Any]]:
        """The (key, buffer) pairs of ``entries`` or ``points`` in the order their threads were
        first met in the file (whatever the order the source handed them over in)."""
        return sorted(buffers.items(), key=lambda item: item[1].first)

    def sorted_points(self, origin: OriginKey, thread: ThreadKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A thread's flow points in (time, phase, ordinal) order, as (times, phases, bind_next)."""
        cols = self.points[(origin, thread)].columns(self.store)
        order = np.lexsort((cols["ordinals"], cols["phases"], cols["ts"]))
        return cols["ts"][order], cols["phases"][order], cols["bind_next"][order]

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

        spans = [entries.span() for entries in self.entries.values() if entries.total]
        firsts = [lo for lo, _ in spans] + [buf.smallest()[0] for buf in self.samples.values() if buf.total]
        if not firsts:
            return result
        result.ts_min = min(firsts)
        shift = -result.ts_min if ts_shift is None else ts_shift
        if keep is not None:
            self._leave_out(ident, keep, result)
        if summary_only:
            return self._summary(ident, result)
        if self.store.size or self._parts:  # too large to hold: what is still held goes too, to make room
            self.check_memory(0)
        attached = bind_flows(
            self.threads_in_order(self.points),
            self.entries,
            self.point_keys,
            self.store,
            ident,
            result,
            flow_id_base,
            times,
        )
        busiest = max(self.threads_in_order(self.entries), key=lambda item: item[1].total, default=None)
        if busiest is not None and busiest[1].total:
            (origin, thread), _ = busiest
            self.enc.default_track(tracks.thread(ident(origin), thread).uuid)
        hi = result.ts_min
        for (origin, thread), entries in self.threads_in_order(self.entries):
            if not entries.total:
                continue
            who = ident(origin)
            result.threads[who].add(thread)
            track = tracks.thread(who, thread)
            walk = ThreadWalk(
                self.enc,
                self.store,
                self.part_prefixes,
                entries,
                track,
                attached.get((origin, thread)),
                shift,
                result,
                who,
            )
            hi = max(hi, walk.run(times))
        counter = self.enc.counter
        store = self.store
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
        for (origin, thread), entries in self.threads_in_order(self.entries):
            if entries.total:
                result.threads[ident(origin)].add(thread)
                hi = max(hi, entries.span()[1])
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
                result.filtered[f"{what} of processes outside --roles/--ranks/--where"] += buffers.pop(key).total


class _PointsByThread(dict):
    """The flow points of each (origin, thread), made as first asked for."""

    def __init__(self, keys: PointKeys, items: dict | None = None) -> None:
        super().__init__(items or {})
        self.keys = keys

    def __missing__(self, key: tuple) -> ThreadPoints:
        found = self[key] = ThreadPoints(self.keys)
        return found


def _regrouped(buffers: dict, rekey: Callable[[tuple], tuple]) -> dict:
    out: dict[tuple, Any] = {}
    for key, buf in buffers.items():
        target = out.get(rekey(key))
        if target is None:
            out[rekey(key)] = buf
        else:
            target.absorb(buf)
    return out


__all__ = ["Encoder", "FileLayout", "Items", "LayoutResult", "Tracks"]
