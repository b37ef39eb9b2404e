"""Perfetto protobuf output (``.pftrace``): TrackEvent packets, as trace_processor imports them.

Layout of the file: sequence 1 holds a clock snapshot (so the UI can show wall-clock time) and
every track descriptor; then each input file's events follow on a sequence of their own, with
names, categories and argument names interned per sequence.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import msgspec
import orjson

from tracemerge.layout import Flow
from tracemerge.model import LOCAL_ZERO, FlowPhase
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


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths, iids and small values are the most frequent varints: look them up.
_SMALL_VARINTS = [_encode_varint(n) for n in range(1 << 14)]


def _varint(n: int) -> bytes:
    """Protobuf varint; negative int64 values take their 64-bit two's complement (10 bytes)."""
    if 0 <= n < 16384:
        return _SMALL_VARINTS[n]
    return _encode_varint(n & 0xFFFFFFFFFFFFFFFF)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# Pre-encoded keys (field number << 3 | wire type) of the fields written on the hot path.
_K_TIMESTAMP = b"\x40"  # TracePacket.timestamp = 8, varint
_K_SEQ = b"\x50"  # TracePacket.trusted_packet_sequence_id = 10, varint
_K_TRACK_EVENT = b"\x5a"  # TracePacket.track_event = 11, bytes
_K_INTERNED = b"\x62"  # TracePacket.interned_data = 12, bytes
_K_FLAGS = b"\x68"  # TracePacket.sequence_flags = 13, varint
_FIRST_PACKET = b"\xb8\x05\x01"  # TracePacket.first_packet_on_sequence = 87, true
_K_CATEGORY_IID = b"\x18"  # TrackEvent.category_iids = 3
_K_ANNOTATION = b"\x22"  # TrackEvent.debug_annotations = 4
_TYPE = {  # TrackEvent.type = 9
    _BEGIN: b"\x48\x01",
    _END: b"\x48\x02",
    _INSTANT: b"\x48\x03",
    _COUNTER: b"\x48\x04",
}
_K_NAME_IID = b"\x50"  # TrackEvent.name_iid = 10
_K_TRACK_UUID = b"\x58"  # TrackEvent.track_uuid = 11
_K_COUNTER_INT = b"\xf0\x01"  # TrackEvent.counter_value = 30, varint
_K_COUNTER_DOUBLE = b"\xe1\x02"  # TrackEvent.double_counter_value = 44, fixed64
_K_FLOW = b"\xf9\x02"  # TrackEvent.flow_ids = 47, fixed64
_K_TERMINATING_FLOW = b"\x81\x03"  # TrackEvent.terminating_flow_ids = 48, fixed64
_K_INTERNED_CATEGORY = b"\x0a"  # InternedData.event_categories = 1
_K_INTERNED_NAME = b"\x12"  # InternedData.event_names = 2
_K_INTERNED_ARG = b"\x1a"  # InternedData.debug_annotation_names = 3
_BEGIN_TYPE = b"\x48\x01"
# Packets of a chunk are stamped on a clock of their sequence (ids 64-127 are sequence-scoped),
# set once as the sequence's default (TracePacketDefaults.timestamp_clock_id = 58).
SEQUENCE_CLOCK = 64
_SEQUENCE_DEFAULTS = b"\xda\x03\x03\xd0\x03\x40"
_NUMBER_START = frozenset(b"-0123456789"[i : i + 1] for i in range(11))
_pack_q = struct.Struct("<Q").pack
_pack_d = struct.Struct("<d").pack


def _interned_entry(tag: bytes, iid: int, name: str) -> bytes:
    # EventName / EventCategory / DebugAnnotationName: iid = 1, name = 2
    return _field(tag, b"\x08" + _varint(iid) + _field(b"\x12", name.encode()))


def _annotation_value(value: Any) -> bytes:
    """A DebugAnnotation's value field."""
    t = type(value)
    if t is str:
        return _field(b"\x32", value.encode())  # string_value = 6
    if t is bool:
        return b"\x10\x01" if value else b"\x10\x00"  # bool_value = 2
    if t is int:
        # trace_processor stores integer args as int64: larger values would display wrapped.
        if _INT64_MIN <= value <= _INT64_MAX:
            return b"\x20" + _varint(value)  # int_value = 4
        return _field(b"\x32", str(value).encode())
    if t is float:
        return b"\x29" + _pack_d(value)  # double_value = 5
    if value is None:
        # A bare JSON null crashes trace_processor v52 (json_utils "Unreachable"), and an
        # annotation without a value is dropped: show it as text.
        return _field(b"\x32", b"null")
    try:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return _field(b"\x32", str(value).encode())
    return _field(b"\x4a", text)  # legacy_json_value = 9


