"""torch.profiler (Kineto) and other Chrome trace-event JSON files (``.json``, ``.json.gz``).

Accepts ``{"traceEvents": [...], ...}`` and bare event arrays, decoded in bounded batches
(:mod:`tracemerge.sources.json.stream`). Timestamps are µs: relative to ``baseTimeNanoseconds``
since torch 2.4 (Kineto writes it after the event array), absolute Unix µs before. The rank comes
from ``distributedInfo.rank`` when the file has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracemerge.core.errors import NotATrace
from tracemerge.core.model import ClockDomain, SourceData, as_rank, rank_unreadable
from tracemerge.core.stats import Stat
from tracemerge.core.units import checked_ns
from tracemerge.sources.base import host_of
from tracemerge.sources.chrome.events import ChromeEvents
from tracemerge.sources.chrome.files import read_events
from tracemerge.sources.chrome.recognise import NAME
from tracemerge.sources.chrome.schema import LenientEvent, TraceEvent
from tracemerge.store.file_layout import FileLayout

KINETO_BASE = ClockDomain("unix epoch (baseTimeNanoseconds)", anchored=True)


# Where a trace names its host: torch's host_name (hostName in some exports), Kineto's hostname.
HOST_KEYS = ("host_name", "hostName", "hostname")


def read(path: Path, layout: FileLayout) -> SourceData:
    reader = ChromeEvents(layout)
    meta = read_events(path, reader, TraceEvent, LenientEvent, layout.options.parts)
    produced = meta.get("metadata")
    if type(produced) is dict and produced.get("producer") == "tracemerge":
        raise NotATrace(path, "already a tracemerge output")
    reader.finish()
    base = meta.get("baseTimeNanoseconds")
    if type(base) is str and base.isascii() and base.isdigit():  # some writers quote it
        base = int(base)
    clock: ClockDomain | None = None
    origin = 0
    if type(base) is int:
        try:
            clock, origin = KINETO_BASE, checked_ns(base)
        except ValueError as exc:  # 10**30: out of range, said and not used like any other unreadable anchor
            reader.dropped.add(
                Stat.CLOCK_ANCHOR_UNREADABLE,
                1,
                f"baseTimeNanoseconds out of range ({exc}): the file is placed without it",
            )
    elif "baseTimeNanoseconds" in meta:  # "12abc", 1.7e18 (no ns in a float), a list: said, not used
        kind = {str: "text", float: "a float", list: "an array", dict: "an object"}.get(type(base), "null or a bool")
        reader.dropped.add(
            Stat.CLOCK_ANCHOR_UNREADABLE,
            1,
            f"baseTimeNanoseconds that is not an integer of ns ({kind}): the file is placed without it",
        )
    given = meta.get("distributedInfo")
    if type(given) is dict and rank_unreadable(given.get("rank")):
        reader.dropped.add(
            Stat.RANK_UNREADABLE, 1, f"distributedInfo.rank that is not a rank ({_brief(given['rank'])})"
        )
    return SourceData(
        path=path,
        format=NAME,
        clock=clock,
        threads=reader.threads(),
        origin_ns=origin,
        rank_hint=_rank(meta.get("distributedInfo")),
        host=host_of(next((meta[k] for k in HOST_KEYS if k in meta), None), path.name),
        pid=reader.own_pid(),
        dropped=reader.dropped,
        metadata_records=reader.metadata_records,
    )


def _brief(value: Any) -> str:
    """A value as a message shows it: its text, cut to 40 characters (a rank of 5,000 digits)."""
    text = getattr(value, "text", None) or repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text):,} characters)"


def _rank(info: Any) -> int | None:
    if type(info) is dict:
        return as_rank(info.get("rank"))
    return None
