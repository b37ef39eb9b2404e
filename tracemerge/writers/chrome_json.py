"""Chrome trace-event JSON output (``.json``, ``.json.gz``), as Perfetto's JSON importer reads it.

Timestamps are written as exact decimal microseconds relative to the trace's time base, so they
keep their nanoseconds. Slices are complete (``X``) events. Overlap lanes become threads of their
own, since Chrome JSON has no child tracks.

Flows are flow events (``s``, ``t``, ``f`` with ``bp: "e"``), any number per slice, each written
right after its slice. Perfetto's importer binds such an event to the slice on top of its thread's
stack when it processes it, and at one timestamp it processes every ``X`` before any other event
(``X`` longest first, the rest in file order). So a flow event at its slice's start binds to that
slice unless a shorter slice starts at the same time on the thread: such slices, once a flow event
was written at their start, are written as ``B``/``E`` pairs instead, which come in file order after
the flow event. (``bind_id`` binds only one flow per event, which is why it is not used.)
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson

from tracemerge.layout import Flow
from tracemerge.model import FlowPhase
from tracemerge.plan import CLOCK_NOTE, SUMMARY_NOTE, CounterTrack, MergePlan, ThreadTrack

_OPTS = orjson.OPT_NON_STR_KEYS


def _us(ns: int) -> bytes:
    """Integer ns as an exact decimal µs literal."""
    if ns < 0:
        return b"-" + _us(-ns)
    return b"%d.%03d" % divmod(ns, 1000)


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_OPTS)
    except TypeError:
        return orjson.dumps(str(value))


_FLOW_EVENTS = {
    FlowPhase.START: b',\n{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
    FlowPhase.STEP: b',\n{"ph":"t","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
    FlowPhase.END: b',\n{"ph":"f","bp":"e","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
}


class UnitEncoder:
    """Encodes one input file's laid-out events as JSON event objects, each preceded by ``,\\n``."""

    def __init__(self, sequence_id: int, out: BinaryIO) -> None:
        self.write = out.write
        # Per thread: the start time after which slices are written as B/E (a flow event or a B
        # event was written there), and the ends of the open slices written as B (innermost last).
        self.begin_events_at: dict[int, int] = {}
        self.begin_ends: dict[int, list[int]] = {}

    def prefix(self, name: str, cat: str) -> bytes:
        return b',"name":' + orjson.dumps(name) + (b',"cat":' + orjson.dumps(cat) if cat else b"")

    args_heads = (b',"args":',) * 4096

    def args(self, text: bytes) -> bytes:
        return b',"args":' + text

    def slice_begin(self, track: ThreadTrack, ts: int, dur: int, body: bytes, flows: list[Flow] | None) -> None:
        thread = track.uuid
        stamp = _us(ts)
        as_begin = self.begin_events_at.get(thread) == ts
        if as_begin:
            self.write(b',\n{"ph":"B","pid":%d,"tid":%d,"ts":%s%s}' % (track.pid, track.tid, stamp, body))
            self.begin_ends.setdefault(thread, []).append(ts + dur)
        else:
            self.write(
                b',\n{"ph":"X","pid":%d,"tid":%d,"ts":%s,"dur":%s%s}' % (track.pid, track.tid, stamp, _us(dur), body)
            )
        if flows:
            for fid, phase in flows:
                self.write(_FLOW_EVENTS[phase] % (fid, track.pid, track.tid, stamp))
            self.begin_events_at[thread] = ts

    def slice_end(self, track: ThreadTrack, ts: int) -> None:
        """Complete events carry their duration; a slice written as B gets its E. Slices end
        innermost first, and those ending at one time one after another, so the E of a B slice
        ending at ``ts`` is written when the first of them ends: the same bytes, without a note
        per slice."""
        ends = self.begin_ends.get(track.uuid)
        if ends and ends[-1] == ts:
            ends.pop()
            self.write(b',\n{"ph":"E","pid":%d,"tid":%d,"ts":%s}' % (track.pid, track.tid, _us(ts)))

    def instant(self, track: ThreadTrack, ts: int, body: bytes) -> None:
        self.write(b',\n{"ph":"i","s":"t","pid":%d,"tid":%d,"ts":%s%s}' % (track.pid, track.tid, _us(ts), body))

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None:
        self.write(
            b',\n{"ph":"C","pid":%d,"ts":%s,"name":%s,"args":{%s:%s}}'
            % (track.pid, _us(ts), orjson.dumps(track.json_name), orjson.dumps(track.json_key), _dumps(value))
        )

    def close(self) -> None:
        """Every event was written as it came."""


def _meta(name: str, pid: int, tid: int | None, args: dict) -> bytes:
    tid_part = b',"tid":%d' % tid if tid is not None else b""
    return b'{"ph":"M","name":%s,"pid":%d%s,"args":%s}' % (orjson.dumps(name), pid, tid_part, orjson.dumps(args))


def _note(pid: int, ts: int, name: str, args: dict) -> bytes:
    """A process-scoped instant of tracemerge's own (category ``tracemerge``)."""
    return b'{"ph":"i","s":"p","pid":%d,"ts":%s,"name":%s,"cat":"tracemerge","args":%s}' % (
        pid,
        _us(ts),
        orjson.dumps(name),
        orjson.dumps(args),
    )


def write_header(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack]) -> None:
    """Opens the document and names every process and thread (sort indexes for v53+ UIs)."""
    records: list[bytes] = []
    for proc in plan.processes:
        records.append(_meta("process_name", proc.pid, None, {"name": proc.name}))
        records.append(_meta("process_sort_index", proc.pid, None, {"sort_index": proc.order}))
    for thread in [*plan.threads, *lanes]:
        records.append(_meta("thread_name", thread.pid, thread.tid, {"name": thread.name}))
        records.append(_meta("thread_sort_index", thread.pid, thread.tid, {"sort_index": thread.order}))
    group = next((proc for proc in plan.processes if proc.is_group), None)
    if plan.phase_summary and group is not None:
        records.append(_note(group.pid, 0, SUMMARY_NOTE, {"summary": plan.phase_summary}))
    records.extend(_note(note.pid, note.ts, CLOCK_NOTE, note.args) for note in plan.clock_notes)
    out.write(b'{"traceEvents":[\n')
    # The plan always has a process, so every event written after these starts with a comma.
    out.write(b",\n".join(records))


def write_footer(out: BinaryIO, plan: MergePlan) -> None:
    meta = {"producer": "tracemerge", "time_base_unix_ns": plan.base_ns if plan.wall_clock else None}
    out.write(b'\n],\n"displayTimeUnit":"ns",\n"metadata":%s}\n' % orjson.dumps(meta))
