"""Exact conversion of trace timestamps to integer nanoseconds.

Chrome-trace timestamps are microseconds written as decimals ("1712345678901234.567"). Parsed as
a float such a value loses its nanoseconds once it exceeds 2**43 µs, so values are converted from
their decimal text where needed and never rounded through a float product.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from tracemerge.core.bounds import MAX_NUMBER_TEXT, check_number_text

# Below this many microseconds a float parsed from a decimal with at most three fraction digits
# still identifies that decimal exactly (half an ulp is under half a nanosecond).
FLOAT_EXACT_LIMIT_US = float(2**43)


def decimal_text_to_int(text: str, digits: int) -> int:
    """Return round-half-up(value * 10**digits) for the decimal ``text``, exactly."""
    s = text.strip()
    if not s:
        raise ValueError("empty number")
    if len(s) > MAX_NUMBER_TEXT:
        raise ValueError(f"number text of {len(s)} characters")
    if "e" in s or "E" in s:
        check_number_text(s)  # before Decimal: 1e999999999 would take it minutes, or overflow it
        try:
            return int((Decimal(s) * (10**digits)).to_integral_value(rounding="ROUND_HALF_UP"))
        except InvalidOperation:
            raise ValueError(f"not a number: {text!r}") from None
    negative = s[0] == "-"
    if s[0] in "+-":
        s = s[1:]
    whole, _, frac = s.partition(".")
    if not (whole or frac) or not (whole.isdigit() or whole == "") or not (frac.isdigit() or frac == ""):
        raise ValueError(f"not a number: {text!r}")
    kept = (frac + "0" * digits)[:digits]
    value = int(whole or "0") * 10**digits + int(kept or "0")
    rest = frac[digits:]
    if rest and rest[0] >= "5":
        value += 1
    return -value if negative else value


# Timestamps a trace can hold, in ns: Perfetto's are 64-bit (and the trace's span must fit one);
# far before 1970 is no clock at all (a relative clock never runs years negative).
NS_MIN, NS_MAX = -(10**17), 1 << 62


def checked_ns(ns: int) -> int:
    """``ns`` when a trace can hold it; ValueError (the event is dropped, with the reason) if not."""
    if ns >= NS_MAX:
        raise ValueError(f"timestamp beyond 64 bits ({ns} ns)")
    if ns <= NS_MIN:
        raise ValueError(f"timestamp long before 1970 ({ns} ns)")
    return ns


def us_to_ns(value: object) -> int:
    """Microseconds (int, float or decimal text) to integer nanoseconds without float rounding."""
    return checked_ns(_us_to_ns(value))


def _us_to_ns(value: object) -> int:
    t = type(value)
    if t is int:
        return value * 1000  # type: ignore[operator]
    if t is float:
        try:
            guess = round(value * 1000)  # type: ignore[operator]
        except (OverflowError, ValueError):
            raise ValueError(f"not a finite number: {value!r}") from None
        # Below 2**43 µs only one 3-decimal value parses to a given float, so a guess that
        # converts back to the same float is that value. Otherwise (more decimals, as Ascend's
        # durations have) round the float's shortest decimal text, which is the text it was
        # parsed from whenever that had 15 significant digits or fewer.
        if guess / 1000 == value:
            return guess
        return decimal_text_to_int(repr(value), 3)
    if t is str:
        return decimal_text_to_int(value, 3)  # type: ignore[arg-type]
    if t is bool or value is None:
        raise ValueError(f"not a timestamp: {value!r}")
    raise ValueError(f"not a timestamp: {value!r}")


def seconds_to_ns(value: object) -> int:
    """Seconds (int, float or decimal text) to integer nanoseconds (see :func:`_seconds_to_ns`)."""
    return checked_ns(_seconds_to_ns(value))


def _seconds_to_ns(value: object) -> int:
    """Seconds (int, float or decimal text) to integer nanoseconds.

    A float carries about 16 significant digits, which for epoch seconds is sub-microsecond; the
    float's shortest decimal text is converted, so ``1732900000.123456`` gives ...123456000 ns.
    """
    t = type(value)
    if t is int:
        return value * 1_000_000_000  # type: ignore[operator]
    if t is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value!r}")
        return decimal_text_to_int(repr(value), 9)
    if t is str:
        return decimal_text_to_int(value, 9)  # type: ignore[arg-type]
    raise ValueError(f"not a time in seconds: {value!r}")


# A run of 19 digits, found fast: every digit made a 9, then a plain substring search.
_DIGITS_AS_NINES = bytes.maketrans(b"0123456789", b"9999999999")
_NINETEEN_DIGITS = b"9" * 19


def plain_json(text: bytes) -> bool:
    """Whether JSON ``text`` holds no ``null`` and no number of 19 digits or more: what
    trace_processor shows exactly as written (it drops nulls and wraps integers beyond int64).
    Either word inside a string also answers False: that only costs a closer look."""
    return b"null" not in text and _NINETEEN_DIGITS not in text.translate(_DIGITS_AS_NINES)


_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "min": 60_000_000_000}
_DURATION = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")
MAX_DURATION_NS = (1 << 63) - 1  # what a trace's int64 ns can hold: about 292 years


def parse_duration(text: str) -> int:
    """``"1.5ms"`` -> 1500000 ns; a bare number is seconds. At most ±MAX_DURATION_NS."""
    m = _DURATION.match(text)
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise ValueError(f"not a duration: {text!r} (use a number with ns, us, ms, s or min)")
    try:
        number = Decimal(m.group(1))
        # Compared before it becomes an int (1e999999999 would have a billion digits).
        if number.adjusted() > 30 or abs(value := number * _UNITS[m.group(2) or "s"]) > MAX_DURATION_NS:
            raise ValueError(f"duration out of range: {text!r} (at most 292 years)")
        return int(value.to_integral_value())
    except ArithmeticError:  # decimal's InvalidOperation, Overflow
        raise ValueError(f"not a duration: {text!r}") from None
