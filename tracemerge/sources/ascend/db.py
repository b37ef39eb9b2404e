"""Ascend DB exports: ``ascend_pytorch_profiler_{rank}.db`` (torch_npu), ``ascend_mindspore_profiler_{rank}.db``
(MindSpore) and msprof's ``msprof_*.db``.

All times are integer ns of the Unix epoch (``PYTORCH_API`` keeps them as TEXT). Names and enums go
through ``STRING_IDS``. Column sets differ between versions, so every table is read by the
columns it has. Timeline tables and where their rows go:

- ``PYTORCH_API`` → ``Python · Thread N``; ``CANN_API`` → ``CANN · Thread N``;
- ``TASK`` → ``Ascend Hardware · Stream N``, named by ``COMPUTE_TASK_INFO`` /
  ``COMMUNICATION_TASK_INFO`` / an MSTX message, else the task type; communication tasks also on
  ``HCCL · Plane N``; ``COMMUNICATION_OP`` → ``HCCL · Group N Communication``;
- ``OVERLAP_ANALYSIS`` → ``Overlap · Computing`` etc.; ``MSTX_EVENTS`` → ``MSTX``;
  ``GC_RECORD`` → ``Python GC`` (slices named ``GC``, as the text export draws them);
- ``MEMORY_RECORD`` / ``OP_MEMORY`` (CSVs in the text export, not in its timeline): rows counted;
- every table with a ``timestampNs`` column → counter tracks (``ascend_counters``): the metric tables
  scaled as the text export draws them and titled as its tracks are (``ascend_titles``), any other
  one series per numeric column; a series of zeros only is left out (counted);
- flows: ``CANN_API`` → ``TASK`` by connectionId (HostToDevice), ``PYTORCH_API`` → ``TASK`` through
  ``CONNECTION_IDS`` (torch_to_npu), and forward → backward ops sharing a connection id (fwdbwd).

A DB is never changed, and nothing is created beside it: one with a ``-wal`` or ``-journal`` file
is read from a private copy (see :func:`~tracemerge.sources.sqlite.opening.opened`). A row that
cannot be read is counted under its table, the rest of the DB is read.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

from tracemerge.core.errors import InputError, NotATrace
from tracemerge.core.model import Event, FlowPhase, Kind, SourceData, ThreadInfo, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.evidence.anchors import DEVICE_COMM, MSTX, ascend_task_tag, device_tag, phase_tag
from tracemerge.sources.ascend import dirs, exports
from tracemerge.sources.ascend.counters import CounterReading, counter_group
from tracemerge.sources.ascend.db_links import Groups, Once, TaskInfo
from tracemerge.sources.ascend.db_rows import DbRows
from tracemerge.sources.ascend.dirs import MSTX_THREAD
from tracemerge.sources.ascend.recognise import DB_NAME as NAME
from tracemerge.sources.ascend.titles import OVERLAP, leave_out_zero_series, slice_title
from tracemerge.sources.sqlite.guard import quote, schema
from tracemerge.sources.sqlite.opening import opened
from tracemerge.store.file_layout import FileLayout

OVERLAP_TYPES: dict[object, str] = {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"}
MSTX_POINT_TYPES = frozenset({0, 3})  # marker, marker_ex
FWD_BWD_CONNECTION = 5 << 28  # connection ids at or above this link forward and backward ops
# Columns that hold STRING_IDS references.
STRING_COLUMNS = frozenset(
    {
        "name",
        "opName",
        "groupName",
        "taskType",
        "opType",
        "algType",
        "inputFormats",
        "inputDataTypes",
        "inputShapes",
        "outputFormats",
        "outputDataTypes",
        "outputShapes",
        "attrInfo",
        "inputDtypes",
        "message",
        "domainId",
        "hf32Eligible",
    }
)
# Task detail columns a task's args leave out.
TASK_INFO_NOT_ARGS = frozenset({"name", "globalTaskId", "depth", "waitNs"})
TIMELINE_TABLES = frozenset(
    {"TASK", "COMMUNICATION_OP", "CANN_API", "PYTORCH_API", "MSTX_EVENTS", "OVERLAP_ANALYSIS", "GC_RECORD"}
)
# connectionId values that link nothing: "no device link" in older CANN (UINT32_MAX) and
# msprof's id for a legacy tx marker without a mark (DEFAULT_CONNECTION_ID_MSTX).
NO_CONNECTION = frozenset({4294967295, 4000000000})
# Tables the text export keeps in CSVs, out of its timeline: their rows are counted, not drawn.
NOT_DRAWN = ("MEMORY_RECORD", "OP_MEMORY")


def read(path: Path, layout: FileLayout) -> SourceData:
    exports.check_read_here(path)
    exports.check_export(path)
    with opened(path, layout.store.directory) as con:
        try:
            tables = schema(con)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # stopped: guarded() says why
            raise InputError(path, f"not a readable SQLite database ({exc})") from None
        if not TIMELINE_TABLES & set(tables):
            raise NotATrace(path, "SQLite database without Ascend timeline tables")
        try:
            reader = _DbReader(con, tables, layout)
            reader.read_all()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # stopped: guarded() says why
            raise InputError(path, f"cannot read the database ({exc})") from None
        reader.dropped.add(Stat.DB_TEXT_NOT_UTF8, con.bad_text, "Ascend DB text not valid UTF-8, read with U+FFFD")
    leave_out_zero_series(layout, reader.dropped, counter_group)
    exports.note_not_read(path, reader.dropped)
    data = dirs.source_data(path, NAME, reader.thread_infos(), reader.dropped, rank=reader.rank)
    data.host = reader.host or data.host
    return data


class _DbReader(DbRows, CounterReading):
    def __init__(self, con: sqlite3.Connection, tables: dict[str, list[str]], layout: FileLayout) -> None:
        self.con = con
        self.tables = tables
        self.layout = layout
        self.emitted = 0
        self.dropped = Losses()
        self.names: dict[ThreadKey, tuple[str, tuple]] = {}
        self.strings: dict[int, str] = dict(self._rows("STRING_IDS", ("id", "value")))
        self.rank: int | None = None
        self.host = next((str(name) for (name,) in self._rows("HOST_INFO", ("hostName",)) if name), None)
        self.devices: set[int] = set()
        # (start, track number) of the tasks each connection id links, for flows; the tracks by number
        self.tasks_by_connection = Groups(2)
        self.task_tracks: dict[ThreadKey, int] = {}
        self.task_track_keys: list[ThreadKey] = []
        self.mstx_by_connection: dict[int, str] = {}

    # -- tables --------------------------------------------------------------------------------

    def read_all(self) -> None:
        for rank, device in self._rows("RANK_DEVICE_MAP", ("rankId", "deviceId")):
            if isinstance(rank, int) and rank >= 0:
                self.rank = rank
            if device is not None and (device := self._id(device, "RANK_DEVICE_MAP", "deviceId")) is not None:
                self.devices.add(device)
        self._mstx()
        self._tasks()
        self._communication_ops()
        self._cann_api()
        self._pytorch_api()
        self._overlap()
        self._gc()
        self._counters(TIMELINE_TABLES)
        self._not_drawn()

    def _mstx(self) -> None:
        kinds = self._enum("ENUM_MSTX_EVENT_TYPE")
        if not self._has_columns("MSTX_EVENTS", "startNs"):
            return
        for row in self._dicts("MSTX_EVENTS"):
            message = str(self._text(row.get("message")))
            domain = str(self._text(row.get("domainId")) or "")
            connection = row.get("connectionId")
            if connection is not None and connection not in NO_CONNECTION:
                self.mstx_by_connection[connection] = message
            args = {"event_type": kinds.get(row.get("eventType"), row.get("eventType")), "domain": domain}
            key = self._track(MSTX_THREAD, "MSTX", (3, "MSTX", 0, ""))
            if row.get("eventType") in MSTX_POINT_TYPES:
                self._instant(key, row.get("startNs"), message, domain, args, "MSTX_EVENTS")
            else:
                ev = self._slice(key, row.get("startNs"), row.get("endNs"), message, domain, args, "MSTX_EVENTS")
                if ev is not None:  # an MSTX range is a phase its user named
                    self.layout.mark(phase_tag(MSTX, message), ev.origin, key, ev.ts, ev.ts + ev.dur)

    def _task_info(self, table: str) -> TaskInfo:
        """Rows of a task detail table by globalTaskId (as tuples: a dict a row would take several
        times their memory); a row without one names no task: counted."""
        cols = self.tables.get(table, [])
        found = {}
        at = cols.index("globalTaskId") if "globalTaskId" in cols else None
        for row in self._rows(table):
            task = row[at] if at is not None else None
            if task is None:
                self.dropped.add(
                    Stat.TASK_INFO_UNJOINED, 1, f"{table} row without a globalTaskId (its task keeps its type as name)"
                )
            else:
                found[task] = row
        return TaskInfo(cols, found, TASK_INFO_NOT_ARGS, STRING_COLUMNS)

    def _tasks(self) -> None:
        self._task_rows(self._task_info("COMPUTE_TASK_INFO"), self._task_info("COMMUNICATION_TASK_INFO"))
        self.tasks_by_connection.seal()
        self.task_track_keys = list(self.task_tracks)

    def _task_rows(self, compute: TaskInfo, comm: TaskInfo) -> None:
        # A communication op's own task on its stream (typed AI_CORE, the op's whole time) is HCCL's too.
        op_connections = {c for (c,) in self._rows("COMMUNICATION_OP", ("connectionId",)) if c not in NO_CONNECTION}
        if not self._has_columns("TASK", "startNs", "endNs"):
            return
        for row in self._dicts("TASK"):
            device = self._id(row.get("deviceId"), "TASK", "deviceId")
            if device is None:
                continue
            self.devices.add(device)
            stream = row.get("streamId")
            task_type = self._text(row.get("taskType"))
            task_id = row.get("globalTaskId")
            planes = comm.rows.get(task_id)
            table, info = compute, compute.rows.get(task_id)
            if info is None:  # a communication task's details, if any
                table, info = comm, planes
            connection = row.get("connectionId")
            if connection in NO_CONNECTION:
                connection = None
            if info is not None:
                name = str(self._text(None if table.name_at is None else info[table.name_at]))
            elif connection in self.mstx_by_connection:
                name = self.mstx_by_connection[connection]
            else:
                name = str(task_type)
            args = {
                "Task Type": task_type,
                "Stream Id": stream,
                "Task Id": row.get("taskId"),
                "connection_id": row.get("connectionId"),
            }
            if info is not None:
                for at, col, text in table.args:
                    if (value := info[at]) is not None:
                        args[col] = self._text(value) if text else value
            key = self._track(("stream", device, stream), f"Ascend Hardware · Stream {stream}", (4, device, stream, ""))
            ev = self._slice(key, row.get("startNs"), row.get("endNs"), name, "", args, "TASK")
            if ev is None:
                continue
            hccl = planes is not None or connection in op_connections or device_tag(name) == DEVICE_COMM
            tag = ascend_task_tag(task_type, hccl)
            if tag is not None:
                self.layout.mark(tag, ev.origin, key, ev.ts, ev.ts + ev.dur)
                self.layout.tally(ev.origin, key, name, ev.ts, ev.dur)
            if connection is not None:
                track = self.task_tracks.setdefault(ev.thread, len(self.task_tracks))
                self.tasks_by_connection.add(connection, ev.ts, track)
            if planes is not None:
                plane = None if comm.plane_at is None else planes[comm.plane_at]
                if plane is not None and self._id(plane, "COMMUNICATION_TASK_INFO", "planeId") is None:
                    continue  # its task is drawn on its stream
                pkey = self._track(("plane", device, plane), f"HCCL · Plane {plane}", (5, device, 1 + (plane or 0), ""))
                self._slice(pkey, row.get("startNs"), row.get("endNs"), name, "", args, "TASK")

    def _communication_ops(self) -> None:
        rows = list(self._dicts("COMMUNICATION_OP"))  # read twice: group names first
        groups = {name: n for n, name in enumerate(sorted({str(self._text(r.get("groupName"))) for r in rows}))}
        default_device = min(self.devices) if self.devices else 0
        for row in rows:
            group = str(self._text(row.get("groupName")))
            device = self._id(row.get("deviceId") or None, "COMMUNICATION_OP", "deviceId", default_device)
            if device is None:
                continue
            n = groups[group]
            key = self._track(("group", device, n), f"HCCL · Group {n} Communication", (5, device, 0, ""))
            args = {
                col: (self._text(v) if col in STRING_COLUMNS else v)
                for col, v in row.items()
                if col not in ("opName", "startNs", "endNs", "waitNs") and v is not None
            }
            self._slice(
                key,
                row.get("startNs"),
                row.get("endNs"),
                str(self._text(row.get("opName"))),
                "",
                args,
                "COMMUNICATION_OP",
            )

    def _cann_api(self) -> None:
        types = self._enum("ENUM_API_TYPE")
        linked = Once(self.tasks_by_connection)  # a connection links its tasks from one host call: the first
        for row in self._dicts("CANN_API"):
            tid = self._id(row.get("globalTid"), "CANN_API", "globalTid")
            if tid is None:
                continue
            tid &= 0xFFFFFFFF
            key = self._track(("cann", tid), f"CANN · Thread {tid}", (2, "CANN", tid, ""))
            args = {"type": types.get(row.get("type"), row.get("type")), "connection_id": row.get("connectionId")}
            ev = self._slice(
                key, row.get("startNs"), row.get("endNs"), str(self._text(row.get("name"))), "", args, "CANN_API"
            )
            if ev is not None and row.get("connectionId") is not None:
                self._link("HostToDevice", "CANN_API", row["connectionId"], ev, linked)

    def _link(self, cat: str, table: str, connection: int, ev: Event, linked: Once) -> None:
        """Flows from a host call to the device tasks of its connection: one per task, from the first
        call naming the connection (rows that share one with an earlier row are counted), so that N
        rows sharing an id make N flows at most, not N x N."""
        found = self.tasks_by_connection.find(connection)
        if found is None:
            return
        at, tasks = found
        if not linked.take(connection, at):
            shared = f"{table} row sharing a connectionId with an earlier one (its tasks linked from it)"
            self.dropped.add(Stat.CONNECTION_SHARED, 1, shared)
            return
        tracks = self.task_track_keys
        for n, (ts, track) in enumerate(tasks):
            self._flow(cat, (connection, n), (ev.ts, ev.thread), (ts, tracks[track]))

    def _pytorch_api(self) -> None:
        links = Groups(1)
        for link_id, connection in self._rows("CONNECTION_IDS", ("id", "connectionId")):
            if connection is None or isinstance(connection, (str, bytes)):
                self.dropped.add(Stat.LINK_UNREADABLE, 1, "CONNECTION_IDS row whose connectionId is NULL or text")
                continue
            links.add(link_id, connection)
        links.seal()
        fwd_bwd: dict[int, list[tuple[int, ThreadKey]]] = defaultdict(list)
        linked = Once(self.tasks_by_connection)
        claimed = Once(links)  # link ids taken by a row: one shared by N rows is followed once
        for row in self._dicts("PYTORCH_API"):
            tid = self._id(row.get("globalTid"), "PYTORCH_API", "globalTid")
            if tid is None:
                continue
            tid &= 0xFFFFFFFF
            key = self._track(("python", tid), f"Python · Thread {tid}", (0, "Python", tid, ""))
            args = {
                col: (self._text(v) if col in STRING_COLUMNS else v)
                for col, v in row.items()
                if col in ("sequenceNumber", "fwdThreadId", "inputDtypes", "inputShapes") and v is not None
            }
            ev = self._slice(
                key,
                row.get("startNs"),
                row.get("endNs"),
                str(self._text(row.get("name"))),
                "cpu_op",
                args or None,
                "PYTORCH_API",
            )
            if ev is None or row.get("connectionId") is None:
                continue
            found = links.find(row["connectionId"])
            if found is None:  # it links nothing
                continue
            at, connections = found
            if not claimed.take(row["connectionId"], at):
                shared = "PYTORCH_API row sharing a connectionId with an earlier one (not linked again)"
                self.dropped.add(Stat.CONNECTION_SHARED, 1, shared)
                continue
            for (connection,) in connections:
                if connection >= FWD_BWD_CONNECTION:
                    fwd_bwd[connection].append((ev.ts, ev.thread))
                self._link("torch_to_npu", "PYTORCH_API", connection, ev, linked)
        for connection, ops in fwd_bwd.items():
            if len(ops) >= 2:
                ops.sort(key=lambda op: op[0])
                self._flow("fwdbwd", (connection, 0), ops[0], ops[-1])

    def _flow(self, cat: str, fid: tuple, source: tuple[int, ThreadKey], target: tuple[int, ThreadKey]) -> None:
        flow_id = (cat, fid)
        self.emit(Event(Kind.FLOW, source[0], source[1], cat, cat, flow_id=flow_id, flow_phase=FlowPhase.START))
        self.emit(Event(Kind.FLOW, target[0], target[1], cat, cat, flow_id=flow_id, flow_phase=FlowPhase.END))

    def _overlap(self) -> None:
        for row in self._dicts("OVERLAP_ANALYSIS"):
            kind = OVERLAP_TYPES.get(row.get("type"), f"type {row.get('type')}")
            device = self._id(row.get("deviceId"), "OVERLAP_ANALYSIS", "deviceId")
            if device is None:
                continue
            key = self._track(
                ("overlap", device, kind), slice_title(OVERLAP, kind), (6, device, row.get("type") or 0, "")
            )
            self._slice(key, row.get("startNs"), row.get("endNs"), kind, "", None, "OVERLAP_ANALYSIS")

    def _gc(self) -> None:
        """Python garbage collections, on the track the text export draws them on (its
        ``Python GC`` process and thread), named ``GC`` as there."""
        for start, end, global_tid in self._rows("GC_RECORD", ("startNs", "endNs", "globalTid")):
            tid = global_tid & 0xFFFFFFFF if type(global_tid) is int else 0
            key = self._track(("gc", tid), slice_title("Python GC", "Python GC"), (1, "Python GC", tid, ""))
            self._slice(key, start, end, "GC", "GC", None, "GC_RECORD")

    def _not_drawn(self) -> None:
        for table in NOT_DRAWN:
            if table in self.tables:
                rows = self.con.execute(f"select count(*) from {quote(table)}").fetchone()[0]
                if rows:
                    self.dropped.add(
                        Stat.DB_ROWS_NOT_DRAWN, rows, f"{table} rows not drawn (the text export keeps them in CSVs too)"
                    )

    def thread_infos(self) -> dict[ThreadKey, ThreadInfo]:
        several = len(self.devices) > 1
        infos = {}
        for key, (name, order) in self.names.items():
            if several and key[0] in ("stream", "plane", "group", "overlap"):
                name = name.replace(" · ", f" (NPU {key[1]}) · ", 1)
            infos[key] = ThreadInfo(name, order)
        return infos
