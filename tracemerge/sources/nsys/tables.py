"""The host side of an Nsight Systems export, read through cursors by the columns each table has,
and what every reader of the export shares: the name of an id, the tracks, rows merged by start
time (the schema and global ids are :mod:`~tracemerge.sources.nsys.schema`'s, NVTX rows are read
by :mod:`~tracemerge.sources.nsys.nvtx`).

- ``NVTX_EVENTS``: push/pop ranges (event type 59) and start/end ranges (60) as slices on the thread
  that opened them, marks (34) as instants; a start/end range that ends on another thread goes to
  its process's ``NVTX ranges across threads`` track; a range still open when the capture stopped
  (no end) is an instant. Domain creations (75) and category names (33) name the other rows'
  category and ``category`` arg. torch's ``emit_nvtx`` texts (``aten::view, op_id = 314290``) are
  named as Kineto names the op (``aten::view``), with ``op_id``, ``seq``, ``sizes`` and
  ``input_op_ids`` as args: names repeat, and phase rules see the op's own name.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``OSRT_API``, ``CUBLAS_EVENTS``, ``CUDNN_EVENTS``): slices on
  their thread; a runtime call that launched GPU work in the export starts an ``ac2g`` flow to each
  piece of it (:mod:`tracemerge.sources.nsys.gpu`), paired by ``correlationId`` within the process
  (ids repeat across the processes of one report).
- ``PROFILER_OVERHEAD``, ``CUPTI_ACTIVITY_KIND_OVERHEAD``: slices on ``Profiler overhead (thread N)``.

Which runtime call launched which GPU work is joined in SQLite (temporary tables of (process,
correlation id) pairs). Tables that share tracks (runtime calls and NVTX ranges on a thread; kernels,
copies and CUDA events on a stream) are read at once, merged by start time (:meth:`NsysReader.merged`):
a track's entries then come in time order, so the layout can work it out in runs and memory does
not grow with the export.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import orjson

from tracemerge.core.errors import shown
from tracemerge.core.model import FlowPhase, OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.nsys.nvtx import NvtxRanges
from tracemerge.sources.nsys.schema import (
    API_TABLES,
    FLOW_TABLES,
    OVERHEAD_TABLES,
    RUNTIME,
    Schema,
    Source,
    pid_of,
    pid_or_none,
    present,
    tid_of,
    times_ok,
)
from tracemerge.store.file_layout import FileLayout


class Placement(Protocol):
    """Where an export's events go (``nsys_db.Placement``): what the table readers ask of it."""

    contexts: dict[tuple[int, Any], int]  # (pid, CUDA context) -> its GPU

    def origin(self, pid: int | None) -> OriginKey: ...

    def device_origin(self, device: Any) -> OriginKey: ...


NO_STREAM = NO_EVENT = 0xFFFFFFFF  # a context-wide sync; a sync on no event
FLOW = "ac2g"  # Kineto's name for a launch's flow
_START, _END = int(FlowPhase.START), int(FlowPhase.END)
_LAUNCHES = (
    "create temp table nsys_launches (p integer, c integer, primary key (p, c)) without rowid",
    'insert or ignore into nsys_launches select "globalTid" >> 24, "correlationId" from "{table}"'
    ' where "globalTid" is not null and "correlationId" is not null',
)
_GPU_WORK = (
    "create temp table nsys_gpu_work (p integer, c integer, primary key (p, c)) without rowid",
    'insert or ignore into nsys_gpu_work select "globalPid" >> 24, "correlationId" from "{table}"'
    ' where "globalPid" is not null and "correlationId" is not null',
)


def flow_key(gid: Any, correlation: Any) -> tuple:
    """A launch's flow id: its process and correlation id in one int64 (a pair when they do not fit)."""
    pid = pid_or_none(gid)
    if pid is not None and type(correlation) is int and 0 <= correlation < 1 << 32:
        return (FLOW, FLOW, (pid << 32) | correlation)
    return (FLOW, FLOW, (pid, correlation))


