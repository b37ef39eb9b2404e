"""Ascend text exports: ``ASCEND_PROFILER_OUTPUT/trace_view.json`` of a torch_npu / MindSpore run
and ``PROF_*/mindstudio_profiler_output/msprof_*.json`` of a bare msprof run.

Files are claimed by name and place alone (the files msprof writes beside msprof_*.json too:
``msprof_tx_*``, ``step_trace_*``), so that a damaged export is reported, and one whose events
another export of the run holds is named as not read (see ``ascend_layout.read_instead``). The
slices of a sliced msprof export (``msprof_slice_{i}_{ts}.json``) are read as one file; a damaged
slice is counted and the others are read.

Both are bare arrays of Chrome trace events with ``ts`` as a decimal string of epoch µs. Processes
are told apart by their ``process_name`` (Python, CANN, Ascend Hardware, HCCL, Overlap Analysis,
counters), never by decoding the pid, whose encoding changed between versions. MSTX markers (events
whose args carry ``event_type`` and ``domain``) go to an ``MSTX`` track with the domain as category.
Tracks are titled by :mod:`ascend_titles`, counters once the file is read (when every process is
named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.core.errors import InputError, NotATrace
from tracemerge.core.model import NO_ORIGIN, OriginKey, SourceData, ThreadInfo, ThreadKey
from tracemerge.core.stats import Stat
from tracemerge.evidence.anchors import ASCEND_HCCL_TASKS, MSTX, ascend_task_tag, phase_tag
from tracemerge.sources.ascend import dirs, exports
from tracemerge.sources.ascend.dirs import COUNTER_ORDER, MSTX_THREAD
from tracemerge.sources.ascend.recognise import TEXT_NAME as NAME
from tracemerge.sources.ascend.titles import (
    FRACTION_KEYS,
    counter_title,
    leave_out_zero_series,
    percent,
    retitled,
    slice_title,
)
from tracemerge.sources.chrome.events import ChromeEvents
from tracemerge.sources.chrome.files import read_events
from tracemerge.sources.chrome.kinds import INSTANT, SLICE
from tracemerge.sources.chrome.schema import ExactEvent, LenientEvent, TraceEvent, us_to_ns
from tracemerge.sources.chrome.values import as_text, counter_series, hashable_id, plain_args
from tracemerge.store.file_layout import FileLayout

HARDWARE = "Ascend Hardware"  # the process of the device's tasks, one thread per stream
_MARKERS = frozenset({"marker", "marker_ex", 0, 3, "0", "3"})
ACC_ID = "acc_id"
# In-process order of the Ascend layers; others follow.
_LAYER_ORDER = {
    "Python": 0,
    "Python GC": 1,
    "CANN": 2,
    "MSTX": 3,
    "Ascend Hardware": 4,
    "HCCL": 5,
    "Communication": 5,
    "Overlap Analysis": 6,
}


class AscendEvents(ChromeEvents):
    """Chrome events named the Ascend way: ``{process_name} · {thread_name}``."""

    def __init__(self, layout: FileLayout) -> None:
        super().__init__(layout)
        self.series_parts: dict[str, tuple[str, str]] = {}  # series -> msprof's event name and arg key
        # Events with a "Task Type": (origin, pid, tid, start, end, task type), device activity
        # once the file names its processes (their names may come last).
        self.tasks: list[tuple[OriginKey, Any, Any, int, int, object, str]] = []

    def add_batch(
        self, batch: list, origin: OriginKey = NO_ORIGIN, plain_text: bool = False, bind_ids: bool = True
    ) -> None:
        plain: list = []
        for e in batch:
            args = e.args
            raw = bytes(args) if e.ph == "X" and args else b""
            if b'"Task Type"' in raw:
                self._note_task(e, origin)
            if b'"event_type"' in raw:
                decoded = plain_args(self.bounded(args)) or {}
                if "event_type" in decoded and "domain" in decoded:
                    # In file order, so that names are interned the same whatever the batches.
                    super().add_batch(plain, origin, plain_text, bind_ids)
                    plain = []
                    self._add_mstx(e, decoded, origin)
                    continue
            plain.append(e)
        super().add_batch(plain, origin, plain_text, bind_ids)

    def _note_task(self, e: Any, origin: OriginKey) -> None:
        """Keeps a task's span and type (an event the slice path reads too: not counted here)."""
        try:
            start = self.to_ns(e.ts)
            end = start + us_to_ns(e.dur)
            task_type = (plain_args(self.bounded(e.args)) or {}).get("Task Type")
        except (ValueError, TypeError):
            return
        if end > start:
            self.tasks.append((origin, hashable_id(e.pid), hashable_id(e.tid), start, end, task_type, as_text(e.name)))

    def finish(self) -> None:
        """Device activity (:mod:`tracemerge.phases.device_time`): the tasks on the Ascend Hardware
        streams, HCCL's communication, the others compute but synchronisation (``ascend_task_tag``)."""
        super().finish()
        for origin, pid, tid, start, end, task_type, name in self.tasks:
            if self.process_of(pid) == HARDWARE:
                tag = ascend_task_tag(task_type, task_type in ASCEND_HCCL_TASKS)
                if tag is not None:
                    self.layout.mark(tag, origin, (pid, tid), start, end)
                    self.layout.tally(origin, (pid, tid), name, start, end - start)
        self.tasks.clear()

    def _counter_args(self, e: Any) -> tuple[str, dict | None]:
        name, args = super()._counter_args(e)
        if not args:
            return name, args
        if args.keys() == {ACC_ID, "value"}:
            # Acc PMU samples of every accelerator share one event name: one series per
            # accelerator (as msprof's earlier "acc_id N" events), the id never a value.
            name, args = f"{ACC_ID} {args[ACC_ID]}", {name: args["value"]}
        for key in args:
            self.series_parts.setdefault(counter_series(name, key), (name, key))
        if not FRACTION_KEYS.isdisjoint(args):
            args = {key: percent(value) if key in FRACTION_KEYS else value for key, value in args.items()}
        return name, args

    def counter_title(self, thread: ThreadKey, series: str) -> str:
        name, key = self.series_parts.get(series, (series, series))
        return counter_title(self.process_of(thread[0]), name, key)

    def process_of(self, pid: Any) -> str:
        return self.process_names.get(pid) or f"pid {pid}"

    def _add_mstx(self, e: Any, args: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        name, domain = str(e.name or ""), str(args.get("domain", ""))
        kind = INSTANT if args.get("event_type") in _MARKERS else SLICE
        dur = 0
        if kind == SLICE:
            try:
                dur = us_to_ns(e.dur if e.dur is not None else 0)
            except ValueError:
                self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "MSTX range with unreadable dur")
                return
        self.threads_seen.add(MSTX_THREAD)
        body = self.layout.describe(name, domain, args)
        self.layout.buffer(origin, MSTX_THREAD).append((ts, -dur, kind, self.layout.ordinal(), body))
        if kind == SLICE:  # an MSTX range is a phase its user named, and what the presets name it
            self.layout.mark(phase_tag(MSTX, name), origin, MSTX_THREAD, ts, ts + dur)
            self.layout.note(name, origin, MSTX_THREAD, ts, dur)

    def threads(self) -> dict[ThreadKey, ThreadInfo]:
        infos: dict[ThreadKey, ThreadInfo] = {}
        for key in self.threads_seen | self.counter_threads:
            if key == MSTX_THREAD:
                infos[key] = ThreadInfo("MSTX", (_LAYER_ORDER["MSTX"], "", 0, ""))
                continue
            pid, tid = key
            process = self.process_of(pid)
            if tid is None:  # counters: each titled whole (ascend_titles), after every slice track
                infos[key] = ThreadInfo("", (COUNTER_ORDER, process, 0, ""))
                continue
            order = _LAYER_ORDER.get(process, len(_LAYER_ORDER))
            thread = self.thread_names.get((pid, tid)) or f"Thread {tid}"
            tid_order = tid if type(tid) is int else 0
            infos[key] = ThreadInfo(slice_title(process, thread), (order, process, tid_order, str(tid)))
        return infos


