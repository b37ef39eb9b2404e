"""TrackEvent packets of a batch built at once in numpy, for
:class:`~tracemerge.writers.perfetto.UnitEncoder` (in its process, or in a process packing for it:
:class:`~tracemerge.writers.packing.ForkedPacker`).

A batch is each packet's timestamp and its TrackEvent's bytes in parts (per part, each packet's
length and the bytes of all joined): :func:`pack_events` writes the ``Trace.packet`` records,
headers side by side and interleaved with the parts, without a Python loop over the packets.
"""

from __future__ import annotations

import numpy as np

from tracemerge.store.entries import interleaved
from tracemerge.writers.perfetto_wire import put_varints, varint_sizes

K_TRACK_EVENT = b"\x5a"  # TracePacket.track_event = 11, bytes


def joined_writes(
    writes: list[tuple[np.ndarray, list[tuple[np.ndarray, bytes]]]],
) -> tuple[np.ndarray, list[tuple[np.ndarray, bytes]]]:
    """Writes of packets (each: their timestamps, and their parts) as one: part ``k`` of each
    packet is part ``k`` of its write, or nothing where its write has fewer."""
    stamps = np.concatenate([s for s, _ in writes])
    parts = []
    for k in range(max(len(p) for _, p in writes)):
        lengths = [p[k][0] if k < len(p) else np.zeros(len(s), np.int64) for s, p in writes]
        parts.append((np.concatenate(lengths), b"".join(p[k][1] for _, p in writes if k < len(p))))
    return stamps, parts


def pack_events(stamped_head: bytes, stamps: np.ndarray, parts: list[tuple[np.ndarray, bytes]]) -> bytes:
    """``Trace.packet`` records of TrackEvents: per packet ``stamped_head`` (sequence id, flags and
    the timestamp key), the timestamp, and the TrackEvent, whose bytes are the packet's share of
    each part in turn (a part: each packet's length, and the bytes of all joined). Built in numpy:
    the headers side by side, then interleaved with the parts (the last, the largest, last)."""
    n = len(stamps)
    stamps = stamps.astype(np.uint64)  # a negative time as its two's complement, as varints are
    lengths = np.zeros(n, np.int64)
    for part_lengths, _ in parts:
        lengths += part_lengths
    stamp_sizes = varint_sizes(stamps)
    length_sizes = varint_sizes(lengths.astype(np.uint64))
    body = len(stamped_head) + stamp_sizes + 1 + length_sizes + lengths
    body_sizes = varint_sizes(body.astype(np.uint64))
    header_sizes = 1 + body_sizes + len(stamped_head) + stamp_sizes + 1 + length_sizes
    ends = np.cumsum(header_sizes)
    at = ends - header_sizes
    headers = np.empty(int(ends[-1]), np.uint8)
    headers[at] = 0x0A  # Trace.packet = 1, length-delimited
    put_varints(headers, at + 1, body, body_sizes)
    at = at + 1 + body_sizes
    head = np.frombuffer(stamped_head, np.uint8)
    headers[at[:, None] + np.arange(len(head))] = head
    at += len(head)
    put_varints(headers, at, stamps, stamp_sizes)
    at += stamp_sizes
    headers[at] = K_TRACK_EVENT[0]
    put_varints(headers, at + 1, lengths, length_sizes)
    *small, last = parts
    if small:  # the small parts with the headers first, then the last part's bytes interleaved
        headers = interleaved([header_sizes, *(sizes for sizes, _ in small)], [headers, *(data for _, data in small)])
        header_sizes = header_sizes + sum(sizes for sizes, _ in small)
    return interleaved([header_sizes, last[0]], [headers, last[1]]).tobytes()
