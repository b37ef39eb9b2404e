"""Perfetto protobuf output (``.pftrace``): TrackEvent packets, as trace_processor imports them.

Layout of the file: sequence 1 holds a clock snapshot (so the UI can show wall-clock time) and
every track descriptor (:mod:`tracemerge.writers.perfetto_tracks`); then each input file's events
follow on a sequence of their own, with names, categories and argument names interned per
sequence: this module's :class:`UnitEncoder` encodes one file's chunk.
"""

from __future__ import annotations

import io
import os
import struct
from contextlib import suppress
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson

from tracemerge.core.model import FlowPhase
from tracemerge.core.units import plain_json
from tracemerge.layout.types import Items
from tracemerge.plan.types import CounterTrack, ThreadTrack
from tracemerge.store.entries import byte_table, gathered
from tracemerge.writers import perfetto_trace_pb2 as pb
from tracemerge.writers.packing import ForkedPacker
from tracemerge.writers.perfetto_packets import K_TRACK_EVENT, joined_writes, pack_events
from tracemerge.writers.perfetto_wire import INT64_MAX, INT64_MIN, SMALL_VARINTS, delimited_field, packet_record, varint

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER


# Pre-encoded keys (field number << 3 | wire type) of the fields written on the hot path.
_K_TIMESTAMP = b"\x40"  # TracePacket.timestamp = 8, varint
_K_SEQ = b"\x50"  # TracePacket.trusted_packet_sequence_id = 10, varint
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
# Packets of a chunk are stamped on a clock of their sequence (ids 64-127 are sequence-scoped),
# set once as the sequence's default (TracePacketDefaults.timestamp_clock_id = 58).
SEQUENCE_CLOCK = 64
_CLOCK_DEFAULT = b"\xd0\x03\x40"  # TracePacketDefaults.timestamp_clock_id = 58: SEQUENCE_CLOCK
_K_DEFAULTS = b"\xda\x03"  # TracePacket.trace_packet_defaults = 59
_K_TRACK_DEFAULTS = b"\x5a"  # TracePacketDefaults.track_event_defaults = 11, whose track_uuid = 11
_ARGS_IID = 1
_ARGS_NAME = b"\x08\x01"  # DebugAnnotation.name_iid = 1: "args", interned when a sequence starts
_pack_d = struct.Struct("<d").pack
_FLOW_KEY = np.frombuffer(_K_FLOW, np.uint8)
_TERMINATING_FLOW_KEY = np.frombuffer(_K_TERMINATING_FLOW, np.uint8)


def _interned_entry(tag: bytes, iid: int, name: str) -> bytes:
    # EventName / EventCategory / DebugAnnotationName: iid = 1, name = 2
    return delimited_field(tag, b"\x08" + varint(iid) + delimited_field(b"\x12", name.encode()))