def read(path: Path, layout: FileLayout) -> SourceData:
    exports.check_read_here(path)
    slices = exports.files_read(path)
    reader = AscendEvents(layout)
    if len(slices) == 1:
        _read_part(path, reader, TraceEvent, LenientEvent)
    else:
        _read_slices(slices, reader)
    reader.finish()
    layout.samples = retitled(layout.samples, reader.counter_title)
    leave_out_zero_series(layout, reader.dropped, lambda thread: reader.process_of(thread[0]))
    exports.note_not_read(path, reader.dropped)
    return dirs.source_data(path, NAME, reader.threads(), reader.dropped, reader.metadata_records)


def _read_slices(slices: list[Path], reader: AscendEvents) -> None:
    """Slices are read as one file, so that flows crossing a cut are kept. A damaged slice loses
    its events only: the others are read (the export was chosen because none other is whole)."""
    damaged: list[InputError] = []
    for part in slices:
        try:
            # Times are taken from the text: a float time too large for its ns would otherwise
            # restart the read, losing the slices read before.
            _read_part(part, reader, ExactEvent, ExactEvent)
        except InputError as exc:
            damaged.append(exc)
    if len(damaged) == len(slices):
        first = damaged[0]
        raise InputError(first.path, f"{first.reason}; no slice of this export can be read", first.where)
    for damage in damaged:
        reader.dropped.add(Stat.FILE_DAMAGED, 1, f"{damage}; events after it are lost (the other slices are read)")


def _read_part(part: Path, reader: AscendEvents, struct: type, lenient: type) -> None:
    exports.check_export(part)
    try:
        read_events(part, reader, struct, lenient)
    except NotATrace as exc:  # at an export's place, a file without events is a damaged export
        raise InputError(exc.path, exc.reason, exc.where) from None
