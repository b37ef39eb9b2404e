"""The keys after a JSON trace's event array, and the bytes after the end of the JSON, for
:class:`~tracemerge.sources.json.stream.EventStream`.

:class:`ArrayTail` is mixed into the stream: :meth:`~ArrayTail._tail` reads the keys that follow
the array's ``]`` (Kineto writes ``baseTimeNanoseconds`` there) into ``meta``, as many as can be
read, and reads through whatever follows the JSON without keeping it (another document may be as
large as the file). It returns what is wrong there as notes, each naming its place in the file;
every event is kept whatever the tail holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.core.errors import shown
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.json.text import (
    WHITESPACE,
    error_offset,
    error_reason,
    event_arrays,
    extended,
    is_truncated,
    object_members,
    trailing_junk,
)


class ArrayTail:
    """Reading after the array (the stream's state, as ``EventStream`` keeps it)."""

    path: Path
    bare: bool
    meta: dict[str, Any]
    more_arrays: list[Any]
    notes: Losses
    _decode: Callable[[bytes], list]
    _cut: Callable[..., bytes]
    _advance: Callable[[bytes, int], bytes]
    _where: Callable[[bytes, int], str]

    def _tail(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses:
        """Reads the keys after the array (``buf[at:]`` follows its ``]``, then ``rest``) into
        :attr:`meta`; returns what is wrong there, as notes."""
        while (notes := self._keys_after(buf, at, rest)) is None:
            longer = extended(buf, rest)
            if longer is None:
                return self._tail_damage(buf, len(buf), "unexpected end of data")
            buf = longer
        return notes

    def _keys_after(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses | None:
        """What :meth:`_tail` returns, or None when ``buf`` ends before the object does."""
        text = buf[at:].lstrip(WHITESPACE)
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
        self._take_arrays(doc)
        return self._trailing(buf, len(buf), rest)

    def _take_arrays(self, doc: bytes) -> None:
        """Moves a ``traceEvents`` key after the array (a key written twice) from :attr:`meta` to
        :attr:`more_arrays`, each one such key holds, so that their events are read too."""
        if "traceEvents" not in self.meta:
            return
        last = self.meta.pop("traceEvents")
        self.more_arrays.extend(event_arrays(doc) or [last])

    def _more_events(self, value: Any) -> list:
        """The events of a further ``traceEvents`` key (a key written twice): as many as the first's."""
        if type(value) is not list:
            where = f"{shown(self.path)}: a further traceEvents key that is not an event array, not read"
            self.notes.add(Stat.EVENT_NOT_OBJECT, 1, where)
            return []
        # Encoded again for the event decoders; a number read with its text (thousands of digits) as its float.
        return self._decode(msgspec.json.encode(value, enc_hook=float))

    def _partial_tail(
        self, buf: bytes, at: int, doc: bytes, exc: msgspec.DecodeError, rest: Iterator[bytes]
    ) -> Losses | None:
        if "trailing characters" in str(exc):
            end = error_offset(exc, doc) - 1
            self.meta.update(msgspec.json.decode(doc[:end]))
            self._take_arrays(doc[:end])
            return self._trailing(buf, at + end, rest)
        members, stop, whole = object_members(doc)
        self.meta.update(members)
        self._take_arrays(doc[:stop] + (b"" if whole else b"}"))
        if whole:  # NaN, Infinity or a bad byte, read as Python reads them
            return self._trailing(buf, at + stop, rest)
        if is_truncated(exc):
            return None
        return self._tail_damage(buf, at + stop, error_reason(exc))

    def _trailing(self, buf: bytes, at: int, rest: Iterator[bytes]) -> Losses:
        """Notes the bytes after the end of the JSON (``buf[at:]``, then ``rest``), read through
        without being kept: another document after it may be as large as the file."""
        text = buf[at:].lstrip(WHITESPACE)
        while not text:  # white space so far: the bytes, if any, start in a later block
            more = next(rest, None)
            if more is None:
                return Losses()
            buf = self._advance(buf, len(buf)) + more
            text = buf.lstrip(WHITESPACE)
        at = len(buf) - len(text)
        size, events, nul_only = trailing_junk(text, rest)
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
