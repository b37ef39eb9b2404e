"""Normalization of Chrome trace-event objects, shared by every source that carries them.

Kineto (torch.profiler) JSON, Ascend's ``trace_view.json`` and AReaL's perf-tracer JSONL all hold
the same event objects. They are decoded by msgspec into :class:`TraceEvent` structs (args stay
raw JSON per key), and :class:`ChromeEvents` hands them to the file's
:class:`~tracemerge.layout.FileLayout`, keeping every event or counting it under a reason.
Timestamps become integer nanoseconds of the file's own clock.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from tracemerge.anchors import DEVICE_COMM, device_tag
from tracemerge.bounds import DEEP_FROM, TOO_DEEP, bounded_args
from tracemerge.layout import FileLayout
from tracemerge.model import NO_ORIGIN, FlowPhase, Kind, OriginKey, ThreadInfo, ThreadKey
from tracemerge.sources.chrome_batch import add_columns
from tracemerge.stats import Losses, Stat
from tracemerge.units import FLOAT_EXACT_LIMIT_US, checked_ns, decimal_text_to_int

# Categories Kineto puts on device (GPU/XPU/MTIA) timelines.
DEVICE_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "Kernel", "Memcpy", "Memset"}
)
# Of those, the device's work itself: kernels, memory copies and sets (device activity).
ACTIVITY_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
_DEVICE_LABEL = re.compile(r"^([A-Za-z]+) (\d+)$")
_FLOW_PHASES = {"s": FlowPhase.START, "t": FlowPhase.STEP, "f": FlowPhase.END}
_FLOW_PHASE_NUMBERS = {ph: int(phase) for ph, phase in _FLOW_PHASES.items()}
# Flow v2: a slice's bind_id with (flow_in, flow_out), as Perfetto's JSON importer binds it.
_BOUND_PHASES = {(False, True): FlowPhase.START, (True, True): FlowPhase.STEP, (True, False): FlowPhase.END}
# A bind_id as text: leading spaces (the only white space JSON text holds unescaped; Perfetto reads
# no id from a string with an escape), a sign, "0x" (alone it reads as 0), hexadecimal digits.
_HEX_ID = re.compile(r" *([+-]?)(?:0[xX]([0-9a-fA-F]*)|([0-9a-fA-F]+))")
_INT64, _UINT64 = 1 << 63, 1 << 64
# Numbers written as text, which Perfetto also draws as counter values.
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_SPECIAL_PIDS = {"Spans": "Profiler spans", "Traces": "Profiler iterations", "": "Profiler"}
_METADATA_NAMES = frozenset(
    {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
)
SLICE, INSTANT = int(Kind.SLICE), int(Kind.INSTANT)
_LIMIT = FLOAT_EXACT_LIMIT_US
# Floats of µs this large are out of range (tracemerge.units.NS_MAX) whatever text they were read from.
_BEYOND_ANY_CLOCK_US = 1e16


# Batches this large are normalised column by column.
_COLUMNS_FROM = 64
_NO_ARGS = msgspec.Raw(b"")
_UNSEEN = object()


class TraceEvent(msgspec.Struct, gc=False):
    """One Chrome trace event as Kineto writes it; args stay raw JSON text."""

    ph: str | None = None
    name: str = ""
    cat: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | str | None = None
    dur: int | float | str | None = None
    id: int | str | None = None
    bp: str | None = None
    args: msgspec.Raw = _NO_ARGS
    # Rare fields, absent from most events (an absent field costs nothing to decode).
    id2: Any = None
    bind_id: Any = None
    flow_in: Any = None
    flow_out: Any = None


class LenientEvent(msgspec.Struct, gc=False):
    """Any JSON object: the fallback for a batch whose fields do not have the usual types."""

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    id2: Any = None
    bp: Any = None
    args: msgspec.Raw = _NO_ARGS
    bind_id: Any = None
    flow_in: Any = None
    flow_out: Any = None


class ExactEvent(LenientEvent, gc=False):
    """A Chrome event whose times are kept as their JSON text (absolute µs with decimals)."""

    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")


class NeedsExactTimes(Exception):
    """A float timestamp too large to hold its nanoseconds: the file must be decoded from text."""


def us_to_ns(value: Any) -> int:
    """Microseconds (int, float or decimal text) to integer ns; exact (see tracemerge.units);
    ValueError for a value no trace can hold."""
    return checked_ns(_us_to_ns(value))


def _us_to_ns(value: Any) -> int:
    t = type(value)
    if t is float:
        if -FLOAT_EXACT_LIMIT_US < value < FLOAT_EXACT_LIMIT_US:  # checked first: 1e308 * 1000 overflows
            guess = round(value * 1000)
            if guess / 1000 == value:
                return guess
            return decimal_text_to_int(repr(value), 3)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value!r}")
        if abs(value) >= _BEYOND_ANY_CLOCK_US:  # out of range whatever its text: no exact read
            raise ValueError(f"timestamp beyond 64 bits ({value!r} us)")
        raise NeedsExactTimes
    if t is int:
        return value * 1000
    if t is str:
        return decimal_text_to_int(value, 3)
    if t is msgspec.Raw:
        text = bytes(value)
        if text == b"null":
            raise ValueError("no timestamp")
        if text[:1] == b'"':
            text = msgspec.json.decode(text)
            return decimal_text_to_int(text, 3)
        return decimal_text_to_int(text.decode(), 3)
    raise ValueError(f"not a timestamp: {value!r}")


def _hashable(value: Any) -> Any:
    if type(value) is list or type(value) is dict:
        return str(value)
    if type(value) is str and value.isdigit() and (len(value) == 1 or value[0] != "0"):
        return int(value)  # Perfetto's JSON importer takes "25738" and 25738 for one thread
    return value


class ChromeEvents:
    """Hands Chrome trace events of one file to its layout and collects thread names.

    ``base_ns`` is added to every converted timestamp (0 for sources whose times are the
    file's clock as written). Thread keys are the raw ``(pid, tid)`` pairs; :meth:`threads`
    names them once all metadata events, wherever they were in the file, have been seen.
    """

    def __init__(self, layout: FileLayout, to_ns: Callable[[Any], int] = us_to_ns) -> None:
        self.layout = layout
        self.to_ns = to_ns
        self.dropped = Losses()
        self.metadata_records = 0
        self.process_names: dict[Any, str] = {}
        self.process_labels: dict[Any, str] = {}
        self.thread_names: dict[tuple, str] = {}
        self.device_pids: set[Any] = set()
        self.threads_seen: set[ThreadKey] = set()
        self.counter_threads: set[ThreadKey] = set()
        # B and E events per thread, paired once the whole file is read: (ts, file position, B | E args)
        self._pending: dict[tuple, list[tuple[int, int, Any]]] = {}
        self._buffers: dict[OriginKey, dict[tuple, list]] = {}
        self._points: dict[tuple, list] = {}
        # Flow v2 ends of slices, placed once every slice is known: (origin, thread, start, ordinal, phase, id)
        self._bound: list[tuple[OriginKey, ThreadKey, int, int, FlowPhase, int]] = []
        # Threads as the columnar path numbers them: each (pid, tid) as decoded, and its key.
        self._thread_index: dict[tuple, int] = {}
        self.thread_keys: list[ThreadKey] = []
        # The ids of the cached prefixes of device categories' pairs (as of that many cached).
        self._device_prefixes: set[int] = set()
        self._device_prefixes_of = 0
        self._activity_prefixes: dict[int, bool] = {}  # of those, device activity's: whether communication
        self._head_sizes: np.ndarray | None = None

    def add_batch(
        self, batch: list, origin: OriginKey = NO_ORIGIN, plain_text: bool = False, bind_ids: bool = True
    ) -> None:
        """The hot path: complete events and flow points of a typed batch as columns
        (:mod:`tracemerge.sources.chrome_batch`), the rest one by one (:meth:`add_each`).

        ``plain_text`` says the batch's JSON holds no ``null`` and no integer too large for
        int64, so args text can be written as it is; ``bind_ids`` False that no event binds a
        flow (v2).
        """
        if len(batch) >= _COLUMNS_FROM and type(batch[0]) is TraceEvent:
            add_columns(self, batch, origin, plain_text, bind_ids)
        elif batch:
            self.add_each(batch, origin, plain_text)

    def thread_indexes(self, keys: list[tuple]) -> np.ndarray:
        """Each (pid, tid) as decoded, as an index into :attr:`thread_keys`."""
        try:
            return np.fromiter(map(self._thread_index.get, keys), np.int32, len(keys))
        except TypeError:  # a thread met for the first time
            return np.fromiter(map(self._thread_of, keys), np.int32, len(keys))

    def _thread_of(self, key: tuple) -> int:
        found = self._thread_index.get(key)
        if found is None:
            pid, tid = key
            thread = (_hashable(pid), _hashable(tid))
            self.threads_seen.add(thread)
            found = self._thread_index[key] = len(self.thread_keys)
            self.thread_keys.append(thread)
        return found

    def head_sizes(self, heads: tuple[bytes, ...]) -> np.ndarray:
        """The length of each of an encoder's args heads (see Encoder.args_heads)."""
        if self._head_sizes is None:
            self._head_sizes = np.fromiter(map(len, heads), np.int64, len(heads))
        return self._head_sizes

    def note_devices(self, threads: np.ndarray, prefixes: list[bytes]) -> None:
        """Pids that hold events of device categories are devices (``prefixes``: each event's
        encoded name and category, one object per pair as the layout caches them)."""
        cached = self.layout.prefixes
        if len(cached) > self._device_prefixes_of:  # the cache only grows: the pairs added since
            added = itertools.islice(cached.items(), self._device_prefixes_of, None)
            added = [(name, cat, id(p)) for (name, cat), p in added if cat in DEVICE_CATEGORIES]
            self._device_prefixes.update(p for _, _, p in added)
            for name, cat, p in added:
                if cat in ACTIVITY_CATEGORIES:
                    self._activity_prefixes[p] = device_tag(name) == DEVICE_COMM
            self._device_prefixes_of = len(cached)
        if self._device_prefixes:
            contained = self._device_prefixes.__contains__
            self._note_device_threads(threads, np.fromiter(map(contained, map(id, prefixes)), bool, len(prefixes)))

    def activity_rows(
        self, prefixes: list[bytes], watched: np.ndarray | None, xs: list
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Which rows are device activity: compute, and a collective's device work (None: none).
        Rows of watched names (never cached) are told by their name and category."""
        compute = comm = None
        if self._activity_prefixes:
            kinds = list(map(self._activity_prefixes.get, map(id, prefixes)))  # None: not activity
            compute = np.fromiter(map(operator.is_, kinds, itertools.repeat(False)), bool, len(kinds))
            if True in kinds:  # communication not watched as evidence (a send or receive)
                comm = np.fromiter(map(operator.is_, kinds, itertools.repeat(True)), bool, len(kinds))
        if watched is not None and watched.any():
            for row in np.flatnonzero(watched).tolist():
                if xs[row].cat in ACTIVITY_CATEGORIES:
                    if device_tag(xs[row].name) == DEVICE_COMM:
                        comm = np.zeros(len(prefixes), bool) if comm is None else comm
                        comm[row] = True
                    else:
                        compute = np.zeros(len(prefixes), bool) if compute is None else compute
                        compute[row] = True
        return (compute if compute is not None and compute.any() else None), comm

    def note_device_rows(self, threads: np.ndarray, cats: list[str]) -> None:
        """Pids of rows whose category (one each) is a device category are devices."""
        self._note_device_threads(threads, np.fromiter(map(DEVICE_CATEGORIES.__contains__, cats), bool, len(cats)))

    def _note_device_threads(self, threads: np.ndarray, on_device: np.ndarray) -> None:
        if on_device.any():
            for n in np.flatnonzero(np.bincount(threads[on_device])).tolist():
                self.device_pids.add(self.thread_keys[n][0])

    def add_each(self, batch: list, origin: OriginKey = NO_ORIGIN, plain_text: bool = False) -> None:
        """Events one by one: complete events and flow points inline, every other phase through
        :meth:`add`."""
        layout = self.layout
        prefixes, prefix = layout.prefixes, layout.prefix
        args_field = layout.enc.args
        heads = layout.enc.args_heads if plain_text else ()
        n_heads = len(heads)
        n_short = min(n_heads, DEEP_FROM)  # longer args may nest too deep: looked at first
        ordinal = layout.ordinal
        buffers = self._buffers.get(origin)
        if buffers is None:
            buffers = self._buffers[origin] = {}
        add = self.add
        device_pids = self.device_pids
        points = self._points
        flow_phases = _FLOW_PHASE_NUMBERS
        # The last (pid, tid) as decoded, its thread key and buffer: events come in runs on one
        # thread. Only typed batches use it: their pid and tid are int, str or None, which are
        # equal only where their thread keys are.
        last_pid: Any = _UNSEEN
        last_tid: Any = _UNSEEN
        key_pid = key_tid = buf = None
        cached = bool(batch) and type(batch[0]) is TraceEvent
        for e in batch:
            ph = e.ph
            if ph != "X":
                phase = flow_phases.get(ph)
                ts, fid = e.ts, e.id
                if phase is None or type(ts) is not float or type(fid) is not int or not -_LIMIT < ts < _LIMIT:
                    add(e, origin)
                    continue
                start = round(ts * 1000)
                if start / 1000 != ts:
                    add(e, origin)
                    continue
                pid, tid = e.pid, e.tid
                if type(tid) is str or type(pid) is str:
                    pid, tid = _hashable(pid), _hashable(tid)
                pts = points.get((origin, pid, tid))
                if pts is None:
                    pts = self._new_points(origin, pid, tid)
                pts.append((start, phase, ordinal(), (e.cat, e.name, fid), ph == "f" and e.bp != "e"))
                continue
            pid, tid = e.pid, e.tid
            if tid == last_tid and pid == last_pid:
                pid, tid = key_pid, key_tid
            else:
                if cached:
                    last_pid, last_tid = pid, tid
                if type(tid) is str or type(pid) is str:
                    pid, tid = _hashable(pid), _hashable(tid)
                buf = buffers.get((pid, tid))
                if buf is None:
                    buf = buffers[(pid, tid)] = self._new_buffer(origin, pid, tid)
                key_pid, key_tid = pid, tid
            ts, dur = e.ts, e.dur
            # Float µs below 2**43 identify their 3-decimal text: check the rounded guess.
            if type(ts) is float and type(dur) is float and -_LIMIT < ts < _LIMIT and 0 <= dur < _LIMIT:
                start, length = round(ts * 1000), round(dur * 1000)
                if start / 1000 != ts or length / 1000 != dur:
                    start, length = self.to_ns(ts), self.to_ns(dur)
            else:
                try:
                    start, length = self.to_ns(ts), self.to_ns(dur)
                    checked_ns(start + length)  # an end no trace can hold: the duration is out of range
                except NeedsExactTimes:
                    raise
                except (ValueError, TypeError):
                    self._bad_complete(e)
                    continue
                if length < 0:
                    self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event with negative dur")
                    continue
            name, cat = e.name, e.cat
            if cat in DEVICE_CATEGORIES:
                device_pids.add(pid)
                if cat in ACTIVITY_CATEGORIES and type(name) is str:
                    layout.mark(device_tag(name), origin, (pid, tid), start, start + length)
            body = prefixes.get((name, cat))
            if body is None:
                name, cat = _text(name), _text(cat)
                body = prefix(name, cat)
                layout.note(name, origin, (pid, tid), start, length)
            args = e.args  # raw JSON text, joined as it is (no copy to bytes first)
            n = len(args)
            if 2 < n < n_short:
                body = b"".join((body, heads[n], args))
            elif n > 2:
                args = self.bounded(args)
                n = len(args)
                body += b"".join((heads[n], args)) if n < n_heads else args_field(bytes(args))
            if e.bind_id is not None:
                slice_ordinal = ordinal()
                buf.append((start, -length, SLICE, slice_ordinal, body))
                self._bind(e, origin, (pid, tid), start, slice_ordinal)
                continue
            buf.append((start, -length, SLICE, ordinal(), body))

    def bounded(self, args: Any) -> Any:
        """Long args text with its values nested too deep replaced (as long), each counted."""
        if type(args) is dict:
            return args
        text, cut = bounded_args(args)
        if cut:
            self.dropped.add(Stat.VALUE_TOO_DEEP, cut, TOO_DEEP)
        return text

    def _new_points(self, origin: OriginKey, pid: Any, tid: Any) -> list:
        thread = (pid, tid)
        self.threads_seen.add(thread)
        pts = self._points[(origin, pid, tid)] = self.layout.points[(origin, thread)]
        return pts

    def _new_buffer(self, origin: OriginKey, pid: Any, tid: Any) -> list:
        thread = (pid, tid)
        self.threads_seen.add(thread)
        return self.layout.buffer(origin, thread)

    def _bind(self, e: Any, origin: OriginKey, thread: ThreadKey, start: int, ordinal: int) -> None:
        """Notes the flow v2 end of a slice (its ``bind_id``), placed by :meth:`_place_bound`."""
        phase = _BOUND_PHASES.get((_flag(e.flow_in), _flag(e.flow_out)))
        fid = _bind_id(e.bind_id)
        if phase is None:
            self.dropped.add(Stat.FLOW_WITHOUT_DIRECTION, 1, "bind_id flow on a slice without flow_in or flow_out")
        elif fid is None:
            self.dropped.add(
                Stat.FLOW_WITHOUT_ID,
                1,
                "bind_id flow event without id (bind_id neither an integer nor hexadecimal text)",
            )
        else:
            self._bound.append((origin, thread, start, ordinal, phase, fid))

    def _bad_complete(self, e: Any) -> None:
        if e.ts is None:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event without ts")
        elif e.dur is None:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event without dur")
        else:
            try:
                self.to_ns(e.ts)
            except (ValueError, TypeError):
                self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event with unreadable ts")
                return
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event with unreadable dur")

    def add(self, e: Any, origin: OriginKey = NO_ORIGIN) -> None:
        ph = e.ph
        if ph == "X":
            self.add_each([e], origin)
        elif ph == "M":
            self._add_metadata(e)
        elif ph in ("i", "I", "R"):
            self._add_instant(e, origin)
        elif ph in _FLOW_PHASES:
            self._add_flow(e, origin, ph)
        elif ph == "C":
            self._add_counter(e, origin)
        elif ph == "B":
            self._add_begin(e, origin)
        elif ph == "E":
            self._add_end(e)
        elif ph is None:
            self.dropped.add(Stat.PHASE_UNSUPPORTED, 1, "event without ph")
        else:
            self.dropped.add(Stat.PHASE_UNSUPPORTED, 1, f"unsupported phase {ph!r}")

    # -- event kinds -------------------------------------------------------------------------

    def _ts(self, e: Any) -> int | None:
        ts = e.ts
        if ts is None:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{e.ph} event without ts")
            return None
        try:
            return self.to_ns(ts)
        except NeedsExactTimes:
            raise
        except (ValueError, TypeError):
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{e.ph} event with unreadable ts")
            return None

    @staticmethod
    def _thread(e: Any) -> ThreadKey:
        return (_hashable(e.pid), _hashable(e.tid))

    def _add_instant(self, e: Any, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        thread = self._thread(e)
        self.threads_seen.add(thread)
        body = self.layout.describe(_text(e.name), _text(e.cat), plain_args(self.bounded(e.args)))
        self.layout.buffer(origin, thread).append((ts, 0, INSTANT, self.layout.ordinal(), body))

    def _add_begin(self, e: Any, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        if e.bind_id is not None:
            self.dropped.add(Stat.FLOW_V2_UNBOUND, 1, "bind_id flow on a B event (only X slices bind flows here)")
        thread = self._thread(e)
        pending = self._pending.setdefault(thread, [])
        pending.append((ts, len(pending), (origin, _text(e.name), _text(e.cat), plain_args(self.bounded(e.args)))))

    def _add_end(self, e: Any) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        thread = self._thread(e)
        pending = self._pending.setdefault(thread, [])
        pending.append((ts, len(pending), plain_args(self.bounded(e.args))))

    def _pair_begin_end(self) -> None:
        """Match B and E events per thread in time order (file order breaks ties), as viewers do."""
        for thread, records in self._pending.items():
            records.sort(key=lambda r: (r[0], r[1]))
            stack: list[tuple[int, tuple]] = []
            for ts, _, item in records:
                if type(item) is tuple:
                    stack.append((ts, item))
                elif not stack:
                    self.dropped.add(Stat.BEGIN_END_UNMATCHED, 1, "E event without matching B")
                else:
                    start, (origin, name, cat, args) = stack.pop()
                    if item:
                        args = {**(args or {}), **item}
                    self.threads_seen.add(thread)
                    body = self.layout.describe(name, cat, args)
                    self.layout.buffer(origin, thread).append((start, start - ts, SLICE, self.layout.ordinal(), body))
                    self.layout.note(name, origin, thread, start, ts - start)
            if stack:
                self.dropped.add(Stat.BEGIN_END_UNMATCHED, len(stack), "B event without matching E")
        self._pending.clear()

    def _add_flow(self, e: Any, origin: OriginKey, ph: str) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        fid = e.id
        if fid is None:
            fid = e.id2
        if fid is None or type(fid) is list:
            self.dropped.add(Stat.FLOW_WITHOUT_ID, 1, f"{ph} flow event without id")
            return
        if type(fid) is dict:
            fid = tuple(sorted((str(k), str(v)) for k, v in fid.items()))
        fid = _hashable(fid)
        name, cat = _text(e.name), _text(e.cat)
        thread = self._thread(e)
        self.threads_seen.add(thread)
        bind_next = ph == "f" and e.bp != "e"
        self.layout.flow_point(origin, thread, ts, _FLOW_PHASES[ph], (cat, name, fid), bind_next)

    def _counter_args(self, e: Any) -> tuple[str, dict | None]:
        """A C event's name and its series: arg key → value."""
        name = _text(e.name)
        if e.id is not None:
            name = f"{name} {e.id}"
        return name, plain_args(self.bounded(e.args))

    def _add_counter(self, e: Any, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        name, args = self._counter_args(e)
        if not args:
            self.dropped.add(Stat.COUNTER_WITHOUT_VALUE, 1, "C event without a numeric value")
            return
        thread = (_hashable(e.pid), None)
        for key, value in args.items():
            number = _counter_value(value)
            if number is None:
                number_text = type(value) is str and _NUMBER_TEXT.fullmatch(value)
                kind = "beyond a double" if type(value) is int or number_text else _json_kind(value)
                self.dropped.add(Stat.COUNTER_VALUE_NOT_NUMBER, 1, f"C event value that is not a number ({kind})")
                continue
            self.layout.counter_sample(origin, thread, counter_series(name, key), ts, number)
            self.counter_threads.add(thread)

    def _add_metadata(self, e: Any) -> None:
        self.metadata_records += 1
        name = e.name
        args = plain_args(self.bounded(e.args)) or {}
        pid = _hashable(e.pid)
        if name == "process_name":
            self.process_names[pid] = _text(args.get("name"))
        elif name == "process_labels":
            self.process_labels[pid] = _text(args.get("labels"))
        elif name == "thread_name":
            self.thread_names[(pid, _hashable(e.tid))] = _text(args.get("name"))
        elif name not in _METADATA_NAMES:
            self.dropped.add(Stat.METADATA_UNSUPPORTED, 1, f"unsupported metadata record {name!r}")
            self.metadata_records -= 1

    # -- a file read in parts (tracemerge.sources.json_segments) -----------------------------

    def part_state(self) -> dict[str, Any]:
        """What this reader of one part of a file learnt, for the reader of the whole."""
        return {
            "dropped": self.dropped,
            "metadata_records": self.metadata_records,
            "process_names": self.process_names,
            "process_labels": self.process_labels,
            "thread_names": self.thread_names,
            "device_pids": self.device_pids,
            "threads_seen": self.threads_seen,
            "counter_threads": self.counter_threads,
            "pending": self._pending,
            "bound": self._bound,
        }

    def absorb(self, part: dict[str, Any]) -> None:
        """Takes what the reader of the file's next part learnt (:meth:`part_state`), as if it
        had read those events itself, after the ones before."""
        self.dropped.update(part["dropped"])
        self.metadata_records += part["metadata_records"]
        self.process_names.update(part["process_names"])
        self.process_labels.update(part["process_labels"])
        self.thread_names.update(part["thread_names"])
        self.device_pids |= part["device_pids"]
        self.threads_seen |= part["threads_seen"]
        self.counter_threads |= part["counter_threads"]
        for thread, records in part["pending"].items():
            mine = self._pending.setdefault(thread, [])
            first = len(mine)
            mine.extend((ts, first + n, item) for ts, n, item in records)
        self._bound.extend(part["bound"])

    # -- results -----------------------------------------------------------------------------

    def finish(self) -> None:
        self._pair_begin_end()
        self._place_bound()

    def _place_bound(self) -> None:
        """Flow v2 points, each at its slice's start where the flow binding finds that slice: bound
        to the innermost slice open there when it is that one, else to the next slice starting
        there when it is the outermost of those (and no point bound to the innermost one at that
        time comes first and takes them). A slice between others that start with it is not bound to."""
        by_thread: dict[tuple, list[tuple]] = defaultdict(list)
        for origin, thread, start, ordinal, phase, fid in self._bound:
            by_thread[(origin, thread)].append((start, ordinal, phase, fid))
        self._bound.clear()
        for (origin, thread), flows in by_thread.items():
            outermost, innermost = self._slices_starting(origin, thread, {start for start, *_ in flows})
            inner = [(start, phase, fid) for start, ordinal, phase, fid in flows if innermost[start] == ordinal]
            outer = [
                (start, phase, fid)
                for start, ordinal, phase, fid in flows
                if outermost[start] == ordinal != innermost[start]
            ]
            unbound = len(flows) - len(inner) - len(outer)
            if outer:
                # Points sort by (time, phase, ordinal): the inner ones, added after, come first only
                # with a lower phase; points read before, with a phase as low.
                first = self._taken_times(origin, thread)
                for start, phase, _ in inner:
                    first[start].append(phase + 1)  # blocks only a higher phase
                for start, phase, fid in outer:
                    if any(p <= phase for p in first.get(start, ())):
                        unbound += 1
                    else:
                        self.layout.flow_point(origin, thread, start, phase, (None, None, fid), True)
            for start, phase, fid in inner:
                self.layout.flow_point(origin, thread, start, phase, (None, None, fid), False)
            if unbound:
                self.dropped.add(
                    Stat.FLOW_V2_UNBOUND,
                    unbound,
                    "bind_id flow on a slice nested in one that starts with it (not bound)",
                )

    def _slices_starting(self, origin: OriginKey, thread: ThreadKey, starts: set[int]) -> tuple[dict, dict]:
        """Per start in ``starts``: the ordinal of the first slice (in order, the outermost) and of
        the last (the innermost) starting then on the thread."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for start, kind, ordinal in zip(*(c.tolist() for c in self.layout.sorted_starts(origin, thread)), strict=True):
            if kind == SLICE and start in starts:
                first.setdefault(start, ordinal)
                last[start] = ordinal
        return first, last

    def _taken_times(self, origin: OriginKey, thread: ThreadKey) -> dict[int, list[int]]:
        """The phases of the thread's flow points bound to the innermost slice open at their time,
        per time: such a point takes the slices starting then from a later one bound to the next."""
        taken: dict[int, list[int]] = defaultdict(list)
        for ts, phase, bind_next in zip(*(c.tolist() for c in self.layout.sorted_points(origin, thread)), strict=True):
            if not bind_next:
                taken[ts].append(phase)
        return taken

    def device_label(self, pid: Any) -> str | None:
        """``"GPU 0"`` for a device pid, else None."""
        label = self.process_labels.get(pid, "")
        m = _DEVICE_LABEL.match(label)
        if m and m.group(1) != "CPU":
            return label
        if pid in self.device_pids:
            return f"GPU {pid}"
        return None

    def threads(self) -> dict[ThreadKey, ThreadInfo]:
        """Readable names and an in-process order for every thread that holds events."""
        keys = self.threads_seen | self.counter_threads
        cpu_pids = {pid for pid, _ in keys if type(pid) is int and pid >= 0 and self.device_label(pid) is None}
        return {key: self._thread_info(key[0], key[1], len(cpu_pids) > 1) for key in keys}

    def _thread_info(self, pid: Any, tid: Any, several_cpu_pids: bool) -> ThreadInfo:
        given = self.thread_names.get((pid, tid), "").strip()
        if tid is None:  # process-scoped counters
            label = self.device_label(pid)
            if label is None and pid in _SPECIAL_PIDS:
                label = _SPECIAL_PIDS[pid]
            elif label is None and type(pid) is str:
                label = pid
            return ThreadInfo(label or "", (3, str(pid)))
        if pid in _SPECIAL_PIDS:
            return ThreadInfo(_SPECIAL_PIDS[pid], (2, str(pid), str(tid)))
        if type(pid) is int and pid < 0:
            suffix = f" {tid}" if tid not in (0, "", None) else ""
            return ThreadInfo(f"Profiler overhead{suffix}", (2, str(pid), str(tid)))
        label = self.device_label(pid)
        if label is not None:
            if given.startswith("stream"):
                name = f"{label} {given}"
            else:
                name = f"{label} stream {tid}" + (f" ({given})" if given else "")
            return ThreadInfo(name, (1, str(pid).zfill(8), _order(tid)))
        if type(pid) is not int:
            return ThreadInfo(f"{pid} {tid}".strip(), (2, str(pid), str(tid)))
        if type(tid) is int and tid < 0 and given:
            name = given
        elif given.startswith("thread "):
            name = f"CPU {given}"
        elif given:
            name = f"CPU thread {tid} ({given})"
        else:
            name = f"CPU thread {tid}"
        if several_cpu_pids:
            name += f" · pid {pid}"
        main_first = 0 if tid == pid else 1
        return ThreadInfo(name, (0, pid, main_first, _order(tid)))


def _counter_value(value: Any) -> int | float | None:
    """A counter arg's value as a number: a number, or a number written as text (Perfetto draws
    those too); None for anything else."""
    t = type(value)
    if t is float:
        return value
    if t is int:
        return value if -_INT64 <= value < _INT64 else _as_double(value)
    if t is str and _NUMBER_TEXT.fullmatch(value):
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            return None
        return _counter_value(int(value)) if value.lstrip("-").isdigit() else number
    return None


def _as_double(value: int) -> float | None:
    """An integer beyond int64 as the double a counter holds (both writers write it alike); None
    beyond any double (10**400)."""
    try:
        return float(value)
    except OverflowError:
        return None


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    return {str: "text", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _flag(value: Any) -> bool:
    """A flow_in / flow_out value as Perfetto's importer reads it: JSON true (1 and "true" are not)."""
    return value is True


def _bind_id(value: Any) -> int | None:
    """A bind_id as Perfetto's importer reads it, as the unsigned 64-bit id it compares: an integer
    that fits 64 signed bits, or hexadecimal text; None for anything else (5.0 included)."""
    if type(value) is int:
        return value % _UINT64 if -_INT64 <= value < _INT64 else None
    if type(value) is str:
        return _hex_id(value)
    return None


def _hex_id(text: str) -> int | None:
    """Hexadecimal text as C's strtoull reads it whole (Perfetto's reading of a bind_id)."""
    match = _HEX_ID.fullmatch(text)
    if match is None:
        return None
    sign, prefixed, digits = match.groups()
    magnitude = int(prefixed or digits or "0", 16)
    if magnitude >= _UINT64:
        return _UINT64 - 1  # strtoull's value for one out of range, whatever its sign
    return -magnitude % _UINT64 if sign == "-" else magnitude


def counter_series(name: str, key: str) -> str:
    """The series one arg of a C event draws: ``<name> <key>``."""
    # "L2 Buffer Bw Level" with a value under that same key is one series, not its name twice.
    return name if key == name and " " in name else f"{name} {key}"


def plain_args(args: Any) -> dict | None:
    """An event's args as a dict of plain values (raw JSON text decoded)."""
    if type(args) is msgspec.Raw or type(args) is bytes:
        args = msgspec.json.decode(args) if args else None
    return args if type(args) is dict and args else None


def _order(value: Any) -> tuple:
    """Sort key that orders ints numerically (negatives by magnitude) before anything else."""
    if type(value) is int:
        return (0, abs(value), value)
    return (1, 0, str(value))


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if type(value) is str else str(value)
