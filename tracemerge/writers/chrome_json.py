"""Chrome trace-event JSON output (``.json``, ``.json.gz``), as Perfetto's JSON importer reads it.

Timestamps are written as exact decimal microseconds relative to the trace's time base, so they
keep their nanoseconds. Slices are complete (``X``) events; flows use ``bind_id`` with
``flow_in``/``flow_out`` so each binds to exactly its slice. Overlap lanes become threads of their
own, since Chrome JSON has no child tracks.
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


class UnitEncoder:
    """Encodes one input file's laid-out events as JSON event objects, each preceded by ``,\\n``."""

    flows_per_slice = 1  # one bind_id per event

    def __init__(self, sequence_id: int, out: BinaryIO) -> None:
        self.write = out.write

    def prefix(self, name: str, cat: str) -> bytes:
        return b',"name":' + orjson.dumps(name) + (b',"cat":' + orjson.dumps(cat) if cat else b"")

    args_heads = (b',"args":',) * 4096

    def args(self, text: bytes) -> bytes:
        return b',"args":' + text

    def slice_begin(self, track: ThreadTrack, ts: int, dur: int, body: bytes, flows: list[Flow] | None) -> None:
        flow = b""
        if flows:  # at most one: flows_per_slice
            fid, phase = flows[0]
            if phase == FlowPhase.START:
                flow = b',"bind_id":%d,"flow_out":true' % fid
            elif phase == FlowPhase.END:
                flow = b',"bind_id":%d,"flow_in":true' % fid
            else:
                flow = b',"bind_id":%d,"flow_in":true,"flow_out":true' % fid
        self.write(
            b',\n{"ph":"X","pid":%d,"tid":%d,"ts":%s,"dur":%s%s%s}'
            % (track.pid, track.tid, _us(ts), _us(dur), body, flow)
        )

    def slice_end(self, track: ThreadTrack, ts: int) -> None:
        """Complete events carry their duration; nothing to write."""

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
