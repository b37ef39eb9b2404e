"""Prometheus text-exposition snapshots (what an engine's ``/metrics`` page says at one moment).

Two shapes, parsed with ``prometheus_client``'s own parsers (the Prometheus text format, or
OpenMetrics when the text ends with ``# EOF``):

* one scrape per file (``*.prom``, or any file starting with ``# HELP``/``# TYPE``), as
  ``tracemerge scrape`` writes them: the scrape time is in the first line
  (``# tracemerge-scrape time_unix_ns=... url=...``), else in the file name (Unix time in s, ms,
  µs or ns, decimals allowed: ``1732900000123.prom``, ``1732900000.250.prom``); samples with a
  timestamp of their own keep it. A counter's rate over the interval a scrape starts needs the
  next scrape of the same directory (in the order of the times in their names), which is read
  for it.
* many scrapes in one JSONL file, one ``{"ts": <Unix seconds>, "text": "...", "url": "..."}``
  per line (``time_unix_ns`` instead of ``ts`` also works).

Like a Prometheus server, a scrape of ``url`` labels its series ``instance="host:port"``.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from tracemerge.core.errors import InputError, NotATrace, shown
from tracemerge.core.model import SourceData
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import NS_MAX, NS_MIN, checked_ns, decimal_text_to_int, seconds_to_ns
from tracemerge.sources.base import read_bytes
from tracemerge.sources.json.lines import JsonLines
from tracemerge.sources.metrics.families import NO_TIME, REST_LOST, UNREADABLE, exposition_families
from tracemerge.sources.metrics.recognise import SCRAPE_HEADER, SNAPSHOTS_NAME, is_snapshot
from tracemerge.sources.metrics.recognise import TEXT_NAME as NAME
from tracemerge.sources.metrics.series import COUNTER, GAUGE, MetricWriter, Series, untyped_kind
from tracemerge.store.file_layout import FileLayout

_HEADER_FIELD = re.compile(r"(\w+)=(\S+)")
# A Unix time in a file name (``1732900000.250.prom``), its unit told by how many whole digits
# it has: the decimals of a second that unit has.
_NAME_TIME = re.compile(r"^(\d+)(?:\.\d+)?(?:\.|$)", re.ASCII)
_NAME_TIME_DIGITS = {10: 9, 13: 6, 16: 3, 19: 0}
_COUNTER_PARTS = {"counter": None, "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}

Point = tuple[Series, int, float]


def instance_of(url: str) -> str:
    """``host:port`` of a scrape URL, as Prometheus labels its targets."""
    return url.split("://", 1)[-1].split("/", 1)[0]


def parse_snapshot(
    text: str, ts_ns: int | None, instance: str | None, dropped: Losses, first_line: int = 1
) -> list[Point]:
    """Every sample of one exposition, at its own time or ``ts_ns``; what cannot be drawn is counted
    (a bad line by its number in the file, where the text starts at ``first_line``)."""
    points: list[Point] = []
    for family in exposition_families(text, dropped, first_line):
        if family.type == "unknown" and untyped_kind(family.name) == GAUGE:
            dropped.add(Stat.METRIC_TYPE_UNKNOWN, len(family.samples), "metric of unknown type (drawn as a gauge)")
        for sample in family.samples:
            if sample.name.endswith("_created"):
                dropped.add(Stat.METRIC_CREATED_SAMPLE, 1, "metric creation-time sample (not drawn)")
                continue
            when = ts_ns if sample.timestamp is None else _sample_time(sample.timestamp)
            if when is None:
                if sample.timestamp is None:
                    dropped.add(Stat.METRIC_SNAPSHOT_WITHOUT_TIME, 1, NO_TIME)
                else:
                    dropped.add(Stat.METRIC_UNREADABLE, 1, "metric sample with unreadable time")
                continue
            labels = dict(sample.labels)
            if instance and "instance" not in labels:
                labels["instance"] = instance
            series = Series(sample.name, tuple(sorted(labels.items())), _kind(family.type, sample.name))
            points.append((series, when, float(sample.value)))
    return points


def _kind(family_type: str, sample: str) -> str:
    if family_type in _COUNTER_PARTS:
        parts = _COUNTER_PARTS[family_type]
        return COUNTER if parts is None or sample.endswith(parts) else GAUGE
    return untyped_kind(sample) if family_type == "unknown" else GAUGE


def _sample_time(value: Any) -> int | None:
    """A sample's own time in ns; None when it is no time a trace can hold (1e17 s, -1e17 s)."""
    try:
        if hasattr(value, "nsec"):  # OpenMetrics' Timestamp: seconds and nanoseconds, exact
            return checked_ns(value.sec * 1_000_000_000 + value.nsec)
        return seconds_to_ns(value)
    except (TypeError, ValueError):
        return None


def _draw(points: list[Point], metrics: MetricWriter, borrowed: frozenset[Series] = frozenset()) -> None:
    """Draws every series; the last sample of those in ``borrowed`` is the next scrape's."""
    by_series: dict[Series, list[tuple[int, float]]] = defaultdict(list)
    for series, ts, value in points:
        by_series[series].append((ts, value))
    for series, samples in by_series.items():
        metrics.add(series, samples, closing=series not in borrowed)


# -- one scrape per file ---------------------------------------------------------------------


class _Parsed(NamedTuple):
    points: tuple[Point, ...]
    dropped: Losses  # what the parse counted (copied by each read: the parse is cached)


def _parsed(path: Path) -> _Parsed:
    return _parse_scrape(path, read_bytes(path))


