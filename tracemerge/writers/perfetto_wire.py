"""Protobuf wire encoding for the Perfetto writer, by hand where the generated classes are slow.

Varints (negative int64 values as their 64-bit two's complement, as protobuf writes them), a
length-delimited field, a ``Trace.packet`` record around a serialized TracePacket, and the
varint sizes and bytes of whole numpy arrays of values at once. Pure functions: no state.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from tracemerge.writers import perfetto_trace_pb2 as pb

# The values a protobuf int64 field holds.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def write_packet(out: BinaryIO, packet: pb.TracePacket) -> None:
    """Append one ``Trace.packet`` record (field 1, length-delimited)."""
    body = packet.SerializeToString()
    out.write(b"\x0a" + varint(len(body)) + body)


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths, iids and small values are the most frequent varints: look them up. Those of two bytes
# are each low byte (with the continuation bit) before each high byte: built so, a third of the
# start-up time of a varint computed one by one.
_ONE_BYTE = [bytes((n,)) for n in range(1 << 7)]
_CONTINUED = [bytes((n | 0x80,)) for n in range(1 << 7)]
SMALL_VARINTS = _ONE_BYTE + [low + high for high in _ONE_BYTE[1:] for low in _CONTINUED]


def varint(n: int) -> bytes:
    """Protobuf varint; negative int64 values take their 64-bit two's complement (10 bytes)."""
    if 0 <= n < 16384:
        return SMALL_VARINTS[n]
    if 0 < n < 1 << 35:  # timestamps within a file: unrolled, the loop costs 4x more
        if n < 1 << 21:
            return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
        if n < 1 << 28:
            return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21))
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21 & 0x7F | 0x80, n >> 28))
    return _encode_varint(n & 0xFFFFFFFFFFFFFFFF)


def delimited_field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def packet_record(body: bytes) -> bytes:
    return b"\x0a" + varint(len(body)) + body


# A varint of k + 1 bytes holds values from _VARINT_FLOORS[k - 1] on.
_VARINT_FLOORS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    return np.searchsorted(_VARINT_FLOORS, values, "right") + 1


def put_varints(out: np.ndarray, at: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
    values = values.astype(np.uint64)
    for k in range(int(sizes.max())):
        todo = sizes > k
        if not todo.all():
            at, values, sizes = at[todo], values[todo], sizes[todo]
        byte = (values >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(sizes > k + 1, np.uint64(0x80), np.uint64(0))
        out[at + k] = byte
