"""The per-event path's phases other than complete events, for
:class:`~tracemerge.sources.chrome.events.ChromeEvents`.

:class:`EventKinds` is mixed into the reader: :meth:`~EventKinds.add` takes one event of any
phase and keeps it in the file's layout (instants, flow points of flow v1, counter samples,
begin and end events paired per thread once the whole file is read by
:meth:`~EventKinds._pair_begin_end`) or learns from it (process and thread names), else counts
it under a reason in ``dropped``. Times go through the reader's ``to_ns``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracemerge.core.model import NO_ORIGIN, FlowPhase, Kind, OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.chrome.schema import NeedsExactTimes
from tracemerge.sources.chrome.values import (
    NUMBER_TEXT,
    as_counter_value,
    as_text,
    counter_series,
    hashable_id,
    json_kind,
    plain_args,
)
from tracemerge.store.file_layout import FileLayout

FLOW_PHASES = {"s": FlowPhase.START, "t": FlowPhase.STEP, "f": FlowPhase.END}
_METADATA_NAMES = frozenset(
    {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
)
SLICE, INSTANT = int(Kind.SLICE), int(Kind.INSTANT)


class EventKinds:
    """Events one at a time, by phase (the reader's state, as ``ChromeEvents`` keeps it)."""

    layout: FileLayout
    to_ns: Callable[[Any], int]
    dropped: Losses
    metadata_records: int
    process_names: dict[Any, str]
    process_labels: dict[Any, str]
    thread_names: dict[tuple, str]
    threads_seen: set[ThreadKey]
    counter_threads: set[ThreadKey]
    _pending: dict[tuple, list[tuple[int, int, Any]]]
    add_each: Callable[..., None]
    bounded: Callable[[Any], Any]

    def add(self, e: Any, origin: OriginKey = NO_ORIGIN) -> None:
        ph = e.ph
        if ph == "X":
            self.add_each([e], origin)
        elif ph == "M":
            self._add_metadata(e)
        elif ph in ("i", "I", "R"):
            self._add_instant(e, origin)
        elif ph in FLOW_PHASES:
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
        return (hashable_id(e.pid), hashable_id(e.tid))

    def _add_instant(self, e: Any, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        thread = self._thread(e)
        self.threads_seen.add(thread)
        body = self.layout.describe(as_text(e.name), as_text(e.cat), plain_args(self.bounded(e.args)))
        self.layout.buffer(origin, thread).append((ts, 0, INSTANT, self.layout.ordinal(), body))

    def _add_begin(self, e: Any, origin: OriginKey) -> None:
        ts = self._ts(e)
        if ts is None:
            return
        if e.bind_id is not None:
            self.dropped.add(Stat.FLOW_V2_UNBOUND, 1, "bind_id flow on a B event (only X slices bind flows here)")
        thread = self._thread(e)
        pending = self._pending.setdefault(thread, [])
        pending.append((ts, len(pending), (origin, as_text(e.name), as_text(e.cat), plain_args(self.bounded(e.args)))))

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
        fid = hashable_id(fid)
        name, cat = as_text(e.name), as_text(e.cat)
        thread = self._thread(e)
        self.threads_seen.add(thread)
        bind_next = ph == "f" and e.bp != "e"
        self.layout.flow_point(origin, thread, ts, FLOW_PHASES[ph], (cat, name, fid), bind_next)

    def _counter_args(self, e: Any) -> tuple[str, dict | None]:
        """A C event's name and its series: arg key → value."""
        name = as_text(e.name)
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
        thread = (hashable_id(e.pid), None)
        for key, value in args.items():
            number = as_counter_value(value)
            if number is None:
                number_text = type(value) is str and NUMBER_TEXT.fullmatch(value)
                kind = "beyond a double" if type(value) is int or number_text else json_kind(value)
                self.dropped.add(Stat.COUNTER_VALUE_NOT_NUMBER, 1, f"C event value that is not a number ({kind})")
                continue
            self.layout.counter_sample(origin, thread, counter_series(name, key), ts, number)
            self.counter_threads.add(thread)

    def _add_metadata(self, e: Any) -> None:
        self.metadata_records += 1
        name = e.name
        args = plain_args(self.bounded(e.args)) or {}
        pid = hashable_id(e.pid)
        if name == "process_name":
            self.process_names[pid] = as_text(args.get("name"))
        elif name == "process_labels":
            self.process_labels[pid] = as_text(args.get("labels"))
        elif name == "thread_name":
            self.thread_names[(pid, hashable_id(e.tid))] = as_text(args.get("name"))
        elif name not in _METADATA_NAMES:
            self.dropped.add(Stat.METADATA_UNSUPPORTED, 1, f"unsupported metadata record {name!r}")
            self.metadata_records -= 1
