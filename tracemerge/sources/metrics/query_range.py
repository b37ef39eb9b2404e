"""Prometheus HTTP API query results (``/api/v1/query_range``, ``/api/v1/query``) saved as JSON.

A file holds one response as the API returns it (``{"status": "success", "data": {"resultType":
"matrix", "result": [{"metric": {...}, "values": [[1732900000.25, "3"], ...]}]}}``), several of
them (a JSON array, one per line, or an object mapping each query to its response), or an
instant ``vector``. Each series becomes a counter track (:mod:`tracemerge.sources.metrics.series`);
sample times are Unix-epoch seconds, so the file needs no clock alignment. Series without a
metric name (the result of an expression) are named after their query when the file says it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tracemerge.core.errors import InputError, NotATrace
from tracemerge.core.model import SourceData
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import seconds_to_ns
from tracemerge.sources.base import read_bytes
from tracemerge.sources.json.lines import JsonLines
from tracemerge.sources.metrics.recognise import QUERY_NAME as NAME
from tracemerge.sources.metrics.series import MetricWriter, Series, untyped_kind
from tracemerge.store.file_layout import FileLayout


def _responses(data: bytes, path: Path, dropped: Losses) -> list[tuple[str | None, Any]]:
    """(query or None, response) for every response in the file; in a file of one response per
    line, a line that is not JSON is counted in ``dropped`` and the others are read."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        lines = JsonLines(data)
        values = [value for _, value in lines]
        found: list[tuple[str | None, Any]] = [(None, r) for r in values if _is_response(r)]
        if not found:
            # One document, damaged (the lines of a pretty-printed one are not responses).
            raise InputError(path, f"not JSON ({exc})") from None
        lines.account(path, dropped)
        # A line `5`, `"x"` or a list among the responses: that line is lost, not the file.
        dropped.add(Stat.LINE_UNREADABLE, len(values) - len(found), "line is JSON but not a query response")
        return found
    if type(doc) is list:
        return [(None, r) for r in doc]
    if type(doc) is dict and ("data" in doc or "status" in doc):
        return [(None, doc)]
    if type(doc) is dict:
        return [(str(q), r) for q, r in doc.items()]
    raise NotATrace(path, "not a Prometheus query response")


def _is_response(value: Any) -> bool:
    """Whether a line of a file of responses holds one (an object with its data or status)."""
    return type(value) is dict and ("data" in value or "status" in value)


def read(path: Path, layout: FileLayout) -> SourceData:
    dropped = Losses()
    metrics = MetricWriter(layout, dropped)
    responses = _responses(read_bytes(path), path, dropped)
    results = 0
    failure = None
    for query, response in responses:
        data = response.get("data") if type(response) is dict else None
        if type(data) is not dict or type(data.get("result")) is not list:
            status = response.get("status") if type(response) is dict else None
            dropped.add(Stat.METRIC_UNREADABLE, 1, f"query response without a result (status {status})")
            if failure is None and status == "error":
                failure = f"{response.get('errorType', 'error')}: {response.get('error', '')}".strip(": ")
            continue
        kind = data.get("resultType")
        if kind not in ("matrix", "vector"):
            dropped.add(Stat.METRIC_UNREADABLE, 1, f"query result of type {kind} (not a series)")
            continue
        for series in data["result"]:
            results += 1
            _add_series(series, query, metrics, dropped)
    if not results and failure is not None:
        raise InputError(path, f"the query failed ({failure[:200]})")
    if not results and not dropped:
        raise NotATrace(path, "no query result in the file")
    return metrics.source_data(path, NAME)


def _add_series(series: Any, query: str | None, metrics: MetricWriter, dropped: Losses) -> None:
    if type(series) is not dict or type(series.get("metric", {})) is not dict:
        dropped.add(Stat.METRIC_UNREADABLE, 1, "query result entry that is not a series")
        return
    labels = {str(k): str(v) for k, v in series.get("metric", {}).items()}
    name = labels.pop("__name__", None) or query or "query result"
    if "histograms" in series or "histogram" in series:
        found = series.get("histograms") or [series.get("histogram")]
        dropped.add(Stat.METRIC_UNREADABLE, len(found), "metric samples of a native histogram (not drawn)")
    raw = series.get("values") if "values" in series else [series["value"]] if "value" in series else []
    if not raw and ("histograms" in series or "histogram" in series):
        return
    samples = []
    for point in raw if type(raw) is list else []:
        try:
            ts, value = point
            samples.append((seconds_to_ns(ts), float(value)))
        except (TypeError, ValueError):
            dropped.add(Stat.METRIC_UNREADABLE, 1, "metric sample with unreadable time or value")
    metrics.add(Series(name, tuple(sorted(labels.items())), untyped_kind(name)), samples)
