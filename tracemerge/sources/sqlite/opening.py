"""A SQLite input opened for reading without anything created or changed beside it.

:func:`_opened` yields a connection to the DB for a ``with`` block: opened ``immutable`` when no
writer left rows in a side file (:data:`SIDE_FILES`), else as a private copy of the DB and that
file in a temporary directory (under the run's work directory), so that SQLite replays them
there. Every query run on it is bounded and stoppable
(:func:`~tracemerge.sources.sqlite.guard.guarded`); a copy that cannot be made is an InputError.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tracemerge.core.errors import InputError
from tracemerge.sources.sqlite.guard import guarded

# Files a writer leaves beside a DB that hold rows not yet in it.
SIDE_FILES = ("-wal", "-journal")


@contextmanager
def _opened(path: Path, work: Path | None) -> Iterator[sqlite3.Connection]:
    """The DB, read so that nothing beside it is created or changed. ``immutable=1`` never
    touches a side file, but never reads one either: a DB whose writer stopped before a
    checkpoint keeps rows in its -wal (or a -journal to roll back), so then the DB and that file
    are copied into a private temporary directory (under ``work``) and the copy is opened.
    Every query run on it is bounded and stoppable (:func:`~tracemerge.sources.sqlite.guard.guarded`)."""
    side = [s for s in SIDE_FILES if _size(path.with_name(path.name + s))]
    size = sum(_size(path.with_name(path.name + s)) for s in ("", *side))
    if not side:
        con = sqlite3.connect(_uri(path) + "?mode=ro&immutable=1", uri=True)
        try:
            with guarded(con, path, size):
                yield con
        finally:
            con.close()
        return
    with tempfile.TemporaryDirectory(prefix=".tracemerge-db-", dir=work) as tmp:
        copy = Path(tmp) / path.name
        try:
            for suffix in ("", *side):
                shutil.copyfile(path.with_name(path.name + suffix), copy.with_name(copy.name + suffix))
        except OSError as exc:
            raise InputError(path, f"cannot copy it with its {'/'.join(side)} file to read both: {exc}") from None
        con = sqlite3.connect(_uri(copy), uri=True)  # writable: SQLite replays the -wal or journal there
        try:
            with guarded(con, path, size):
                yield con
        finally:
            con.close()


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve()))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
