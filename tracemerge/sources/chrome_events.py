"""Normalization of Chrome trace-event objects, shared by every source that carries them.

Kineto (torch.profiler) JSON, AReaL's perf-tracer JSONL and plain Chrome traces all hold the same
event objects; this module turns them into :class:`~tracemerge.model.Event` objects, keeping every
event or counting it under a reason.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from tracemerge.model import (
    NO_ORIGIN,
    Event,
    FlowPhase,
    Kind,
    OriginKey,
    ThreadInfo,
    ThreadKey,
)

# Categories Kineto puts on device (GPU/XPU/MTIA) timelines.
DEVICE_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "Kernel", "Memcpy", "Memset"}
)
_DEVICE_LABEL = re.compile(r"^([A-Za-z]+) (\d+)$")
_FLOW_PHASES = {"s": FlowPhase.START, "t": FlowPhase.STEP, "f": FlowPhase.END}
_SPECIAL_PIDS = {"Spans": "Profiler spans", "Traces": "Profiler iterations", "": "Profiler"}
_METADATA_NAMES = frozenset(
    {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
)


class ChromeEvents:
    """Accumulates Chrome trace events of one file into normalized events and thread names.

    ``to_ns`` converts an event's ``ts`` (µs) into nanoseconds of the file's clock domain.
    Thread keys are the raw ``(pid, tid)`` pairs; :meth:`threads` names them once all metadata
    events, wherever they were in the file, have been seen.
    """

    def __init__(self, to_ns: Callable[[Any], int], dur_to_ns: Callable[[Any], int]) -> None:
        self.to_ns = to_ns
        self.dur_to_ns = dur_to_ns
        self.events: list[Event] = []
        self.dropped: Counter[str] = Counter()
        self.metadata_records = 0
        self.process_names: dict[Any, str] = {}
        self.process_labels: dict[Any, str] = {}
        self.thread_names: dict[tuple, str] = {}
        self.device_pids: set[Any] = set()
        # B and E events per thread, paired once the whole file is read: (ts, file position, B event | E args)
        self._pending: dict[tuple, list[tuple[int, int, Any]]] = {}

    def add(self, e: Any, origin: OriginKey = NO_ORIGIN) -> None:
        if type(e) is not dict:
            self.dropped["not an event object"] += 1
            return
        ph = e.get("ph")
        if ph == "X":
            self._add_complete(e, origin)
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
            self.dropped["event without ph"] += 1
        else:
            self.dropped[f"unsupported phase {ph!r}"] += 1

    # -- event kinds -------------------------------------------------------------------------

    def _ts(self, e: dict) -> int | None:
        ts = e.get("ts")
        if ts is None:
            self.dropped[f"{e.get('ph')} event without ts"] += 1
            return None
        try:
            return self.to_ns(ts)
        except (ValueError, TypeError):
            self.dropped[f"{e.get('ph')} event with unreadable ts"] += 1
            return None

    @staticmethod
    def _args(e: dict) -> dict | None:
        args = e.get("args")
        return args if type(args) is dict and args else None

    def _thread(self, e: dict) -> ThreadKey:
        pid = e.get("pid")
        tid = e.get("tid")
        if type(pid) is list or type(pid) is dict:
            pid = str(pid)
        if type(tid) is list or type(tid) is dict:
            tid = str(tid)
        return (pid, tid)

    def _add_complete(self, e: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        dur = e.get("dur")
        if dur is None:
            self.dropped["X event without dur"] += 1
            return
        try:
            dur_ns = self.dur_to_ns(dur)
        except (ValueError, TypeError):
            self.dropped["X event with unreadable dur"] += 1
            return
        if dur_ns < 0:
            self.dropped["X event with negative dur"] += 1
            return
        cat = e.get("cat")
        thread = self._thread(e)
        if cat in DEVICE_CATEGORIES:
            self.device_pids.add(thread[0])
        self.events.append(
            Event(Kind.SLICE, ts, thread, _text(e.get("name")), _text(cat), dur_ns, self._args(e), origin)
        )

    def _add_begin(self, e: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        ev = Event(Kind.SLICE, ts, self._thread(e), _text(e.get("name")), _text(e.get("cat")), 0, self._args(e), origin)
        self._pending.setdefault(ev.thread, []).append((ts, len(self._pending[ev.thread]), ev))

    def _add_end(self, e: dict) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        thread = self._thread(e)
        self._pending.setdefault(thread, []).append((ts, len(self._pending[thread]), self._args(e)))

    def _pair_begin_end(self) -> None:
        """Match B and E events per thread in time order (file order breaks ties), as viewers do."""
        for records in self._pending.values():
            records.sort(key=lambda r: (r[0], r[1]))
            stack: list[Event] = []
            for ts, _, item in records:
                if type(item) is Event:
                    stack.append(item)
                elif not stack:
                    self.dropped["E event without matching B"] += 1
                else:
                    ev = stack.pop()
                    ev.dur = ts - ev.ts
                    if item:
                        ev.args = {**(ev.args or {}), **item}
                    self.events.append(ev)
            if stack:
                self.dropped["B event without matching E"] += len(stack)
        self._pending.clear()

    def _add_instant(self, e: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        self.events.append(
            Event(
                Kind.INSTANT, ts, self._thread(e), _text(e.get("name")), _text(e.get("cat")), 0, self._args(e), origin
            )
        )

    def _add_flow(self, e: dict, origin: OriginKey, ph: str) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        fid = e.get("id")
        if fid is None:
            fid = e.get("id2")
        if fid is None or type(fid) is list:
            self.dropped[f"{ph} flow event without id"] += 1
            return
        if type(fid) is dict:
            fid = tuple(sorted(fid.items()))
        name = _text(e.get("name"))
        cat = _text(e.get("cat"))
        self.events.append(
            Event(
                Kind.FLOW,
                ts,
                self._thread(e),
                name,
                cat,
                origin=origin,
                flow_id=(cat, name, fid),
                flow_phase=_FLOW_PHASES[ph],
                flow_next=(ph == "f" and e.get("bp") != "e"),
            )
        )

    def _add_counter(self, e: dict, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        args = e.get("args")
        pid = e.get("pid")
        name = _text(e.get("name"))
        if e.get("id") is not None:
            name = f"{name} {e.get('id')}"
        kept = 0
        if type(args) is dict:
            for key, value in args.items():
                if type(value) is bool or type(value) not in (int, float):
                    continue
                self.events.append(
                    Event(
                        Kind.COUNTER, ts, (pid, None), f"{name} {key}", _text(e.get("cat")), origin=origin, value=value
                    )
                )
                kept += 1
        if not kept:
            self.dropped["C event without a numeric value"] += 1

    def _add_metadata(self, e: dict) -> None:
        self.metadata_records += 1
        name = e.get("name")
        args = e.get("args") if type(e.get("args")) is dict else {}
        pid = e.get("pid")
        if name == "process_name":
            self.process_names[pid] = _text(args.get("name"))
        elif name == "process_labels":
            self.process_labels[pid] = _text(args.get("labels"))
        elif name == "thread_name":
            self.thread_names[(pid, e.get("tid"))] = _text(args.get("name"))
        elif name not in _METADATA_NAMES:
            self.dropped[f"unsupported metadata record {name!r}"] += 1
            self.metadata_records -= 1

    # -- results -----------------------------------------------------------------------------

    def finish(self) -> None:
        self._pair_begin_end()

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
        keys = {ev.thread for ev in self.events}
        cpu_pids = {pid for pid, _ in keys if type(pid) is int and pid >= 0 and self.device_label(pid) is None}
        infos: dict[ThreadKey, ThreadInfo] = {}
        for key in keys:
            pid, tid = key
            infos[key] = self._thread_info(pid, tid, len(cpu_pids) > 1)
        return infos

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


def _order(value: Any) -> tuple:
    """Sort key that orders ints numerically (negatives by magnitude) before anything else."""
    if type(value) is int:
        return (0, abs(value), value)
    return (1, 0, str(value))


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if type(value) is str else str(value)