class UnitEncoder:
    """Encodes one input file's laid-out events onto its own packet sequence.

    The packets are encoded by hand (the schema's field numbers are spelled out above): on
    this path that is several times faster than building messages, and tests check the bytes
    against the official schema. Timestamps are on the sequence's own clock
    (:data:`SEQUENCE_CLOCK`), which the assembled trace relates to the trace clock with a clock
    snapshot written just before the chunk (:func:`sequence_start`): a chunk is encoded before
    the time base of the whole trace is known.
    """

    def __init__(self, sequence_id: int, out: BinaryIO) -> None:
        self.out = out
        seq = _K_SEQ + _varint(sequence_id)
        self.head = seq + _K_FLAGS + _varint(_NEEDS)
        self.first_head: bytes | None = seq + _K_FLAGS + _varint(_CLEARED | _NEEDS) + _FIRST_PACKET + _SEQUENCE_DEFAULTS
        self.prefixes: dict[tuple[str, str], bytes] = {}
        self.names: dict[str, int] = {}
        self.cats: dict[str, bytes] = {}
        self.arg_names: dict[str, bytes] = {}
        self.uuids: dict[int, bytes] = {}
        self.ends: dict[int, bytes] = {}
        self.interned: list[bytes] = []
        self.parts: list[bytes] = []

    def flush(self) -> None:
        self.out.write(b"".join(self.parts))
        self.parts.clear()

    def _emit(self, ts: int, event: bytes) -> None:
        head = self.head
        if self.first_head is not None:
            head, self.first_head = self.first_head, None
        body = head + _K_TIMESTAMP + _varint(ts) + _K_TRACK_EVENT + _varint(len(event)) + event
        if self.interned:
            body += _field(_K_INTERNED, b"".join(self.interned))
            self.interned.clear()
        parts = self.parts
        parts.append(b"\x0a" + _varint(len(body)) + body)
        if len(parts) >= 4096:
            self.flush()

    def _uuid(self, uuid: int) -> bytes:
        encoded = self.uuids.get(uuid)
        if encoded is None:
            encoded = self.uuids[uuid] = _K_TRACK_UUID + _varint(uuid)
        return encoded

    def describe(self, name: str, cat: str, args: dict[str, Any] | None) -> bytes:
        """Name, category and args as TrackEvent fields, interning what is new on this sequence."""
        prefix = self.prefixes.get((name, cat))
        if prefix is None:
            prefix = self.prefixes[(name, cat)] = self._prefix(name, cat)
        if not args or type(args) is not dict:
            return prefix
        parts = [prefix]
        arg_names = self.arg_names
        for key, value in args.items():
            aname = arg_names.get(key)
            if aname is None:
                aid = len(arg_names) + 1
                aname = arg_names[key] = b"\x08" + _varint(aid)
                self.interned.append(_interned_entry(_K_INTERNED_ARG, aid, key))
            encoded = aname + (_raw_value(value) if type(value) is msgspec.Raw else _annotation_value(value))
            parts.append(_K_ANNOTATION + _varint(len(encoded)) + encoded)
        return b"".join(parts)

    def _prefix(self, name: str, cat: str) -> bytes:
        iid = self.names.get(name)
        if iid is None:
            iid = self.names[name] = len(self.names) + 1
            self.interned.append(_interned_entry(_K_INTERNED_NAME, iid, name))
        prefix = _K_NAME_IID + _varint(iid)
        if cat:
            cat_field = self.cats.get(cat)
            if cat_field is None:
                cid = len(self.cats) + 1
                cat_field = self.cats[cat] = _K_CATEGORY_IID + _varint(cid)
                self.interned.append(_interned_entry(_K_INTERNED_CATEGORY, cid, cat))
            prefix += cat_field
        return prefix

    def slice_begin(self, track: ThreadTrack, ts: int, dur: int, body: bytes, flows: list[Flow] | None) -> None:
        event = _BEGIN_TYPE + body + self._uuid(track.uuid)
        if flows:
            event += b"".join(
                (_K_TERMINATING_FLOW if phase == FlowPhase.END else _K_FLOW) + _pack_q(fid) for fid, phase in flows
            )
        self._emit(ts, event)

    def slice_end(self, track: ThreadTrack, ts: int) -> None:
        end = self.ends.get(track.uuid)
        if end is None:
            end = self.ends[track.uuid] = _TYPE[_END] + self._uuid(track.uuid)
        self._emit(ts, end)

    def instant(self, track: ThreadTrack, ts: int, body: bytes) -> None:
        self._emit(ts, _TYPE[_INSTANT] + body + self._uuid(track.uuid))

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None:
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            sample = _K_COUNTER_INT + _varint(value)
        else:
            sample = _K_COUNTER_DOUBLE + _pack_d(float(value))
        self._emit(ts, _TYPE[_COUNTER] + self._uuid(track.uuid) + sample)

    def close(self) -> None:
        if self.interned:  # names interned for events that were all dropped: keep the bytes valid
            self.parts.append(_packet(self.head + _field(_K_INTERNED, b"".join(self.interned))))
            self.interned.clear()
        self.flush()


