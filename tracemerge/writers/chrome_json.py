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

from tracemerge.core.model import FlowPhase
from tracemerge.layout.types import Items
from tracemerge.plan.types import CLOCK_NOTE, SUMMARY_NOTE, CounterTrack, MergePlan, ThreadTrack
from tracemerge.report.run_report import json_bytes

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


_COMPLETE = b',\n{"ph":"X","pid":%d,"tid":%d,"ts":%s,"dur":%s%s}'
_FLOW_EVENTS = {
    FlowPhase.START: b',\n{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
    FlowPhase.STEP: b',\n{"ph":"t","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
    FlowPhase.END: b',\n{"ph":"f","bp":"e","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"flow","name":"flow"}',
}


class UnitEncoder:
    """Encodes one input file's laid-out events as JSON event objects, each preceded by ``,\\n``."""

    flows_bind_by_order = True  # a flow event binds to the slice on top of its thread's stack
    ends_apart = False  # complete events carry their duration

    def __init__(self, sequence_id: int, out: BinaryIO, ahead: bool = False) -> None:
        self.write = out.write  # (``ahead``: events are written as they come; nothing to pack)

    def prefix(self, name: str, cat: str) -> bytes:
        return b',"name":' + orjson.dumps(name) + (b',"cat":' + orjson.dumps(cat) if cat else b"")

    args_heads: tuple[bytes, ...] = (b',"args":',) * 4096

    def args(self, text: bytes) -> bytes:
        return b',"args":' + text

    def default_track(self, uuid: int) -> None:
        """Every event names its thread."""

    def ends(self, tracks: list[ThreadTrack], lanes: Any, stamps: Any) -> None:
        """Complete events carry their duration."""

    def items(self, tracks: list[ThreadTrack], items: Items, in_walk_order: bool) -> None:
        """Slices as X events and instants, each slice's flow events right after it. In a tie
        (given ``in_walk_order``), a slice starting where a flow event was just written is a B/E
        pair, which Perfetto reads after that flow event (it reads every X of a timestamp first)."""
        ids, phases = items.flow_ids.tolist(), items.flow_phases.tolist()
        flow = 0
        begin_events_at: dict[int, int] = {}
        bodies = memoryview(items.bodies)
        offset = 0
        out: list[bytes] = []
        for lane, ts, dur, instant, length, count in zip(
            items.lanes.tolist(),
            items.stamps.tolist(),
            items.durs.tolist(),
            items.instants.tolist(),
            items.lengths.tolist(),
            items.flow_counts.tolist(),
            strict=True,
        ):
            body = bodies[offset : offset + length]
            offset += length
            track = tracks[lane]
            stamp = _us(ts)
            if instant:
                out.append(b',\n{"ph":"i","s":"t","pid":%d,"tid":%d,"ts":%s%s}' % (track.pid, track.tid, stamp, body))
                continue
            if in_walk_order and begin_events_at.get(lane) == ts:
                out.append(b',\n{"ph":"B","pid":%d,"tid":%d,"ts":%s%s}' % (track.pid, track.tid, stamp, body))
                out.append(b',\n{"ph":"E","pid":%d,"tid":%d,"ts":%s}' % (track.pid, track.tid, _us(ts + dur)))
            else:
                out.append(_COMPLETE % (track.pid, track.tid, stamp, _us(dur), body))
            if count:
                for n in range(flow, flow + count):
                    out.append(_FLOW_EVENTS[phases[n]] % (ids[n], track.pid, track.tid, stamp))
                flow += count
                begin_events_at[lane] = ts
        self.write(b"".join(out))

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None:
        self.write(
            b',\n{"ph":"C","pid":%d,"ts":%s,"name":%s,"args":{%s:%s}}'
            % (track.pid, _us(ts), orjson.dumps(track.json_name), orjson.dumps(track.json_key), _dumps(value))
        )

    def close(self) -> None:
        """Every event was written as it came."""

    def end(self) -> None:
        """Nothing runs beside it to stop."""


def _meta(name: str, pid: int, tid: int | None, args: dict) -> bytes:
    tid_part = b',"tid":%d' % tid if tid is not None else b""
    return b'{"ph":"M","name":%s,"pid":%d%s,"args":%s}' % (orjson.dumps(name), pid, tid_part, json_bytes(args, False))


def _note(pid: int, ts: int, name: str, args: dict) -> bytes:
    """A process-scoped instant of tracemerge's own (category ``tracemerge``)."""
    return b'{"ph":"i","s":"p","pid":%d,"ts":%s,"name":%s,"cat":"tracemerge","args":%s}' % (
        pid,
        _us(ts),
        orjson.dumps(name),
        json_bytes(args, indent=False),
    )


def write_header(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack]) -> None:
    """Opens the document and names every process and thread (sort indexes for v53+ UIs)."""
    records: list[bytes] = []
    for proc in plan.processes:
        records.append(_meta("process_name", proc.pid, None, {"name": proc.name}))
        records.append(_meta("process_sort_index", proc.pid, None, {"sort_index": proc.order}))
        if proc.labels:
            records.append(_meta("process_labels", proc.pid, None, {"labels": ",".join(proc.labels)}))
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
