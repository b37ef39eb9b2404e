"""The host side of an Nsight Systems export, read through cursors by the columns each table has,
and what every reader of the export shares: the schema, global ids, the name of an id, the tracks.

- ``NVTX_EVENTS``: push/pop ranges (event type 59) and start/end ranges (60) as slices on the thread
  that opened them, marks (34) as instants; a start/end range that ends on another thread goes to
  its process's ``NVTX ranges across threads`` track; a range still open when the capture stopped
  (no end) is an instant. Domain creations (75) and category names (33) name the other rows'
  category and ``category`` arg. torch's ``emit_nvtx`` texts (``aten::view, op_id = 314290``) are
  named as Kineto names the op (``aten::view``), with ``op_id``, ``seq``, ``sizes`` and
  ``input_op_ids`` as args: names repeat, and phase rules see the op's own name.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``OSRT_API``, ``CUBLAS_EVENTS``, ``CUDNN_EVENTS``): slices on
  their thread; a runtime call that launched GPU work in the export starts an ``ac2g`` flow to each
  piece of it (:mod:`tracemerge.sources.nsys_gpu`), paired by ``correlationId`` within the process
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
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import orjson

from tracemerge.errors import shown
from tracemerge.layout import FileLayout
from tracemerge.model import FlowPhase, OriginKey, ThreadKey
from tracemerge.stats import Losses, Stat


class Placement(Protocol):
    """Where an export's events go (``nsys_db.Placement``): what the table readers ask of it."""

    contexts: dict[tuple[int, Any], int]  # (pid, CUDA context) -> its GPU

    def origin(self, pid: int | None) -> OriginKey: ...

    def device_origin(self, device: Any) -> OriginKey: ...


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
# ENUM_NSYS_EVENT_TYPE: NVTX (and nvtxt) ranges and marks, and the rows that name domains and categories.
PUSH_POP, START_END, MARKS = frozenset({59, 70}), frozenset({60, 71}), frozenset({34, 65})
DRAWN = PUSH_POP | START_END | MARKS
NAMING = {33: "category names", 64: "category names", 75: "domain creations", 76: "domain destructions"}
DOMAIN_CREATE, CATEGORY_NAME = 75, 33
NO_STREAM = NO_EVENT = 0xFFFFFFFF  # a context-wide sync; a sync on no event
PAYLOAD = ("uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value", "floatValue")
# torch.autograd.profiler.emit_nvtx: "<name>[, seq = N], op_id = N[, sizes = [...]][, input_op_ids = [...]]"
TORCH_OP = re.compile(
    r"(?P<name>.*?)(?:, seq = (?P<seq>\d+))?, op_id = (?P<op_id>\d+)"
    r"(?:, sizes = (?P<sizes>\[.*?\]))?(?:, input_op_ids = (?P<input_op_ids>.*))?",
    re.S,
)
FLOW = "ac2g"  # Kineto's name for a launch's flow
_START, _END = int(FlowPhase.START), int(FlowPhase.END)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A table's rows, and what to do with each: read with others, merged by start time.
Source = tuple[Iterable[tuple], Callable[[tuple], None]]
_PID_BITS = 0xFFFFFF
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


def pid_of(global_id: int) -> int:
    """The OS pid in an nsys global thread or process id."""
    return (global_id >> 24) & _PID_BITS


def tid_of(global_tid: int) -> int:
    return global_tid & _PID_BITS


def flow_key(gid: int, correlation: int) -> tuple:
    """A launch's flow id: its process and correlation id in one int64."""
    return (FLOW, FLOW, (pid_of(gid) << 32) | correlation if 0 <= correlation < 1 << 32 else (pid_of(gid), correlation))


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


def _check(*names: str) -> None:
    for name in names:
        if not _IDENT.fullmatch(name):
            raise ValueError(f"not an identifier: {name!r}")


