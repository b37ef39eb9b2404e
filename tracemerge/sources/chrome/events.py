"""Normalization of Chrome trace-event objects, shared by every source that carries them.

Kineto (torch.profiler) JSON, Ascend's ``trace_view.json`` and AReaL's perf-tracer JSONL all hold
the same event objects. They are decoded by msgspec into :class:`TraceEvent` structs (args stay
raw JSON per key), and :class:`ChromeEvents` hands them to the file's
:class:`~tracemerge.store.file_layout.FileLayout`, keeping every event or counting it under a reason.
Timestamps become integer nanoseconds of the file's own clock.

This module holds the reader's state, its dispatch of a batch and its hot per-event path for
complete events; the other phases are :mod:`~tracemerge.sources.chrome.kinds`', flow v2 binding
:mod:`~tracemerge.sources.chrome.bound`'s, thread naming :mod:`~tracemerge.sources.chrome.threads`'
(each mixed into :class:`ChromeEvents`) and the column-wise path :mod:`~tracemerge.sources.chrome.batch`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from tracemerge.core.bounds import DEEP_FROM, TOO_DEEP, bounded_args
from tracemerge.core.model import NO_ORIGIN, FlowPhase, OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import FLOAT_EXACT_LIMIT_US, checked_ns
from tracemerge.evidence.anchors import DEVICE_COMM, device_tag
from tracemerge.sources.chrome.batch import add_columns
from tracemerge.sources.chrome.bound import BoundFlows
from tracemerge.sources.chrome.kinds import FLOW_PHASES, SLICE, EventKinds
from tracemerge.sources.chrome.schema import NeedsExactTimes, TraceEvent, us_to_ns
from tracemerge.sources.chrome.threads import ThreadNames
from tracemerge.sources.chrome.values import as_text, hashable_id
from tracemerge.store.file_layout import FileLayout

# Categories Kineto puts on device (GPU/XPU/MTIA) timelines.
DEVICE_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "Kernel", "Memcpy", "Memset"}
)
# Of those, the device's work itself: kernels, memory copies and sets (device activity).
ACTIVITY_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
_FLOW_PHASE_NUMBERS = {ph: int(phase) for ph, phase in FLOW_PHASES.items()}
_LIMIT = FLOAT_EXACT_LIMIT_US
# What an event's (name, category) pair says of where it ran: not on a device, on one but not its
# work (an annotation, a sync), device compute (a kernel, a copy, a set), a collective's device work.
NOT_ON_DEVICE, ON_DEVICE, DEVICE_COMPUTE_ROW, DEVICE_COMM_ROW = -1, 0, 1, 2


# Batches this large are normalised column by column.
_COLUMNS_FROM = 64
_UNSEEN = object()


class ChromeEvents(EventKinds, BoundFlows, ThreadNames):
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
        # The (name, category) pairs of device categories among the layout's cached ones (as of
        # that many cached), each with what it says of its device (ON_DEVICE, DEVICE_COMPUTE_ROW, ...).
        self._device_pairs: dict[tuple, int] = {}
        self._device_pairs_of = 0
        self._head_sizes: np.ndarray | None = None

    def add_batch(
        self, batch: list, origin: OriginKey = NO_ORIGIN, plain_text: bool = False, bind_ids: bool = True
    ) -> None:
        """The hot path: complete events and flow points of a typed batch as columns
        (:mod:`tracemerge.sources.chrome.batch`), the rest one by one (:meth:`add_each`).

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
            thread = (hashable_id(pid), hashable_id(tid))
            self.threads_seen.add(thread)
            found = self._thread_index[key] = len(self.thread_keys)
            self.thread_keys.append(thread)
        return found

    def head_sizes(self, heads: tuple[bytes, ...]) -> np.ndarray:
        """The length of each of an encoder's args heads (see Encoder.args_heads)."""
        if self._head_sizes is None:
            self._head_sizes = np.fromiter(map(len, heads), np.int64, len(heads))
        return self._head_sizes

    def device_rows(
        self, threads: np.ndarray, pairs: list[tuple], watched: np.ndarray | None, xs: list
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Notes the pids of rows of device categories as devices (``pairs``: each row's name and
        category, ``threads`` its thread); returns which rows are device activity: compute, and a
        collective's device work (None: none). Rows of names watched as evidence (``watched``:
        their pairs are cached apart, see EventStore.watched_prefixes) are told by their name and
        category, one by one."""
        self._learn_device_pairs()
        compute = comm = None
        n = len(pairs)
        if self._device_pairs:
            kinds = np.fromiter(map(self._device_pairs.get, pairs, itertools.repeat(NOT_ON_DEVICE)), np.int8, n)
            self._note_device_threads(threads, kinds != NOT_ON_DEVICE)
            compute = kinds == DEVICE_COMPUTE_ROW
            comm = kinds == DEVICE_COMM_ROW
            if not comm.any():  # communication not watched as evidence (a send or receive)
                comm = None
        if watched is not None and watched.any():
            for row in np.flatnonzero(watched).tolist():
                if xs[row].cat in ACTIVITY_CATEGORIES:
                    if device_tag(xs[row].name) == DEVICE_COMM:
                        comm = np.zeros(n, bool) if comm is None else comm
                        comm[row] = True
                    else:
                        compute = np.zeros(n, bool) if compute is None else compute
                        compute[row] = True
        return (compute if compute is not None and compute.any() else None), comm

    def _learn_device_pairs(self) -> None:
        """The pairs of device categories among those the layout cached since last asked (its
        cache only grows), with what each says of its device."""
        cached = self.layout.prefixes
        if len(cached) > self._device_pairs_of:
            for name, cat in itertools.islice(cached, self._device_pairs_of, None):
                if cat in ACTIVITY_CATEGORIES:
                    comm = device_tag(name) == DEVICE_COMM
                    self._device_pairs[(name, cat)] = DEVICE_COMM_ROW if comm else DEVICE_COMPUTE_ROW
                elif cat in DEVICE_CATEGORIES:
                    self._device_pairs[(name, cat)] = ON_DEVICE
            self._device_pairs_of = len(cached)

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
        args_field = layout.encode_args
        heads = layout.args_heads if plain_text else ()
        n_heads = len(heads)
        n_short = min(n_heads, DEEP_FROM)  # longer args may nest too deep: looked at first
        ordinal = layout.ordinal
        buffers = self._buffers.get(origin)
        if buffers is None:
            buffers = self._buffers[origin] = {}
        add_point = self._add_point
        device_pids = self.device_pids
        # The last (pid, tid) as decoded, its thread key and buffer: events come in runs on one
        # thread. Only typed batches use it: their pid and tid are int, str or None, which are
        # equal only where their thread keys are.
        last_pid: Any = _UNSEEN
        last_tid: Any = _UNSEEN
        key_pid = key_tid = None
        buf: list = []  # the first event's thread's: last_pid is _UNSEEN until then
        cached = bool(batch) and type(batch[0]) is TraceEvent
        for e in batch:
            ph = e.ph
            if ph != "X":
                add_point(e, origin)
                continue
            pid, tid = e.pid, e.tid
            if tid == last_tid and pid == last_pid:
                pid, tid = key_pid, key_tid
            else:
                if cached:
                    last_pid, last_tid = pid, tid
                if type(tid) is str or type(pid) is str:
                    pid, tid = hashable_id(pid), hashable_id(tid)
                found = buffers.get((pid, tid))
                if found is None:
                    found = buffers[(pid, tid)] = self._new_buffer(origin, pid, tid)
                buf = found
                key_pid, key_tid = pid, tid
            ts, dur = e.ts, e.dur
            # Float µs below 2**43 identify their 3-decimal text: check the rounded guess.
            if type(ts) is float and type(dur) is float and -_LIMIT < ts < _LIMIT and 0 <= dur < _LIMIT:
                start, length = round(ts * 1000), round(dur * 1000)
                if start / 1000 != ts or length / 1000 != dur:
                    start, length = self.to_ns(ts), self.to_ns(dur)
            else:
                times = self._complete_times(e)
                if times is None:
                    continue
                start, length = times
            name, cat = e.name, e.cat
            if cat in DEVICE_CATEGORIES:
                device_pids.add(pid)
                if cat in ACTIVITY_CATEGORIES and type(name) is str:
                    layout.mark(device_tag(name), origin, (pid, tid), start, start + length)
                    layout.tally(origin, (pid, tid), name, start, length)
            body = prefixes.get((name, cat))
            if body is None:  # a pair met for the first time, or one whose name is watched (noted)
                name, cat = as_text(name), as_text(cat)
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
            slice_ordinal = ordinal()
            buf.append((start, -length, SLICE, slice_ordinal, body))
            if e.bind_id is not None:
                self._bind(e, origin, (pid, tid), start, slice_ordinal)

    def _add_point(self, e: Any, origin: OriginKey) -> None:
        """A flow point (v1) whose time is a float and id an integer, kept inline; any other event
        but a complete one through :meth:`add`."""
        ph = e.ph
        phase = _FLOW_PHASE_NUMBERS.get(ph)
        ts, fid = e.ts, e.id
        if phase is None or type(ts) is not float or type(fid) is not int or not -_LIMIT < ts < _LIMIT:
            self.add(e, origin)
            return
        start = round(ts * 1000)
        if start / 1000 != ts:
            self.add(e, origin)
            return
        pid, tid = e.pid, e.tid
        if type(tid) is str or type(pid) is str:
            pid, tid = hashable_id(pid), hashable_id(tid)
        pts = self._points.get((origin, pid, tid))
        if pts is None:
            pts = self._new_points(origin, pid, tid)
        pts.append((start, phase, self.layout.ordinal(), (e.cat, e.name, fid), ph == "f" and e.bp != "e"))

    def _complete_times(self, e: Any) -> tuple[int, int] | None:
        """A complete event's start and duration in ns read by ``to_ns`` (times other than floats
        whose 3-decimal value is exact); None, counted, when they cannot be read or the duration
        is negative."""
        try:
            start, length = self.to_ns(e.ts), self.to_ns(e.dur)
            checked_ns(start + length)  # an end no trace can hold: the duration is out of range
        except NeedsExactTimes:
            raise
        except (ValueError, TypeError):
            self._bad_complete(e)
            return None
        if length < 0:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event with negative dur")
            return None
        return start, length

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

    def start_over(self) -> None:
        """Forget what was read, the layout's events and marks too: the file is read again (the
        encoder's names stay, interned in the order a new read meets them)."""
        self.layout.reset()
        self.__init__(self.layout, self.to_ns)  # type: ignore[misc]

    # -- a file read in parts (tracemerge.sources.json.segments) -----------------------------

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
