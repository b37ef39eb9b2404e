"""The NVTX ranges and marks of an Nsight Systems export, for its host reader
(:class:`~tracemerge.sources.nsys.tables.NsysReader`).

:class:`NvtxRanges` reads ``NVTX_EVENTS``: push/pop and start/end ranges as slices on the thread
that opened them (a start/end range ending on another thread on its process's ``NVTX ranges across
threads`` track, a range without an end as an instant), marks as instants, torch's ``emit_nvtx``
texts named as Kineto names the op with its ids as args, and domain and category names from the
rows that create them. Rows of other event types are counted by type (:meth:`~NvtxRanges.nvtx_counted`).
It uses the reader's ``schema``, ``layout``, ``dropped``, ``nvtx_not_drawn``, ``_cpu`` and its row
helpers (``has_columns``, ``string``, ``unresolved``, ``bad_time``, ``cpu``, ``track``, ``body``).
"""

from __future__ import annotations

import bisect
import re
import sqlite3
from collections import Counter
from typing import TYPE_CHECKING, Any

import orjson

from tracemerge.core.errors import shown
from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.nsys.schema import NVTX, Schema, Source, present, tid_of, times_ok
from tracemerge.store.file_layout import FileLayout

# ENUM_NSYS_EVENT_TYPE: NVTX (and nvtxt) ranges and marks, and the rows that name domains and categories.
PUSH_POP, START_END, MARKS = frozenset({59, 70}), frozenset({60, 71}), frozenset({34, 65})
DRAWN = PUSH_POP | START_END | MARKS
NAMING = {33: "category names", 64: "category names", 75: "domain creations", 76: "domain destructions"}
DOMAIN_CREATE, CATEGORY_NAME = 75, 33
PAYLOAD = ("uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value", "floatValue")
# torch.autograd.profiler.emit_nvtx: "<name>[, seq = N], op_id = N[, sizes = [...]][, input_op_ids = [...]]"
OP_ID, SEQ, SIZES, INPUTS = ", op_id = ", ", seq = ", ", sizes = [", ", input_op_ids = "
ID_DIGITS = 18  # an op_id or seq of more digits is no id of torch's (they are int64): the text is its name
_ONE_OP = re.compile(
    r"(.*?)(?:, seq = ([0-9]{1,18}))?, op_id = ([0-9]{1,18})(?:, sizes = (\[.*?\]))?(?:, input_op_ids = (.*))?", re.S
)


class NvtxRanges:
    """NVTX_EVENTS read as one of the sources the host reader merges by start time."""

    # The host reader's (NsysReader):
    schema: Schema
    con: sqlite3.Connection
    layout: FileLayout
    dropped: Losses
    nvtx_not_drawn: Counter[Any]
    _cpu: dict[Any, tuple]

    if TYPE_CHECKING:

        def has_columns(self, table: str, *columns: str) -> bool: ...
        def string(self, sid: Any) -> str | None: ...
        def unresolved(self, table: str, column: str, to: str = "StringIds") -> None: ...
        def bad_time(self, table: str, start: Any, end: Any) -> None: ...
        def cpu(self, gtid: Any) -> tuple: ...
        def track(self, key: ThreadKey, pid: int | None, origin: OriginKey | None = None) -> tuple: ...
        def body(self, prefix: bytes, args: dict | None) -> bytes: ...

    def _nvtx(self) -> Source | None:
        if not self.has_columns(NVTX, "start", "eventType"):
            return None
        domains, categories = self._nvtx_names()
        payload = [self.schema.column(NVTX, c) for c in PAYLOAD if self.schema.has(NVTX, c)]
        extra = (f"coalesce({', '.join(payload)}, NULL)" if payload else "NULL",)
        cols = ("start", "end", "eventType", "text", "textId", "globalTid", "endGlobalTid", "domainId", "category")
        layout, heads, ordinal = self.layout, self.layout.args_heads, self.layout.ordinal
        cats: dict[Any, str] = {}
        cpu, not_drawn = self._cpu, self.nvtx_not_drawn

        def handle(row: tuple) -> None:
            start, end, etype, text, text_id, gtid, end_gtid, domain, category, json_text, value = row
            if etype not in DRAWN:
                not_drawn[etype] += 1
                return
            if not times_ok(start, start if end is None else end):
                self.bad_time(NVTX, start, end)
                return
            if type(text) is not str:
                text = self._nvtx_text(text_id)
            args: dict | None = None
            data = b""
            if OP_ID in text and (op := torch_op(text)) is not None:
                text, seq, op_id, sizes, inputs = op
                if sizes is None and inputs is None:  # plain digits: the args text written at once
                    data = b'{"seq":%d,"op_id":%d}' % (int(seq), int(op_id)) if seq else b'{"op_id":%d}' % int(op_id)
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
            if type(end_gtid) is int and type(gtid) is int and end_gtid != gtid and etype in START_END:
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
            if kind == 0 and layout.tag(text):
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


