"""A multi-host trace's machines in `.pftrace` (:mod:`tracemerge.plan.machines` says which).

trace_processor reads the packets of each ``TracePacket.machine_id`` apart, each machine with its
own sequences, clocks and tracks: every packet about a process on a machine carries the machine's
id. A file's chunk is encoded before anyone knows the run has several hosts, so its packets are
stamped here, while the output is assembled: each packet gets the machine of its sequence (the
field is appended; protobuf reads fields in any order). A machine is named by a ``SystemInfo``
packet's ``machine_name`` (trace_processor v58+ shows it; older ones ignore the field).
"""

from __future__ import annotations

import shutil
from typing import BinaryIO

import numpy as np

from tracemerge.plan.types import UnitPlan
from tracemerge.store.entries import byte_table, gathered, ranks
from tracemerge.writers import perfetto_trace_pb2 as pb
from tracemerge.writers.perfetto_wire import delimited_field, packet_record, put_varints, varint, varint_sizes

_K_MACHINE = b"\x90\x06"  # TracePacket.machine_id = 98, varint
_K_SYSTEM_INFO = b"\xea\x02"  # TracePacket.system_info = 45, length-delimited
_K_MACHINE_NAME = b"\x8a\x01"  # SystemInfo.machine_name = 17, string
_K_SEQ = 0x50  # TracePacket.trusted_packet_sequence_id = 10, varint: where every chunk packet starts
_BLOCK = 1 << 22


def machine_field(machine: int) -> bytes:
    return _K_MACHINE + varint(machine)


def machine_name(machine: int, name: str, sequence: int) -> bytes:
    """The packet that names a machine (``SystemInfo.machine_name``, on that machine), on the
    descriptor ``sequence`` (a reader of the trace's own notes reads that sequence alone)."""
    info = delimited_field(_K_SYSTEM_INFO, delimited_field(_K_MACHINE_NAME, name.encode()))
    return packet_record(bytes([_K_SEQ]) + varint(sequence) + machine_field(machine) + info)


def copy_chunk(src: BinaryIO, out: BinaryIO, unit: UnitPlan) -> None:
    """A unit's chunk, each packet stamped with the machine of its sequence (as it is in a run of
    one host)."""
    if not unit.machines:
        shutil.copyfileobj(src, out, 1 << 20)
        return
    fields = {seq: machine_field(machine) for seq, machine in unit.machines}
    pending = b""
    while block := src.read(_BLOCK):
        pending += block
        done = _stamp(pending, fields, out)
        pending = pending[done:]
    if pending:  # a chunk we wrote ends within a packet: only a bug does that
        raise ValueError(f"{unit.path.name}: its encoded chunk ends within a packet")


def _stamp(data: bytes, fields: dict[int, bytes], out: BinaryIO) -> int:
    """Writes the whole packets at the start of ``data`` stamped; returns where the first packet
    not whole begins. The packets are found one by one (a packet's length says where the next
    begins), then rebuilt all at once."""
    starts, done = _packets(data)
    if not starts:
        return 0
    pos = np.array(starts, np.int64)
    stop = np.append(pos[1:], done)
    buffer = np.frombuffer(data, np.uint8, done)
    # A body begins after its key and length: one more byte for each length byte with the
    # continuation bit (a packet is at least 2 bytes long, its length up to 5 bytes).
    at = pos + 2
    for k in range(1, 5):
        at += (buffer[np.minimum(pos + k, done - 1)] >= 0x80) & (at == pos + k + 1)
    table, table_begins, table_sizes = byte_table([b"", *fields.values()])
    which = np.zeros(len(at), np.int64)
    sequences = _sequences(data, buffer, at, stop)
    for n, seq in enumerate(fields, 1):
        which[sequences == seq] = n
    field_sizes = table_sizes[which]
    bodies = stop - at
    lengths = bodies + field_sizes
    header_sizes = 1 + varint_sizes(lengths.astype(np.uint64))
    sizes = header_sizes + lengths
    begins = np.cumsum(sizes) - sizes
    # The bodies are copied as they are (a masked copy: a few passes over the bytes in numpy);
    # the new keys, lengths and machine fields are written around them.
    stamped = np.empty(int(sizes.sum()), np.uint8)
    kept = np.ones(len(stamped), bool)
    kept[np.repeat(begins, header_sizes) + ranks(header_sizes)] = False
    field_at = np.repeat(begins + header_sizes + bodies, field_sizes) + ranks(field_sizes)
    kept[field_at] = False
    copied = np.ones(done, bool)
    copied[np.repeat(pos, at - pos) + ranks(at - pos)] = False
    stamped[kept] = buffer[copied]
    stamped[begins] = 0x0A  # Trace.packet = 1, length-delimited
    put_varints(stamped, begins + 1, lengths, header_sizes - 1)
    stamped[field_at] = np.frombuffer(gathered(table, table_begins[which], field_sizes), np.uint8)
    out.write(stamped.tobytes())
    return done


def _packets(data: bytes) -> tuple[list[int], int]:
    """Where each whole packet at the start of ``data`` begins, and where the last one ends."""
    starts: list[int] = []
    append = starts.append
    pos, end = 0, len(data)
    try:
        while True:
            byte = data[pos + 1]  # the length: a varint after the key (0x0A)
            if byte < 0x80:
                stop = pos + 2 + byte
            elif data[pos + 2] < 0x80:
                stop = pos + 3 + ((byte & 0x7F) | data[pos + 2] << 7)
            else:
                stop = _long_packet_end(data, pos)
            if stop > end:
                break
            append(pos)
            pos = stop
    except IndexError:  # the data ends within a packet's length
        pass
    return starts, pos


def _long_packet_end(data: bytes, pos: int) -> int:
    at, length, shift = pos + 1, 0, 0
    while True:
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return at + length
        shift += 7


def _sequences(data: bytes, buffer: np.ndarray, at: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Each packet's sequence id: a one-byte id right at the body's start read at once (the
    encoder starts every packet with its sequence id), any other packet one by one."""
    sequences = np.full(len(at), -1, np.int64)
    room = stop - at >= 2
    first = np.zeros(len(at), np.uint8)
    second = np.zeros(len(at), np.uint8)
    first[room] = buffer[at[room]]
    second[room] = buffer[at[room] + 1]
    quick = room & (first == _K_SEQ) & (second < 0x80)
    sequences[quick] = second[quick]
    for n in np.flatnonzero(~quick):
        sequences[n] = _sequence(data, int(at[n]), int(stop[n]))
    return sequences


def _sequence(data: bytes, at: int, stop: int) -> int:
    """The sequence id of a chunk packet (its body: ``data[at:stop]``). The encoder starts every
    packet with it; one that does not is read whole."""
    if at < stop and data[at] == _K_SEQ:
        value, shift = 0, 0
        for byte in data[at + 1 : min(at + 6, stop)]:
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
    return pb.TracePacket.FromString(data[at:stop]).trusted_packet_sequence_id
