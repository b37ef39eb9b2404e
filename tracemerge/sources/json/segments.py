"""A large Chrome JSON file read in parts, by several processes at once.

A plain (not gzipped) file of at least two PART_MIN is cut where one event of its array ends
and the next begins. The first part is read by the process reading the file, into the file's own
layout and reader, as a read of the whole file begins. Each other part is read meanwhile where
the executor's ``PartReads`` runs it (locally, a process of its own:
:class:`~tracemerge.run.executors.ForkedPartReads`) into a layout and a reader of its own, exactly as
a read of the whole file reads those bytes, except that names and categories are written as
placeholders (the interning order is the whole file's, known only once every part is read). These
parts are then handed, in file order, to the file's layout and reader
(:meth:`~tracemerge.store.file_layout.FileLayout.absorb_part`, :meth:`~tracemerge.sources.chrome.events.
ChromeEvents.absorb`), which end up as one read would have left them: the same entries in the
same order, ordinals in file order, names interned in order of first appearance. So the output is
the same bytes however many parts a file is read in.

A part that does not end between two events (a cut that fell inside a string), or a float time
too large for its nanoseconds (the file must be read from the numbers' text), makes the file be
read whole instead, as it would have been.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import msgspec
from msgspec import field

from tracemerge.core.model import NO_ORIGIN
from tracemerge.core.stats import Losses
from tracemerge.sources.base import GZIP_MAGIC, UTF8_BOM
from tracemerge.sources.chrome.events import ChromeEvents
from tracemerge.sources.chrome.framework_steps import note_framework_steps
from tracemerge.sources.chrome.schema import NeedsExactTimes
from tracemerge.sources.json.stream import Damage, EventStream, SegmentCut
from tracemerge.sources.json.text import KEYED_BOUNDARY
from tracemerge.store.file_layout import FileLayout, PlaceholderEncoder
from tracemerge.store.read_options import PartReads

# A part holds at least this many bytes: a file of two parts' worth is read in parts when the
# merge leaves cores idle. Below that, forking a reader and handing its part over cost about what
# the second core saves (on 2 cores, a 23 MB Kineto rank in two parts: wall -5.5%, CPU +17%; a
# 64 MB one: wall -20%, CPU +6%; bench/RESULTS.md, third round).
PART_MIN = 8 << 20
_SEARCH = 4 << 20  # bytes searched for a boundary after a cut's nominal place
_FIRST_LOOK = 64 << 10  # bytes read first (then four times more each time)


class Part(msgspec.Struct):
    """What reading one part left: its layout's buffers and its reader's state (see the module)."""

    index: int
    layout: dict[str, Any] = field(default_factory=dict)
    reader: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    notes: Losses = field(default_factory=Losses)
    damage: Damage | None = None
    whole: str = ""  # why the file must be read whole instead


def spans(path: Path, count: int) -> list[tuple[int, int | None]] | None:
    """Where each of ``count`` parts starts and stops (None: the file's end), each cut where an
    event starts; None when the file is not worth cutting or cannot be."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if f.read(3)[:2] == GZIP_MAGIC:
                return None
            f.seek(0)
            if f.read(len(UTF8_BOM)) == UTF8_BOM:  # the parts' places would count it differently
                return None
            count = min(count, size // PART_MIN)
            if count < 2:
                return None
            cuts = []
            for k in range(1, count):
                cut = _boundary_after(f, size * k // count)
                if cut is None:
                    return None
                cuts.append(cut)
    except OSError:
        return None
    if cuts != sorted(set(cuts)):
        return None
    starts = [0, *cuts]
    return list(zip(starts, [*cuts, None], strict=True))


def _boundary_after(f: BinaryIO, at: int) -> int | None:
    """Where the first event starting after byte ``at`` begins (its ``{``), searched for up to
    _SEARCH bytes on: a little first, as it is seldom far (reading the 4 MB at once cost 15 ms
    of a 23 MB rank's merge)."""
    f.seek(at)
    text, step = b"", _FIRST_LOOK
    while len(text) < _SEARCH:
        more = f.read(min(step, _SEARCH - len(text)))
        if not more:
            break
        text += more
        # Searched from the start again: a boundary may straddle two reads. The first found in
        # what is read so far is the first in the whole window (none can start before it and
        # end after: its braces and comma are not whitespace).
        found = KEYED_BOUNDARY.search(text)  # not one that a string holds, as far as can be told
        if found is not None:
            return at + found.end() - 1  # the next event's ``{``
        step *= 4
    return None


def read_in_parts(
    path: Path, reader: ChromeEvents, struct: type, lenient: type, reads: PartReads
) -> tuple[dict[str, Any], Damage | None, Losses] | None:
    """Reads the file in parts into ``reader`` (and its layout): the first here, straight into
    them, the others at once where the executor says (``reads``); returns the keys around the
    event array, the damage that stopped the read if any, and what the stream counted; None,
    its events and marks forgotten, when the file is to be read whole."""
    found = spans(path, reads.workers)
    if found is None:
        return None

    layout = reader.layout
    recipe = layout.part_recipe(path)
    if recipe is None:
        return None
    # The other parts' readers start from this layout as the read begins: asked for first.
    first, others = reads.map(
        _read_part,
        [(recipe, k, span, struct, lenient) for k, span in enumerate(found) if k],
        here=lambda: _read(Part(0), EventStream(path, struct, lenient, found[0]), reader),
    )
    parts = [first, *others]
    if any(part.whole for part in parts):
        layout.discard_parts(recipe, range(len(found)))
        reader.start_over()  # what the first part left
        return None
    meta: dict[str, Any] = {}
    notes = Losses()
    damage, taken = None, 0
    for part in parts:
        if part.index:  # the first was read straight into them
            layout.absorb_part(part.index, part.layout)
            reader.absorb(part.reader)
        meta.update(part.meta)
        notes.update(part.notes)
        taken += 1
        if part.damage is not None:  # a read of the whole file stops there
            damage = part.damage
            break
    layout.discard_parts(recipe, range(taken, len(found)))
    if taken > 1:
        layout.intern_parts()
    return meta, damage, notes


def _read_part(recipe: dict, index: int, span: tuple[int, int | None], struct: type, lenient: type) -> Part:
    """One part read into a layout and a reader of its own, handed over as their state."""
    layout = FileLayout.for_part(recipe, index)
    reader = ChromeEvents(layout)
    part = _read(Part(index), EventStream(recipe["path"], struct, lenient, span), reader)
    if not part.whole:
        part.layout = layout.part_state()
        part.reader = reader.part_state()
    return part


def _read(part: Part, stream: EventStream, reader: ChromeEvents) -> Part:
    """``stream`` (one part) read into ``reader``; ``part`` says how it went."""
    layout = reader.layout
    try:
        for batch in stream.batches():
            reader.add_batch(batch, plain_text=stream.plain_text, bind_ids=stream.bind_ids)
            if stream.step_args:
                note_framework_steps(batch, NO_ORIGIN, layout, reader.to_ns)
            layout.check_memory()
    except NeedsExactTimes:
        part.whole = "times too precise for floats"
        return part
    except SegmentCut as exc:
        part.whole = str(exc)
        return part
    part.meta, part.notes, part.damage = stream.meta, stream.notes, stream.damage
    return part


__all__ = ["PART_MIN", "Part", "PlaceholderEncoder", "read_in_parts", "spans"]
