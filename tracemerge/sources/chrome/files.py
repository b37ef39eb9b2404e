"""A file of Chrome trace events streamed into a :class:`ChromeEvents`, whole or in parts, with
what the stream counted and the damage it stopped at: what the formats holding Chrome events
(Chrome JSON, Ascend's text export) share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.core.errors import InputError, shown
from tracemerge.core.model import NO_ORIGIN
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.chrome.events import ChromeEvents
from tracemerge.sources.chrome.framework_steps import note_framework_steps
from tracemerge.sources.chrome.schema import ExactEvent, NeedsExactTimes
from tracemerge.sources.json.segments import read_in_parts
from tracemerge.sources.json.stream import Damage, EventStream
from tracemerge.store.read_options import PartReads


def read_events(
    path: Path, reader: ChromeEvents, struct: type, lenient: type, parts: PartReads | None = None
) -> dict[str, Any]:
    """Stream a Chrome-event JSON file into ``reader``; returns the keys around the event array.

    Float timestamps too large to hold their nanoseconds make the file be read again with its
    times taken from the text (old Kineto traces in absolute µs). Raises
    :class:`~tracemerge.core.errors.InputError` where the JSON is damaged. With ``parts`` (the
    executor's), a large file is read in parts at once (:mod:`tracemerge.sources.json.segments`).
    """
    if parts is not None:
        found = read_in_parts(path, reader, struct, lenient, parts)
        if found is not None:
            meta, damage, notes = found
            _account(path, reader, notes, damage)
            return meta
    try:
        return _stream(path, reader, struct, lenient)
    except NeedsExactTimes:
        reader.start_over()
        return _stream(path, reader, ExactEvent, ExactEvent)


def _stream(path: Path, reader: ChromeEvents, struct: type, lenient: type) -> dict[str, Any]:
    stream = EventStream(path, struct, lenient)
    add_batch = reader.add_batch
    check_memory = reader.layout.check_memory
    for batch in stream.batches():
        add_batch(batch, plain_text=stream.plain_text, bind_ids=stream.bind_ids)
        if stream.step_args:
            note_framework_steps(batch, NO_ORIGIN, reader.layout, reader.to_ns)
        check_memory()
    _account(path, reader, stream.notes, stream.damage)
    return stream.meta


def _account(path: Path, reader: ChromeEvents, notes: Losses, damage: Damage | None) -> None:
    """What the stream counted instead of yielding, and the damage it stopped at, if any."""
    reader.dropped.update(notes)
    if damage is not None:
        # Salvage (a job killed while writing): every complete event before the damage is kept;
        # what follows it is lost, said once with the place.
        if not (reader.threads_seen or reader.counter_threads or reader.metadata_records):
            raise InputError(path, damage.reason, damage.where or None)
        where = f":{damage.where}" if damage.where else ""
        lost = f"{damage.reason}; events after it are lost (the ones before are kept)"
        reader.dropped.add(Stat.FILE_DAMAGED, 1, f"{shown(path)}{where}: {lost}")
