"""Perfetto protobuf output (``.pftrace``): TrackEvent packets, as trace_processor imports them.

Layout of the file: sequence 1 holds a clock snapshot (so the UI can show wall-clock time) and
every track descriptor; then each input file's events follow on a sequence of their own, with
names, categories and argument names interned per sequence.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson

from tracemerge.merge import Flow
from tracemerge.model import Event, FlowPhase
from tracemerge.plan import CounterTrack, MergePlan, ThreadTrack, UnitPlan
from tracemerge.writers import perfetto_trace_pb2 as pb

DESCRIPTOR_SEQUENCE = 1
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def write_packet(out: BinaryIO, packet: pb.TracePacket) -> None:
    """Append one ``Trace.packet`` record (field 1, length-delimited)."""
    body = packet.SerializeToString()
    out.write(b"\x0a" + _varint(len(body)) + body)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class UnitEncoder:
    """Encodes one input file's laid-out events onto its own packet sequence."""

    def __init__(self, plan: UnitPlan, out: BinaryIO) -> None:
        self.out = out
        self.seq = plan.sequence_id
        self.flags = _CLEARED | _NEEDS
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}

    def _packet(self, ts: int) -> pb.TracePacket:
        pkt = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=self.seq, sequence_flags=self.flags)
        if self.flags & _CLEARED:
            pkt.first_packet_on_sequence = True
            self.flags = _NEEDS
        return pkt

    def _describe(self, pkt: pb.TracePacket, te: pb.TrackEvent, ev: Event) -> None:
        iid = self.names.get(ev.name)
        if iid is None:
            iid = self.names[ev.name] = len(self.names) + 1
            pkt.interned_data.event_names.add(iid=iid, name=ev.name)
        te.name_iid = iid
        if ev.cat:
            cid = self.cats.get(ev.cat)
            if cid is None:
                cid = self.cats[ev.cat] = len(self.cats) + 1
                pkt.interned_data.event_categories.add(iid=cid, name=ev.cat)
            te.category_iids.append(cid)
        if ev.args:
            for key, value in ev.args.items():
                aid = self.arg_names.get(key)
                if aid is None:
                    aid = self.arg_names[key] = len(self.arg_names) + 1
                    pkt.interned_data.debug_annotation_names.add(iid=aid, name=key)
                _set_value(te.debug_annotations.add(name_iid=aid), value)

    def slice_begin(self, track: ThreadTrack, ts: int, ev: Event, flows: list[Flow] | None) -> None:
        pkt = self._packet(ts)
        te = pkt.track_event
        te.type = _BEGIN
        te.track_uuid = track.uuid
        self._describe(pkt, te, ev)
        if flows:
            for fid, phase in flows:
                if phase == FlowPhase.END:
                    te.terminating_flow_ids.append(fid)
                else:
                    te.flow_ids.append(fid)
        write_packet(self.out, pkt)

    def slice_end(self, track: ThreadTrack, ts: int) -> None:
        pkt = self._packet(ts)
        pkt.track_event.type = _END
        pkt.track_event.track_uuid = track.uuid
        write_packet(self.out, pkt)

    def instant(self, track: ThreadTrack, ts: int, ev: Event) -> None:
        pkt = self._packet(ts)
        te = pkt.track_event
        te.type = _INSTANT
        te.track_uuid = track.uuid
        self._describe(pkt, te, ev)
        write_packet(self.out, pkt)

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None:
        pkt = self._packet(ts)
        te = pkt.track_event
        te.type = _COUNTER
        te.track_uuid = track.uuid
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            te.counter_value = value
        else:
            te.double_counter_value = float(value)
        write_packet(self.out, pkt)


def _set_value(ann: pb.DebugAnnotation, value: Any) -> None:
    t = type(value)
    if t is str:
        ann.string_value = value
    elif t is bool:
        ann.bool_value = value
    elif t is int:
        # trace_processor stores integer args as int64: larger values would display wrapped.
        if _INT64_MIN <= value <= _INT64_MAX:
            ann.int_value = value
        else:
            ann.string_value = str(value)
    elif t is float:
        ann.double_value = value
    elif value is None:
        # A bare JSON null crashes trace_processor v52 (json_utils "Unreachable"), and an
        # annotation without a value is dropped: show it as text.
        ann.string_value = "null"
    else:
        try:
            ann.legacy_json_value = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            ann.string_value = str(value)


def write_header(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack]) -> None:
    """The clock snapshot and every track descriptor, before any event that uses them."""
    seq = DESCRIPTOR_SEQUENCE
    if plan.wall_clock:
        snap = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=0)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=plan.base_ns)
        write_packet(out, snap)
    for proc in plan.processes:
        pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        td = pkt.track_descriptor
        td.uuid = proc.uuid
        td.process.pid = proc.pid
        td.process.process_name = proc.name
        td.sibling_order_rank = proc.order
        write_packet(out, pkt)
    for thread in plan.threads:
        pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        td = pkt.track_descriptor
        td.uuid = thread.uuid
        td.parent_uuid = thread.process_uuid
        td.thread.pid = thread.pid
        td.thread.tid = thread.tid
        td.thread.thread_name = thread.name
        td.sibling_order_rank = thread.order
        write_packet(out, pkt)
    for lane in lanes:
        pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        td = pkt.track_descriptor
        td.uuid = lane.uuid
        td.parent_uuid = lane.parent_uuid
        td.name = lane.name
        td.sibling_order_rank = lane.lane
        write_packet(out, pkt)
    for counter in plan.counters:
        pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        td = pkt.track_descriptor
        td.uuid = counter.uuid
        td.parent_uuid = counter.process_uuid
        td.name = counter.name
        td.counter.SetInParent()
        write_packet(out, pkt)


def write_footer(out: BinaryIO, plan: MergePlan) -> None:
    """Nothing follows the last packet in a protobuf trace."""
