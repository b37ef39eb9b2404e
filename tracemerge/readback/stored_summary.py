"""The phase summary a merged trace carries (the ``phase summary`` instant tracemerge writes: lines
as a person reads them, and the numbers as one JSON text, :func:`tracemerge.phases.stored`)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tracemerge.plan.types import SUMMARY_NOTE
from tracemerge.sources.base import GZIP_MAGIC
from tracemerge.writers import perfetto_trace_pb2 as pb
from tracemerge.writers.perfetto_tracks import DESCRIPTOR_SEQUENCE


def read_summary(path: Path) -> dict | None:
    """The numbers of :func:`tracemerge.phases.summary` stored in a tracemerge output; None when
    the trace has none (no phases were found, or another tool wrote it)."""
    with path.open("rb") as raw:
        gz = raw.read(2) == GZIP_MAGIC
    opener = gzip.open if gz else open
    with opener(path, "rb") as f:
        head = f.read(64).lstrip(b" \t\r\n")[:1]  # JSON may open with blanks (Kineto's does)
    with opener(path, "rb") as f:
        found = _from_json(f) if head in (b"{", b"[") else _from_pftrace(f)  # type: ignore[arg-type]
    if isinstance(found, dict) and isinstance(found.get("numbers"), str):
        return json.loads(found["numbers"])
    return found  # as tracemerge wrote it before the readable form


def _from_json(f: BinaryIO) -> dict | None:
    top = json.load(f)
    events = top.get("traceEvents", []) if isinstance(top, dict) else top
    for e in events:
        if isinstance(e, dict) and e.get("name") == SUMMARY_NOTE and e.get("cat") == "tracemerge":
            return e.get("args", {}).get("summary")
    return None


def _from_pftrace(f: BinaryIO) -> dict | None:
    """Reads packets from the start until the descriptor sequence ends (the note is in it)."""
    for data in _packets(f):
        packet = pb.TracePacket.FromString(data)
        if packet.trusted_packet_sequence_id != DESCRIPTOR_SEQUENCE:
            return None
        event = packet.track_event
        if packet.HasField("track_event") and event.name == SUMMARY_NOTE:
            for annotation in event.debug_annotations:
                if annotation.name == "summary":
                    return json.loads(annotation.legacy_json_value)
    return None


def _packets(f: BinaryIO) -> Iterator[bytes]:
    while True:
        tag = f.read(1)
        if not tag:
            return
        if tag != b"\x0a":  # Trace.packet = 1, length-delimited
            raise ValueError("not a Perfetto protobuf trace")
        size = shift = 0
        while True:
            byte = f.read(1)
            if not byte:
                return
            size |= (byte[0] & 0x7F) << shift
            shift += 7
            if byte[0] < 0x80:
                break
        yield f.read(size)
