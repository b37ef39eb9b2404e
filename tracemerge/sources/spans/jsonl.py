"""Role/rank span logs, one JSON object per line (``*.jsonl``).

Two line shapes are read, and may be mixed in one file:

* Chrome trace events, as AReaL's perf tracer writes them
  (``perf_tracer/{role}/traces-r{rank}.jsonl``): ``ts``/``dur`` in integer µs from a per-process
  ``perf_counter`` origin, ``args.rank`` and ``args.role`` on every event.
* Generic spans, for any framework that logs spans (documented in the README)::

    {"name": "generate", "start": 1732900000.25, "end": 1732900003.5,
     "role": "rollout", "rank": 0, "thread": "engine", "cat": "phase", "args": {...}}

  Times are ``start``/``end``/``duration`` in seconds, ``start_ns``/``end_ns``/``duration_ns`` in
  integer nanoseconds, or ``ts``/``dur`` in microseconds. Values at Unix-epoch magnitude are wall
  clock; smaller ones are taken as a monotonic clock with no anchor. A line without an end is an
  instant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.core.model import ClockDomain, Event, Kind, SourceData, ThreadInfo, as_rank, rank_unreadable
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import FLOAT_EXACT_LIMIT_US, checked_ns, plain_json, seconds_to_ns, us_to_ns
from tracemerge.evidence.anchors import FRAMEWORK_STEPS, STEP_ARGS, framework_step, session_tag, step_tag
from tracemerge.sources.base import read_bytes
from tracemerge.sources.chrome.events import ChromeEvents
from tracemerge.sources.chrome.schema import ExactEvent, LenientEvent, NeedsExactTimes, TraceEvent
from tracemerge.sources.json.lines import JsonLines
from tracemerge.sources.spans.recognise import SPAN_STARTS, is_span_line
from tracemerge.sources.spans.recognise import SPANS_NAME as NAME
from tracemerge.store.file_layout import FileLayout

_EVENT = msgspec.json.Decoder(TraceEvent)
_LENIENT = msgspec.json.Decoder(LenientEvent)
_EXACT = msgspec.json.Decoder(ExactEvent)

PERF_COUNTER = ClockDomain("perf_counter µs, no wall-clock anchor", anchored=False)
MONOTONIC_SPANS = ClockDomain("monotonic, no wall-clock anchor", anchored=False)


def read(path: Path, layout: FileLayout) -> SourceData:
    chrome = ChromeEvents(layout)
    span_threads: dict[Any, ThreadInfo] = {}
    dropped = Losses()
    pid_origin: dict[Any, tuple[str | None, int | None]] = {}
    lines = JsonLines(read_bytes(path))
    for block in lines.blocks(_BLOCK):
        layout.check_memory()
        if _add_block(block, chrome, layout, pid_origin):
            continue
        for line, obj in lines.parsed(block):
            _add_line(line, obj, chrome, layout, pid_origin, span_threads, dropped)

    lines.account(path, dropped)
    chrome.finish()

    def origin_of(origin: tuple, thread: tuple) -> tuple:
        role, rank = origin
        if (role is None or rank is None) and thread and thread[0] != "span":
            p_role, p_rank = pid_origin.get(thread[0], (None, None))
            return (role if role is not None else p_role, rank if rank is not None else p_rank)
        return origin

    layout.regroup(origin_of)
    dropped.update(chrome.dropped)
    threads = chrome.threads()
    threads.update(span_threads)
    return SourceData(
        path=path,
        format=NAME,
        clock=None,  # Unix epoch when the times are that large (see SourceData)
        relative_clock=PERF_COUNTER if chrome.threads_seen or chrome.counter_threads else MONOTONIC_SPANS,
        threads=threads,
        dropped=dropped,
        metadata_records=chrome.metadata_records,
    )


def _add_line(
    line: bytes,
    obj: Any,
    chrome: ChromeEvents,
    layout: FileLayout,
    pid_origin: dict,
    span_threads: dict[Any, ThreadInfo],
    dropped: Losses,
) -> None:
    """One line, as its own value says: a Chrome event, a span, or neither (counted)."""
    if type(obj) is not dict:
        dropped.add(Stat.LINE_UNREADABLE, 1, "line is not a JSON object")
    elif "ph" in obj:
        origin = _chrome_origin(obj, pid_origin)
        ev: TraceEvent | LenientEvent | ExactEvent
        try:
            ev = _EVENT.decode(line)
        except msgspec.ValidationError:
            ev = _LENIENT.decode(line)
        try:
            chrome.add(ev, origin)
        except NeedsExactTimes:  # a float too large to hold its ns: its time from the text
            ev = _EXACT.decode(line)
            chrome.add(ev, origin)
        args = obj.get("args")
        if type(args) is dict and ev.ph == "X":
            if "session_id" in args:
                _note_session(args["session_id"], ev, origin, layout)
            _note_step(framework_step(tuple(args.get(key) for key in STEP_ARGS)), ev, origin, layout)
    elif is_span_line(obj):
        _add_span(obj, line, layout, span_threads, dropped)
    else:
        dropped.add(Stat.LINE_UNREADABLE, 1, "line is neither a trace event nor a span")


class _OriginArgs(msgspec.Struct, gc=False):
    """The args an AReaL event's origin and session are told by (the others are skipped)."""

    role: Any = None
    rank: Any = None
    name: Any = None
    session_id: Any = msgspec.UNSET
    global_step: Any = None  # the framework's step (tracemerge.evidence.anchors.STEP_ARGS)
    step: Any = None
    version: Any = None


