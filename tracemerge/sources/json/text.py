"""JSON text of a trace scanned and mended as bytes, without decoding it whole.

Pure functions of the text they are given (and of the blocks still to come, where they read on):
where one event of an array ends and the next begins (:data:`EVENT_BOUNDARY`,
:func:`last_boundary`), where an array closes (:func:`closed_array`, mending what loses
nothing: lone surrogate escapes, trailing commas, values nested too deep), the members of an
object as Python's json reads them, what the bytes after the end of the JSON hold, and
msgspec's decode errors as a reason and a byte offset.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from tracemerge.core.bounds import JSON_STRING, cut_deep_or_fail

# Where one event of an array ends and the next begins: ``}``, a comma, ``{``.
EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
# Such a boundary with the next event's first key after it: one that a string holds is rare, as
# its quote would be escaped there (serialized JSON in an arg: ``}, {\"k\": 1``).
KEYED_BOUNDARY = re.compile(rb'\}\s*,\s*\{(?=\s*")')
WHITESPACE = b" \t\r\n"
# Each element of an array, its text kept: finds where an array ends, whatever its elements hold.
ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
# An escaped backslash (skipped whole, so that the text after it is not read as an escape), a
# UTF-16 surrogate pair, or a lone surrogate (6 bytes, what Python's json writes for some text).
_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_MENDS = 16  # trailing commas mended in the file's last bytes before giving up on them
# Where an event's args object is in a batch's text: the array 1, the event 2, its args 3.
ARGS_LEVEL = 3


class NumberText(float):
    """A JSON number read by Python's json, with its text (times are taken from the text)."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> NumberText:
        number = super().__new__(cls, text)
        number.text = text
        return number


KINDS_BY_FIRST_BYTE = {b"n": "null", b"t": "boolean", b"f": "boolean", b'"': "string", b"[": "array"}


