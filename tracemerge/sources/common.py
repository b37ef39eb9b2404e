"""Helpers shared by the source modules (formats never import each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.errors import InputError
from tracemerge.sources.chrome_events import ChromeEvents, ExactEvent, NeedsExactTimes
from tracemerge.sources.json_stream import EventStream


def as_rank(value: Any) -> int | None:
    """A rank from an int or a numeric string; None for anything else."""
    if type(value) is int and value >= 0:
        return value
    if type(value) is str and value.strip().isdigit():
        return int(value)
    return None


def read_events(path: Path, reader: ChromeEvents, struct: type, lenient: type) -> dict[str, Any]:
    """Stream a Chrome-event JSON file into ``reader``; returns the keys around the event array.

    Float timestamps too large to hold their nanoseconds make the file be read again with its
    times taken from the text (old Kineto traces in absolute µs). Raises
    :class:`~tracemerge.errors.InputError` where the JSON is damaged.
    """
    try:
        return _stream(path, reader, struct, lenient)
    except NeedsExactTimes:
        reader.layout.reset()
        reader.__init__(reader.layout)  # type: ignore[misc]
        return _stream(path, reader, ExactEvent, ExactEvent)


def _stream(path: Path, reader: ChromeEvents, struct: type, lenient: type) -> dict[str, Any]:
    stream = EventStream(path, struct, lenient)
    add_batch = reader.add_batch
    check_memory = reader.layout.check_memory
    for batch in stream.batches():
        add_batch(batch, plain_text=stream.plain_text)
        check_memory()
    if stream.damage is not None:
        raise InputError(path, stream.damage.reason, stream.damage.where or None)
    return stream.meta
