"""A file's encoded chunk copied with some of its track uuids given again.

A file is encoded before the plan exists, its tracks named by uuids hashed from what they are
(:mod:`tracemerge.plan.types`). Within a file no two tracks share one (the file's encoder gives a
track whose hash is taken another); across files two may, and the plan then gives one of them
another uuid. The events of that file's chunk that name the track (``TrackEvent.track_uuid``, and
the sequence's default track in ``TracePacketDefaults``) are rewritten as the chunk is copied into
the output: the file is never read again. Only the packets where the old uuid's bytes appear are
decoded; the others are copied as they are.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import BinaryIO

from tracemerge.writers.perfetto_wire import varint

# Where a track uuid lies in a TracePacket, by field number: TrackEvent (11).track_uuid (11), and
# TracePacketDefaults (59).track_event_defaults (11).track_uuid (11). None: the varint itself.
_Schema = dict[int, "_Schema | None"]
_UUIDS: _Schema = {11: {11: None}, 59: {11: {11: None}}}
_TRACK_UUID_KEY = b"\x58"  # field 11, varint: how the uuid's bytes begin wherever it is


def copy_renamed(chunk: Path, out: BinaryIO, renames: dict[int, int]) -> int:
    """Copies ``chunk`` (TracePackets, each ``0x0a``, its length, its body) to ``out``, every
    track uuid found in ``renames`` replaced by its value; returns how many packets changed."""
    size = chunk.stat().st_size
    if not size:
        return 0
    with chunk.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        candidates = sorted(_occurrences(data, [_TRACK_UUID_KEY + varint(old) for old in renames]))
        copied = pos = changed = 0
        k = 0
        while k < len(candidates):
            length, body = _read_varint(data, pos + 1)
            end = body + length
            if candidates[k] >= end:  # not in this packet
                pos = end
                continue
            packet, was_renamed = _rewritten(data[body:end], _UUIDS, renames)
            if was_renamed:
                out.write(data[copied:pos])
                out.write(b"\x0a" + varint(len(packet)) + packet)
                copied = end
                changed += 1
            while k < len(candidates) and candidates[k] < end:
                k += 1
            pos = end
        for start in range(copied, size, 1 << 24):
            out.write(data[start : min(size, start + (1 << 24))])
    return changed


def _occurrences(data: mmap.mmap, patterns: list[bytes]) -> list[int]:
    found = []
    for pattern in patterns:
        at = data.find(pattern)
        while at >= 0:
            found.append(at)
            at = data.find(pattern, at + 1)
    return found


def _read_varint(data: bytes | mmap.mmap, at: int) -> tuple[int, int]:
    """The varint at ``at``, and where what follows it begins."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _rewritten(message: bytes, schema: _Schema, renames: dict[int, int]) -> tuple[bytes, bool]:
    """``message`` with the uuids ``schema`` locates renamed, and whether any was."""
    parts: list[bytes] = []
    kept = at = 0
    while at < len(message):
        field_at = at
        key, at = _read_varint(message, at)
        field, wire = key >> 3, key & 7
        key_bytes = message[field_at:at]
        if wire == 0:
            value, after = _read_varint(message, at)
            if field in schema and schema[field] is None and value in renames:
                parts += [message[kept:field_at], key_bytes + varint(renames[value])]
                kept = after
            at = after
        elif wire == 2:
            length, inner = _read_varint(message, at)
            at = inner + length
            sub = schema.get(field)
            if sub is not None:
                body, changed = _rewritten(message[inner:at], sub, renames)
                if changed:
                    parts += [message[kept:field_at], key_bytes + varint(len(body)) + body]
                    kept = at
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:  # groups: never written by the encoder
            raise ValueError(f"wire type {wire} in an encoded chunk")
    if not parts:
        return message, False
    parts.append(message[kept:])
    return b"".join(parts), True
