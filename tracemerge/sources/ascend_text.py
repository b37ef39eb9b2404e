"""Ascend text exports: ``ASCEND_PROFILER_OUTPUT/trace_view.json`` of a torch_npu / MindSpore run
and ``PROF_*/mindstudio_profiler_output/msprof_*.json`` of a bare msprof run.

Both are bare arrays of Chrome trace events with ``ts`` as a decimal string of epoch µs. Processes
are told apart by their ``process_name`` (Python, CANN, Ascend Hardware, HCCL, Overlap Analysis,
counters), never by decoding the pid, whose encoding changed between versions. MSTX markers (events
whose args carry ``event_type`` and ``domain``) go to an ``MSTX`` track with the domain as category.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.errors import NotATrace
from tracemerge.model import NO_ORIGIN, Event, Kind, OriginKey, SourceData, ThreadInfo, ThreadKey
from tracemerge.sources import ascend_layout as layout
from tracemerge.sources.base import SourceFormat, read_bytes
from tracemerge.sources.chrome_events import ChromeEvents
from tracemerge.sources.chrome_json import parse_json
from tracemerge.units import us_to_ns

NAME = "ascend-text"
MSTX_THREAD: ThreadKey = ("MSTX", None)
_MARKERS = frozenset({"marker", "marker_ex", 0, 3, "0", "3"})
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

    def add(self, e: Any, origin: OriginKey = NO_ORIGIN) -> None:
        if type(e) is dict and e.get("ph") == "X":
            args = e.get("args")
            if type(args) is dict and "event_type" in args and "domain" in args:
                self._add_mstx(e, args, origin)
                return
        super().add(e, origin)

    def _add_mstx(self, e: dict, args: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        name, domain = str(e.get("name", "")), str(args.get("domain", ""))
        if args.get("event_type") in _MARKERS:
            self.events.append(Event(Kind.INSTANT, ts, MSTX_THREAD, name, domain, 0, args, origin))
            return
        try:
            dur = us_to_ns(e.get("dur", 0))
        except ValueError:
            self.dropped["MSTX range with unreadable dur"] += 1
            return
        self.events.append(Event(Kind.SLICE, ts, MSTX_THREAD, name, domain, dur, args, origin))

    def threads(self) -> dict[ThreadKey, ThreadInfo]:
        infos: dict[ThreadKey, ThreadInfo] = {}
        for key in {ev.thread for ev in self.events}:
            if key == MSTX_THREAD:
                infos[key] = ThreadInfo("MSTX", (_LAYER_ORDER["MSTX"], "", 0, ""))
                continue
            pid, tid = key
            process = self.process_names.get(pid) or f"pid {pid}"
            order = _LAYER_ORDER.get(process, len(_LAYER_ORDER))
            if tid is None:  # counters: named after their process
                infos[key] = ThreadInfo(process, (order, process, 0, ""))
                continue
            thread = self.thread_names.get((pid, tid)) or f"Thread {tid}"
            tid_order = tid if type(tid) is int else 0
            infos[key] = ThreadInfo(f"{process} · {thread}", (order, process, tid_order, str(tid)))
        return infos


def claims(path: Path, head: bytes) -> bool:
    in_run = (path.name == "trace_view.json" and path.parent.name == layout.OUTPUT_DIR) or layout.is_msprof_json(path)
    if not in_run or not head.lstrip().startswith(b"["):
        return False
    if layout.is_msprof_json(path):
        # trace_view.json already holds every msprof event of the run: read one of them, not both.
        run = layout.run_dir_of(path)
        return not (run is not None and (run / layout.OUTPUT_DIR / "trace_view.json").is_file())
    return True


def read(path: Path) -> SourceData:
    data = read_bytes(path)
    events = parse_json(path, data)
    if type(events) is not list:
        raise NotATrace(path, "not an event array")
    reader = AscendEvents(us_to_ns, us_to_ns)
    for e in events:
        reader.add(e)
    reader.finish()
    return layout.source_data(path, NAME, reader.events, reader.threads(), reader.dropped, reader.metadata_records)


ASCEND_TEXT = SourceFormat(NAME, claims, read, layout.path_hints, layout.unusable_reason)
