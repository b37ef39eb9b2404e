"""A column of Chrome-trace times in µs (a field of a typed batch) as int64 ns, exactly.

Integers of any size a trace holds are exact, decimal text too (Ascend writes
``"1736400000123.456"``), floats when their 3-decimal value is what the float holds. A row the
columns cannot take exactly is marked :data:`INEXACT`: the per-event path
(:func:`tracemerge.core.units.us_to_ns`) reads it, in its place, and says why it cannot when it cannot.
"""

from __future__ import annotations

import itertools
from operator import is_

import numpy as np

from tracemerge.core.units import FLOAT_EXACT_LIMIT_US, NS_MAX, NS_MIN

_INTS = {int}
_LIMIT = FLOAT_EXACT_LIMIT_US
INEXACT = np.int64(-(1 << 63))
# Text the columns read: at most this many characters, plain decimal only.
_TEXT_WIDTH = 40
_MINUS, _PLUS, _POINT, _ZERO, _FIVE, _NINE = b"-+.059"
_POWERS = np.array([10**k for k in range(20)], np.uint64)
# Integer µs the columns take: their ns fit a trace (units.checked_ns says why not, per event).
_INT_LOW, _INT_HIGH = -(-NS_MIN // 1000), NS_MAX // 1000


def micros_to_ns(values: list, n: int) -> np.ndarray | None:
    """Times in µs as int64 ns, when every one is a number or number text (else None: the
    per-event path reads them). Integers are exact whatever their size (older Kineto writes epoch
    µs as integers), decimal text too (Ascend writes ``"1736400000123.456"``); a float is taken
    when its 3-decimal value is what the float holds. Rows the columns cannot take exactly (a
    float of more decimals or too large to be exact, text that is not plain decimal, a time beyond
    what a trace holds) are marked INEXACT: the per-event path reads each, in its place."""
    kinds = set(map(type, values))
    if len(kinds) == 1:
        kind = kinds.pop()
        return (
            _int_micros(values, n)
            if kind is int
            else text_micros_to_ns(values, n)
            if kind is str
            else _float_micros(values, n)
        )
    found = np.empty(n, np.int64)
    types = list(map(type, values))
    rest = np.ones(n, bool)
    for kind, convert in ((int, _int_micros), (str, text_micros_to_ns)):
        if kind in kinds:
            rows = np.fromiter(map(is_, types, itertools.repeat(kind)), bool, n)
            rest &= ~rows
            found[rows] = convert(list(itertools.compress(values, rows)), int(rows.sum()))
    others = _float_micros(list(itertools.compress(values, rest)), int(rest.sum()))
    if others is None:
        return None
    found[rest] = others
    return found


def _int_micros(values: list, n: int) -> np.ndarray:
    try:
        us = np.fromiter(values, np.int64, n)
    except OverflowError:  # beyond int64: those rows go one by one
        us = np.fromiter((v if _INT_LOW < v < _INT_HIGH else _INT_HIGH for v in values), np.int64, n)
    found = us * 1000
    found[(us <= _INT_LOW) | (us >= _INT_HIGH)] = INEXACT
    return found


def _float_micros(values: list, n: int) -> np.ndarray | None:
    try:
        us = np.fromiter(values, np.float64, n)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond any float (10**400)
        return None
    exact = np.abs(us) < _LIMIT  # NaN is not
    ns = np.rint(np.where(exact, us, 0) * 1000)
    found = ns.astype(np.int64)
    found[(ns / 1000 != us) | ~exact] = INEXACT
    return found


def text_micros_to_ns(values: list[str], n: int) -> np.ndarray:
    """Plain decimal text (an optional sign, digits, at most one point) to ns exactly, rounded
    half away from zero at the nanosecond as :func:`~tracemerge.core.units.decimal_text_to_int`
    does; every other text is INEXACT. Done on the texts' bytes side by side, one column of
    characters at a time."""
    try:
        raw = np.array(values, dtype="S")
    except UnicodeEncodeError:  # a text that is not ASCII (so no plain decimal): read the others
        ascii_rows = np.fromiter(map(str.isascii, values), bool, n)
        found = np.full(n, INEXACT, np.int64)
        found[ascii_rows] = text_micros_to_ns(list(itertools.compress(values, ascii_rows)), int(ascii_rows.sum()))
        return found
    width = raw.dtype.itemsize
    if not n or width > _TEXT_WIDTH:
        return np.full(n, INEXACT, np.int64)
    chars = raw.view(np.uint8).reshape(n, width)  # NUL after each text's end
    signed = (chars[:, 0] == _MINUS) | (chars[:, 0] == _PLUS)
    digit = (chars >= _ZERO) & (chars <= _NINE)
    point = chars == _POINT
    size = np.count_nonzero(chars, axis=1)
    column = np.arange(width)
    inside = column < size[:, None]
    plain = (digit | point | (column == 0) & signed[:, None]) | ~inside
    points = np.count_nonzero(point, axis=1)
    at = np.where(points == 1, np.argmax(point, axis=1), size)  # where the fraction starts
    # Each digit's power of ten in ns: 3 beyond its place before the point, less after it.
    power = np.where(column < at[:, None], at[:, None] - 1 - column + 3, 3 - (column - at[:, None]))
    counted = digit & (power >= 0)
    ints = np.where(counted, (chars - _ZERO).astype(np.uint64) * _POWERS[np.clip(power, 0, 19)], 0).sum(
        axis=1, dtype=np.uint64
    )
    ints += np.any(digit & (power == -1) & (chars >= _FIVE), axis=1)  # the first digit past ns: half up
    digits_before = at - signed
    ok = (
        plain.all(axis=1) & (points <= 1) & (size > signed) & (digits_before <= 16) & ~np.any(chars[:, :1] == 0, axis=1)
    )
    ok &= size - signed > points  # a lone sign or point is no number
    ok &= size == np.fromiter(map(len, values), np.int64, n)  # no NUL in a text (numpy ends it there)
    negative = chars[:, 0] == _MINUS
    ok &= np.where(negative, ints < np.uint64(-NS_MIN), ints < np.uint64(NS_MAX))  # what a trace holds
    found = ints.astype(np.int64)
    found[negative] *= -1
    found[~ok] = INEXACT
    return found
