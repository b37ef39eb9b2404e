"""Nsight Systems JSON-lines exports (``nsys export --type jsonlines``), read as the SQLite export is.

Such an export holds the tables of the SQLite one, one JSON object per table row: the table's name
in ``"table"``, the columns as keys, a NULL column left out (``{"id":38,"table":"StringIds",
"value":"compute_log_prob"}``). verl's nsys runs are read this way by RL-Insight
(``worker_process_<pid>.<rid>.jsonl``). A file is this format's by its content: its first object
names an Nsight Systems table in ``"table"`` (span logs share the ``.jsonl`` suffix).

Rows are rows: the lines are streamed (one at a time, however long the file) into a private SQLite
database in the run's work folder, removed afterwards, each table's rows in the order the file
gives them, whether a table's rows are grouped or interleaved with other tables'. That database is
then read by the SQLite export's reader (:func:`tracemerge.sources.nsys.db.read_rows`): the same
slices, flows, wall-clock times and counted losses, and the same bounded memory, since the joins
of launches to GPU work and the name lookups stay in SQLite. What a JSON line cannot say the same
way: a table without rows, or a column NULL in every row, is not in the file, so it reads as
absent (a table's rows that need such a column are counted under ``nsys_column_missing``).

A line that is not a JSON object with a ``"table"`` string is counted (``line_unreadable``); a value
SQLite cannot hold as a column value (an array or object) is left out of its row and counted
(``nsys_value_unreadable``), as is a key that cannot be a column of its own (one differing from
another of the table only in case, or past :data:`MAX_COLUMNS`).
"""

from __future__ import annotations

import gzip
import io
import json
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tracemerge.core.errors import InputError, shown
from tracemerge.core.model import SourceData
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.base import GZIP_MAGIC, UTF8_BOM
from tracemerge.sources.json.text import replaced_surrogates
from tracemerge.sources.nsys.db import read_rows
from tracemerge.sources.nsys.recognise import JSONL_NAME as NAME
from tracemerge.sources.nsys.schema import TABLE_KEY
from tracemerge.sources.sqlite.guard import quote
from tracemerge.store.file_layout import FileLayout

MAX_LINE = 64 << 20  # a longer line is no row of an export: counted, not read
MAX_TABLES = 1_000  # an export has about fifty
MAX_COLUMNS = 500  # an export's widest table has about forty
MAX_SHAPES = 10_000  # key orders remembered to fit their table
BATCH_ROWS = 20_000  # rows held before they are written to the staging database
_INT64 = 1 << 63
_FLOAT_MAX = 1 << 1023  # an int at least this large may not convert to a float


def read(path: Path, layout: FileLayout) -> SourceData:
    with tempfile.TemporaryDirectory(prefix=".tracemerge-nsys-", dir=layout.store.directory) as tmp:
        staged = Path(tmp) / "rows.sqlite"
        reading = _lines(path)
        with reading as lines:
            stage = Staging(staged)
            try:
                for line in lines:
                    stage.add_line(line)
                stage.finish()
            except sqlite3.Error as exc:
                raise InputError(path, f"cannot stage its rows in the work folder ({exc})") from None
            finally:
                stage.close()
        if not stage.rows and stage.bad_lines:
            raise InputError(path, "no line is an Nsight Systems table row")
        data = read_rows(path, staged, layout, NAME)
    _account(stage, data.dropped)
    if reading.damaged is not None:
        data.dropped.add(
            Stat.FILE_DAMAGED, 1, f"nsys JSON lines cut or damaged after line {stage.lines}: {shown(reading.damaged)}"
        )
    return data


def _account(stage: Staging, dropped: Losses) -> None:
    if stage.bad_lines:
        dropped.add(
            Stat.LINE_UNREADABLE,
            stage.bad_lines,
            f"nsys JSON-lines line that is not a table row (first at line {stage.first_bad})",
        )
    for why, n in stage.bad_values.items():
        dropped.add(Stat.NSYS_VALUE_UNREADABLE, n, f"nsys JSON-lines value left out: {why}")
    if stage.bad_text:
        dropped.add(
            Stat.DB_TEXT_NOT_UTF8, stage.bad_text, "nsys JSON-lines text with a lone surrogate, read with U+FFFD for it"
        )


