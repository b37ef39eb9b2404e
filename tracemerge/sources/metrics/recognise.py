"""What recognises the metric formats (Prometheus query results, scrapes, scrapes as JSON lines),
without their readers (:mod:`tracemerge.sources.metrics.query_range`,
:mod:`tracemerge.sources.metrics.exposition`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tracemerge.sources.base import SourceFormat
from tracemerge.sources.json.lines import first_json_object

QUERY_NAME, TEXT_NAME, SNAPSHOTS_NAME = "prometheus-query", "prometheus-text", "prometheus-snapshots"
SCRAPE_HEADER = "# tracemerge-scrape"
SUFFIX = ".prom"
_MARKERS = (b'"resultType"', b'"result"')
_TEXT_STARTS = (b"# HELP ", b"# TYPE ", SCRAPE_HEADER.encode())


def query_claim(path: Path, head: bytes) -> bool:
    start = head.lstrip()[:1]
    return start in (b"{", b"[") and (all(m in head for m in _MARKERS) or _is_error_response(head))


def _is_error_response(head: bytes) -> bool:
    """A failed query's whole response (small: it is all in the head)."""
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError:
        return False
    return type(doc) is dict and doc.get("status") == "error" and "errorType" in doc


def text_claim(path: Path, head: bytes) -> bool:
    first = next((line for line in head.split(b"\n") if line.strip()), b"")
    return first.startswith(_TEXT_STARTS) or (path.suffix == SUFFIX and not first.startswith((b"{", b"[")))


def is_snapshot(obj: Any) -> bool:
    return type(obj) is dict and type(obj.get("text")) is str and "ph" not in obj and "name" not in obj


def snapshots_claim(path: Path, head: bytes) -> bool:
    return is_snapshot(first_json_object(head, path))


PROMETHEUS_QUERY = SourceFormat(QUERY_NAME, "tracemerge.sources.metrics.query_range", query_claim)
PROMETHEUS_TEXT = SourceFormat(TEXT_NAME, "tracemerge.sources.metrics.exposition", text_claim)
PROMETHEUS_SNAPSHOTS = SourceFormat(
    SNAPSHOTS_NAME, "tracemerge.sources.metrics.exposition", snapshots_claim, function="read_snapshots"
)
