"""Field values of Chrome trace events read as Perfetto's JSON importer reads them.

Pure functions of one value each, no state: thread ids as hashable keys (``"25738"`` and
``25738`` one thread), counter values as numbers (numbers written as text included, ``None`` for
what is not one), flow v2 ``bind_id`` / ``flow_in`` / ``flow_out`` as the importer compares
them, args raw JSON text as a plain dict, names as text, and the series a counter arg draws.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

# A bind_id as text: leading spaces (the only white space JSON text holds unescaped; Perfetto reads
# no id from a string with an escape), a sign, "0x" (alone it reads as 0), hexadecimal digits.
_HEX_ID = re.compile(r" *([+-]?)(?:0[xX]([0-9a-fA-F]*)|([0-9a-fA-F]+))")
_INT64, _UINT64 = 1 << 63, 1 << 64
# Numbers written as text, which Perfetto also draws as counter values.
NUMBER_TEXT = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")


def hashable_id(value: Any) -> Any:
    if type(value) is list or type(value) is dict:
        return str(value)
    if type(value) is str and value.isdigit() and (len(value) == 1 or value[0] != "0"):
        return int(value)  # Perfetto's JSON importer takes "25738" and 25738 for one thread
    return value


def as_counter_value(value: Any) -> int | float | None:
    """A counter arg's value as a number: a number, or a number written as text (Perfetto draws
    those too); None for anything else."""
    t = type(value)
    if t is float:
        return value
    if t is int:
        return value if -_INT64 <= value < _INT64 else _as_double(value)
    if t is str and NUMBER_TEXT.fullmatch(value):
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            return None
        return as_counter_value(int(value)) if value.lstrip("-").isdigit() else number
    return None


def _as_double(value: int) -> float | None:
    """An integer beyond int64 as the double a counter holds (both writers write it alike); None
    beyond any double (10**400)."""
    try:
        return float(value)
    except OverflowError:
        return None


_JSON_KINDS: dict[type, str] = {str: "text", list: "array", dict: "object"}


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    return _JSON_KINDS.get(type(value), type(value).__name__)


def as_flow_flag(value: Any) -> bool:
    """A flow_in / flow_out value as Perfetto's importer reads it: JSON true (1 and "true" are not)."""
    return value is True


def as_bind_id(value: Any) -> int | None:
    """A bind_id as Perfetto's importer reads it, as the unsigned 64-bit id it compares: an integer
    that fits 64 signed bits, or hexadecimal text; None for anything else (5.0 included)."""
    if type(value) is int:
        return value % _UINT64 if -_INT64 <= value < _INT64 else None
    if type(value) is str:
        return _hex_id(value)
    return None


def _hex_id(text: str) -> int | None:
    """Hexadecimal text as C's strtoull reads it whole (Perfetto's reading of a bind_id)."""
    match = _HEX_ID.fullmatch(text)
    if match is None:
        return None
    sign, prefixed, digits = match.groups()
    magnitude = int(prefixed or digits or "0", 16)
    if magnitude >= _UINT64:
        return _UINT64 - 1  # strtoull's value for one out of range, whatever its sign
    return -magnitude % _UINT64 if sign == "-" else magnitude


def counter_series(name: str, key: str) -> str:
    """The series one arg of a C event draws: ``<name> <key>``."""
    # "L2 Buffer Bw Level" with a value under that same key is one series, not its name twice.
    return name if key == name and " " in name else f"{name} {key}"


def plain_args(args: Any) -> dict | None:
    """An event's args as a dict of plain values (raw JSON text decoded)."""
    if type(args) is msgspec.Raw or type(args) is bytes:
        args = msgspec.json.decode(args) if args else None
    return args if type(args) is dict and args else None


def id_order(value: Any) -> tuple:
    """Sort key that orders ints numerically (negatives by magnitude) before anything else."""
    if type(value) is int:
        return (0, abs(value), value)
    return (1, 0, str(value))


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if type(value) is str else str(value)
