"""The phase summary a merged trace carries (the ``phase summary`` instant tracemerge writes: lines
as a person reads them, and the numbers as one JSON text, :func:`tracemerge.phases.stored`).

Neither form is loaded whole to find it: a ``.pftrace`` is read packet by packet up to the end of
its descriptor sequence, a JSON trace a batch of events at a time
(:class:`~tracemerge.sources.json.stream.EventStream`, each event's name and category decoded,
its args kept as text), up to the note (in the header of what tracemerge writes); a JSON trace of
another tool is read through in bounded batches and holds none.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from tracemerge.core.errors import InputError, NotATrace
from tracemerge.plan.types import SUMMARY_NOTE
from tracemerge.sources.base import GZIP_MAGIC
from tracemerge.sources.json.stream import EventStream
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
    if head in (b"{", b"["):
        found = _from_json(path)
    else:
        with opener(path, "rb") as f:
            found = _from_pftrace(f)  # type: ignore[arg-type]
    if isinstance(found, dict) and isinstance(found.get("numbers"), str):
        return json.loads(found["numbers"])
    return found  # as tracemerge wrote it before the readable form


class _Note(msgspec.Struct):
    """What the search needs of an event: its name and category (of any type), its args as text."""

    name: Any = None
    cat: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


def _from_json(path: Path) -> dict | None:
    """The summary note's ``summary`` arg in a JSON trace; None when it holds no note (or is no
    trace: a JSON object without ``traceEvents``). ValueError when it cannot be read."""
    stream = EventStream(path, _Note, _Note)
    try:
        for batch in stream.batches():
            for event in batch:
                if type(event) is _Note and event.name == SUMMARY_NOTE and event.cat == "tracemerge":
                    args = json.loads(bytes(event.args)) if event.args else {}
                    return args.get("summary")  # AttributeError for args of no shape tracemerge writes
    except NotATrace:
        return None
    except InputError as exc:
        raise ValueError(exc.reason) from None
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
