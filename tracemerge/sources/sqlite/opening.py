"""A SQLite input opened for reading without anything created or changed beside it.

:func:`opened` yields a connection to the DB for a ``with`` block: opened ``immutable`` when no
writer left rows in a side file (:data:`SIDE_FILES`), else as a private copy of the DB and that
file in a temporary directory (under the run's work directory), so that SQLite replays them
there. A side file that holds nothing to replay (no WAL frame, no journal header: a file of
zeros, say) is neither copied nor counted in the DB's step budget. Every query run on it is
bounded and stoppable (:func:`~tracemerge.sources.sqlite.guard.guarded`); a copy that cannot be
made is an InputError. Text that is not valid UTF-8 is read with U+FFFD for each bad byte and
counted (:class:`ReadConnection`), never failing the query.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracemerge.core.errors import InputError
from tracemerge.sources.sqlite.guard import guarded

# Files a writer leaves beside a DB that hold rows not yet in it.
SIDE_FILES = ("-wal", "-journal")
# How each begins when it holds something to replay: a WAL header (either byte order of its
# checksums) followed by at least one frame; a rollback journal's header (one zeroed by
# journal_mode=persist, or any other content, is no hot journal: SQLite ignores it too).
WAL_MAGIC, WAL_HEADER = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83"), 32
JOURNAL_MAGIC = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"


class ReadConnection(sqlite3.Connection):
    """A connection whose text values are read even when they are not valid UTF-8 (each bad
    byte as U+FFFD, counted in :attr:`bad_text`), instead of failing the query and the file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bad_text = 0
        self.text_factory = self._text

    def _text(self, data: bytes) -> str:
        try:
            return data.decode()
        except UnicodeDecodeError:
            self.bad_text += 1
            return data.decode("utf-8", "replace")


@contextmanager
def opened(path: Path, work: Path | None) -> Iterator[ReadConnection]:
    """The DB, read so that nothing beside it is created or changed. ``immutable=1`` never
    touches a side file, but never reads one either: a DB whose writer stopped before a
    checkpoint keeps rows in its -wal (or a -journal to roll back), so then the DB and that file
    are copied into a private temporary directory (under ``work``) and the copy is opened.
    Every query run on it is bounded and stoppable (:func:`~tracemerge.sources.sqlite.guard.guarded`)."""
    side = [s for s in SIDE_FILES if _replays(path.with_name(path.name + s))]
    size = sum(_size(path.with_name(path.name + s)) for s in ("", *side))
    if not side:
        con = sqlite3.connect(_uri(path) + "?mode=ro&immutable=1", uri=True, factory=ReadConnection)
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
        # writable: SQLite replays the -wal or journal there
        con = sqlite3.connect(_uri(copy), uri=True, factory=ReadConnection)
        try:
            with guarded(con, path, size):
                yield con
        finally:
            con.close()


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve()))


def _replays(side: Path) -> bool:
    """Whether the side file holds something SQLite would replay into the DB: neither a missing
    or empty file nor one that is no WAL or journal (a gigabyte of zeros, say) is copied or counted."""
    try:
        with side.open("rb") as file:
            head = file.read(len(JOURNAL_MAGIC))
    except OSError:
        return False
    if side.name.endswith("-wal"):
        return head[:4] in WAL_MAGIC and _size(side) > WAL_HEADER
    return head == JOURNAL_MAGIC


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
