"""Nsight Systems: SQLite exports (``nsys export --type sqlite``, schema 3.24–3.25) and ``.nsys-rep``
reports, exported to one first.

An export's event times are integer ns since the capture session started; the session's wall
clock is ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, so that is the file's ``origin_ns`` on a
Unix-epoch clock (without it the file keeps a clock of its own, placed by the alignment). One
report may hold several processes of a job (torchrun under one nsys: one per GPU); each becomes
the process of its rank:

- the ``RANK`` (else ``LOCAL_RANK``) of the captured environment (``META_DATA_CAPTURE``), for every
  process of the report (a verl worker under Ray's nsight plugin is one rank);
- else the GPU each process used, when the report's processes used different GPUs;
- else what the path says (the file name, e.g. verl's ``[<role>_]<host>_worker_process_<pid>``).

The host is ``TARGET_INFO_SYSTEM_ENV``'s ``Hostname``. The host tables are read by
:mod:`~tracemerge.sources.nsys.tables`, the device tables by :mod:`~tracemerge.sources.nsys.gpu`;
rows of the other event tables are counted here by table. A report (``.nsys-rep``) is exported
by ``nsys`` when it is on PATH, into a private temporary folder removed afterwards; without
``nsys`` it is named with the command that exports it (:data:`tracemerge.naming.paths.NEEDS_EXPORT`);
beside its own export (``X.sqlite``, or the JSON-lines ``X.jsonl``, next to ``X.nsys-rep``) it is
read through that export. :func:`read_rows` reads an export's tables from an SQLite database: the
export itself, a report's export, or the rows of a JSON-lines export
(:mod:`tracemerge.sources.nsys.jsonl`).

Every query names only this package's own table and column constants, once the export is seen to
have them: nothing read from the file becomes SQL.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracemerge.core.errors import InputError, NotATrace, shown
from tracemerge.core.model import ClockDomain, OriginKey, SourceData, ThreadInfo, ThreadKey, as_rank
from tracemerge.core.stats import Losses, Stat
from tracemerge.naming.paths import needs_export
from tracemerge.sources.nsys.gpu import read_device
from tracemerge.sources.nsys.recognise import DB_NAME as NAME
from tracemerge.sources.nsys.recognise import EXPORT_SUFFIX, JSONL_SUFFIX, REPORT_SUFFIX, export_beside
from tracemerge.sources.nsys.schema import (
    API_TABLES,
    CUDA_EVENT,
    GPU_METRICS,
    GPU_TABLES,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    OVERHEAD_TABLES,
    SYNC,
    Schema,
    pid_of,
    shown_id,
    tid_of,
)
from tracemerge.sources.nsys.tables import NsysReader
from tracemerge.sources.sqlite.opening import opened
from tracemerge.store.file_layout import FileLayout

NSYS_CLOCK = ClockDomain("unix epoch (nsys session start)", anchored=True)
SESSION_CLOCK = ClockDomain("ns since the nsys capture started, no session start time", anchored=False)
# Tables whose presence makes an SQLite file an nsys export.
NSYS_TABLES = (NVTX, KERNEL, MEMCPY, MEMSET, "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_SESSION_START_TIME")
ENV_ROW = re.compile(r"^PROCESS_\d+:ENVIRONMENT_VARIABLE$")
RANK_VARIABLES = ("RANK", "LOCAL_RANK")  # in this order
NULL_STREAM = 3  # ENUM_CUPTI_STREAM_TYPE: the legacy default stream
READ = frozenset({NVTX, KERNEL, MEMCPY, MEMSET, SYNC, CUDA_EVENT, GPU_METRICS, *OVERHEAD_TABLES, *dict(API_TABLES)})
# Event tables counted, not drawn (info: no event of the job's timeline), with why.
NOT_DRAWN = {
    "DIAGNOSTIC_EVENT": "nsys's own messages",
    "COMPOSITE_EVENTS": "CPU samples",
    "SCHED_EVENTS": "thread scheduling",
}
# Event tables known to hold events this reader does not draw: counted as not read.
NOT_READ = (
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
    "CUDA_GRAPH_NODE_EVENTS",
    "CUDA_UM_CPU_PAGE_FAULT_EVENTS",
    "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
    "GPU_CONTEXT_SWITCH_EVENTS",
    "MPI_P2P_EVENTS",
    "MPI_COLLECTIVES_EVENTS",
    "MPI_START_WAIT_EVENTS",
    "MPI_OTHER_EVENTS",
    "UCP_SUBMIT_EVENTS",
    "UCP_PROGRESS_EVENTS",
    "UCP_EVENTS",
    "OPENMP_EVENTS",
)

# -- the format ------------------------------------------------------------------------------------


def read(path: Path, layout: FileLayout) -> SourceData:
    if not path.name.endswith(REPORT_SUFFIX):
        return read_rows(path, path, layout)
    beside = export_beside(path)
    if beside is not None:
        raise NotATrace(path, f"read through its export beside it, {shown(beside.name)}")
    with _exported(path, layout.store.directory) as db:
        return read_rows(path, db, layout)


@contextmanager
def _exported(report: Path, work: Path | None) -> Iterator[Path]:
    """The report exported by ``nsys`` into a private temporary folder (under ``work``, removed
    afterwards): nothing is written beside the report."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(report, needs_export(report) or "nsys is not on PATH")
    with tempfile.TemporaryDirectory(prefix=".tracemerge-nsys-", dir=work) as tmp:
        out = Path(tmp) / f"report{EXPORT_SUFFIX}"
        command = [nsys, "export", "--type", "sqlite", "--output", str(out), str(report.resolve())]
        try:
            done = subprocess.run(
                command, cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace"
            )
        except OSError as exc:
            raise InputError(report, f"cannot run nsys export: {exc.strerror or exc}") from None
        if done.returncode != 0 or not out.is_file():
            said = (done.stderr or done.stdout).strip().splitlines()
            last = shown(said[-1]) if said else "no output"
            raise InputError(report, f"nsys export failed (exit status {done.returncode}): {last}")
        yield out