class _LineView(msgspec.Struct, gc=False):
    """What a block of Chrome-event lines is read by beside the events: each one's origin and
    whether its times need their text. A line without ``ph`` or with args that are not an
    object fails the block, which is then read line by line."""

    ph: str
    name: Any = None
    pid: Any = None
    ts: Any = None
    dur: Any = None
    args: _OriginArgs | None = None


_BLOCK = 4096  # lines decoded together when every one is a Chrome event
_EVENTS = msgspec.json.Decoder(list[TraceEvent])
_VIEWS = msgspec.json.Decoder(list[_LineView])


def _add_block(block: list[tuple[int, bytes]], chrome: ChromeEvents, layout: FileLayout, pid_origin: dict) -> bool:
    """A block of lines that are all Chrome events, decoded at once and handed over as batches
    of one origin each (the column path); False, reading nothing, for any other block."""
    joined = b"[" + b",".join([line for _, line in block]) + b"]"
    try:
        views = _VIEWS.decode(joined)
        events = _EVENTS.decode(joined)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    if any(_inexact_float(v.ts) or _inexact_float(v.dur) for v in views):
        return False  # a time that needs its text: each line decodes it (see _add_line)
    origins = [_view_origin(v, pid_origin) for v in views]
    plain, binds = plain_json(joined), b'"bind_id"' in joined
    at = 0
    for origin, run in itertools.groupby(origins):
        n = sum(1 for _ in run)
        chrome.add_batch(events[at : at + n], origin, plain_text=plain, bind_ids=binds)
        for view, ev in zip(views[at : at + n], events[at : at + n], strict=True):
            args = view.args
            if args is not None and ev.ph == "X":
                if args.session_id is not msgspec.UNSET:
                    _note_session(args.session_id, ev, origin, layout)
                _note_step(framework_step((args.global_step, args.step, args.version)), ev, origin, layout)
        at += n
    return True


def _inexact_float(value: Any) -> bool:
    return type(value) is float and abs(value) >= FLOAT_EXACT_LIMIT_US


def _view_origin(view: _LineView, pid_origin: dict) -> tuple[str | None, int | None]:
    """:func:`_chrome_origin` of a decoded line."""
    args = view.args
    said = (args.role, args.rank, args.name) if args is not None else None
    return _origin(view.ph, view.name, view.pid, said, pid_origin)


def _note_session(session_id: Any, ev: Any, origin: tuple, layout: FileLayout) -> None:
    """A perf-tracer span of a rollout session: clock evidence against the session records."""
    try:
        start, dur = us_to_ns(ev.ts), us_to_ns(ev.dur)
    except (ValueError, TypeError):
        return  # the span itself is counted as unreadable by the event reader
    layout.mark(session_tag(session_id, str(ev.name)), origin, (ev.pid, ev.tid), start, start + dur)


def _note_step(step: int | None, ev: Any, origin: tuple, layout: FileLayout) -> None:
    """A span the framework says belongs to ``step``: the phases count the step by it."""
    if step is None:
        return
    try:
        start, dur = us_to_ns(ev.ts), us_to_ns(ev.dur)
    except (ValueError, TypeError):
        return  # the span itself is counted as unreadable by the event reader
    layout.mark(step_tag(FRAMEWORK_STEPS, str(step)), origin, (ev.pid, ev.tid), start, start + dur)


def _chrome_origin(obj: dict, pid_origin: dict) -> tuple[str | None, int | None]:
    """(role, rank) from the event's args; remembered per pid for the events that lack them."""
    args = obj.get("args")
    said = (args.get("role"), args.get("rank"), args.get("name")) if type(args) is dict else None
    return _origin(obj.get("ph"), obj.get("name"), obj.get("pid"), said, pid_origin)


