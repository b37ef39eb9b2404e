"""Decode the event array of a large JSON trace in bounded batches.

Chrome trace files (Kineto's ``{"traceEvents": [...]}``, bare ``[...]`` arrays, Ascend's
``trace_view.json``) run to hundreds of MB. Loading one whole costs several times its size in
memory; instead the file is read in blocks (gunzipped on the fly), cut after an event object, and
each batch is decoded by msgspec into typed structs. The keys around the array (Kineto writes
``baseTimeNanoseconds`` after it) are decoded separately and are in :attr:`EventStream.meta` once
the batches are consumed.

A batch ends at a ``}`` followed by ``,`` and ``{`` (white space allowed between). Such a sequence
inside a string (serialized JSON in an arg holds one per object) makes the batch end inside that
string; the decoder then reports truncated input, and the batch is cut at an earlier boundary
instead, its remainder going to the next batch: the last one followed by a key, else the last one
outside the strings, found in one pass whatever the strings hold. A buffer without a whole event
yet is read on until it doubles. When
the boundary lies after the array's ``]`` (in a list among the keys after it, or in a second document
after the JSON), the array's last events are decoded with those keys and the bytes after the JSON
are read through, counted and not kept, however long they run. A file
that ends early (a job killed while writing) still yields every complete event before the cut;
then :attr:`EventStream.damage` says where and why. A bare array may end without its ``]`` (the
trace-event format allows it): that is no damage. What the stream counts instead of yielding (array
elements that are not objects, bytes after the end of the JSON, keys after the array that cannot be
read) is in :attr:`EventStream.notes` once the batches are consumed.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.core.bounds import TOO_DEEP, cut_deep_or_fail
from tracemerge.core.errors import shown
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.base import GZIP_MAGIC, UTF8_BOM
from tracemerge.sources.json.decode import BatchDecoding
from tracemerge.sources.json.head import ArrayHead
from tracemerge.sources.json.tail import ArrayTail
from tracemerge.sources.json.text import (
    KEYED_BOUNDARY,
    WHITESPACE,
    closed_array,
    closes_early,
    error_offset,
    error_reason,
    is_truncated,
    last_boundary,
    last_boundary_outside_strings,
)

BLOCK = 512 << 10
_SEPARATOR = re.compile(rb"[ \t\r\n]*,?")  # what follows an event in the array


class _ArrayEnds(Exception):
    """The event array closes inside the text being cut into batches: the rest is its tail."""


class SegmentCut(Exception):
    """A file read in parts was not cut between two events: it is read whole instead."""


class Damage(Exception):
    """Where the JSON stops being readable: a one-line reason and the line:col of the place."""

    def __init__(self, reason: str, where: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where

    def __reduce__(self) -> tuple:
        return Damage, (self.reason, self.where)


def _line_col(path: Path, offset: int) -> str:
    """``line:col`` (from 1) of the byte at ``offset`` of a file's text, gunzipped as read."""
    lines, line_start, seen = 0, 0, 0
    try:
        for block in text_blocks(path):
            part = block[: offset - seen]
            newlines = part.count(b"\n")
            if newlines:
                lines += newlines
                line_start = seen + part.rfind(b"\n") + 1
            seen += len(block)
            if seen >= offset:
                break
    except (OSError, Damage):
        return f"byte {offset + 1}"
    return f"{lines + 1}:{offset - line_start + 1}"


def _span_blocks(path: Path, start: int, stop: int) -> Iterator[bytes]:
    """The bytes ``start``..``stop`` of a plain file, in blocks of BLOCK bytes."""
    with path.open("rb") as f:
        f.seek(start)
        left = stop - start
        while left > 0:
            block = f.read(min(BLOCK, left))
            if not block:
                return
            left -= len(block)
            yield block


