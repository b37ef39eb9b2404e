"""What recognises an Nsight Systems file (a report, its SQLite export, its JSON-lines export),
without the readers (:mod:`tracemerge.sources.nsys.db`, :mod:`tracemerge.sources.nsys.jsonl`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tracemerge.sources.ascend.dirs import SQLITE_MAGIC
from tracemerge.sources.base import SourceFormat, read_head
from tracemerge.sources.nsys.schema import is_jsonl_export

DB_NAME, JSONL_NAME = "nsys-db", "nsys-jsonl"
REPORT_SUFFIX, EXPORT_SUFFIX, JSONL_SUFFIX = ".nsys-rep", ".sqlite", ".jsonl"
# Names of an export's tables a head of the file may show.
_HEAD_HINTS = (b"CUPTI_ACTIVITY_KIND_", b"NVTX_EVENTS", b"TARGET_INFO_SESSION_START_TIME")


def db_claim(path: Path, head: bytes) -> bool:
    if path.name.endswith(REPORT_SUFFIX):
        return export_beside(path) is not None or shutil.which("nsys") is not None
    return head.startswith(SQLITE_MAGIC) and (path.suffix == EXPORT_SUFFIX or any(h in head for h in _HEAD_HINTS))


def export_beside(report: Path) -> Path | None:
    """``X.sqlite`` beside the report ``X.nsys-rep``, else ``X.jsonl`` when it is an nsys
    JSON-lines export: its export, as ``nsys export`` names it."""
    stem = report.name[: -len(REPORT_SUFFIX)]
    found = report.with_name(stem + EXPORT_SUFFIX)
    if found.is_file():
        return found
    lines = report.with_name(stem + JSONL_SUFFIX)
    try:
        return lines if lines.is_file() and is_jsonl_export(lines, read_head(lines)) else None
    except OSError:
        return None


def jsonl_claim(path: Path, head: bytes) -> bool:
    return is_jsonl_export(path, head)


NSYS_DB = SourceFormat(DB_NAME, "tracemerge.sources.nsys.db", db_claim)
NSYS_JSONL = SourceFormat(JSONL_NAME, "tracemerge.sources.nsys.jsonl", jsonl_claim)