class UnitEncoder:
    """Encodes one input file's laid-out events onto its own packet sequence.

    The packets are encoded by hand (the schema's field numbers are spelled out above), a batch
    of events at a time in numpy: on this path that is many times faster than building messages,
    and tests check the bytes against the official schema. Timestamps are on the sequence's own
    clock (:data:`SEQUENCE_CLOCK`), which the assembled trace relates to the trace clock with a
    clock snapshot written just before the chunk
    (:func:`~tracemerge.writers.perfetto_tracks.prologue`): a chunk is encoded before
    the time base of the whole trace is known.

    An event's args are written as one annotation named ``args`` holding the JSON object as it
    was read (``legacy_json_value``); trace_processor flattens it into typed args
    (``debug.args.<key>``). Passing the text through keeps the read path free of per-argument
    work (bench/RESULTS.md has the measurement).
    """

    flows_bind_by_order = False  # flows are bound by id, wherever the slices are in the file
    ends_apart = True

    def __init__(self, sequence_id: int, out: BinaryIO, ahead: bool = False) -> None:
        self.out = out
        # ``ahead`` (a core is idle, ``out`` a file): the batches' packets are packed and written
        # by a process of its own while the layout works the next batch out (see ForkedPacker).
        self._packer: ForkedPacker | None = None
        if ahead and _is_file(out):
            with suppress(OSError):  # no process to fork: packed here
                self._packer = ForkedPacker(out, pack_events)
        seq = _K_SEQ + varint(sequence_id)
        self.head = seq + _K_FLAGS + varint(_NEEDS)
        # Packet bytes: key and length, head and timestamp key, timestamp, track-event key and
        # length, event.
        self.stamped_head = self.head + _K_TIMESTAMP
        self.first_head: bytes | None = seq + _K_FLAGS + varint(_CLEARED | _NEEDS) + _FIRST_PACKET
        self.defaults = _CLOCK_DEFAULT
        self.default_uuid: int | None = None
        self.names: dict[str, int] = {}
        self.cats: dict[str, bytes] = {}
        self.interned: list[bytes] = [_interned_entry(_K_INTERNED_ARG, _ARGS_IID, "args")]
        # Counter samples are collected as (timestamp, TrackEvent bytes), encoded ``batch`` at a time.
        self.times: list[int] = []
        self.events: list[bytes] = []
        self._tails: dict[tuple[int | None, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # Packets written but not packed yet (see _write), and how many.
        self._pending: list[tuple[np.ndarray, list[tuple[np.ndarray, bytes]]]] = []
        self._pending_packets = 0
        self._last_tails: tuple[list, tuple[int, int | None], tuple] | None = None

    batch = 1 << 14
    packed_alone = 512  # packets: a write at least this large is packed by itself (see _write)

    def flush(self) -> None:
        times, events = self.times, self.events
        if not times:
            return
        lengths = np.fromiter(map(len, events), np.int64, len(events))
        self._write(np.array(times, dtype=np.int64), [(lengths, b"".join(events))])
        self.times, self.events = [], []

    def _emit(self, ts: int, event: bytes) -> None:
        self.times.append(ts)
        self.events.append(event)
        if len(self.times) >= self.batch:
            self.flush()

    def _write(self, stamps: np.ndarray, parts: list[tuple[np.ndarray, bytes]]) -> None:
        """Packets of TrackEvents made of ``parts`` (per part, each packet's length and the bytes
        joined), the first one starting the sequence or carrying newly interned names."""
        if not len(stamps):
            return
        if self.first_head is not None or self.interned:
            sizes = [int(lengths[0]) for lengths, _ in parts]
            self._write_first(
                int(stamps[0]), b"".join(data[:size] for (_, data), size in zip(parts, sizes, strict=True))
            )
            stamps = stamps[1:]
            parts = [(lengths[1:], data[size:]) for (lengths, data), size in zip(parts, sizes, strict=True)]
        if not len(stamps):
            return
        # Small writes are packed together: a thread of a few events (thousands of them in some
        # traces) is too small for numpy to pay (0.3 ms a pack, whatever its size). Others are
        # packed at once, so that a packing process has them as early as they are written.
        if len(stamps) >= self.packed_alone:
            self._pack_pending()
            self._pack(stamps, parts)
            return
        self._pending.append((stamps, parts))
        self._pending_packets += len(stamps)
        if self._pending_packets >= self.batch:
            self._pack_pending()

    def _pack_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending, self._pending_packets = [], 0
        self._pack(*(pending[0] if len(pending) == 1 else joined_writes(pending)))

    def _pack(self, stamps: np.ndarray, parts: list[tuple[np.ndarray, bytes]]) -> None:
        if self._packer is not None:
            self._packer.pack(self.stamped_head, stamps, parts)
        else:
            self.out.write(pack_events(self.stamped_head, stamps, parts))

    def _put(self, data: bytes) -> None:
        """``data`` written after what was sent before it."""
        self._pack_pending()
        if self._packer is not None:
            self._packer.write(data)
        else:
            self.out.write(data)

    def _write_first(self, ts: int, event: bytes) -> None:
        """A packet that also starts the sequence or carries newly interned names."""
        head = self.head
        if self.first_head is not None:
            head, self.first_head = self.first_head + delimited_field(_K_DEFAULTS, self.defaults), None
        body = head + _K_TIMESTAMP + varint(ts) + K_TRACK_EVENT + varint(len(event)) + event
        if self.interned:
            body += delimited_field(_K_INTERNED, b"".join(self.interned))
            self.interned.clear()
        self._put(packet_record(body))

    def prefix(self, name: str, cat: str) -> bytes:
        """Name and category as TrackEvent fields, interning what is new on this sequence."""
        iid = self.names.get(name)
        if iid is None:
            iid = self.names[name] = len(self.names) + 1
            self.interned.append(_interned_entry(_K_INTERNED_NAME, iid, name))
        prefix = _K_NAME_IID + varint(iid)
        if cat:
            cat_field = self.cats.get(cat)
            if cat_field is None:
                cid = len(self.cats) + 1
                cat_field = self.cats[cat] = _K_CATEGORY_IID + varint(cid)
                self.interned.append(_interned_entry(_K_INTERNED_CATEGORY, cid, cat))
            prefix += cat_field
        return prefix

    # ``args_heads[len(text)] + text`` is the annotation of an args text known to need no
    # rewriting (:meth:`args` checks): the layout's hot path uses it without a call.
    args_heads = tuple(
        _K_ANNOTATION + SMALL_VARINTS[3 + len(v) + n] + _ARGS_NAME + b"\x4a" + v
        for n, v in enumerate(SMALL_VARINTS[:4096])  # each n's varint, looked up
    )

    def args(self, text: bytes) -> bytes:
        """An args object (JSON text) as the event's ``args`` annotation."""
        if not plain_json(text):
            text = _displayable(text)
        value = _ARGS_NAME + b"\x4a" + varint(len(text)) + text  # legacy_json_value = 9
        return _K_ANNOTATION + varint(len(value)) + value

    def default_track(self, uuid: int) -> None:
        """The track events name when they name none (TrackEventDefaults on this sequence): set
        before anything is written, to the file's busiest thread, whose events then leave out
        their track_uuid."""
        if self.first_head is None:
            return
        self.default_uuid = uuid
        track = _K_TRACK_UUID + varint(uuid)
        self.defaults = _CLOCK_DEFAULT + delimited_field(_K_TRACK_DEFAULTS, track)

    def _tail_table(self, tracks: list[ThreadTrack]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What follows an event's body, per track: after a BEGIN's, an instant's, and the whole
        END event (at 3 * lane + 0, 1, 2): its bytes, where each begins and how long it is."""
        last = self._last_tails
        if last is not None and last[0] is tracks and last[1] == (len(tracks), self.default_uuid):
            return last[2]  # the same thread's tracks again: not keyed again (a thread may have many lanes)
        key = (self.default_uuid, *(track.uuid for track in tracks))
        found = self._tails.get(key)
        if found is None:
            tails = []
            for track in tracks:
                field = b"" if track.uuid == self.default_uuid else _K_TRACK_UUID + varint(track.uuid)
                tails += [field + _TYPE[_BEGIN], field + _TYPE[_INSTANT], _TYPE[_END] + field]
            found = self._tails[key] = byte_table(tails)
        self._last_tails = (tracks, (len(tracks), self.default_uuid), found)
        return found

    def ends(self, tracks: list[ThreadTrack], lanes: np.ndarray, stamps: np.ndarray) -> None:
        table, begins, lengths = self._tail_table(tracks)
        which = lanes * 3 + 2
        self.flush()
        self._write(stamps, [(lengths[which], gathered(table, begins[which], lengths[which]))])

    def items(self, tracks: list[ThreadTrack], items: Items, in_walk_order: bool) -> None:
        """BEGINs (a zero-length slice's END right after it) and instants, in the order given."""
        table, begins, lengths = self._tail_table(tracks)
        zero = ~items.instants & (items.durs == 0)
        reps = 1 + zero.astype(np.int64)
        main = np.cumsum(reps) - reps  # each item's packet; a zero-length slice's END follows
        total = len(items.stamps) + int(np.count_nonzero(zero))
        which = np.empty(total, np.int64)
        which[main] = items.lanes * 3 + items.instants
        which[main[zero] + 1] = items.lanes[zero] * 3 + 2
        body_lengths = np.zeros(total, np.int64)
        body_lengths[main] = items.lengths
        flow_lengths = np.zeros(total, np.int64)
        flow_lengths[main] = items.flow_counts * self.flow_field_size
        flows = self.flow_field_run(items.flow_ids, items.flow_phases) if len(items.flow_ids) else b""
        self.flush()
        self._write(
            np.repeat(items.stamps, reps),
            [
                (lengths[which], gathered(table, begins[which], lengths[which])),
                (flow_lengths, flows),
                (body_lengths, items.bodies),
            ],
        )

    flow_field_size = 10  # a two-byte key and a fixed64

    @staticmethod
    def flow_field_run(ids: np.ndarray, phases: np.ndarray) -> bytes:
        """A BEGIN's flow ids (the last point of a flow terminates it) for many flows at once,
        joined: ``flow_field_size`` bytes per flow."""
        rows = np.empty((len(ids), UnitEncoder.flow_field_size), np.uint8)
        rows[:, :2] = np.where((phases == FlowPhase.END)[:, None], _TERMINATING_FLOW_KEY, _FLOW_KEY)
        rows[:, 2:] = ids.astype("<u8").view(np.uint8).reshape(-1, 8)
        return rows.tobytes()

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None:
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            sample = _K_COUNTER_INT + varint(value)
        else:
            sample = _K_COUNTER_DOUBLE + _pack_d(float(value))
        self._emit(ts, _TYPE[_COUNTER] + _K_TRACK_UUID + varint(track.uuid) + sample)

    def close(self) -> None:
        self.flush()
        if self.interned and self.first_head is None:  # names of events that were all dropped
            self._put(packet_record(self.head + delimited_field(_K_INTERNED, b"".join(self.interned))))
            self.interned.clear()
        self._pack_pending()
        if self._packer is not None:
            self._packer.close()

    def end(self) -> None:
        """The packing process stopped if it still runs: the file was given up."""
        if self._packer is not None:
            self._packer.end()


def _is_file(out: BinaryIO) -> bool:
    """Whether ``out`` writes to a file descriptor another process can write to, where processes
    can be forked (``out`` is a plain binary file or in memory: a compressing wrapper's
    descriptor is not where its bytes go, and none is given here)."""
    if not hasattr(os, "fork"):
        return False
    try:
        out.fileno()
    except (OSError, io.UnsupportedOperation, AttributeError):
        return False
    return True


def _displayable(text: bytes) -> bytes:
    """Args with what trace_processor cannot show as written made text: nulls (it drops them)
    and integers beyond int64 (it shows them wrapped)."""
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return orjson.dumps(text.decode("utf-8", "replace"))
    return orjson.dumps(_as_displayed(value))


def _as_displayed(value: Any) -> Any:
    if value is None:
        return "null"
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        return str(value)
    if type(value) is dict:
        return {k: _as_displayed(v) for k, v in value.items()}
    if type(value) is list:
        return [_as_displayed(v) for v in value]
    return value