def _origin(
    ph: Any, name: Any, pid: Any, args: tuple[Any, Any, Any] | None, pid_origin: dict
) -> tuple[str | None, int | None]:
    """(role, rank) from the ``role``, ``rank`` and ``name`` args (None: no args object) of an
    event ``ph`` named ``name``; remembered for ``pid``, for its events that lack them."""
    role = rank = None
    if args is not None:
        arg_role, arg_rank, arg_name = args
        role = arg_role if type(arg_role) is str else None
        rank = as_rank(arg_rank)
        if ph == "M" and name == "process_name":
            role, rank = _process_name_origin(arg_name)
    if (role is not None or rank is not None) and type(pid) is not list and type(pid) is not dict:
        known_role, known_rank = pid_origin.get(pid, (None, None))
        pid_origin[pid] = (known_role or role, known_rank if known_rank is not None else rank)
    return (role, rank)


def _process_name_origin(name: Any) -> tuple[str | None, int | None]:
    """AReaL names its processes ``"[role] Rank 3, Process"`` or ``"Rank 3, Process"``."""
    if type(name) is not str:
        return (None, None)
    role = None
    text = name.strip()
    if text.startswith("[") and "]" in text:
        role, text = text[1 : text.index("]")], text[text.index("]") + 1 :].strip()
    rank = None
    if text.startswith("Rank "):
        rank = as_rank(text[5:].split(",")[0])
    return (role, rank)


def _add_span(obj: dict, line: bytes, layout: FileLayout, threads: dict, dropped: Losses) -> None:
    try:
        start, end = _span_times(line)
    except (ValueError, TypeError):
        dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "span with unreadable times")
        return
    if end is not None and end < start:
        dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, "span ending before it starts")
        return
    role = obj.get("role") if type(obj.get("role")) is str else None
    origin = (role, as_rank(obj.get("rank")))
    if rank_unreadable(obj.get("rank")):
        dropped.add(Stat.RANK_UNREADABLE, 1, "span whose rank is not a rank: read without it")
    thread = obj.get("thread", obj.get("tid", "main"))
    if type(thread) not in (int, str):
        thread = str(thread)
    key = ("span", thread)
    if key not in threads:
        name = thread if type(thread) is str else f"thread {thread}"
        threads[key] = ThreadInfo(name, (0, -1, 0, (0 if type(thread) is int else 1, str(thread))))
    args = obj.get("args") if type(obj.get("args")) is dict and obj.get("args") else None
    cat = obj.get("cat", obj.get("category", ""))
    cat = cat if type(cat) is str else str(cat)
    kind = Kind.INSTANT if end is None else Kind.SLICE
    layout.add_event(Event(kind, start, key, obj["name"], cat, 0 if end is None else end - start, args, origin))
    step = framework_step(tuple(args.get(k) for k in STEP_ARGS)) if args is not None and end is not None else None
    if step is not None and end is not None:  # a span the framework says belongs to that step
        layout.mark(step_tag(FRAMEWORK_STEPS, str(step)), origin, key, start, end)


def _span_times(line: bytes) -> tuple[int, int | None]:
    """A span's start and end in ns, from the numbers' text (a float would lose nanoseconds)."""
    times = _time_texts(line)
    for start_key, end_key, duration_key, to_ns in _TIME_KEYS:
        if times.get(start_key) is None:
            continue
        start = to_ns(times[start_key])
        if end_key and times.get(end_key) is not None:
            return start, to_ns(times[end_key])
        if times.get(duration_key) is not None:
            return start, checked_ns(start + to_ns(times[duration_key]))
        return start, None
    raise ValueError("no start time")


_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _time_texts(line: bytes) -> dict[str, str | None]:
    """The line's time keys as text: a number as written, a string's value, None for null."""
    texts: dict[str, str | None] = {}
    for key, raw in _TOP_LEVEL.decode(line).items():
        if key in _TIME_KEY_NAMES:
            text = bytes(raw)
            texts[key] = None if text == b"null" else msgspec.json.decode(text) if text[:1] == b'"' else text.decode()
    return texts


def _int_ns(value: Any) -> int:
    if type(value) is int:
        return checked_ns(value)
    if type(value) is str and value.strip().lstrip("-").isdigit():
        return checked_ns(int(value))
    raise ValueError(f"not integer nanoseconds: {value!r}")


# A span's (start, end, duration) keys and their unit, in the order they are looked for.
_TIME_KEYS: tuple[tuple[str, str | None, str, Callable[[Any], int]], ...] = (
    ("start_ns", "end_ns", "duration_ns", _int_ns),
    ("start", "end", "duration", seconds_to_ns),
    ("ts", None, "dur", us_to_ns),
)
_TIME_KEY_NAMES = frozenset(key for keys in _TIME_KEYS for key in keys[:3] if key)
assert tuple(keys[0] for keys in _TIME_KEYS) == SPAN_STARTS  # what a line is recognised by
