"""Bounds on the work one input value may cost: how deep it nests, how long a number's text runs.

A JSON value nested thousands of levels deep breaks every recursive reader (msgspec, Python's
json, orjson, TOML) and what writes it again; a number written as ``1e999999999`` makes an exact
decimal parse build an integer of a billion digits. Neither loses more than its own value here:

* a value nested more than :data:`MAX_DEPTH` levels inside an event's args (or a metadata file's
  key) is replaced by a short text saying so, the rest of the event kept, and counted under
  :data:`TOO_DEEP` (statistic ``value_too_deep``). The replacement keeps the text's length
  (spaces pad it), so that every offset into a batch of events still names the same place;
* a number's text longer than :data:`MAX_NUMBER_TEXT` or whose exponent puts it beyond
  :data:`MAX_EXPONENT` is no time at all (ValueError, counted by the reader as out of range),
  found before any exact parse.
"""

from __future__ import annotations

import re
import sys
from typing import Any

# Levels of nesting kept in a value: an event's args object is level 1. Perfetto shows a few; the
# encoders' own limits (orjson writes 255) are above it, so a kept value is always written.
MAX_DEPTH = 200
TOO_DEEP = f"value nested more than {MAX_DEPTH} levels deep (replaced by a note, the event kept)"
_NOTE = b'"(nested more than %d levels deep: not kept)"' % MAX_DEPTH
# A JSON string (closed, or cut by the end of the text), its escapes skipped whole. Possessive
# where the re module has them (3.11): a string with many escapes (serialized JSON in an arg) then
# costs the matcher no memory per escape. Looping over a character or an escape at a time took
# 288 MB for an arg of 2.3 MB; unrolled 40 MB, possessive 2 MB.
if sys.version_info >= (3, 11):
    JSON_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?$)'
else:  # pragma: no cover
    JSON_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?$)'
# A string, or a bracket: what nesting is counted from.
_TOKENS = re.compile(JSON_STRING + rb"|[\[\]{}]", re.S)
_OPENING = frozenset(b"[{")
# A container this long at least may nest that deep: shorter args need no look.
DEEP_FROM = 2 * (MAX_DEPTH + 1)

# Number text longer than this is no time, whatever it says (nanoseconds need 20 digits, a
# float's shortest text with an exponent 24 characters).
MAX_NUMBER_TEXT = 100
# Powers of ten beyond this (either way) are no time in ns of any clock: 10**40 ns is 3e23 years.
MAX_EXPONENT = 40


def cut_deep(text: bytes, at: int = 1) -> tuple[bytes, list[int]]:
    """``text`` (JSON, or a part of a JSON array) with each value nested more than MAX_DEPTH levels
    below an object at level ``at`` (its args object: 1 for args text itself, 3 for a batch of
    events in an array) replaced by a note of the same length; and where each replaced value
    began. Only the members of such objects are replaced (the value of the args member that holds
    the deep part), never the object itself."""
    if text.count(b"[") + text.count(b"{") <= MAX_DEPTH + at - 1:
        return text, []
    limit, keep = MAX_DEPTH + at - 1, at + 1
    depth = 0
    cut_from = -1
    pieces: list[bytes] = []
    done = 0
    cuts: list[int] = []
    for m in _TOKENS.finditer(text):
        c = text[m.start()]
        if c == 0x22:  # a string: brackets in it count for nothing
            continue
        if c in _OPENING:
            depth += 1
            if depth == keep:
                start = m.start()
            elif depth > limit and cut_from < 0:
                cut_from = start
        else:
            if depth == keep and cut_from >= 0:
                pieces += [text[done:cut_from], _note(m.end() - cut_from)]
                cuts.append(cut_from)
                done, cut_from = m.end(), -1
            depth -= 1
    if cut_from >= 0:  # cut short inside the deep value: what is left of it goes too
        pieces += [text[done:cut_from], _note(len(text) - cut_from)]
        cuts.append(cut_from)
        done = len(text)
    if not cuts:
        return text, cuts
    pieces.append(text[done:])
    return b"".join(pieces), cuts


def cut_deep_or_fail(text: bytes, at: int, with_places: bool = False) -> Any:
    """What :func:`cut_deep` gives (the text alone unless ``with_places``), where a decoder gave up
    on ``text`` for its depth; RecursionError again when nothing in it nests too deep (the decoder
    gave up for another reason)."""
    cut, where = cut_deep(text, at)
    if not where:
        raise RecursionError("nested too deep")
    return (cut, where) if with_places else cut


def _note(length: int) -> bytes:
    """The note put in place of a deep value ``length`` bytes long (padded with spaces)."""
    note = _NOTE if length >= len(_NOTE) else b'""'
    return note + b" " * (length - len(note))


def bounded_args(args: bytes) -> tuple[bytes, int]:
    """An args object's text with its too deep values replaced (see :func:`cut_deep`), and how
    many; the spaces that kept a replaced value's length are dropped (its text is not read again)."""
    if len(args) < DEEP_FROM:
        return args, 0
    text, where = cut_deep(bytes(args), 1)
    if _NOTE in text:
        text = _PADDED_NOTE.sub(_NOTE, text)
    return text, len(where)


_PADDED_NOTE = re.compile(re.escape(_NOTE) + b" +")


_SCIENTIFIC = re.compile(r"\s*[+-]?(\d*)(?:\.(\d*))?[eE]([+-]?\d+)\s*")


def check_number_text(text: str) -> None:
    """ValueError for number text whose exact value would cost more than the value could be
    worth: too long, or so large that no clock reaches it (``1e999999999``); a tiny value costs
    nothing and is left alone."""
    if len(text) > MAX_NUMBER_TEXT:
        raise ValueError(f"number text of {len(text)} characters")
    m = _SCIENTIFIC.fullmatch(text)
    if m is None:
        return
    whole, frac, exponent = m.group(1), m.group(2) or "", m.group(3)
    digits = whole.lstrip("0")
    if digits:
        lead = len(digits) - 1  # the power of ten of the first digit
    elif frac.strip("0"):
        lead = -1 - (len(frac) - len(frac.lstrip("0")))
    else:
        return  # zero, whatever its exponent
    if lead + int(exponent) > MAX_EXPONENT:
        raise ValueError(f"number out of range: {text.strip()[:40]!r}")
