"""Decode the event array of a large JSON trace in bounded batches.

Chrome trace files (Kineto's ``{"traceEvents": [...]}``, bare ``[...]`` arrays, Ascend's
``trace_view.json``) run to hundreds of MB. Loading one whole costs several times its size in
memory; instead the file is read in blocks (gunzipped on the fly), cut after an event object, and
each batch is decoded by msgspec into typed structs. The keys around the array (Kineto writes
``baseTimeNanoseconds`` after it) are decoded separately and are in :attr:`EventStream.meta` once
the batches are consumed.

A batch ends at a ``}`` followed by ``,`` and ``{`` (white space allowed between). Such a sequence
inside a string makes the batch end inside that string; the decoder then reports truncated input,
and the batch is cut at an earlier boundary instead, its remainder going to the next batch. A file
that ends early (a job killed while writing) still yields every complete event before the cut;
then :attr:`EventStream.damage` says where and why.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.errors import InputError, NotATrace
from tracemerge.sources.base import GZIP_MAGIC, UTF8_BOM
from tracemerge.units import plain_json

BLOCK = 4 << 20
# Largest run of bytes searched for the array's opening key before giving up.
_HEAD_LIMIT = 64 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_WS = b" \t\r\n"
_SEPARATOR = re.compile(rb"[ \t\r\n]*,?")  # what follows an event in the array


class Damage(Exception):
    """Where the JSON stops being readable: a one-line reason and the line:col of the place."""

    def __init__(self, reason: str, where: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where


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

    def __init__(self, path: Path, struct: type, lenient: type | None = None) -> None:
        self.path = path
        self._typed = msgspec.json.Decoder(list[struct])
        self._lenient = msgspec.json.Decoder(list[lenient]) if lenient else None
        self._lenient_type = lenient
        self._lenient_fields = getattr(lenient, "__struct_fields__", ())
        self.meta: dict[str, Any] = {}
        self.damage: Damage | None = None
        self.bare = False
        # Whether the last batch's text is plain_json (see ChromeEvents).
        self.plain_text = False
        # For line:col of a problem: text consumed before the current buffer.
        self._lines_before = 0
        self._col_base = 0

    def batches(self) -> Iterator[list]:
        try:
            yield from self._batches()
        except Damage as exc:
            self.damage = exc

    def _batches(self) -> Iterator[list]:
        blocks = _blocks(self.path)
        buf = self._open_array(blocks)
        eof = False
        while True:
            while not eof and len(buf) < BLOCK:
                more = next(blocks, None)
                if more is None:
                    eof = True
                else:
                    buf += more
            if eof:
                yield from self._finish(buf)
                return
            cut = _last_boundary(buf)
            decoded = self._decode_prefix(buf, cut) if cut is not None else None
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
        newlines = buf.count(b"\n", 0, end)
        if newlines:
            self._lines_before += newlines
            self._col_base = end - buf.rfind(b"\n", 0, end) - 1
        else:
            self._col_base += end
        return buf[end:]

    def _where(self, buf: bytes, pos: int) -> str:
        pos = max(0, min(pos, len(buf)))
        newlines = buf.count(b"\n", 0, pos)
        col = pos - buf.rfind(b"\n", 0, pos) if newlines else self._col_base + pos + 1
        return f"{self._lines_before + newlines + 1}:{col}"

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
            value = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise InputError(
                self.path, f"invalid JSON ({_reason(exc)})", self._where(buf, at + _pos(exc, text))
            ) from None
        if type(value) is dict:
            self.meta.update(value)

    def _decode_prefix(self, buf: bytes, cut: int) -> tuple[list, int] | None:
        """Events of ``buf[:cut + 1]``, cut earlier when that boundary lies inside a string;
        None when no boundary before ``cut`` ends an event."""
        while True:
            doc = b"".join((b"[", memoryview(buf)[: cut + 1], b"]"))  # one copy of the block, not three
            try:
                return self._decode(doc), cut + 1
            except msgspec.DecodeError as exc:
                if not _truncated(exc):  # damage, not a boundary inside a string
                    raise Damage(f"invalid JSON ({_reason(exc)})", self._where(buf, _pos(exc, doc) - 1)) from None
            earlier = _last_boundary(buf, 0, cut)
            if earlier is None:
                return None
            cut = earlier

    def _finish(self, buf: bytes) -> Iterator[list]:
        """The file's last bytes: the rest of the array, its ``]`` and the keys after it."""
        text = buf.rstrip(_WS)
        if not self.bare or text.endswith(b"]"):
            for m in reversed(list(_ARRAY_END.finditer(buf))):
                tail = buf[m.end() :]
                if not self._tail_ok(tail):
                    continue
                doc = b"[" + buf[: m.start() + 1] + b"]"
                try:
                    events = self._decode(doc)
                except msgspec.DecodeError:
                    continue
                yield events
                self._read_tail(tail)
                return
            if not buf.lstrip(_WS) or buf.lstrip(_WS)[:1] == b"]":  # an empty array
                self._read_tail(buf.lstrip(_WS)[1:])
                return
        # The array never closes: keep every complete event, then say where the file stopped.
        while True:
            cut = _last_boundary(buf)
            decoded = self._decode_prefix(buf, cut) if cut is not None else None
            if decoded is None:
                break
            events, used = decoded
            yield events
            buf = self._advance(buf, used)
        last = buf.rstrip(_WS)
        if last.endswith(b"}"):
            try:
                events = self._decode(b"[" + last + b"]")
            except msgspec.DecodeError:
                events = None
            if events is not None:  # the last event is whole, only the array's end is missing
                yield events
                raise Damage("invalid JSON (unexpected end of data)", self._where(buf, len(buf)))
        doc = b"[" + buf
        try:
            self._decode(doc)
        except msgspec.DecodeError as exc:
            if not _truncated(exc):
                raise Damage(f"invalid JSON ({_reason(exc)})", self._where(buf, _pos(exc, doc) - 1)) from None
        raise Damage("invalid JSON (unexpected end of data)", self._where(buf, len(buf)))

    def _decode(self, doc: bytes) -> list:
        self.plain_text = plain_json(doc)
        try:
            return self._typed.decode(doc)
        except msgspec.ValidationError:
            if self._lenient is None:
                raise
            return self._lenient.decode(doc)
        except msgspec.DecodeError as exc:
            # What Python's own json writes and reads (NaN, Infinity) and text with a bad UTF-8
            # byte: read as Python reads it (the bad byte as U+FFFD) rather than lose the file.
            if _truncated(exc) or self._lenient_type is None:
                raise
            try:
                values = json.loads(doc.decode("utf-8", "replace"))
            except ValueError:
                raise exc from None
            self.plain_text = False
            return [self._from_python(v) for v in values]

    def _from_python(self, value: Any) -> Any:
        if type(value) is not dict:
            raise msgspec.ValidationError("an event is not an object")
        fields = {k: value[k] for k in self._lenient_fields if k in value and k != "args"}
        if "args" in value:
            fields["args"] = msgspec.Raw(msgspec.json.encode(value["args"]))
        return self._lenient_type(**fields)

    def _tail_ok(self, tail: bytes) -> bool:
        text = tail.strip(_WS)
        if self.bare:
            return not text
        if text == b"}":
            return True
        if not text.startswith(b",") or not text.endswith(b"}"):
            return False
        try:
            return type(msgspec.json.decode(b"{" + text[1:])) is dict
        except msgspec.DecodeError:
            return False

    def _read_tail(self, tail: bytes) -> None:
        text = tail.strip(_WS)
        if text.startswith(b","):
            value = msgspec.json.decode(b"{" + text[1:])
            if type(value) is dict:
                self.meta.update(value)


def _last_boundary(buf: bytes, lo: int = 0, hi: int | None = None) -> int | None:
    """Offset of the ``}`` of the last event boundary in ``buf[lo:hi]``."""
    hi = len(buf) if hi is None else hi
    window = 1 << 16
    while hi > lo:
        a = max(lo, hi - window)
        last = None
        for last in _BOUNDARY.finditer(buf, a, hi):  # noqa: B007 - the last match is wanted
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
