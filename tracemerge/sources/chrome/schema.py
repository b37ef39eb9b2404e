"""The shapes msgspec decodes a Chrome trace event into, and its times read as nanoseconds.

:class:`TraceEvent` is the typed shape of the usual event (args kept as raw JSON text),
:class:`LenientEvent` takes any JSON object, :class:`ExactEvent` keeps times as their JSON text.
:func:`us_to_ns` turns µs (int, float, decimal text or raw JSON) into exact integer ns, raising
ValueError for a value no trace can hold and :class:`NeedsExactTimes` for a float too large to
hold its nanoseconds (the file must then be decoded as :class:`ExactEvent`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from tracemerge.core.units import FLOAT_EXACT_LIMIT_US, checked_ns, decimal_text_to_int

# Floats of µs this large are out of range (tracemerge.core.units.NS_MAX) whatever text they were read from.
_BEYOND_ANY_CLOCK_US = 1e16


_NO_ARGS = msgspec.Raw(b"")


class TraceEvent(msgspec.Struct, gc=False):
    """One Chrome trace event as Kineto writes it; args stay raw JSON text."""

    ph: str | None = None
    name: str = ""
    cat: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | str | None = None
    dur: int | float | str | None = None
    id: int | str | None = None
    bp: str | None = None
    args: msgspec.Raw = _NO_ARGS
    # Rare fields, absent from most events (an absent field costs nothing to decode).
    id2: Any = None
    bind_id: Any = None
    flow_in: Any = None
    flow_out: Any = None


class LenientEvent(msgspec.Struct, gc=False):
    """Any JSON object: the fallback for a batch whose fields do not have the usual types."""

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    id2: Any = None
    bp: Any = None
    args: msgspec.Raw = _NO_ARGS
    bind_id: Any = None
    flow_in: Any = None
    flow_out: Any = None


class ExactEvent(LenientEvent, gc=False):
    """A Chrome event whose times are kept as their JSON text (absolute µs with decimals)."""

    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")


class NeedsExactTimes(Exception):
    """A float timestamp too large to hold its nanoseconds: the file must be decoded from text."""


def us_to_ns(value: Any) -> int:
    """Microseconds (int, float or decimal text) to integer ns; exact (see tracemerge.core.units);
    ValueError for a value no trace can hold."""
    return checked_ns(_us_to_ns(value))


def _us_to_ns(value: Any) -> int:
    t = type(value)
    if t is float:
        if -FLOAT_EXACT_LIMIT_US < value < FLOAT_EXACT_LIMIT_US:  # checked first: 1e308 * 1000 overflows
            guess = round(value * 1000)
            if guess / 1000 == value:
                return guess
            return decimal_text_to_int(repr(value), 3)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value!r}")
        if abs(value) >= _BEYOND_ANY_CLOCK_US:  # out of range whatever its text: no exact read
            raise ValueError(f"timestamp beyond 64 bits ({value!r} us)")
        raise NeedsExactTimes
    if t is int:
        return value * 1000
    if t is str:
        return decimal_text_to_int(value, 3)
    if t is msgspec.Raw:
        text = bytes(value)
        if text == b"null":
            raise ValueError("no timestamp")
        if text[:1] == b'"':
            text = msgspec.json.decode(text)
            return decimal_text_to_int(text, 3)
        return decimal_text_to_int(text.decode(), 3)
    raise ValueError(f"not a timestamp: {value!r}")
