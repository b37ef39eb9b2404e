"""SQLite inputs read safely: no SQL is ever made of what a file holds, and no query outruns its file.

- Names: a table or column name is data. It is used only after it was read from the file's own
  schema (``sqlite_master``, ``pragma_table_info``, the name bound as a parameter, never spliced
  into the pragma), and only as a quoted identifier (:func:`quote`), so a name holding ``"``,
  ``'``, spaces or SQL stays a name. Virtual tables (their module's code would run) are left out.
- Work: every query of a connection counts against one budget of SQLite VM steps that grows with
  the file (:data:`STEPS_PER_BYTE`, at least :data:`MIN_STEPS`): reading a table of a DB takes
  far fewer, so a query that needs more is stopped and the file skipped with the reason.
- Stopping: SQLite calls back into Python every :data:`CHECK_EVERY` steps, so SIGINT, SIGTERM and
  SIGHUP are handled during a query; the query is interrupted, and :class:`~tracemerge.core.errors.Stopped`
  raised again once SQLite returns (it swallows exceptions raised in its callbacks).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tracemerge.core.errors import InputError, raise_if_stopped

CHECK_EVERY = 10_000  # SQLite VM steps between two checks
STEPS_PER_BYTE = 64  # a plain read of every table of a DB takes well under 1 step per byte
MIN_STEPS = 50_000_000  # about a second of SQLite work
MAX_VALUE_BYTES = 256 << 20  # no text or blob of an export comes near this


def quote(name: str) -> str:
    """``name`` as an SQL identifier: ``a"b`` -> ``"a""b"``."""
    return '"' + name.replace('"', '""') + '"'


def schema(con: sqlite3.Connection) -> dict[str, list[str]]:
    """Each ordinary table of the DB and its columns, as the DB names them."""
    tables = {}
    for name, sql in con.execute("select name, sql from sqlite_master where type = 'table'"):
        if type(name) is not str or (type(sql) is str and sql.lstrip()[:14].upper().startswith("CREATE VIRTUAL")):
            continue
        tables[name] = [c for (c,) in con.execute("select name from pragma_table_info(?)", (name,)) if type(c) is str]
    return tables


class Budget:
    """The VM steps left to a connection's queries; see the module docstring."""

    def __init__(self, file_bytes: int) -> None:
        self.steps = MIN_STEPS + STEPS_PER_BYTE * max(file_bytes, 0)
        self.checks_left = self.steps // CHECK_EVERY

    def tick(self) -> int:
        """SQLite's progress handler: non-zero stops the query."""
        self.checks_left -= 1
        return self.checks_left < 0

    @property
    def spent(self) -> bool:
        return self.checks_left < 0


@contextmanager
def guarded(con: sqlite3.Connection, path: Path, file_bytes: int) -> Iterator[Budget]:
    """Bounds and makes stoppable every query of ``con`` run inside; a query stopped by the budget
    becomes an :class:`~tracemerge.core.errors.InputError` naming ``path``, one stopped by a signal
    :class:`~tracemerge.core.errors.Stopped`."""
    budget = Budget(file_bytes)
    con.set_progress_handler(budget.tick, CHECK_EVERY)
    if hasattr(con, "setlimit"):  # Python 3.11+
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    try:
        yield budget
    except sqlite3.OperationalError:
        raise_if_stopped()
        if budget.spent:
            raise InputError(
                path, f"reading it took more than {budget.steps:,} SQLite steps, far more than its size needs: not read"
            ) from None
        raise
    finally:
        con.set_progress_handler(None, CHECK_EVERY)