def value_kind(value: Any) -> str:
    """What a JSON value that is not an object is, in JSON's words."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if type(value) in (int, float):
        return "number"
    return "string" if type(value) is str else "array"


def extended(buf: bytes, rest: Iterator[bytes]) -> bytes | None:
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


def trailing_junk(first: bytes, rest: Iterator[bytes]) -> tuple[int, bool, bool]:
    """Of the bytes ``first`` then ``rest`` hold: how many there are up to the last one that is not
    white space, whether they hold an event (``"ph"``), whether those are all NUL bytes."""
    size = seen = 0
    events, nul_only = False, True
    carry = b""  # the end of the previous block: a "ph" across two blocks is found
    for block in itertools.chain((first,), rest):
        events = events or b'"ph"' in carry + block[:3] or b'"ph"' in block
        carry = (carry + block[-3:])[-3:]
        text = block.rstrip(WHITESPACE)
        if text:
            nul_only = nul_only and seen == size and not text.strip(b"\0")
            size = seen + len(text)
        seen += len(block)
    return size, events, nul_only


def closes_early(doc: bytes) -> bool:
    """Whether the array ``doc`` opens closes before its last byte (read as :func:`closed_array` reads it)."""
    found = closed_array(doc)
    return found is not None and found[1] < len(doc)


def without_lone_surrogates(doc: bytes) -> bytes:
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


def closed_array(doc: bytes, cut: Callable[[bytes, int], bytes] | None = None) -> tuple[bytes, int] | None:
    """``doc`` (``[`` then the file's last bytes), mended where that loses nothing (lone
    surrogates, trailing commas, with ``cut`` values nested too deep), and the end of the array it
    opens; None if it never closes."""
    surrogates = True
    for _ in range(_MENDS):
        try:
            ELEMENTS.decode(doc)
        except RecursionError:
            doc = (cut or cut_deep_or_fail)(doc, ARGS_LEVEL)
            continue
        except msgspec.DecodeError as exc:
            text = str(exc)
            if "trailing characters" in text:
                return doc, len(doc[: error_offset(exc, doc) - 1].rstrip(WHITESPACE))
            if "trailing comma" in text:
                comma = len(doc[: error_offset(exc, doc)].rstrip(WHITESPACE)) - 1
                doc = b"".join((doc[:comma], b" ", doc[comma + 1 :]))
                continue
            if surrogates:
                surrogates, mended = False, without_lone_surrogates(doc)
                if mended is not doc:
                    doc = mended
                    continue
            if is_truncated(exc):
                return None
            break
        else:
            return doc, len(doc.rstrip(WHITESPACE))
    try:
        return _python_end(doc)
    except RecursionError:
        return _python_end((cut or cut_deep_or_fail)(doc, ARGS_LEVEL))


def _python_end(doc: bytes) -> tuple[bytes, int] | None:
    """Where the array ``doc`` opens ends as Python's json reads it (NaN, Infinity); None if not."""
    text = doc.decode("utf-8", "surrogateescape")  # one character per bad byte: places stay
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return doc, len(text[:end].encode("utf-8", "surrogateescape"))


_SPACE = re.compile(r"[ \t\r\n]*")
_INT_DIGITS = 4000  # longer integers Python refuses to read (4300 digits): kept as numbers with their text


def _int_or_number(text: str) -> int | NumberText:
    """An integer as Python's json reads it; one too long to read as an int, a number with its text
    (a value no field can use, rather than the object lost)."""
    return int(text) if len(text) <= _INT_DIGITS else NumberText(text)


def _space_end(text: str, pos: int) -> int:
    """Where the JSON white space from ``pos`` ends."""
    found = _SPACE.match(text, pos)
    assert found is not None  # the pattern matches empty text
    return found.end()


def object_members(doc: bytes) -> tuple[dict[str, Any], int, bool]:
    """The members of the object ``doc`` opens, as Python's json reads them, up to the first that
    cannot be read: (members, the offset where reading stopped, whether the object closed)."""
    text = without_lone_surrogates(doc).decode("utf-8", "surrogateescape")
    scan = json.JSONDecoder(parse_int=_int_or_number).raw_decode
    members: dict[str, Any] = {}
    pos = _space_end(text, 1)
    if text[pos : pos + 1] == "}":
        return members, len(text[: pos + 1].encode("utf-8", "surrogateescape")), True
    while True:
        start = pos
        try:
            key, pos = scan(text, pos)
            pos = _space_end(text, pos)
            if type(key) is not str or text[pos : pos + 1] != ":":
                raise ValueError("not a member")
            value, pos = scan(text, _space_end(text, pos + 1))
        except ValueError:
            return members, len(text[:start].encode("utf-8", "surrogateescape")), False
        pos = _space_end(text, pos)
        after = text[pos : pos + 1]
        if after not in (",", "}"):  # a value cut short looks whole (a number): not kept
            return members, len(text[:start].encode("utf-8", "surrogateescape")), False
        members[key] = replaced_surrogates(value)
        pos = _space_end(text, pos + 1)
        if after == "}":
            return members, len(text[:pos].encode("utf-8", "surrogateescape")), True


def event_arrays(doc: bytes) -> list[Any] | None:
    """The value of every top-level ``traceEvents`` key of the object ``doc`` opens, in order (an
    object may repeat a key, and a decoder into a dict keeps only the last); None when Python's
    json cannot read the object."""
    found: list[list[Any]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append([value for key, value in items if key == "traceEvents"])  # the outermost comes last
        return dict(items)

    try:
        json.JSONDecoder(object_pairs_hook=pairs).raw_decode(doc.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None
    return found[-1] if found else None


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


def last_boundary(
    buf: bytes, lo: int = 0, hi: int | None = None, boundary: re.Pattern[bytes] = EVENT_BOUNDARY
) -> int | None:
    """Offset of the ``}`` of the last event boundary (``boundary``) in ``buf[lo:hi]``."""
    hi = len(buf) if hi is None else hi
    window = 1 << 16
    while hi > lo:
        a = max(lo, hi - window)
        last = None
        for last in boundary.finditer(buf, a, hi):  # noqa: B007 - the last match is wanted
            pass
        if last is not None:
            return last.start()
        if a == lo:
            return None
        hi = a + 64  # overlap the windows so that a boundary on the edge is found
        window *= 2
    return None


# A JSON string (or the one the text ends inside), or an event boundary outside any string.
_STRING_OR_BOUNDARY = re.compile(JSON_STRING + rb"|\}\s*,\s*\{", re.S)


def last_boundary_outside_strings(buf: bytes, at_most: int) -> int | None:
    """Offset of the ``}`` of the last event boundary at or before ``at_most`` that no string
    holds, reading ``buf`` from its start (outside any string: where an event begins). One pass,
    however many ``}, {`` the strings hold (serialized JSON in an arg, say)."""
    last = None
    for found in _STRING_OR_BOUNDARY.finditer(buf):
        at = found.start()
        if at > at_most:
            break
        if buf[at] == 0x7D:  # ``}``
            last = at
    return last


def is_truncated(exc: msgspec.DecodeError) -> bool:
    return "truncated" in str(exc)


def error_reason(exc: msgspec.DecodeError) -> str:
    text = str(exc)
    if "truncated" in text:
        return "unexpected end of data"
    return re.sub(r"\s*\(byte \d+\)", "", text.split(" - at ")[0]).removeprefix("JSON is malformed: ")


def error_offset(exc: msgspec.DecodeError, doc: bytes) -> int:
    m = re.search(r"\(byte (\d+)\)", str(exc))
    return int(m.group(1)) if m else len(doc)
