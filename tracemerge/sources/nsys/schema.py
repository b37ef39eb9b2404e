"""What every reader of an Nsight Systems export shares: the names of its tables, their columns as
SQLite's catalogue gives them, and the ids packed in its global thread and process ids.

:class:`Schema` answers which tables and columns the export has and builds the queries that read
them: a table or column name in a query is always one of the readers' constants, checked to be an
identifier (:func:`_check`), and a column the table lacks is read as NULL. :func:`pid_of` and
:func:`tid_of` take the OS ids out of a global id; :func:`present` and :func:`shown_id` are the
small readings of row values the readers share; :func:`is_jsonl_export` recognises a JSON-lines
export (``nsys export --type jsonlines``) by its first row, for its reader and for a report's.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tracemerge.core.units import NS_MAX, NS_MIN
from tracemerge.sources.json.lines import first_json_object

NVTX, RUNTIME = "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC, CUDA_EVENT = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
GPU_METRICS = "GPU_METRICS"
# The GPU work tables: where each process's GPU comes from.
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)
# Host API tables drawn as slices on their thread: (table, category).
API_TABLES = ((RUNTIME, "cuda_runtime"), ("OSRT_API", "osrt"), ("CUBLAS_EVENTS", "cublas"), ("CUDNN_EVENTS", "cudnn"))
OVERHEAD_TABLES = ("PROFILER_OVERHEAD", "CUPTI_ACTIVITY_KIND_OVERHEAD")
# GPU work a runtime call's flow may go to.
FLOW_TABLES = (KERNEL, MEMCPY, MEMSET, SYNC)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PID_BITS = 0xFFFFFF
# A table's rows, and what to do with each: read with others, merged by start time.
Source = tuple[Iterable[tuple], Callable[[tuple], None]]


def _check(*names: str) -> None:
    for name in names:
        if not _IDENT.fullmatch(name):
            raise ValueError(f"not an identifier: {name!r}")


class Schema:
    """The export's tables and columns, read through SQLite's catalogue (table names are bound
    values there, never SQL). Queries name only this module's constants, checked against it."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tables: dict[str, set[str]] = {}
        # virtual tables left out: their module's code would run (an export has none)
        rows = con.execute(
            "select m.name, p.name from sqlite_master as m join pragma_table_info(m.name) as p"
            " where m.type = 'table' and coalesce(m.sql, '') not like 'create virtual%'"
        )
        for table, column in rows:
            self.tables.setdefault(table, set()).add(column)

    def has(self, table: str, *columns: str) -> bool:
        found = self.tables.get(table)
        return found is not None and all(c in found for c in columns)

    def column(self, table: str, name: str, alias: str = "") -> str:
        """``name`` of ``table`` as a query expression: NULL when the table lacks it."""
        _check(table, name)
        return f'{alias}"{name}"' if name in self.tables.get(table, ()) else "NULL"

    def select(
        self, table: str, columns: Sequence[str], alias: str = "", extra: Sequence[str] = (), tail: str = ""
    ) -> str:
        _check(table)
        cols = [self.column(table, c, f"{alias}." if alias else "") for c in columns]
        return f'select {", ".join([*cols, *extra])} from "{table}"' + (f" as {alias}" if alias else "") + tail

    def rows(self, table: str, columns: Sequence[str], tail: str = "") -> Iterator[tuple]:
        """The table's rows as they are fetched (a cursor); none when the export lacks the table."""
        return self.con.execute(self.select(table, columns, tail=tail)) if table in self.tables else iter(())

    def count(self, table: str) -> int:
        _check(table)
        return self.con.execute(f'select count(*) from "{table}"').fetchone()[0] if table in self.tables else 0

    def labels(self, table: str, known: dict[int, str]) -> dict[int, str]:
        """An ENUM_* table's labels, over ``known`` ones."""
        found = dict(known)
        for key, label in self.rows(table, ("id", "label")):
            if type(key) is int and type(label) is str:
                found[key] = label
        return found


def pid_of(global_id: int) -> int:
    """The OS pid in an nsys global thread or process id."""
    return (global_id >> 24) & _PID_BITS


def tid_of(global_tid: int) -> int:
    return global_tid & _PID_BITS


def pid_or_none(gid: Any) -> int | None:
    return pid_of(gid) if type(gid) is int else None


def times_ok(start: Any, end: Any) -> bool:
    """Whether a row's start and end are integer ns a trace can hold (:data:`tracemerge.core.units.NS_MIN`
    to ``NS_MAX``), the end not before the start: else the row is dropped, counted (``bad_time``)."""
    return type(start) is int and type(end) is int and NS_MIN < start <= end < NS_MAX


def present(args: dict) -> dict:
    return {k: v for k, v in args.items() if v is not None}


def shown_id(value: Any) -> str:
    return "?" if value is None else str(value)


TABLE_KEY = "table"
# Names an nsys export gives its tables: one of these, or a name with one of the prefixes.
KNOWN_TABLES = frozenset(
    {"StringIds", "ThreadNames", "PROCESSES", "NVTX_EVENTS", "ANALYSIS_DETAILS", "GPU_METRICS", "OSRT_API"}
    | {"PROFILER_OVERHEAD", "CUBLAS_EVENTS", "CUDNN_EVENTS", "DIAGNOSTIC_EVENT", "COMPOSITE_EVENTS", "SCHED_EVENTS"}
)
KNOWN_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "META_DATA_", "ENUM_")


def is_jsonl_export(path: Path, head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts a JSON-lines export: its first object is a
    row of a table an nsys export has."""
    obj = first_json_object(head, path)
    return obj is not None and is_nsys_table(obj.get(TABLE_KEY))


def is_nsys_table(name: Any) -> bool:
    return type(name) is str and (name in KNOWN_TABLES or name.startswith(KNOWN_PREFIXES))
