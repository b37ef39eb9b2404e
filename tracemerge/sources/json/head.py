"""The keys before a JSON trace's event array, up to the ``[`` that opens it, for
:class:`~tracemerge.sources.json.stream.EventStream`.

:class:`ArrayHead` is mixed into the stream: :meth:`~ArrayHead._open_array` reads the first
blocks up to the array's ``[`` (a bare array's first byte, or the value of ``traceEvents``), and
decodes the keys before it into ``meta``. A file that is no trace raises NotATrace, one whose keys
cannot be read InputError, naming the place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.core.errors import InputError, NotATrace
from tracemerge.sources.json.text import WHITESPACE, error_offset, error_reason, object_members

# Largest run of bytes searched for the array's opening key before giving up.
HEAD_LIMIT = 64 << 20


class ArrayHead:
    """Reading up to the array (the stream's state, as ``EventStream`` keeps it)."""

    path: Path
    bare: bool
    meta: dict[str, Any]
    _cut: Callable[..., bytes]
    _advance: Callable[[bytes, int], bytes]
    _where: Callable[[bytes, int], str]

    def _open_array(self, blocks: Iterator[bytes]) -> bytes:
        """Reads up to the ``[`` that opens the event array; decodes the keys before it."""
        buf = b""
        for more in blocks:
            buf += more
            head = buf.lstrip(WHITESPACE)
            lead = len(buf) - len(head)
            if head[:1] == b"[":
                self.bare = True
                return self._advance(buf, lead + 1)
            if head[:1] != b"{":
                break
            pos = head.find(b'"traceEvents"')
            if pos >= 0:
                after = head[pos + 13 :].lstrip(WHITESPACE)
                if after[:1] == b":":
                    value = after[1:].lstrip(WHITESPACE)
                    if value[:1] == b"[":
                        self._read_object(head[:pos].rstrip(WHITESPACE).rstrip(b",") + b"}", buf, lead)
                        return self._advance(buf, len(buf) - len(value) + 1)
                    if value:
                        raise InputError(self.path, "traceEvents is not an array")
            if len(buf) > HEAD_LIMIT:
                break
        if not buf.strip(WHITESPACE):
            raise InputError(self.path, "empty file")
        raise NotATrace(self.path, "no traceEvents array")

    def _read_object(self, text: bytes, buf: bytes, at: int) -> None:
        """The keys before the event array into :attr:`meta`: NaN, Infinity, an integer too long
        for msgspec or a bad byte in one is read as Python's json reads it, not the file lost."""
        try:
            try:
                value = msgspec.json.decode(text)
            except RecursionError:
                text = self._cut(text, 1, at)
                value = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            members, _, whole = object_members(text)
            if not whole:
                raise InputError(
                    self.path, f"invalid JSON ({error_reason(exc)})", self._where(buf, at + error_offset(exc, text))
                ) from None
            value = members
        if type(value) is dict:
            self.meta.update(value)