def read_rows(path: Path, db: Path, layout: FileLayout, format_name: str = NAME) -> SourceData:
    """The export ``path`` read from the SQLite database ``db`` that holds its tables (the export
    itself, or what a report or a JSON-lines export was turned into)."""
    with opened(db, layout.store.directory) as con:
        try:
            schema = Schema(con)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # a query stopped: the guard of opened says why
            raise InputError(path, f"not a readable SQLite database ({exc})") from None
        if not any(t in schema.tables for t in NSYS_TABLES):
            form = "SQLite database" if format_name == NAME else "JSON-lines export"
            raise NotATrace(path, f"{form} without Nsight Systems tables")
        try:
            place = Placement(schema)
            reader = NsysReader(schema, layout, place)
            reader.read_host()
            read_device(reader)
            _count_not_read(schema, reader.dropped)
            threads = track_names(reader)
            bad_text = con.bad_text
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # a query stopped: the guard of opened says why
            raise InputError(path, f"cannot read the database ({exc})") from None
    dropped = reader.dropped
    if reader.not_captured:
        why = "launched before the capture" if reader.launches else "the export has no CUDA runtime calls"
        dropped.add(
            Stat.NSYS_LAUNCH_NOT_CAPTURED,
            reader.not_captured,
            f"nsys GPU work whose CUDA runtime call is not in the export ({why}): no flow",
        )
    if place.unreadable_ranks:
        dropped.add(
            Stat.NSYS_VALUE_UNREADABLE,
            place.unreadable_ranks,
            "nsys META_DATA_CAPTURE RANK or LOCAL_RANK that is no rank (not ASCII digits, or too many): "
            "the rank comes from the GPUs or the path",
        )
    if bad_text:
        dropped.add(Stat.DB_TEXT_NOT_UTF8, bad_text, "nsys text not valid UTF-8, read with U+FFFD for each bad byte")
    if place.session_start is None:
        dropped.add(
            Stat.NSYS_SESSION_START_MISSING,
            1,
            "nsys export without a session start time (TARGET_INFO_SESSION_START_TIME): its times count from "
            "the capture's start, placed by the clock alignment",
        )
    report = path.with_suffix(REPORT_SUFFIX)
    if path.suffix in (EXPORT_SUFFIX, JSONL_SUFFIX) and report.is_file():
        dropped.add(Stat.NSYS_REPORT_READ_AS_EXPORT, 1, f"nsys report read through this export: {shown(report.name)}")
    return SourceData(
        path=path,
        format=format_name,
        clock=SESSION_CLOCK if place.session_start is None else NSYS_CLOCK,
        threads=threads,
        origin_ns=place.session_start or 0,
        host=place.host,
        dropped=dropped,
        metadata_records=reader.metadata_records,
    )