def text_blocks(path: Path) -> Iterator[bytes]:
    """The file's bytes, gunzipped when it is gzip data, in blocks of about BLOCK bytes."""
    with path.open("rb") as f:
        first = f.read(BLOCK)
        if first[:2] != GZIP_MAGIC:
            first = first.removeprefix(UTF8_BOM)  # some editors and Windows tools write one
            while first:
                yield first
                first = f.read(BLOCK)
            return
        gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = first
        started = False
        while raw:
            while raw:
                try:
                    out = gz.decompress(raw, BLOCK)
                except zlib.error as exc:
                    raise Damage(f"corrupt gzip data ({exc})", "") from None
                raw = gz.unconsumed_tail
                if gz.eof:
                    rest = gz.unused_data
                    gz = zlib.decompressobj(16 + zlib.MAX_WBITS)  # a further gzip member may follow
                    raw = rest if rest[:2] == GZIP_MAGIC else b""
                if out:
                    if not started:
                        out, started = out.removeprefix(UTF8_BOM), True
                    yield out
            raw = f.read(BLOCK // 4)
        if not gz.eof and gz.unconsumed_tail == b"" and getattr(gz, "_started", True):
            tail = gz.flush()
            if tail:
                yield tail


def _doubled(buf: bytes, blocks: Iterator[bytes]) -> tuple[bytes, bool]:
    """``buf`` and as many bytes again from ``blocks`` (at least a block); and whether they ran out."""
    pieces, size = [buf], len(buf)
    while size < 2 * len(buf) or len(pieces) == 1:
        more = next(blocks, None)
        if more is None:
            return b"".join(pieces), True
        pieces.append(more)
        size += len(more)
    return b"".join(pieces), False


class EventStream(BatchDecoding, ArrayHead, ArrayTail):
    """Batches of decoded events of one file, then the keys around the event array.

    ``struct`` is the msgspec type each event decodes into; a batch whose values do not fit its
    field types is decoded into ``lenient`` instead. Iterate :meth:`batches`; afterwards
    :attr:`meta` holds the top-level keys other than ``traceEvents`` (empty for a bare array) and
    :attr:`damage` is set when the file could not be read to its end.
    """

    def __init__(
        self, path: Path, struct: type, lenient: type | None = None, span: tuple[int, int | None] | None = None
    ) -> None:
        self.path = path
        # A part of a plain file's event array (see json_segments): from the event at span[0]
        # (0: the file's start), up to the event at span[1] (None: the file's end).
        self.span = span
        # The element types are the caller's, which mypy cannot read as a type: list[...] made at run time.
        self._typed = msgspec.json.Decoder(list[struct])  # type: ignore[valid-type]
        self._lenient = msgspec.json.Decoder(list[lenient]) if lenient else None  # type: ignore[valid-type]
        self._lenient_type = lenient
        self._lenient_fields = getattr(lenient, "__struct_fields__", ())
        self._one = msgspec.json.Decoder(lenient) if lenient else None
        # Fields the lenient type keeps as JSON text (ExactEvent's times): read from the numbers' text.
        self._text_fields = frozenset(
            f.name for f in (msgspec.structs.fields(lenient) if lenient else ()) if f.type is msgspec.Raw
        ) - {"args"}
        self.meta: dict[str, Any] = {}
        self.more_arrays: list[Any] = []  # traceEvents keys after the first (see ArrayTail)
        self.damage: Damage | None = None
        self.notes = Losses()
        self.bare = False
        # Whether the last batch's text is plain_json (see ChromeEvents), and whether it may hold
        # a bind_id (flow v2), which most traces never use.
        self.plain_text = False
        self.bind_ids = True
        self.step_args = False  # whether the last batch's text may name a span's step in its args
        # For line:col of a problem: how many bytes of text were consumed before the current
        # buffer (lines are counted only when a place is named, by reading the text again).
        self._consumed = span[0] if span else 0
        # Where values nested too deep to decode were replaced (see tracemerge.core.bounds), as offsets
        # in the text: a batch decoded again counts them once.
        self._cuts: set[int] = set()

    def batches(self) -> Iterator[list]:
        try:
            yield from self._batches()
        except Damage as exc:
            self.damage = exc
        if self._cuts:
            self.notes.add(Stat.VALUE_TOO_DEEP, len(self._cuts), TOO_DEEP)

    def _cut(self, doc: bytes, level: int, at: int = -1) -> bytes:
        """``doc`` (its byte 0 at ``buf[at]``; -1: the ``[`` added before the buffer) with its values
        nested too deep replaced, and where noted; RecursionError again when none is."""
        doc, where = cut_deep_or_fail(doc, level, with_places=True)
        self._cuts.update(self._consumed + at + w for w in where)
        return doc

    def _batches(self) -> Iterator[list]:
        start, stop = self.span or (0, None)
        if not start and stop is None:
            blocks = text_blocks(self.path)
        else:  # a part of a plain file (without a byte-order mark)
            blocks = _span_blocks(self.path, start, stop if stop is not None else self.path.stat().st_size)
        buf = next(blocks, b"") if start else self._open_array(blocks)
        eof = False
        while True:
            while not eof and len(buf) < BLOCK:
                more = next(blocks, None)
                if more is None:
                    eof = True
                else:
                    buf += more
            if eof:
                if stop is not None:
                    yield from self._segment_end(buf)
                else:
                    yield from self._finish(buf, blocks)
                return
            cut = last_boundary(buf)
            try:
                decoded = self._decode_prefix(buf, cut) if cut is not None else None
            except _ArrayEnds:  # the boundary found lies after the array (in the keys or bytes after it)
                yield from self._finish(buf, blocks)
                return
            if decoded is None:  # not one whole event yet: read on, as much again (one event of
                # many blocks, a long string in its args, then costs a pass per doubling, not per block)
                buf, eof = _doubled(buf, blocks)
                continue
            events, used = decoded
            yield events
            buf = self._advance(buf, used)

    # -- pieces --------------------------------------------------------------------------------

    def _advance(self, buf: bytes, used: int) -> bytes:
        """Drops ``buf[:used]`` and the comma after it, keeping count of lines for messages."""
        found = _SEPARATOR.match(buf, used)
        assert found is not None  # always a match: the pattern matches empty text
        end = found.end()
        self._consumed += end
        return buf[end:]

    def _where(self, buf: bytes, pos: int) -> str:
        """``line:col`` of ``buf[pos]`` in the file's text."""
        return _line_col(self.path, self._consumed + max(0, min(pos, len(buf))))

    def _decode_prefix(self, buf: bytes, cut: int) -> tuple[list, int] | None:
        """Events of ``buf[:cut + 1]``, cut earlier when that boundary lies inside a string or
        after damage; None when no boundary before ``cut`` ends an event; Damage when the first
        event is damaged; _ArrayEnds when the array closes before ``cut``."""
        damage, jumps = None, 0
        while True:
            doc = b"".join((b"[", memoryview(buf)[: cut + 1], b"]"))  # one copy of the block, not three
            inside_string = False
            try:
                return self._decode(doc), cut + 1
            except msgspec.DecodeError as exc:
                at = cut
                if not is_truncated(exc):  # damage, not a boundary inside a string: keep the events before it
                    if damage is None and closes_early(doc):
                        raise _ArrayEnds from None
                    at = error_offset(exc, doc) - 1
                    damage = Damage(f"invalid JSON ({error_reason(exc)})", self._where(buf, at))
                else:
                    inside_string = damage is None
            # Stepping back one ``}, {`` at a time would decode the batch again for each that a
            # string holds: first to the last one before a key, then to the last one outside the
            # strings (a pass over their tokens), and only then one at a time.
            if inside_string and jumps < 2:
                jumps += 1
                earlier = last_boundary(buf, 0, cut, KEYED_BOUNDARY) if jumps == 1 else None
                if earlier is None:  # none before a key, or that one lay in a string too
                    jumps = 2
                    earlier = last_boundary_outside_strings(buf, cut - 1)
            else:
                earlier = last_boundary(buf, 0, at)
            if earlier is None:
                if damage is not None:
                    raise damage
                return None
            cut = earlier

    def _finish(self, buf: bytes, rest: Iterator[bytes]) -> Iterator[list]:
        """The rest of the array, its ``]`` and the keys after it: ``buf`` then the blocks
        ``rest`` still holds (none when ``buf`` is the file's last bytes)."""
        found = closed_array(b"[" + buf, self._cut)
        if found is None:
            yield from self._unclosed(buf)
            return
        doc, end = found
        try:
            events = self._decode(doc[:end])
        except msgspec.DecodeError as exc:
            raise Damage(f"invalid JSON ({error_reason(exc)})", self._where(buf, error_offset(exc, doc) - 1)) from None
        if events:
            yield events
        self.notes.update(self._tail(buf, end - 1, rest))
        for array in self.more_arrays:
            yield self._more_events(array)

    def _segment_end(self, buf: bytes) -> Iterator[list]:
        """The last events of a span that ends where another event starts: read as batches are
        (damage there is the file's), the last one alone; if that one is not whole, the span
        was not cut between two events (SegmentCut: the file is read whole instead)."""
        text = buf.rstrip(WHITESPACE)
        if not text.endswith(b","):
            raise SegmentCut(f"{shown(self.path)}: a part does not end between two events")
        text = text[:-1]
        while (cut := last_boundary(text)) is not None:
            decoded = self._decode_prefix(text, cut)
            if decoded is None:
                break
            events, used = decoded
            yield events
            text = self._advance(text, used)
        try:
            events = self._decode(b"".join((b"[", text, b"]")))
        except msgspec.DecodeError:
            raise SegmentCut(f"{shown(self.path)}: a part does not end between two events") from None
        if events:
            yield events

    def _unclosed(self, buf: bytes) -> Iterator[list]:
        """An array without its ``]``: every complete event; then where the file stopped, unless
        it is a bare array whose last event is whole (the format lets one end that way)."""
        while True:
            cut = last_boundary(buf)
            decoded = self._decode_prefix(buf, cut) if cut is not None else None
            if decoded is None:
                break
            events, used = decoded
            yield events
            buf = self._advance(buf, used)
        doc = b"[" + buf
        try:
            self._decode(doc)
        except msgspec.DecodeError as exc:
            reason, pos = error_reason(exc), error_offset(exc, doc)
        else:  # closed after all (_finish reads a closed array): say where it stops
            reason, pos = "unexpected end of data", len(doc)
        head = doc[:pos].rstrip(WHITESPACE).removesuffix(b",").rstrip(WHITESPACE)
        kept = 1
        if head.endswith(b"}"):  # the events before the damage are whole
            try:
                events = self._decode(head + b"]")
            except msgspec.DecodeError:
                pass
            else:
                yield events
                kept = len(head)
        if self.bare and not doc[kept:].strip(WHITESPACE + b","):
            return
        raise Damage(f"invalid JSON ({reason})", self._where(buf, pos - 1))