# A scrape is parsed for its own read and for the read of the scrape before it (the next values
# of that one's counters). Only the last parse is kept: read in order, each scrape is parsed once.
# The file's content is in the key: a file that changed is parsed again.
@functools.lru_cache(maxsize=1)
def _parse_scrape(path: Path, data: bytes) -> _Parsed:
    dropped = Losses()
    text, when, instance, first_line = _scrape(path, data, dropped)
    points = parse_snapshot(text, when, instance, dropped, first_line)
    return _Parsed(tuple(points), dropped)


def _scrape(path: Path, data: bytes, dropped: Losses) -> tuple[str, int | None, str | None, int]:
    """The scrape's text, time and instance, and the file line its text starts at."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None
    first, _, rest = text.partition("\n")
    fields, first_line = {}, 1
    if first.startswith(SCRAPE_HEADER):
        fields = dict(_HEADER_FIELD.findall(first))
        text, first_line = rest, 2  # ours, not the page's (OpenMetrics allows no other comments)
    when = _header_time(path, fields["time_unix_ns"], dropped) if "time_unix_ns" in fields else _name_time(path)
    url = fields.get("url")
    return text, when, instance_of(url) if url else None, first_line


def _header_time(path: Path, text: str, dropped: Losses) -> int | None:
    """The scrape time our header gives. One it cannot hold ("²", out of range) costs that value:
    counted, the scrape placed by the time in its name; InputError when its name gives none."""
    digits = text.isascii() and text.isdigit()  # "²" is a digit to Python, not to int()
    ns = int(text) if digits and len(text) <= 20 else None
    if ns is not None and NS_MIN < ns < NS_MAX:
        return ns
    reason = f"scrape time {'out of range' if digits else 'unreadable'} (time_unix_ns={shown(text[:40])})"
    instead = _name_time(path)
    if instead is None:
        raise InputError(path, reason)
    dropped.add(Stat.CLOCK_ANCHOR_UNREADABLE, 1, f"{reason}: placed by the time in its name")
    return instead


def _name_time(path: Path) -> int | None:
    found = _NAME_TIME.match(path.name)
    digits = _NAME_TIME_DIGITS.get(len(found.group(1))) if found else None
    if found is None or digits is None:
        return None
    ns = decimal_text_to_int(found.group(0).rstrip("."), digits)
    return ns if NS_MIN < ns < NS_MAX else None


def _next_scrape(path: Path) -> Path | None:
    """The scrape after this one in its directory: in the order of the times in their names
    (names without one after, shorter names first)."""
    try:
        names = _scrape_names(path.parent, path.suffix, path.parent.stat().st_mtime_ns)
    except OSError:
        return None
    n = bisect.bisect_right(names, _scrape_order(path.name))
    return path.parent / names[n][-1] if n < len(names) else None


def _scrape_order(name: str) -> tuple[bool, int, int, str]:
    when = _name_time(Path(name))
    return (when is None, when or 0, len(name), name)


# A directory of scrapes is listed once, not once per scrape (it holds one file per tick of a
# run); the modification time in the key lists it again if it changed.
@functools.lru_cache(maxsize=16)
def _scrape_names(directory: Path, suffix: str, mtime_ns: int) -> list[tuple[bool, int, int, str]]:
    return sorted(_scrape_order(p.name) for p in directory.iterdir() if p.suffix == suffix and p.is_file())


def read(path: Path, layout: FileLayout) -> SourceData:
    parsed = _parsed(path)
    points, dropped = list(parsed.points), parsed.dropped.copy()
    if not points:
        messages = dropped.messages_of(Stat.METRIC_UNREADABLE)
        unreadable = next((message for message in messages if message.startswith(UNREADABLE)), None)
        if unreadable:
            raise InputError(path, unreadable.replace(REST_LOST, ""))
        if dropped.count(Stat.METRIC_SNAPSHOT_WITHOUT_TIME):
            raise InputError(path, f"{NO_TIME} (no scrape header, no Unix time in its name)")
        if not dropped:
            raise NotATrace(path, "no metric samples")
    following = _next_scrape(path)
    borrowed: frozenset[Series] = frozenset()
    if following is not None:
        # The next scrape's counter values: each counter's rate over the interval this scrape starts.
        try:
            counters = {s for s, _, _ in points if s.kind == COUNTER}
            later = [p for p in _parsed(following).points if p[0] in counters]
        except (InputError, OSError):
            later = []  # that scrape is reported when it is read itself; this one is whole without it
        points += later
        borrowed = frozenset(series for series, _, _ in later)
    metrics = MetricWriter(layout, dropped)
    _draw(points, metrics, borrowed)
    return metrics.source_data(path, NAME)


# -- many scrapes in one JSONL file -----------------------------------------------------------


def _snapshot_time(obj: dict) -> int | None:
    if type(obj.get("time_unix_ns")) is int:
        ns = obj["time_unix_ns"]
        return ns if NS_MIN < ns < NS_MAX else None
    value = obj.get("ts", obj.get("time", obj.get("timestamp")))
    return None if value is None or type(value) is bool else _sample_time(value)


def read_snapshots(path: Path, layout: FileLayout) -> SourceData:
    dropped = Losses()
    points: list[Point] = []
    lines = JsonLines(read_bytes(path))
    for _, obj in lines:
        if not is_snapshot(obj):
            dropped.add(Stat.LINE_UNREADABLE, 1, "line is not a metrics snapshot")
            continue
        url = obj.get("url") or obj.get("target")
        instance = instance_of(url) if type(url) is str else None
        points += parse_snapshot(obj["text"], _snapshot_time(obj), instance, dropped)
    lines.account(path, dropped)
    metrics = MetricWriter(layout, dropped)
    _draw(points, metrics)
    return metrics.source_data(path, SNAPSHOTS_NAME)
