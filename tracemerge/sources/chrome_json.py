"""torch.profiler (Kineto) and other Chrome trace-event JSON files (``.json``, ``.json.gz``).

Accepts ``{"traceEvents": [...], ...}`` and bare event arrays. Timestamps are µs: relative to
``baseTimeNanoseconds`` since torch 2.4, absolute Unix µs before. The rank comes from
``distributedInfo.rank`` when the file has one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from tracemerge.errors import InputError, NotATrace
from tracemerge.model import UNIX_EPOCH, ClockDomain, SourceData
from tracemerge.sources.base import SourceFormat, line_col, read_bytes
from tracemerge.sources.chrome_events import ChromeEvents
from tracemerge.units import FLOAT_EXACT_LIMIT_US, us_to_ns

NAME = "chrome-json"
# Absolute Unix µs are at least this large (1973); smaller values without a base are relative.
_EPOCH_US_FLOOR = 10**14
_TS_NUMBER = re.compile(rb'("(?:ts|dur)"\s*:\s*)(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)')
_EVENT_HINT = re.compile(rb'"ph"\s*:\s*"')

RELATIVE_NO_ANCHOR = ClockDomain("relative µs, no wall-clock anchor", anchored=False)
KINETO_BASE = ClockDomain("unix epoch (baseTimeNanoseconds)", anchored=True)


def claims(path: Path, head: bytes) -> bool:
    text = head.lstrip()
    if text.startswith(b"{"):
        return b'"traceEvents"' in head or (b'"schemaVersion"' in head and path.name.endswith((".json", ".json.gz")))
    if text.startswith(b"["):
        return _EVENT_HINT.search(head) is not None
    return False


def parse_json(path: Path, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON ({exc.msg})", line_col(data, exc.pos)) from None


def read(path: Path) -> SourceData:
    data = read_bytes(path)
    top = parse_json(path, data)
    events, meta = _event_list(path, top)
    if _needs_exact_reparse(events):
        # Float timestamps this large lost their nanoseconds in parsing: read them from the text.
        top = parse_json(path, _TS_NUMBER.sub(rb'\1"\2"', data))
        events, meta = _event_list(path, top)
        data = b""

    base = meta.get("baseTimeNanoseconds")
    if type(base) is int:
        clock = KINETO_BASE

        def to_ns(v: Any) -> int:
            return base + us_to_ns(v)
    else:
        clock = UNIX_EPOCH if _looks_absolute(events) else RELATIVE_NO_ANCHOR
        to_ns = us_to_ns

    reader = ChromeEvents(to_ns, us_to_ns)
    add = reader.add
    for e in events:
        add(e)
    reader.finish()
    return SourceData(
        path=path,
        format=NAME,
        clock=clock,
        events=reader.events,
        threads=reader.threads(),
        rank_hint=_rank(meta.get("distributedInfo")),
        dropped=reader.dropped,
        metadata_records=reader.metadata_records,
    )


def _event_list(path: Path, top: Any) -> tuple[list, dict]:
    if type(top) is list:
        return top, {}
    if type(top) is dict:
        meta = top.get("metadata")
        if type(meta) is dict and meta.get("producer") == "tracemerge":
            raise NotATrace(path, "already a tracemerge output")
        events = top.get("traceEvents")
        if type(events) is list:
            return events, top
        if events is None:
            raise NotATrace(path, "JSON object without traceEvents")
        raise InputError(path, "traceEvents is not an array")
    raise NotATrace(path, "JSON value is neither a trace object nor an event array")


def _needs_exact_reparse(events: list) -> bool:
    for e in events:
        if type(e) is dict:
            ts = e.get("ts")
            if type(ts) is float and abs(ts) >= FLOAT_EXACT_LIMIT_US:
                return True
    return False


def _looks_absolute(events: list) -> bool:
    for e in events:
        if type(e) is dict and e.get("ph") != "M":
            ts = e.get("ts")
            if type(ts) in (int, float):
                return abs(ts) >= _EPOCH_US_FLOOR
            if type(ts) is str:
                try:
                    return abs(us_to_ns(ts)) >= _EPOCH_US_FLOOR * 1000
                except ValueError:
                    continue
    return False


def _rank(info: Any) -> int | None:
    if type(info) is dict:
        return as_rank(info.get("rank"))
    return None


def as_rank(value: Any) -> int | None:
    """A rank from an int or a numeric string; None for anything else."""
    if type(value) is int and value >= 0:
        return value
    if type(value) is str and value.strip().isdigit():
        return int(value)
    return None


CHROME_JSON = SourceFormat(NAME, claims, read)
