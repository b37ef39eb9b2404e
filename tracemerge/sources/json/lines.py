"""What the JSON-lines formats share: each line's value (:class:`JsonLines`, a line Python's json
wrote read as Python reads it), and the first object of a file's head, which they claim a file by
(:func:`first_json_object`; a Chrome trace written one event per line is none of theirs)."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson

from tracemerge.core.bounds import DEEP_FROM, TOO_DEEP, cut_deep
from tracemerge.core.errors import NotATrace
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.base import HEAD_BYTES, read_head
from tracemerge.sources.json.text import replaced_surrogates


def first_json_object(head: bytes, path: Path | None = None) -> dict | None:
    """The first leading line that is a JSON object (a first line cut or garbage does not hide the
    rest): what a JSON-lines format looks at to claim a file. A first line longer than the head
    (a metrics page, large args) is read further from ``path``, up to LONG_LINE bytes, unless it
    opens a Chrome trace (a minified one is a single line)."""
    found = _first_object(head)
    if found is None and path is not None and len(head) >= HEAD_BYTES:
        start = head.lstrip()
        if start[:1] == b"{" and b"\n" not in start and not opens_chrome_trace(start):
            try:
                stat = path.stat()
            except OSError:
                return None
            found = _long_first_object(path, stat.st_size, stat.st_mtime_ns)
    return found


def opens_chrome_trace(head: bytes) -> bool:
    """Whether the first line is the opening of a Chrome trace file (a bare event array, or an
    object holding ``traceEvents``) rather than a whole JSON-lines record."""
    first = next((line.strip() for line in head.split(b"\n") if line.strip()), b"")
    if _ARRAY_OPENING.match(first):
        return True
    if not _TRACE_EVENTS_OPENING.match(first):
        return False
    try:
        return type(orjson.loads(first)) is not dict  # a whole record may hold that key in its args
    except orjson.JSONDecodeError:
        return True


_ARRAY_OPENING = re.compile(rb"^\[\s*(?:\{|$)")
_TRACE_EVENTS_OPENING = re.compile(rb'^\{.*"traceEvents"\s*:\s*\[')

# Longest first line of a JSON-lines file that is looked at to claim it.
LONG_LINE = 16 << 20


@functools.lru_cache(maxsize=4)  # each JSON-lines format asks for the same file in turn
def _long_first_object(path: Path, size: int, mtime_ns: int) -> dict | None:
    try:
        return _first_object(read_head(path, LONG_LINE))
    except OSError:
        return None


# Where a line's args object is: the line's object is level 1.
_LINE_ARGS = 2


def _first_object(head: bytes) -> dict | None:
    for line in head.split(b"\n")[:50]:
        if not line.strip():
            continue
        if len(line) >= DEEP_FROM:
            line = cut_deep(line, _LINE_ARGS)[0]
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            read = _as_python_reads(line)
            if read is None:
                continue
            obj = read[1]
        if type(obj) is dict:
            return obj
    return None


class JsonLines:
    """The non-blank lines of JSON-lines content and their values; the lines that are not JSON are
    noted, for :meth:`account`."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.count = 0  # non-blank lines met so far
        self.bad = 0  # lines that are not JSON
        self.first_bad = 0  # the number of the first of them
        self.deep = 0  # values nested too deep, replaced (tracemerge.core.bounds)

    def __iter__(self) -> Iterator[tuple[bytes, Any]]:
        for block in self.blocks(1 << 16):
            yield from self.parsed(block)

    def blocks(self, size: int) -> Iterator[list[tuple[int, bytes]]]:
        """The non-blank lines, ``size`` at a time, each with its number, not yet parsed (a line
        long enough to nest too deep already cut, see :mod:`tracemerge.core.bounds`)."""
        block: list[tuple[int, bytes]] = []
        for lineno, line in enumerate(self.data.split(b"\n"), 1):
            if not line.strip():
                continue
            self.count += 1
            if len(line) >= DEEP_FROM:  # a line this long may nest too deep for any decoder
                line, where = cut_deep(line, _LINE_ARGS)
                self.deep += len(where)
            block.append((lineno, line))
            if len(block) == size:
                yield block
                block = []
        if block:
            yield block

    def parsed(self, block: list[tuple[int, bytes]]) -> Iterator[tuple[bytes, Any]]:
        """Each line of a block that is JSON, with its value; the others are noted."""
        for lineno, line in block:
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                read = _as_python_reads(line)
                if read is None:
                    self.bad += 1
                    self.first_bad = self.first_bad or lineno
                    continue
                line, obj = read
            yield line, obj

    def account(self, path: Path, dropped: Losses) -> None:
        """Once read: NotATrace when no line was JSON, else the lines that were not counted."""
        if self.count and self.bad == self.count:
            raise NotATrace(path, "no line is valid JSON", where=str(self.first_bad))
        if self.bad:
            dropped.add(Stat.LINE_UNREADABLE, self.bad, f"invalid JSON line (first at line {self.first_bad})")
        if self.deep:
            dropped.add(Stat.VALUE_TOO_DEEP, self.deep, TOO_DEEP)


def _as_python_reads(line: bytes) -> tuple[bytes, Any] | None:
    """A line with what Python's json writes and reads (NaN, Infinity) or a bad UTF-8 byte, read
    as Python reads it (the byte as U+FFFD), with its text re-encoded as strict JSON (NaN and
    Infinity as null, as a ``.json`` file's events are read; a record's own numbers as written,
    see :func:`_own_numbers_as_written`); None when it is not JSON at all."""
    text = line.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    strict = _own_numbers_as_written(obj, text)
    try:
        return msgspec.json.encode(strict), obj
    except UnicodeEncodeError:  # a lone surrogate escape ("\udcff", as json.dumps writes one)
        return msgspec.json.encode(replaced_surrogates(strict)), replaced_surrogates(obj)


def _own_numbers_as_written(obj: Any, text: str) -> Any:
    """The object ``text`` holds (``obj``, as Python reads it) with its top-level numbers as their
    text: times are read from the text, and a float would lose their nanoseconds."""
    if type(obj) is not dict:
        return obj
    written = json.loads(text, parse_float=_number_as_written)
    return {**obj, **{key: value for key, value in written.items() if type(value) is msgspec.Raw}}


def _number_as_written(text: str) -> msgspec.Raw | float:
    number = float(text)
    return msgspec.Raw(text.encode()) if math.isfinite(number) else number  # 1e400: null, as before
