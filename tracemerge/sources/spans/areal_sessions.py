"""AReaL session-tracer records (``session_tracer/{role}/sessions-r{rank}.jsonl``).

One JSON object per rollout session: ``session_id``, ``rank``, ``role``, ``status`` and, per
phase (generate, reward, toolcall or custom), spans ``{"start_ts", "end_ts"}`` in seconds:
``time.time()`` wall clock since AReaL 2025-11, ``perf_counter`` before. Each phase span becomes a
slice on the rank's ``sessions`` thread, with the session's id and status as args. A phase left
open (``end_ts`` null, the session ended by an error) becomes an instant.

The records are also clock evidence: the rollout's perf-tracer spans that name a ``session_id``
are the same moments on the perf-tracer's clock (:mod:`tracemerge.evidence.anchors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.core.model import UNIX_EPOCH, ClockDomain, Event, Kind, SourceData, ThreadInfo, as_rank, rank_unreadable
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import seconds_to_ns
from tracemerge.evidence.anchors import session_tag
from tracemerge.sources.base import read_bytes
from tracemerge.sources.json.lines import JsonLines
from tracemerge.sources.spans.recognise import SESSIONS_NAME as NAME
from tracemerge.sources.spans.recognise import is_session_record
from tracemerge.store.file_layout import FileLayout

PERF_COUNTER_SECONDS = ClockDomain("perf_counter s, no wall-clock anchor", anchored=False)
THREAD = ("sessions",)
# Marks under this name give a session's submit time (record side of the session anchors).
SUBMIT = "@submit"
_EPOCH_S_FLOOR = 946_684_800  # 2000-01-01: seconds at or above are wall clock


def read(path: Path, layout: FileLayout) -> SourceData:
    dropped = Losses()
    epoch = None
    lines = JsonLines(read_bytes(path))
    for _, obj in lines:
        if not is_session_record(obj):
            dropped.add(Stat.LINE_UNREADABLE, 1, "line is not a session record")
            continue
        try:
            submit = seconds_to_ns(obj["submit_ts"])
        except (ValueError, TypeError):
            dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "session record with unreadable submit_ts")
            continue
        if epoch is None:
            epoch = submit >= _EPOCH_S_FLOOR * 1_000_000_000
        _add_record(obj, submit, layout, dropped)
    lines.account(path, dropped)
    return SourceData(
        path=path,
        format=NAME,
        clock=UNIX_EPOCH if epoch or epoch is None else PERF_COUNTER_SECONDS,
        threads={THREAD: ThreadInfo("sessions", (0, -2))},
        dropped=dropped,
    )


def _add_record(obj: dict, submit: int, layout: FileLayout, dropped: Losses) -> None:
    role = obj.get("role") if type(obj.get("role")) is str else None
    origin = (role, as_rank(obj.get("rank")))
    if rank_unreadable(obj.get("rank")):
        dropped.add(Stat.RANK_UNREADABLE, 1, "session record whose rank is not a rank: read without it")
    sid = obj["session_id"]
    args = {k: obj[k] for k in ("session_id", "task_id", "status", "reason") if obj.get(k) is not None}
    end = _seconds(obj.get("finalized_ts"))
    layout.mark(session_tag(sid, SUBMIT), origin, THREAD, submit, end if end is not None else submit)
    phases = obj.get("phases")
    spans = [] if type(phases) is not dict else [(p, v) for p, found in phases.items() for v in _listed(found)]
    if not spans:
        # Nothing ran (rejected, pending) or nothing readable: the record is an instant at submit.
        layout.add_event(Event(Kind.INSTANT, submit, THREAD, "session", "session", 0, args, origin))
        return
    for phase, span in spans:
        if type(span) is not dict or span.get("start_ts") is None:
            dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "session phase without start_ts")
            continue
        start = _seconds(span["start_ts"])
        if start is None:
            dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "session phase with unreadable start_ts")
            continue
        stop = _seconds(span.get("end_ts"))
        if stop is None and span.get("end_ts") is not None:
            dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "session phase with unreadable times (end_ts)")
            continue
        if stop is not None and stop < start:
            dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "session phase ending before it starts")
            continue
        kind = Kind.INSTANT if stop is None else Kind.SLICE
        dur = 0 if stop is None else stop - start
        # A session's phases are one sample's, many at once: no step phases (tracemerge.phases).
        layout.add_event(Event(kind, start, THREAD, str(phase), "session", dur, args, origin), note=False)
        layout.mark(session_tag(sid, f"@{phase}"), origin, THREAD, start, start + dur)


def _listed(spans: Any) -> list:
    return spans if type(spans) is list else [spans]


def _seconds(value: Any) -> int | None:
    if value is None or type(value) is bool:
        return None
    try:
        return seconds_to_ns(value)
    except (ValueError, TypeError):
        return None