def _raw_value(raw: msgspec.Raw) -> bytes:
    """A DebugAnnotation value for a raw JSON value, typed where the JSON says the type."""
    text = bytes(raw)
    first = text[:1]
    if first == b'"':
        if b"\\" not in text:
            return _field(b"\x32", text[1:-1])  # string_value = 6
        return _annotation_value(msgspec.json.decode(text))
    if first in _NUMBER_START and len(text) < 19:
        try:
            return b"\x20" + _varint(int(text))  # int_value = 4
        except ValueError:
            pass
    return _annotation_value(msgspec.json.decode(text))


def _packet(body: bytes) -> bytes:
    return b"\x0a" + _varint(len(body)) + body


def prologue(unit: UnitPlan, local_min: int) -> bytes:
    """The clock snapshot that places a file's chunk on the trace's timeline.

    The chunk's timestamps are the file's own ns plus ``LOCAL_ZERO``; the trace time of a file
    timestamp ``t`` is ``t + unit.shift_ns``. The snapshot is taken at the file's first timestamp,
    where both readings are non-negative.
    """
    snap = pb.TracePacket(trusted_packet_sequence_id=unit.sequence_id)
    snap.clock_snapshot.clocks.add(clock_id=SEQUENCE_CLOCK, timestamp=local_min + LOCAL_ZERO)
    snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=local_min + unit.shift_ns)
    return _packet(snap.SerializeToString())


def write_header(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack]) -> None:
    """The clock snapshot and every track descriptor, before any event that uses them."""
    seq = DESCRIPTOR_SEQUENCE
    if plan.wall_clock:
        snap = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=0)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=plan.base_ns)
        write_packet(out, snap)
    # The root descriptor (uuid 0) asks v57+ UIs to order processes and threads by their
    # sibling_order_rank (role, then rank) instead of by slice count; older ones ignore it.
    root = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
    root.track_descriptor.uuid = 0
    root.track_descriptor.process_ordering = pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT
    root.track_descriptor.thread_ordering = pb.TrackDescriptor.THREAD_ORDERING_EXPLICIT
    write_packet(out, root)
    for proc in plan.processes:
        pkt = _descriptor(proc.uuid)
        pkt.track_descriptor.process.pid = proc.pid
        pkt.track_descriptor.process.process_name = proc.name
        pkt.track_descriptor.sibling_order_rank = proc.order
        write_packet(out, pkt)
    for thread in plan.threads:
        pkt = _descriptor(thread.uuid, thread.process_uuid)
        td = pkt.track_descriptor
        td.thread.pid, td.thread.tid, td.thread.thread_name = thread.pid, thread.tid, thread.name
        td.sibling_order_rank = thread.order
        write_packet(out, pkt)
    for lane in lanes:
        pkt = _descriptor(lane.uuid, lane.parent_uuid)
        pkt.track_descriptor.name = lane.name
        pkt.track_descriptor.sibling_order_rank = lane.lane
        write_packet(out, pkt)
    for counter in plan.counters:
        pkt = _descriptor(counter.uuid, counter.process_uuid)
        pkt.track_descriptor.name = counter.name
        pkt.track_descriptor.counter.SetInParent()
        write_packet(out, pkt)


def _descriptor(uuid: int, parent: int = 0) -> pb.TracePacket:
    """A TrackDescriptor packet on the descriptor sequence."""
    pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=DESCRIPTOR_SEQUENCE)
    pkt.track_descriptor.uuid = uuid
    if parent:
        pkt.track_descriptor.parent_uuid = parent
    return pkt


def write_footer(out: BinaryIO, plan: MergePlan) -> None:
    """Nothing follows the last packet in a protobuf trace."""
