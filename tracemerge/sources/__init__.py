"""Input formats, declared as data: each format's name, the module that reads it, and what
recognises its files (:class:`~tracemerge.sources.base.SourceFormat`).

What recognises a family's files is a small module of its own (``recognise.py``): discovery asks
every format of every file, and needs none of the readers for that. A format's reading module is
imported when a file of the format is read (:meth:`SourceFormat.reader`), so a run of Chrome JSON
files loads no Ascend, nsys or metrics reader.

A new format is a reading module and a :class:`SourceFormat` declared in its family's
``recognise.py``, added to :data:`FORMATS`; nothing else changes. Order matters: the first format
that claims a file wins.
"""

from __future__ import annotations

from tracemerge.sources.ascend.recognise import ASCEND_DB, ASCEND_TEXT
from tracemerge.sources.base import SourceFormat, read_bytes, read_head
from tracemerge.sources.chrome.recognise import CHROME_JSON
from tracemerge.sources.metrics.recognise import PROMETHEUS_QUERY, PROMETHEUS_SNAPSHOTS, PROMETHEUS_TEXT
from tracemerge.sources.nsys.recognise import NSYS_DB, NSYS_JSONL
from tracemerge.sources.spans.recognise import AREAL_SESSIONS, JSONL_SPANS, TRACKER_SCALARS

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