def _count_not_read(schema: Schema, dropped: Losses) -> None:
    for table, why in NOT_DRAWN.items():
        if rows := schema.count(table):
            dropped.add(Stat.NSYS_ROWS_NOT_DRAWN, rows, f"nsys {table} rows not drawn ({why})")
    for table in NOT_READ:
        if rows := schema.count(table):
            dropped.add(
                Stat.NSYS_ROWS_NOT_READ, rows, f"nsys {table} rows not read (tracemerge does not draw this table)"
            )
    known = READ | set(NOT_DRAWN) | set(NOT_READ)
    for table, columns in sorted(schema.tables.items()):
        if table not in known and ("start" in columns or "timestamp" in columns):
            dropped.add(
                Stat.NSYS_ROWS_NOT_READ,
                1,
                f"nsys table {shown(table)} not read (unknown to tracemerge; its rows are not counted)",
            )


# -- who wrote what --------------------------------------------------------------------------------


class Placement:
    """Where an export's events go: its wall clock, its host, and each process's rank."""

    def __init__(self, schema: Schema) -> None:
        self.session_start = _session_start(schema)
        self.host = next(
            (
                v.strip()
                for n, v in schema.rows("TARGET_INFO_SYSTEM_ENV", ("name", "value"))
                if n == "Hostname" and type(v) is str
            ),
            None,
        )
        self.env_rank, self.unreadable_ranks = _env_rank(schema)
        # per process and per CUDA context, its GPUs by the number of rows of GPU work on each
        used: dict[int, Counter[int]] = {}
        contexts: dict[tuple[int, Any], Counter[int]] = {}
        for table in GPU_TABLES:
            if schema.has(table, "globalPid", "deviceId"):
                cols = ("globalPid", "contextId", "deviceId")
                for gpid, context, device, n in schema.con.execute(
                    schema.select(table, cols, extra=("count(*)",), tail=" group by 1, 2, 3")
                ):
                    if type(gpid) is int and type(device) is int:
                        used.setdefault(pid_of(gpid), Counter())[device] += n
                        contexts.setdefault((pid_of(gpid), context), Counter())[device] += n
        self.gpus = {pid: found.most_common(1)[0][0] for pid, found in sorted(used.items())}
        # a synchronization's GPU (CUPTI records none for it), and a CUDA event's: its context's
        self.contexts = {key: found.most_common(1)[0][0] for key, found in contexts.items()}
        distinct = len(set(self.gpus.values())) == len(self.gpus)
        self.gpu_ranks = self.gpus if distinct else {}
        self._origins: dict[int | None, OriginKey] = {}

    def origin(self, pid: int | None) -> OriginKey:
        """(role, rank) of a process as the export says: the role is the path's to give."""
        found = self._origins.get(pid)
        if found is None:
            rank = self.env_rank if self.env_rank is not None else self.gpu_ranks.get(pid)  # type: ignore[arg-type]
            found = self._origins[pid] = (None, rank)
        return found

    def device_origin(self, device: Any) -> OriginKey:
        """The process of the rank that used ``device`` (a GPU's own counters go there)."""
        return self.origin(next((p for p, d in self.gpus.items() if d == device), None))


