"""What recognises the JSON-lines logs of spans, sessions and tracker scalars by their first
object, without their readers (:mod:`tracemerge.sources.spans.jsonl`,
:mod:`~tracemerge.sources.spans.areal_sessions`, :mod:`~tracemerge.sources.spans.tracker_scalars`),
which take each line by the same tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.sources.base import SourceFormat
from tracemerge.sources.json.lines import first_json_object, opens_chrome_trace

SPANS_NAME, SESSIONS_NAME, SCALARS_NAME = "jsonl-spans", "areal-sessions", "tracker-scalars"
# The keys a span's start is under, one per unit (the start keys of the span log's times, in
# the order its reader looks for them).
SPAN_STARTS = ("start_ns", "start", "ts")
_SESSION_KEYS = ("session_id", "submit_ts")
STEP_KEYS = ("step", "global_step", "_step")
# Keys that mark another line format than tracker scalars (trace events, spans, sessions, metric snapshots).
_OTHER_FORMATS = ("ph", "name", "session_id", "text", "traceEvents")


def is_span_line(obj: dict) -> bool:
    return type(obj.get("name")) is str and any(key in obj for key in SPAN_STARTS)


def spans_claim(path: Path, head: bytes) -> bool:
    if opens_chrome_trace(head):
        return False  # a Chrome trace file written one event per line, not JSON lines
    obj = first_json_object(head, path)
    if obj is None or "traceEvents" in obj:
        return False
    return type(obj.get("ph")) is str or is_span_line(obj)


def is_session_record(obj: Any) -> bool:
    return type(obj) is dict and all(k in obj for k in _SESSION_KEYS) and "ph" not in obj


def sessions_claim(path: Path, head: bytes) -> bool:
    return is_session_record(first_json_object(head, path))


def step_of(obj: dict) -> int | None:
    for key in STEP_KEYS:
        value = obj.get(key)
        if type(value) is int and value >= 0:
            return value
        if type(value) is float and value.is_integer() and value >= 0:
            return int(value)
    return None


def is_scalars_record(obj: Any) -> bool:
    return type(obj) is dict and step_of(obj) is not None and not any(k in obj for k in _OTHER_FORMATS)


def scalars_claim(path: Path, head: bytes) -> bool:
    return is_scalars_record(first_json_object(head, path))


JSONL_SPANS = SourceFormat(SPANS_NAME, "tracemerge.sources.spans.jsonl", spans_claim)
AREAL_SESSIONS = SourceFormat(SESSIONS_NAME, "tracemerge.sources.spans.areal_sessions", sessions_claim)
TRACKER_SCALARS = SourceFormat(SCALARS_NAME, "tracemerge.sources.spans.tracker_scalars", scalars_claim)