class NsysReader:
    """Reads an export's rows into a file's layout: the host tables here, the device tables with
    :func:`tracemerge.sources.nsys_gpu.read_device`. Each track is a tuple (origin, key, entry
    buffer, flow points, the pid part of its flow ids), made once and looked up per row."""

    def __init__(self, schema: Schema, layout: FileLayout, place: Placement) -> None:
        self.schema, self.con, self.layout, self.place = schema, schema.con, layout, place
        self.dropped = Losses()
        self.metadata_records = 0
        self._strings: dict[int, str | None] = {}
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
        if self.schema.has("StringIds", "id", "value"):
            row = self.con.execute('select "value" from "StringIds" where "id" = ?', (sid,)).fetchone()
            found = row[0] if row is not None and type(row[0]) is str else None
        self._strings[sid] = found
        return found

    def named(self, sid: Any, cat: str) -> tuple[bytes, str, bool, bool]:
        """(encoded name, name, watched as evidence, resolved) of a name id."""
        found = self._named.get((sid, cat))
        if found is None:
            name = self.string(sid) if sid is not None else None
            resolved = name is not None
            name = name if resolved else f"string {sid}"
            prefix = self.layout.prefix(name, cat)
            found = self._named[(sid, cat)] = (prefix, name, bool(self.layout.tag(name)), resolved)
        return found

    def unresolved(self, table: str, column: str, to: str = "StringIds") -> None:
        self.dropped.add(
            Stat.NSYS_ID_UNRESOLVED, 1, f"nsys {table} row whose {column} points nowhere in {to} (named by the id)"
        )

    def bad_time(self, table: str, start: Any, end: Any) -> None:
        if type(start) is int and type(end) is int:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"nsys {table} row ending before it starts")
        else:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"nsys {table} row with unreadable times")

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
            pid = pid_of(gpid) if type(gpid) is int else None
            on = device if kind == "gpu" else self.place.contexts.get((pid, context), device)
            if kind == "sync":
                key = ("sync", pid, on, None if stream == NO_STREAM else stream)
            else:
                key = ("gpu", pid, on, stream)
            found = self._gpu[(kind, gpid, device, context, stream)] = self.track(key, pid)
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
        fid = (FLOW, FLOW, track[4] | corr) if 0 <= corr < 1 << 32 else flow_key(gid, corr)
        track[3].append((ts, phase, self.layout.ordinal(), fid, False))

    def body(self, prefix: bytes, args: dict | None) -> bytes:
        if not args:
            return prefix
        return prefix + self.layout.enc.args(orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS))

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
        heads, note, ordinal = self.layout.enc.args_heads, self.layout.note, self.layout.ordinal
        cpu, names = self._cpu, self._named

        def handle(row: tuple) -> None:
            start, end, gtid, name_id, corr, ret, launched = row
            if type(start) is not int or type(end) is not int or end < start:
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

    def _nvtx(self) -> Source | None:
        if not self.has_columns(NVTX, "start", "eventType"):
            return None
        domains, categories = self._nvtx_names()
        payload = [self.schema.column(NVTX, c) for c in PAYLOAD if self.schema.has(NVTX, c)]
        extra = (f"coalesce({', '.join(payload)}, NULL)" if payload else "NULL",)
        cols = ("start", "end", "eventType", "text", "textId", "globalTid", "endGlobalTid", "domainId", "category")
        layout, heads, ordinal = self.layout, self.layout.enc.args_heads, self.layout.ordinal
        cpu, cats, not_drawn = self._cpu, {}, self.nvtx_not_drawn

        def handle(row: tuple) -> None:
            start, end, etype, text, text_id, gtid, end_gtid, domain, category, json_text, value = row
            if etype not in DRAWN:
                not_drawn[etype] += 1
                return
            if type(start) is not int or (end is not None and (type(end) is not int or end < start)):
                self.bad_time(NVTX, start, end)
                return
            if type(text) is not str:
                text = self._nvtx_text(text_id)
            args: dict | None = None
            data = b""
            if ", op_id = " in text and (op := TORCH_OP.fullmatch(text)) is not None:
                text, seq, op_id, sizes, inputs = op.groups()
                if sizes is None and inputs is None:  # plain digits: the args text is written as is
                    data = (f'{{"seq":{seq},"op_id":{op_id}}}' if seq else f'{{"op_id":{op_id}}}').encode()
                else:
                    args = {"seq": seq and int(seq), "op_id": int(op_id), "sizes": sizes, "input_op_ids": inputs}
                    args = present(args)
            cat = cats.get(domain)
            if cat is None:
                cat = cats[domain] = domains.get(domain) or ("nvtx" if not domain else f"nvtx domain {domain}")
            if category is not None or value is not None or json_text is not None:
                args = args or (orjson.loads(data) if data else {})
                named = categories.get((domain, category), category)
                args.update(present({"category": named, "payload": value, "json": json_text}))
            track = cpu.get(gtid) or self.cpu(gtid)
            if type(end_gtid) is int and end_gtid != gtid and etype in START_END:
                track = self.track(("nvtx", track[1][1], None), track[1][1])
                args = args or (orjson.loads(data) if data else {})
                args["start thread"], args["end thread"] = tid_of(gtid), tid_of(end_gtid)
            if end is None or etype in MARKS:
                if etype not in MARKS:
                    self.dropped.add(
                        Stat.NSYS_RANGE_WITHOUT_END,
                        1,
                        "nsys NVTX range without an end (open when the capture stopped): drawn as an instant",
                    )
                kind, negdur = 1, 0
            else:
                kind, negdur = 0, start - end
            prefix = layout.prefix(text, cat)
            body = self.body(prefix, args) if args is not None else prefix + heads[len(data)] + data if data else prefix
            track[2].append((start, negdur, kind, ordinal(), body))
            if kind == 0 and layout.tags.get(text):
                layout.note(text, track[0], track[1], start, -negdur)

        return self.con.execute(self.schema.select(NVTX, (*cols, "jsonText"), extra=extra)), handle

    def nvtx_counted(self) -> None:
        """The NVTX rows not drawn, by event type."""
        labels = self.schema.labels("ENUM_NSYS_EVENT_TYPE", {})
        for etype, n in sorted(self.nvtx_not_drawn.items(), key=lambda kv: str(kv[0])):
            if etype in NAMING:
                self.dropped.add(
                    Stat.NSYS_ROWS_NOT_DRAWN,
                    n,
                    f"nsys NVTX_EVENTS rows not drawn ({NAMING[etype]}, which name other rows)",
                )
            else:
                label = shown(labels.get(etype, etype))
                self.dropped.add(Stat.NSYS_ROWS_NOT_READ, n, f"nsys NVTX_EVENTS rows of event type {label} not read")

    def _nvtx_text(self, text_id: Any) -> str:
        """A range's registered string (``textId``), when it has no text of its own."""
        text = self.string(text_id) if text_id is not None else None
        if text is not None:
            return text
        if text_id is None:
            self.dropped.add(
                Stat.NSYS_TEXT_MISSING, 1, "nsys NVTX_EVENTS row without text (NULL text and textId): drawn unnamed"
            )
            return ""
        self.unresolved(NVTX, "textId")
        return f"string {text_id}"

    def _nvtx_names(self) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
        """Domain names (from their creation rows) and category names, by id."""
        domains: dict[Any, str] = {}
        categories: dict[tuple[Any, Any], str] = {}
        tail = f' where "eventType" in ({DOMAIN_CREATE}, {CATEGORY_NAME})'
        for etype, domain, category, text, text_id in self.schema.rows(
            NVTX, ("eventType", "domainId", "category", "text", "textId"), tail
        ):
            name = text if type(text) is str else self.string(text_id) if text_id is not None else None
            if name is None:
                continue
            if etype == DOMAIN_CREATE:
                domains[domain] = name
            else:
                categories[(domain, category)] = name
        return domains, categories

    def _overhead(self, table: str) -> Source | None:
        if not self.has_columns(table, "start", "end"):
            return None

        def handle(row: tuple) -> None:
            start, end, gtid, name_id = row
            if type(start) is not int or type(end) is not int or end < start:
                self.bad_time(table, start, end)
                return
            pid, tid = (pid_of(gtid), tid_of(gtid)) if type(gtid) is int else (None, None)
            prefix, _, _, resolved = self.named(name_id, "overhead")
            if not resolved:
                self.unresolved(table, "nameId")
            self.emit(self.track(("overhead", pid, tid), pid)[2], start, start - end, 0, prefix)

        return self.schema.rows(table, ("start", "end", "globalTid", "nameId")), handle


def _by_start(rows: Iterable[tuple], source: int) -> Iterator[tuple[int, int, tuple]]:
    """(start, source, row): what the merge orders rows by (a row without a start first)."""
    for row in rows:
        start = row[0]
        yield (start if type(start) is int else -1, source, row)


def pid_or_none(gid: Any) -> int | None:
    return pid_of(gid) if type(gid) is int else None


def present(args: dict) -> dict:
    return {k: v for k, v in args.items() if v is not None}


def shown_id(value: Any) -> str:
    return "?" if value is None else str(value)
