"""Table access for the reader of an Ascend DB (:class:`ascend_db._DbReader`).

:class:`DbRows` is the reader's base: a table's rows by the columns asked for (a column the
table lacks reads as NULL, a table it lacks as no rows), ids of ``STRING_IDS`` and enum tables
resolved to text, tracks named once, and rows turned into slices and instants handed to the
layout, a row whose times cannot be read counted under its table in ``dropped``. It uses the
reader's ``con``, ``tables``, ``layout``, ``emitted``, ``dropped``, ``names`` and ``strings``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from tracemerge.core.model import Event, Kind, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import checked_ns
from tracemerge.sources.sqlite.guard import quote
from tracemerge.store.file_layout import FileLayout


class DbRows:
    """Rows of the DB's tables, and events made of them (the reader's state, as ``_DbReader`` keeps it)."""

    con: sqlite3.Connection
    tables: dict[str, list[str]]
    layout: FileLayout
    emitted: int
    dropped: Losses
    names: dict[ThreadKey, tuple[str, tuple]]
    strings: dict[int, str]

    def _rows(self, table: str, wanted: tuple[str, ...] | None = None) -> Iterator[tuple]:
        """The table's rows, fetched as they are consumed (a cursor, not a list)."""
        if table not in self.tables:
            return iter(())
        cols = wanted or tuple(self.tables[table])
        present = [c for c in cols if c in self.tables[table]]
        select = ", ".join(quote(c) if c in present else "NULL" for c in cols)
        return self.con.execute(f"select {select} from {quote(table)}")  # names of its schema: sqlite_guard

    def _dicts(self, table: str) -> Iterator[dict[str, Any]]:
        cols = self.tables.get(table, [])
        return (dict(zip(cols, row, strict=True)) for row in self._rows(table))

    def emit(self, ev: Event) -> None:
        self.layout.add_event(ev)
        self.emitted += 1
        if self.emitted % 65536 == 0:
            self.layout.check_memory()

    def _id(self, value: Any, table: str, column: str, default: int = 0) -> int | None:
        """An id column's integer (NULL: ``default``); any other value makes the row unreadable
        (tracks are ordered by their ids): counted under its table, None."""
        if value is None:
            return default
        if type(value) is int:
            return value
        self.dropped.add(Stat.DB_ID_UNREADABLE, 1, f"{table} row whose {column} is not an integer")
        return None

    def _text(self, value: Any) -> Any:
        return self.strings.get(value, value) if type(value) is int else value

    def _enum(self, table: str) -> dict[Any, str]:
        # Keyed by what the table's id column holds: looked up with any column's value.
        return dict(self._rows(table, ("id", "name")))

    def _track(self, key: ThreadKey, name: str, order: tuple) -> ThreadKey:
        if key not in self.names:
            self.names[key] = (name, order)
        return key

    def _slice(
        self, key: ThreadKey, start: Any, end: Any, name: str, cat: str, args: dict | None, what: str
    ) -> Event | None:
        try:
            start, end = checked_ns(int(start)), checked_ns(int(end))
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite REAL
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{what} row with unreadable times")
            return None
        if end < start:
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{what} row ending before it starts")
            return None
        ev = Event(Kind.SLICE, start, key, name, cat, end - start, args)
        self.emit(ev)
        return ev

    def _instant(self, key: ThreadKey, ts: Any, name: str, cat: str, args: dict | None, what: str) -> None:
        try:
            ts = checked_ns(int(ts))
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite REAL
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{what} row with unreadable times")
            return
        self.emit(Event(Kind.INSTANT, ts, key, name, cat, 0, args))

    def _has_columns(self, table: str, *cols: str) -> bool:
        """Whether ``table`` has ``cols``; if not, its rows are counted as not read, with the column."""
        missing = [c for c in cols if c not in self.tables.get(table, cols)]
        if missing:
            rows = self.con.execute(f"select count(*) from {quote(table)}").fetchone()[0]
            if rows:
                self.dropped.add(
                    Stat.DB_COLUMN_MISSING, rows, f"{table} row not read: the table has no {missing[0]} column"
                )
        return not missing