class NsysReader(NvtxRanges):
    """Reads an export's rows into a file's layout: the host tables here, the device tables with
    :func:`tracemerge.sources.nsys.gpu.read_device`. Each track is a tuple (origin, key, entry
    buffer, flow points, the pid part of its flow ids), made once and looked up per row."""

    def __init__(self, schema: Schema, layout: FileLayout, place: Placement) -> None:
        self.schema, self.con, self.layout, self.place = schema, schema.con, layout, place
        self.dropped = Losses()
        self.metadata_records = 0
        self._strings: dict[int, str | None] = {}
        self._string_query: str | None = None  # how a name is looked up by id, once StringIds is seen
        self._named: dict[tuple[Any, str], tuple[bytes, str, bool, bool]] = {}
        self.tracks: dict[ThreadKey, tuple[OriginKey, int | None]] = {}  # key -> (origin, pid)
        self._cpu: dict[Any, tuple] = {}
        self._gpu: dict[tuple, tuple] = {}
        self.not_captured = 0  # GPU work whose launch is not in the export
        self.nvtx_not_drawn: Counter[Any] = Counter()

    # -- rows to entries -----------------------------------------------------------------------

    def string(self, sid: Any) -> str | None:
        """A StringIds value (looked up as ids are met: names repeat, the table may be large)."""
        if sid in self._strings:
            return self._strings[sid]
        found = None
        if self._string_query is None and self.schema.has("StringIds", "id", "value"):
            self._string_query = _string_lookup(self.con)
        if self._string_query:
            row = self.con.execute(self._string_query, (sid,)).fetchone()
            found = row[0] if row is not None and type(row[0]) is str else None
        self._strings[sid] = found
        return found

    def named(self, sid: Any, cat: str) -> tuple[bytes, str, bool, bool]:
        """(encoded name, name, watched as evidence, resolved) of a name id."""
        found = self._named.get((sid, cat))
        if found is None:
            name = self.string(sid) if sid is not None else None
            resolved = name is not None
            name = name if name is not None else f"string {sid}"
            prefix = self.layout.prefix(name, cat)
            found = self._named[(sid, cat)] = (prefix, name, bool(self.layout.tag(name)), resolved)
        return found

    def unresolved(self, table: str, column: str, to: str = "StringIds") -> None:
        self.dropped.add(
            Stat.NSYS_ID_UNRESOLVED, 1, f"nsys {table} row whose {column} points nowhere in {to} (named by the id)"
        )

    def bad_time(self, table: str, start: Any, end: Any) -> None:
        if type(start) is not int or type(end) is not int:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"nsys {table} row with unreadable times")
        elif end < start:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"nsys {table} row ending before it starts")
        else:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"nsys {table} row with a time no trace can hold")

    def cpu(self, gtid: Any) -> tuple:
        """The :meth:`track` of a CPU thread."""
        found = self._cpu.get(gtid)
        if found is None:
            pid, tid = (pid_of(gtid), tid_of(gtid)) if type(gtid) is int else (None, None)
            found = self._cpu[gtid] = self.track(("cpu", pid, tid), pid)
        return found

    def track(self, key: ThreadKey, pid: int | None, origin: OriginKey | None = None) -> tuple:
        """(origin, key, its entry buffer, its flow points, the pid part of its flows' ids)."""
        origin = self.place.origin(pid) if origin is None else origin
        self.tracks.setdefault(key, (origin, pid))
        return origin, key, self.layout.buffer(origin, key), self.layout.points[(origin, key)], (pid or 0) << 32

    def gpu(self, gpid: Any, device: Any, context: Any, stream: Any, kind: str = "gpu") -> tuple:
        """The :meth:`track` of a device stream: ``kind`` "gpu" for its work, on the GPU the row
        names; "event" for a CUDA event on it and "sync" for its synchronizations (on their own
        track; a context's own without a stream), both on the GPU their context's work ran on."""
        found = self._gpu.get((kind, gpid, device, context, stream))
        if found is None:
            row_key = (kind, gpid, device, context, stream)
            # a BLOB names no GPU, context or stream: the track of an unknown one ("GPU ?")
            device, context, stream = (None if type(v) is bytes else v for v in (device, context, stream))
            pid = pid_of(gpid) if type(gpid) is int else None
            # contexts are known by process: a row without one stays on the device it names
            on = device if kind == "gpu" or pid is None else self.place.contexts.get((pid, context), device)
            if kind == "sync":
                key = ("sync", pid, on, None if stream == NO_STREAM else stream)
            else:
                key = ("gpu", pid, on, stream)
            found = self._gpu[row_key] = self.track(key, pid)
        return found

    def merged(self, sources: list[Source | None]) -> None:
        """Each source's rows handed to its handler, the sources merged by start time (the first
        column; each table is written in time order). The layout spills past its budget, checked
        every 64k rows."""
        found = [s for s in sources if s is not None]
        handlers = [handle for _, handle in found]
        if len(found) == 1:
            keyed: Iterable[tuple] = ((0, 0, row) for row in found[0][0])
        else:
            keyed = heapq.merge(*(_by_start(rows, n) for n, (rows, _) in enumerate(found)))
        check = self.layout.check_memory
        for n, (_, source, row) in enumerate(keyed, 1):
            handlers[source](row)
            if not n & 0xFFFF:
                check()

    def emit(self, buf: Any, start: int, negdur: int, kind: int, body: bytes) -> None:
        buf.append((start, negdur, kind, self.layout.ordinal(), body))

    def flow(self, track: tuple, ts: int, phase: int, gid: Any, corr: int) -> None:
        """A launch's flow point: its id is the process and correlation id in one int64."""
        fid = (FLOW, FLOW, track[4] | corr) if type(corr) is int and 0 <= corr < 1 << 32 else flow_key(gid, corr)
        track[3].append((ts, phase, self.layout.ordinal(), fid, False))

    def body(self, prefix: bytes, args: dict | None) -> bytes:
        """The entry's body: its name's prefix and its args, each value one JSON can hold (a BLOB,
        an infinite or NaN number is left out and counted: the event keeps the rest)."""
        if not args:
            return prefix
        try:
            text = orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # a BLOB among them
            text = b""
        if text == b"" or b"null" in text:  # orjson writes an infinite or NaN number as null
            args = self._plain_args(args)
            if not args:
                return prefix
            text = orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS)
        return prefix + self.layout.encode_args(text)

    def _plain_args(self, args: dict) -> dict:
        plain = {}
        for key, value in args.items():
            if all(map(_plain, value)) if type(value) is list else _plain(value):
                plain[key] = value
            else:  # a grid or block with such a dimension goes as a whole
                self.dropped.add(
                    Stat.NSYS_VALUE_UNREADABLE,
                    1,
                    f"nsys {shown(key)} value that is a BLOB or an infinite or NaN number: left out of its event",
                )
        return plain

    def has_columns(self, table: str, *columns: str) -> bool:
        """Whether ``table`` is there with ``columns``; if it lacks one, its rows are counted."""
        if table not in self.schema.tables:
            return False
        missing = [c for c in columns if not self.schema.has(table, c)]
        if missing:
            rows = self.schema.count(table)
            if rows:
                self.dropped.add(
                    Stat.NSYS_COLUMN_MISSING, rows, f"nsys {table} rows not read: the table has no {missing[0]} column"
                )
        return not missing

    # -- tables --------------------------------------------------------------------------------

    def read_host(self) -> None:
        """The host's tables: runtime and other API calls with NVTX ranges (their threads'), then
        profiler overhead."""
        self._temp_tables()
        self.merged([*(self._api(table, cat) for table, cat in API_TABLES), self._nvtx()])
        self.nvtx_counted()
        for table in OVERHEAD_TABLES:
            self.merged([self._overhead(table)])

    def _temp_tables(self) -> None:
        """The (process, correlation id) pairs of runtime calls and of GPU work, indexed in SQLite's
        temporary store (bounded memory, nothing beside the file): the rows of each side then say
        whether the other side has their pair."""
        self.launches = self.schema.has(RUNTIME, "globalTid", "correlationId")
        if self.launches:
            for sql in _LAUNCHES:
                self.con.execute(sql.format(table=RUNTIME))
        self.con.execute(_GPU_WORK[0])
        for table in FLOW_TABLES:  # the ones read: a table without its times draws nothing to flow to
            if self.schema.has(table, "globalPid", "correlationId", "start", "end"):
                self.con.execute(_GPU_WORK[1].format(table=table))

    def _api(self, table: str, cat: str) -> Source | None:
        if not self.has_columns(table, "start", "end", "globalTid"):
            return None
        flows = table == RUNTIME and self.schema.has(table, "correlationId")
        sql = self.schema.select(
            table,
            ("start", "end", "globalTid", "nameId", "correlationId", "returnValue"),
            "r",
            ("w.c is not null" if flows else "0",),
            ' left join temp.nsys_gpu_work as w on w.p = r."globalTid" >> 24 and w.c = r."correlationId"'
            if flows
            else "",
        )
        heads, note, ordinal = self.layout.args_heads, self.layout.note, self.layout.ordinal
        cpu, names = self._cpu, self._named

        def handle(row: tuple) -> None:
            start, end, gtid, name_id, corr, ret, launched = row
            if not times_ok(start, end):
                self.bad_time(table, start, end)
                return
            track = cpu.get(gtid) or self.cpu(gtid)
            prefix, name, watched, resolved = names.get((name_id, cat)) or self.named(name_id, cat)
            if not resolved:
                self.unresolved(table, "nameId")
            if type(corr) is int and not ret:
                text = b'{"correlation":%d}' % corr
                body = prefix + heads[len(text)] + text
            else:
                body = self.body(prefix, present({"correlation": corr, "return value": ret or None}))
            track[2].append((start, start - end, 0, ordinal(), body))
            if watched:
                note(name, track[0], track[1], start, end - start)
            if launched:
                self.flow(track, start, _START, gtid, corr)

        return self.con.execute(sql), handle

    def _overhead(self, table: str) -> Source | None:
        if not self.has_columns(table, "start", "end"):
            return None

        def handle(row: tuple) -> None:
            start, end, gtid, name_id = row
            if not times_ok(start, end):
                self.bad_time(table, start, end)
                return
            pid, tid = (pid_of(gtid), tid_of(gtid)) if type(gtid) is int else (None, None)
            prefix, _, _, resolved = self.named(name_id, "overhead")
            if not resolved:
                self.unresolved(table, "nameId")
            self.emit(self.track(("overhead", pid, tid), pid)[2], start, start - end, 0, prefix)

        return self.schema.rows(table, ("start", "end", "globalTid", "nameId")), handle


