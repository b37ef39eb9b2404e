"""Input formats. Each module recognises its files and reads them into :class:`SourceData`.

A new format is a new module with a :class:`~tracemerge.sources.base.SourceFormat` object added to
:data:`FORMATS`; nothing else changes. Order matters: the first format that claims a file wins.
"""

from __future__ import annotations

from tracemerge.sources.ascend.db import ASCEND_DB
from tracemerge.sources.ascend.text import ASCEND_TEXT
from tracemerge.sources.base import SourceFormat, read_bytes, read_head
from tracemerge.sources.chrome.format import CHROME_JSON
from tracemerge.sources.metrics.exposition import PROMETHEUS_SNAPSHOTS, PROMETHEUS_TEXT
from tracemerge.sources.metrics.query_range import PROMETHEUS_QUERY
from tracemerge.sources.nsys.db import NSYS_DB
from tracemerge.sources.nsys.jsonl import NSYS_JSONL
from tracemerge.sources.spans.areal_sessions import AREAL_SESSIONS
from tracemerge.sources.spans.jsonl import JSONL_SPANS
from tracemerge.sources.spans.tracker_scalars import TRACKER_SCALARS

FORMATS: tuple[SourceFormat, ...] = (
    ASCEND_TEXT,
    ASCEND_DB,
    NSYS_DB,
    NSYS_JSONL,
    PROMETHEUS_QUERY,
    PROMETHEUS_TEXT,
    PROMETHEUS_SNAPSHOTS,
    AREAL_SESSIONS,
    TRACKER_SCALARS,
    JSONL_SPANS,
    CHROME_JSON,
)

__all__ = ["FORMATS", "SourceFormat", "read_bytes", "read_head"]