def torch_op(text: str) -> tuple[str, str | None, str, str | None, str | None] | None:
    """(name, seq, op_id, sizes, input_op_ids) of an ``emit_nvtx`` text, None when it is not one.

    The name is the shortest prefix the rest parses after, as the regular expression
    ``(.*?)(?:, seq = (\\d+))?, op_id = (\\d+)(?:, sizes = (\\[.*?\\]))?(?:, input_op_ids = (.*))?``
    fully matched would take it, in time linear in the text (that expression backtracks: a text of
    n ``, op_id = 1, sizes = [ ]`` takes time in n²): each ``op_id`` is tried once, left to right,
    and a ``sizes`` list ends at the first ``]`` that ends the text or is followed by the inputs.
    Digits are ASCII, at most :data:`ID_DIGITS` of them (torch writes int64 ids)."""
    if text.count(OP_ID) == 1:  # the usual text: the expression is linear with one op_id to try
        found = _ONE_OP.fullmatch(text)
        return found.groups() if found else None  # type: ignore[return-value]
    ends = _list_ends(text)
    at = text.find(OP_ID)
    while at >= 0:
        digits_end = _digits_end(text, at + len(OP_ID))
        if 0 < digits_end - at - len(OP_ID) <= ID_DIGITS:
            rest = _rest(text, digits_end, ends)
            if rest is not None:
                name_end, seq = _seq_before(text, at)
                return (text[:name_end], seq, text[at + len(OP_ID) : digits_end], *rest)
        at = text.find(OP_ID, at + 1)
    return None


def _list_ends(text: str) -> list[int]:
    """Where a ``sizes`` list may end: each ``]`` at the text's end or before ``, input_op_ids = ``."""
    ends = []
    at = text.find("]")
    while at >= 0:
        if at + 1 == len(text) or text.startswith(INPUTS, at + 1):
            ends.append(at)
        at = text.find("]", at + 1)
    return ends


def _digits_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] in "0123456789":
        end += 1
    return end


def _rest(text: str, start: int, ends: list[int]) -> tuple[str | None, str | None] | None:
    """(sizes, input_op_ids) of what follows ``op_id = N``, None when it does not parse."""
    if start == len(text):
        return None, None
    if text.startswith(INPUTS, start):
        return None, text[start + len(INPUTS) :]
    if text.startswith(SIZES, start):
        found = bisect.bisect_left(ends, start + len(SIZES) - 1)
        if found < len(ends):
            end = ends[found]
            inputs = text[end + 1 + len(INPUTS) :] if end + 1 < len(text) else None
            return text[start + len(SIZES) - 1 : end + 1], inputs
    return None


def _seq_before(text: str, at: int) -> tuple[int, str | None]:
    """Where the name ends before the ``op_id`` at ``at``, and the ``seq`` between them if any."""
    digits_start = at
    while digits_start > 0 and text[digits_start - 1] in "0123456789":
        digits_start -= 1
    if 0 < at - digits_start <= ID_DIGITS and text.endswith(SEQ, 0, digits_start):
        return digits_start - len(SEQ), text[digits_start:at]
    return at, None
