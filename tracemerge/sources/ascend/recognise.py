"""What recognises an Ascend profiling export (the text timeline, the DB) and what its folders
say, without the readers (:mod:`tracemerge.sources.ascend.text`, :mod:`tracemerge.sources.ascend.db`)."""

from __future__ import annotations

from pathlib import Path

from tracemerge.sources.ascend import dirs
from tracemerge.sources.ascend.dirs import SQLITE_MAGIC
from tracemerge.sources.ascend.run_metadata import metadata_of
from tracemerge.sources.base import SourceFormat

TEXT_NAME, DB_NAME = "ascend-text", "ascend-db"


def text_claim(path: Path, head: bytes) -> bool:
    # By name and place alone: an export damaged past reading is still reported, not passed over.
    return dirs.is_text_export(path)


def db_claim(path: Path, head: bytes) -> bool:
    # At an export's place by name alone (damaged, it is reported); elsewhere by its SQLite header.
    return dirs.is_timeline_db(path) and (head.startswith(SQLITE_MAGIC) or dirs.is_export_db(path))


ASCEND_TEXT = SourceFormat(
    TEXT_NAME,
    "tracemerge.sources.ascend.text",
    text_claim,
    dirs.path_hints,
    dirs.unusable_reason,
    metadata_of,
)
ASCEND_DB = SourceFormat(DB_NAME, "tracemerge.sources.ascend.db", db_claim, dirs.path_hints)
