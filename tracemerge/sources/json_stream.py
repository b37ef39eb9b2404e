"""Decode the event array of a large JSON trace in bounded batches.

Chrome trace files (Kineto's ``{"traceEvents": [...]}``, bare ``[...]`` arrays, Ascend's
``trace_view.json``) run to hundreds of MB. Loading one whole costs several times its size in
memory; instead the file is read in blocks (gunzipped on the fly), cut after an event object, and
each batch is decoded by msgspec into typed structs. The keys around the array (Kineto writes
``baseTimeNanoseconds`` after it) are decoded separately and are in :attr:`EventStream.meta` once
the batches are consumed.

A batch ends at a ``}`` followed by ``,`` and ``{`` (white space allowed between). Such a sequence
inside a string makes the batch end inside that string; the decoder then reports truncated input,
and the batch is cut at an earlier boundary instead, its remainder going to the next batch. When
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

import itertools
import json
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.bounds import TOO_DEEP, cut_deep_or_fail
from tracemerge.errors import InputError, NotATrace, shown
from tracemerge.sources.base import GZIP_MAGIC, UTF8_BOM
from tracemerge.stats import Losses, Stat
from tracemerge.units import plain_json

BLOCK = 512 << 10
# Largest run of bytes searched for the array's opening key before giving up.
_HEAD_LIMIT = 64 << 20
# Where one event of an array ends and the next begins: ``}``, a comma, ``{``.
EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
_SEPARATOR = re.compile(rb"[ \t\r\n]*,?")  # what follows an event in the array
# Each element of an array, its text kept: finds where an array ends, whatever its elements hold.
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
# An escaped backslash (skipped whole, so that the text after it is not read as an escape), a
# UTF-16 surrogate pair, or a lone surrogate (6 bytes, what Python's json writes for some text).
_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_MENDS = 16  # trailing commas mended in the file's last bytes before giving up on them
# Where an event's args object is in a batch's text: the array 1, the event 2, its args 3.
_ARGS_LEVEL = 3


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
        for block in _blocks(path):
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


def _blocks(path: Path) -> Iterator[bytes]:
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


class EventStream:
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
        self._typed = msgspec.json.Decoder(list[struct])
        self._lenient = msgspec.json.Decoder(list[lenient]) if lenient else None
        self._lenient_type = lenient
        self._lenient_fields = getattr(lenient, "__struct_fields__", ())
        self._one = msgspec.json.Decoder(lenient) if lenient else None
        # Fields the lenient type keeps as JSON text (ExactEvent's times): read from the numbers' text.
        self._text_fields = frozenset(
            f.name for f in (msgspec.structs.fields(lenient) if lenient else ()) if f.type is msgspec.Raw
        ) - {"args"}
        self.meta: dict[str, Any] = {}
        self.damage: Damage | None = None
        self.notes = Losses()
        self.bare = False
        # Whether the last batch's text is plain_json (see ChromeEvents), and whether it may hold
        # a bind_id (flow v2), which most traces never use.
        self.plain_text = False
        self.bind_ids = True
        # For line:col of a problem: how many bytes of text were consumed before the current
        # buffer (lines are counted only when a place is named, by reading the text again).
        self._consumed = span[0] if span else 0
        # Where values nested too deep to decode were replaced (see tracemerge.bounds), as offsets
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
            blocks = _blocks(self.path)
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
            cut = _last_boundary(buf)
            try:
                decoded = self._decode_prefix(buf, cut) if cut is not None else None
            except _ArrayEnds:  # the boundary found lies after the array (in the keys or bytes after it)
                yield from self._finish(buf, blocks)
                return
            if decoded is None:  # not one whole event yet: read on
                more = next(blocks, None)
                if more is None:
                    eof = True
                else:
                    buf += more
                continue
            events, used = decoded
            yield events
            buf = self._advance(buf, used)

    # -- pieces --------------------------------------------------------------------------------

    def _advance(self, buf: bytes, used: int) -> bytes:
        """Drops ``buf[:used]`` and the comma after it, keeping count of lines for messages."""
        end = _SEPARATOR.match(buf, used).end()  # always a match: the pattern matches empty text
        self._consumed += end
        return buf[end:]

    def _where(self, buf: bytes, pos: int) -> str:
        """``line:col`` of ``buf[pos]`` in the file's text."""
        return _line_col(self.path, self._consumed + max(0, min(pos, len(buf))))

    def _open_array(self, blocks: Iterator[bytes]) -> bytes:
        """Reads up to the ``[`` that opens the event array; decodes the keys before it."""
        buf = b""
        for more in blocks:
            buf += more
            head = buf.lstrip(_WS)
            lead = len(buf) - len(head)
            if head[:1] == b"[":
                self.bare = True
                return self._advance(buf, lead + 1)
            if head[:1] != b"{":
                break
            pos = head.find(b'"traceEvents"')
            if pos >= 0:
                after = head[pos + 13 :].lstrip(_WS)
                if after[:1] == b":":
                    value = after[1:].lstrip(_WS)
                    if value[:1] == b"[":
                        self._read_object(head[:pos].rstrip(_WS).rstrip(b",") + b"}", buf, lead)
                        return self._advance(buf, len(buf) - len(value) + 1)
                    if value:
                        raise InputError(self.path, "traceEvents is not an array")
            if len(buf) > _HEAD_LIMIT:
                break
        if not buf.strip(_WS):
            raise InputError(self.path, "empty file")
        raise NotATrace(self.path, "no traceEvents array")

    def _read_object(self, text: bytes, buf: bytes, at: int) -> None:
        try:
            try:
                value = msgspec.json.decode(text)
            except RecursionError:
                value = msgspec.json.decode(self._cut(text, 1, at))
        except msgspec.DecodeError as exc:
            raise InputError(
                self.path, f"invalid JSON ({_reason(exc)})", self._where(buf, at + _pos(exc, text))
            ) from None
        if type(value) is dict:
            self.meta.update(value)

    def _decode_prefix(self, buf: bytes, cut: int) -> tuple[list, int] | None:
        """Events of ``buf[:cut + 1]``, cut earlier when that boundary lies inside a string or
        after damage; None when no boundary before ``cut`` ends an event; Damage when the first
        event is damaged; _ArrayEnds when the array closes before ``cut``."""
        damage = None
        while True:
            doc = b"".join((b"[", memoryview(buf)[: cut + 1], b"]"))  # one copy of the block, not three
            try:
                return self._decode(doc), cut + 1
            except msgspec.DecodeError as exc:
                at = cut
                if not _truncated(exc):  # damage, not a boundary inside a string: keep the events before it
                    if damage is None and _closes_early(doc):
                        raise _ArrayEnds from None
                    at = _pos(exc, doc) - 1
                    damage = Damage(f"invalid JSON ({_reason(exc)})", self._where(buf, at))
            earlier = _last_boundary(buf, 0, at)
            if earlier is None:
                if damage is not None:
                    raise damage
                return None
            cut = earlier

    def _finish(self, buf: bytes, rest: Iterator[bytes]) -> Iterator[list]:
        """The rest of the array, its ``]`` and the keys after it: ``buf`` then the blocks
        ``rest`` still holds (none when ``buf`` is the file's last bytes)."""
        found = _closed_array(b"[" + buf, self._cut)
        if found is None:
            yield from self._unclosed(buf)
            return
        doc, end = found
        try:
            events = self._decode(doc[:end])
        except msgspec.DecodeError as exc:
            raise Damage(f"invalid JSON ({_reason(exc)})", self._where(buf, _pos(exc, doc) - 1)) from None
        if events:
            yield events
        self.notes.update(self._tail(buf, end - 1, rest))

    def _segment_end(self, buf: bytes) -> Iterator[list]:
        """The last events of a span that ends where another event starts: read as batches are
        (damage there is the file's), the last one alone; if that one is not whole, the span
        was not cut between two events (SegmentCut: the file is read whole instead)."""
        text = buf.rstrip(_WS)
        if not text.endswith(b","):
            raise SegmentCut(f"{shown(self.path)}: a part does not end between two events")
        text = text[:-1]
        while (cut := _last_boundary(text)) is not None:
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
            cut = _last_boundary(buf)
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
            reason, pos = _reason(exc), _pos(exc, doc)
        else:  # closed after all (_finish reads a closed array): say where it stops
            reason, pos = "unexpected end of data", len(doc)
        head = doc[:pos].rstrip(_WS).removesuffix(b",").rstrip(_WS)
        kept = 1
        if head.endswith(b"}"):  # the events before the damage are whole
            try:
                events = self._decode(head + b"]")
            except msgspec.DecodeError:
                pass
            else:
                yield events
                kept = len(head)
        if self.bare and not doc[kept:].strip(_WS + b","):
            return
        raise Damage(f"invalid JSON ({reason})", self._where(buf, pos - 1))

    def _decode(self, doc: bytes) -> list:
        """The events of ``doc`` (``[`` then a run of the buffer's events, ``]``)."""
        try:
            return self._decode_as_is(doc)
        except RecursionError:  # a value nested beyond what any decoder follows: that value goes
            return self._decode_as_is(self._cut(doc, _ARGS_LEVEL))

    def _decode_as_is(self, doc: bytes) -> list:
        self.plain_text = plain_json(doc)
        self.bind_ids = b'"bind_id"' in doc
        try:
            return self._typed.decode(doc)
        except msgspec.ValidationError:
            if self._lenient is None:
                raise
        except msgspec.DecodeError as exc:
            return self._decode_malformed(doc, exc)
        try:
            return self._lenient.decode(doc)
        except msgspec.ValidationError:  # an element that is not an object
            return self._objects_only(doc)

    def _decode_malformed(self, doc: bytes, exc: msgspec.DecodeError) -> list:
        """A batch msgspec cannot read: lone surrogate escapes become U+FFFD; what Python's own
        json writes and reads (NaN, Infinity) and text with a bad UTF-8 byte are read as Python
        reads them (the bad byte as U+FFFD) rather than lose the file."""
        mended = _without_lone_surrogates(doc)
        if mended is not doc:  # (msgspec may call such an escape truncated input)
            return self._decode(mended)
        if _truncated(exc) or self._lenient_type is None:
            raise exc
        text = doc.decode("utf-8", "replace")
        try:
            values = json.loads(text, parse_float=_NumberText) if self._text_fields else json.loads(text)
        except ValueError:
            raise exc from None
        self.plain_text = False
        events = [self._from_python(v) for v in values if type(v) is dict]
        return self._noted(events, Counter(_kind(v) for v in values if type(v) is not dict))

    def _objects_only(self, doc: bytes) -> list:
        """The objects of an array that also holds other values, which are counted."""
        assert self._one is not None
        try:
            elements = _ELEMENTS.decode(doc)
        except msgspec.DecodeError as exc:
            return self._decode_malformed(doc, exc)
        events, others = [], Counter()
        for element in elements:
            text = bytes(element)
            if text[:1] == b"{":
                events.append(self._one.decode(text))
            else:
                others[_KINDS.get(text[:1], "number")] += 1
        return self._noted(events, others)

    def _noted(self, events: list, others: Counter[str]) -> list:
        for kind, n in others.items():
            self.notes.add(Stat.EVENT_NOT_OBJECT, n, f"event array element that is not an object ({kind})")
        return events

    def _from_python(self, value: dict) -> Any:
        fields = {}
        for key in self._lenient_fields:
            if key == "args" or key not in value:
                continue
            v = value[key]
            if key in self._text_fields:
                v = msgspec.Raw(v.text.encode() if type(v) is _NumberText else msgspec.json.encode(v))
            elif type(v) is _NumberText:
                v = float(v)
            fields[key] = v
        if "args" in value:
            fields["args"] = msgspec.Raw(msgspec.json.encode(value["args"], enc_hook=float))
        return self._lenient_type(**fields)  # type: ignore[misc]

    # -- the keys after the array ------------------------------------------------------------------

    def _tail(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses:
        """Reads the keys after the array (``buf[at:]`` follows its ``]``, then ``rest``) into
        :attr:`meta`; returns what is wrong there, as notes."""
        while (notes := self._keys_after(buf, at, rest)) is None:
            longer = _extended(buf, rest)
            if longer is None:
                return self._tail_damage(buf, len(buf), "unexpected end of data")
            buf = longer
        return notes

    def _keys_after(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses | None:
        """What :meth:`_tail` returns, or None when ``buf`` ends before the object does."""
        text = buf[at:].lstrip(_WS)
        at = len(buf) - len(text)
        if self.bare:
            return self._trailing(buf, at, rest)
        if text[:1] == b"}":
            return self._trailing(buf, at + 1, rest)
        if not text:
            return None
        if text[:1] != b",":
            return self._tail_damage(buf, at, "expected ',' or '}' after the event array")
        doc = b"{" + text[1:]  # the same offsets as text
        try:
            try:
                value = msgspec.json.decode(doc)
            except RecursionError:
                doc = self._cut(doc, 1, at)
                value = msgspec.json.decode(doc)
        except msgspec.DecodeError as exc:
            try:
                return self._partial_tail(buf, at, doc, exc, rest)
            except RecursionError:
                return self._partial_tail(buf, at, self._cut(doc, 1, at), exc, rest)
        self.meta.update(value)
        return self._trailing(buf, len(buf), rest)

    def _partial_tail(
        self, buf: bytes, at: int, doc: bytes, exc: msgspec.DecodeError, rest: Iterator[bytes]
    ) -> Losses | None:
        if "trailing characters" in str(exc):
            end = _pos(exc, doc) - 1
            self.meta.update(msgspec.json.decode(doc[:end]))
            return self._trailing(buf, at + end, rest)
        members, stop, whole = _members(doc)
        self.meta.update(members)
        if whole:  # NaN, Infinity or a bad byte, read as Python reads them
            return self._trailing(buf, at + stop, rest)
        if _truncated(exc):
            return None
        return self._tail_damage(buf, at + stop, _reason(exc))

    def _trailing(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses:
        """Notes the bytes after the end of the JSON (``buf[at:]``, then ``rest``), read through
        without being kept: another document after it may be as large as the file."""
        text = buf[at:].lstrip(_WS)
        while not text:  # white space so far: the bytes, if any, start in a later block
            more = next(rest, None)
            if more is None:
                return Losses()
            buf = self._advance(buf, len(buf)) + more
            text = buf.lstrip(_WS)
        at = len(buf) - len(text)
        size, events, nul_only = _junk(text, rest)
        where = f"{shown(self.path)}:{self._where(buf, at)}"
        if events:  # another document (gzip members of two traces, concatenated)
            return Losses.one(
                Stat.FILE_TRAILING_EVENTS, f"{where}: events after the end of the JSON ({size} bytes), not read"
            )
        what = "NUL padding" if nul_only else f"{size} bytes"
        return Losses.one(
            Stat.FILE_TRAILING_DATA, f"{where}: trailing data after the end of the JSON ({what}), ignored"
        )

    def _tail_damage(self, buf: bytes, at: int, reason: str) -> Losses:
        lost = "the keys from there on are lost (every event is kept)"
        where = f"{shown(self.path)}:{self._where(buf, at)}"
        return Losses.one(Stat.FILE_TAIL_DAMAGED, f"{where}: invalid JSON ({reason}) after the event array: {lost}")


class _NumberText(float):
    """A JSON number read by Python's json, with its text (times are taken from the text)."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> _NumberText:
        number = super().__new__(cls, text)
        number.text = text
        return number


_KINDS = {b"n": "null", b"t": "boolean", b"f": "boolean", b'"': "string", b"[": "array"}


def _kind(value: Any) -> str:
    """What a JSON value that is not an object is, in JSON's words."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if type(value) in (int, float):
        return "number"
    return "string" if type(value) is str else "array"


def _extended(buf: bytes, rest: Iterator[bytes]) -> bytes | None:
    """``buf`` with the next blocks of ``rest``: at least doubled unless the file ends first, so that
    reading the text again after each extension costs time linear in its length; None when
    ``rest`` is exhausted."""
    more = []
    size = 0
    for block in rest:
        more.append(block)
        size += len(block)
        if size >= len(buf):
            break
    return b"".join((buf, *more)) if more else None


def _junk(first: bytes, rest: Iterator[bytes]) -> tuple[int, bool, bool]:
    """Of the bytes ``first`` then ``rest`` hold: how many there are up to the last one that is not
    white space, whether they hold an event (``"ph"``), whether those are all NUL bytes."""
    size = seen = 0
    events, nul_only = False, True
    carry = b""  # the end of the previous block: a "ph" across two blocks is found
    for block in itertools.chain((first,), rest):
        events = events or b'"ph"' in carry + block[:3] or b'"ph"' in block
        carry = (carry + block[-3:])[-3:]
        text = block.rstrip(_WS)
        if text:
            nul_only = nul_only and seen == size and not text.strip(b"\0")
            size = seen + len(text)
        seen += len(block)
    return size, events, nul_only


def _closes_early(doc: bytes) -> bool:
    """Whether the array ``doc`` opens closes before its last byte (read as :func:`_closed_array` reads it)."""
    found = _closed_array(doc)
    return found is not None and found[1] < len(doc)


def _without_lone_surrogates(doc: bytes) -> bytes:
    """``doc`` with each lone surrogate escape as ``\\ufffd`` (as long: places stay); ``doc``
    itself when it has none."""
    if b"\\ud" not in doc and b"\\uD" not in doc:
        return doc
    lone = False

    def mend(m: re.Match) -> bytes:
        nonlocal lone
        if len(m.group()) != 6:
            return m.group()
        lone = True
        return b"\\ufffd"

    mended = _ESCAPES.sub(mend, doc)
    return mended if lone else doc


def _closed_array(doc: bytes, cut: Callable[[bytes, int], bytes] | None = None) -> tuple[bytes, int] | None:
    """``doc`` (``[`` then the file's last bytes), mended where that loses nothing (lone
    surrogates, trailing commas, with ``cut`` values nested too deep), and the end of the array it
    opens; None if it never closes."""
    surrogates = True
    for _ in range(_MENDS):
        try:
            _ELEMENTS.decode(doc)
        except RecursionError:
            doc = (cut or cut_deep_or_fail)(doc, _ARGS_LEVEL)
            continue
        except msgspec.DecodeError as exc:
            text = str(exc)
            if "trailing characters" in text:
                return doc, len(doc[: _pos(exc, doc) - 1].rstrip(_WS))
            if "trailing comma" in text:
                comma = len(doc[: _pos(exc, doc)].rstrip(_WS)) - 1
                doc = b"".join((doc[:comma], b" ", doc[comma + 1 :]))
                continue
            if surrogates:
                surrogates, mended = False, _without_lone_surrogates(doc)
                if mended is not doc:
                    doc = mended
                    continue
            if _truncated(exc):
                return None
            break
        else:
            return doc, len(doc.rstrip(_WS))
    try:
        return _python_end(doc)
    except RecursionError:
        return _python_end((cut or cut_deep_or_fail)(doc, _ARGS_LEVEL))


def _python_end(doc: bytes) -> tuple[bytes, int] | None:
    """Where the array ``doc`` opens ends as Python's json reads it (NaN, Infinity); None if not."""
    text = doc.decode("utf-8", "surrogateescape")  # one character per bad byte: places stay
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return doc, len(text[:end].encode("utf-8", "surrogateescape"))


_SPACE = re.compile(r"[ \t\r\n]*")


def _members(doc: bytes) -> tuple[dict[str, Any], int, bool]:
    """The members of the object ``doc`` opens, as Python's json reads them, up to the first that
    cannot be read: (members, the offset where reading stopped, whether the object closed)."""
    text = _without_lone_surrogates(doc).decode("utf-8", "surrogateescape")
    scan = json.JSONDecoder().raw_decode
    members: dict[str, Any] = {}
    pos = _SPACE.match(text, 1).end()
    if text[pos : pos + 1] == "}":
        return members, len(text[: pos + 1].encode("utf-8", "surrogateescape")), True
    while True:
        start = pos
        try:
            key, pos = scan(text, pos)
            pos = _SPACE.match(text, pos).end()
            if type(key) is not str or text[pos : pos + 1] != ":":
                raise ValueError("not a member")
            value, pos = scan(text, _SPACE.match(text, pos + 1).end())
        except ValueError:
            return members, len(text[:start].encode("utf-8", "surrogateescape")), False
        pos = _SPACE.match(text, pos).end()
        after = text[pos : pos + 1]
        if after not in (",", "}"):  # a value cut short looks whole (a number): not kept
            return members, len(text[:start].encode("utf-8", "surrogateescape")), False
        members[key] = replaced_surrogates(value)
        pos = _SPACE.match(text, pos + 1).end()
        if after == "}":
            return members, len(text[:pos].encode("utf-8", "surrogateescape")), True


def replaced_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings (a bad byte, or a lone surrogate escape
    Python's json read) as U+FFFD."""
    if type(value) is str:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if type(value) is list:
        return [replaced_surrogates(v) for v in value]
    if type(value) is dict:
        return {replaced_surrogates(k): replaced_surrogates(v) for k, v in value.items()}
    return value


def _last_boundary(buf: bytes, lo: int = 0, hi: int | None = None) -> int | None:
    """Offset of the ``}`` of the last event boundary in ``buf[lo:hi]``."""
    hi = len(buf) if hi is None else hi
    window = 1 << 16
    while hi > lo:
        a = max(lo, hi - window)
        last = None
        for last in EVENT_BOUNDARY.finditer(buf, a, hi):  # noqa: B007 - the last match is wanted
            pass
        if last is not None:
            return last.start()
        if a == lo:
            return None
        hi = a + 64  # overlap the windows so that a boundary on the edge is found
        window *= 2
    return None


def _truncated(exc: msgspec.DecodeError) -> bool:
    return "truncated" in str(exc)


def _reason(exc: msgspec.DecodeError) -> str:
    text = str(exc)
    if "truncated" in text:
        return "unexpected end of data"
    return re.sub(r"\s*\(byte \d+\)", "", text.split(" - at ")[0]).removeprefix("JSON is malformed: ")


def _pos(exc: msgspec.DecodeError, doc: bytes) -> int:
    m = re.search(r"\(byte (\d+)\)", str(exc))
    return int(m.group(1)) if m else len(doc)