def _string_lookup(con: Any) -> str:
    """The query of a StringIds value by id: on the table itself when an index answers it (its
    primary key, in every export nsys writes), else on a copy indexed by id in SQLite's temporary
    store, made once, so that a name costs a lookup, not a scan of every string (the first row of
    an id wins, as a scan finds it)."""
    lookup = 'select "value" from "StringIds" where "id" = ?'
    plan = " ".join(str(row[-1]) for row in con.execute("explain query plan " + lookup, (0,)))
    if "USING" in plan:  # SEARCH ... USING INTEGER PRIMARY KEY / INDEX
        return lookup
    con.execute('create temp table nsys_strings ("id" primary key, "value") without rowid')
    con.execute('insert or ignore into temp.nsys_strings select "id", "value" from "StringIds"')
    return 'select "value" from temp.nsys_strings where "id" = ?'


def _plain(value: Any) -> bool:
    """Whether an arg's value is one JSON holds as it is: no BLOB, no infinite or NaN number."""
    kind = type(value)
    return kind is not bytes and (kind is not float or math.isfinite(value))


def _by_start(rows: Iterable[tuple], source: int) -> Iterator[tuple[int, int, tuple]]:
    """(start, source, row): what the merge orders rows by (a row without a start first)."""
    for row in rows:
        start = row[0]
        yield (start if type(start) is int else -1, source, row)