def _session_start(schema: Schema) -> int | None:
    for (utc,) in schema.rows("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs",)):
        if type(utc) is int and utc > 0:
            return utc
    return None


def _env_rank(schema: Schema) -> tuple[int | None, int]:
    """``RANK`` (else ``LOCAL_RANK``) of the captured environment (rows ``KEY="value"``), and how
    many of those variables held no rank (``RANK="²"``)."""
    found: dict[str, int] = {}
    unreadable = 0
    for name, value in schema.rows("META_DATA_CAPTURE", ("name", "value")):
        if type(name) is str and ENV_ROW.match(name) and type(value) is str:
            key, eq, text = value.partition("=")
            if key not in RANK_VARIABLES or not eq:
                continue
            rank = as_rank(text.strip().strip('"'))
            if rank is None:
                unreadable += 1
            else:
                found.setdefault(key, rank)
    return next((found[k] for k in RANK_VARIABLES if k in found), None), unreadable


def track_names(reader: NsysReader) -> dict[ThreadKey, ThreadInfo]:
    """Names of the tracks read: ``CPU thread <tid> (<name>)``, ``GPU <d> stream <s>``, ``GPU <d>
    stream <s> sync``, ``NVTX ranges across threads``, ``Profiler overhead (thread <tid>)``, with
    `` · pid <pid>`` when a rank's process holds several of the report's processes."""
    schema = reader.schema
    thread_names: dict[tuple[int, int], Any] = {}
    for name_id, gtid in schema.rows("ThreadNames", ("nameId", "globalTid")):
        if type(gtid) is int:
            thread_names[(pid_of(gtid), tid_of(gtid))] = name_id  # a thread renamed: its last name
        reader.metadata_records += 1
    processes: dict[Any, str] = {}
    for pid, name in schema.rows("PROCESSES", ("pid", "name")):
        if type(name) is str:
            processes[pid] = name.rsplit("/", 1)[-1]
        reader.metadata_records += 1
    null_streams = {
        (pid, stream)
        for pid, stream, flag in schema.rows("TARGET_INFO_CUDA_STREAM", ("processId", "streamId", "flag"))
        if flag == NULL_STREAM
    }
    pids: dict[OriginKey, set] = defaultdict(set)
    for origin, pid in reader.tracks.values():
        if pid is not None:
            pids[origin].add(pid)
    infos = {}
    for key, (origin, pid) in reader.tracks.items():
        kind, a, b, *rest = (*key, None)
        if kind == "cpu":
            given = reader.string(thread_names[(a, b)]) if (a, b) in thread_names else None
            given = given or (processes.get(a) if a == b else None)
            name = f"CPU thread {shown_id(b)}" + (f" ({given})" if given else "")
            order: tuple = (0, a if a is not None else -1, 0 if a == b else 1, _order(b))
        elif kind == "nvtx":
            name, order = "NVTX ranges across threads", (0, a if a is not None else -1, 2, (1, 0, ""))
        elif kind in ("gpu", "sync"):
            stream = rest[0]
            name = f"GPU {shown_id(b)}" + ("" if stream is None else f" stream {stream}")
            if kind == "sync":
                name += " sync"
            elif (a, stream) in null_streams:
                name += " (null stream)"
            order = (1, str(b).zfill(8), _order(stream), kind)
        elif kind == "overhead":
            name, order = f"Profiler overhead (thread {shown_id(b)})", (2, "overhead", _order(a), _order(b))
        else:
            name, order = f"GPU {shown_id(a)}", (3, "metrics", _order(a))  # its counters: "GPU <d>: <metric>"
        if len(pids[origin]) > 1 and pid is not None:
            name += f" · pid {pid}"
        infos[key] = ThreadInfo(name, order)
    return infos


def _order(value: Any) -> tuple:
    """Sort key that orders ints numerically before anything else (as Kineto's threads sort)."""
    if type(value) is int:
        return (0, abs(value), value)
    return (1, 0, str(value))
