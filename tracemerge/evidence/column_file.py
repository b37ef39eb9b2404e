"""Per-kernel columns kept on disk past a bound: the device activity's span unions
(:mod:`tracemerge.evidence.span_union`) and each kernel's start, length and name
(:mod:`tracemerge.evidence.kernel_tally`) write their columns, once they hold more than
:data:`SPILL_AT` spans or kernels, to a file of the run's work folder, and read them back a
chunk at a time: a trace of ten million kernels costs what one of a million does.

Each process writes to a file of its own in the folder (named by its pid: a pool's workers and
the processes reading parts of a large file at once each have theirs), appending only, so that
a column written stays where it was for as long as the folder lives; what points at it (a
:class:`Piece`: the file, the offset, the count) travels to another process as it is, which
reads it from the same folder. The folder is removed with the run, and every file in it.
Where the folder is not the merge's (a Ray node's), nothing is spilled: no folder is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

# Spans or kernels one union or one stream's columns hold in memory before they go to disk
# (4 MB of a union, 5 MB of a stream's kernels); the passes over them read as many at a time.
SPILL_AT = 1 << 18


class Piece(NamedTuple):
    """One column written to a file: where, and how many values of which type."""

    path: str
    offset: int
    size: int  # values
    dtype: str


def columns_file(folder: Path) -> Path:
    """The file this process appends its columns to in ``folder``."""
    return folder / f".tracemerge-columns-{os.getpid()}"


def write_column(folder: Path, column: np.ndarray) -> Piece:
    """Appends ``column`` to this process's file in ``folder``; where it lies."""
    path = columns_file(folder)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as out:
        offset = out.tell()  # the end: only this process appends to the file
        np.ascontiguousarray(column).tofile(out)
    return Piece(str(path), offset, len(column), column.dtype.str)


def read_column(piece: Piece) -> np.ndarray:
    """The column :func:`write_column` wrote (a new array)."""
    if not piece.size:
        return np.zeros(0, np.dtype(piece.dtype))
    return np.fromfile(piece.path, np.dtype(piece.dtype), piece.size, offset=piece.offset)