class _lines:
    """The file's lines, streamed (gunzipped when it is gzip data): each at most MAX_LINE bytes, a
    longer one given as a line that is no JSON (counted by the caller). A gzip stream cut or
    damaged ends the lines there: what came before is read, the damage kept in :attr:`damaged`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: list[io.BufferedIOBase] = []
        self.damaged: str | None = None

    def __enter__(self) -> Iterator[bytes]:
        try:
            raw = self.path.open("rb")
        except OSError as exc:
            raise InputError(self.path, f"cannot read: {exc.strerror or exc}") from None
        self.files.append(raw)
        packed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        if packed:
            self.files.append(gzip.GzipFile(fileobj=raw))
        return self._iter(self.files[-1])

    def _iter(self, file: io.BufferedIOBase) -> Iterator[bytes]:
        first = True
        try:
            while line := file.readline(MAX_LINE):
                if first:
                    line, first = line.removeprefix(UTF8_BOM), False
                if len(line) == MAX_LINE and not line.endswith(b"\n"):
                    while (rest := file.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                        pass
                    yield b"\x00"  # not JSON: counted
                    continue
                yield line
        except (OSError, EOFError, zlib.error) as exc:
            self.damaged = str(exc) or type(exc).__name__

    def __exit__(self, *exc: object) -> None:
        for file in reversed(self.files):
            file.close()


class Staging:
    """A private SQLite database the rows are written to, a table per ``"table"`` name, its
    columns the keys its rows use (added as they are met), its rows in the order of the file."""

    def __init__(self, path: Path) -> None:
        self.con = sqlite3.connect(path, isolation_level=None)
        self.con.execute("pragma journal_mode = off")
        self.con.execute("pragma synchronous = off")
        self.columns: dict[str, list[str]] = {}  # table -> its columns, in order
        self._folded: dict[str, dict[str, str]] = {}  # table -> casefolded column -> column
        self._tables_folded: dict[str, str] = {}
        self._shapes: dict[tuple[str, tuple[str, ...]], bool] = {}  # keys known to fit the table
        self.pending: dict[str, list[tuple]] = {}
        self.held = 0
        self.rows = self.lines = self.bad_lines = self.first_bad = self.bad_text = 0
        self.bad_values: dict[str, int] = {}

    def add_line(self, line: bytes) -> None:
        self.lines += 1
        if not line.strip():
            return
        obj = _parsed(line)
        table = obj.pop(TABLE_KEY, None) if type(obj) is dict else None
        if type(table) is not str or not self._table(table, obj):
            self.bad_lines += 1
            self.first_bad = self.first_bad or self.lines
            return
        shape = (table, tuple(obj))
        if shape not in self._shapes:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
            self._shapes[shape] = self._fit(table, obj)
        if not self._shapes[shape]:
            self._drop_extra(table, obj)
        self.pending[table].append(tuple(map(obj.get, self.columns[table])))
        self.rows += 1
        self.held += 1
        if self.held >= BATCH_ROWS:
            self.flush()

    def _table(self, table: str, obj: dict) -> bool:
        """Whether rows of ``table`` can be staged: it is made when first met, with the first key
        of its first row (SQLite has no table without a column)."""
        if table in self.columns:
            return True
        folded = table.casefold()
        if not _name(table) or folded.startswith("sqlite_") or folded in self._tables_folded:
            return False
        first = next((k for k in obj if _name(k)), None)
        if len(self.columns) >= MAX_TABLES or first is None:
            return False
        self._tables_folded[folded] = table
        self.con.execute(f"create table {quote(table)} ({quote(first)})")
        self.columns[table], self._folded[table], self.pending[table] = [first], {first.casefold(): first}, []
        return True

    def _fit(self, table: str, obj: dict) -> bool:
        """Adds the columns ``obj`` brings; whether every key of it is a column of the table."""
        fits = True
        for key in obj:
            if key in self._folded[table].values():
                continue
            folded = key.casefold()
            if not _name(key) or folded in self._folded[table] or len(self.columns[table]) >= MAX_COLUMNS:
                fits = False
                continue
            self._flush_table(table)  # the rows held so far have no such column
            self.con.execute(f"alter table {quote(table)} add column {quote(key)}")
            self.columns[table].append(key)
            self._folded[table][folded] = key
        return fits

    def _drop_extra(self, table: str, obj: dict) -> None:
        known = self._folded[table].values()
        for key in [k for k in obj if k not in known]:
            del obj[key]
            self._bad(f"key {shown(key)} of {shown(table)} cannot be a column of its own")

    def _bad(self, why: str) -> None:
        self.bad_values[why] = self.bad_values.get(why, 0) + 1

    def flush(self) -> None:
        for table in self.pending:
            self._flush_table(table)
        self.held = 0

    def _flush_table(self, table: str) -> None:
        rows = self.pending[table]
        if not rows:
            return
        columns = self.columns[table]
        sql = f"insert into {quote(table)} ({', '.join(map(quote, columns))}) values ({', '.join('?' * len(columns))})"
        self.con.execute("begin")
        try:
            self.con.executemany(sql, rows)
            self.con.execute("commit")
        except (sqlite3.InterfaceError, sqlite3.ProgrammingError, OverflowError, UnicodeEncodeError, ValueError):
            self.con.execute("rollback")  # a value SQLite cannot hold: the batch again, value by value
            self.con.execute("begin")
            self.con.executemany(sql, (tuple(self._value(table, v) for v in row) for row in rows))
            self.con.execute("commit")
        self.pending[table] = []

    def _value(self, table: str, value: Any) -> Any:
        kind = type(value)
        if kind is int and not -_INT64 <= value < _INT64:
            if abs(value) < _FLOAT_MAX:
                return float(value)  # as SQLite keeps an integer literal past 64 bits
            self._bad(f"a number past any float in a column of {shown(table)}")
            return None
        if kind is str:
            try:
                value.encode()
            except UnicodeEncodeError:
                self.bad_text += 1
                return replaced_surrogates(value)
            return value
        if kind in (list, dict):
            self._bad(f"an array or object in a column of {shown(table)}")
            return None
        return value

    def finish(self) -> None:
        """The rows held written, and StringIds indexed by id (the reader looks names up by it)."""
        self.flush()
        if "id" in self.columns.get("StringIds", ()):
            self.con.execute('create index "StringIds_id" on "StringIds" ("id")')

    def close(self) -> None:
        self.con.close()


def _name(name: str) -> bool:
    """Whether ``name`` can name an SQLite table or column: not empty, no NUL, no lone surrogate."""
    if not name or "\x00" in name:
        return False
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _parsed(line: bytes) -> Any:
    """The line's value: strict JSON, else what Python's json reads of it (Infinity, NaN, a bad
    UTF-8 byte as U+FFFD, a lone surrogate); None when it is not JSON at all."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
