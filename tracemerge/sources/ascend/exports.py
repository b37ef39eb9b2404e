"""Which of a run's exports is read, when the run was exported more than once.

A run exported more than once holds its events several times: trace_view.json (or, without it,
the profiler DB) holds every msprof event of the run; in a bare PROF_* directory msprof_{ts}.json
(as trace_view.json over the DB, the text export first) holds what msprof_{ts}.db, msprof_tx_*.json
and step_trace_*.json hold, and an export written again (a later stamp) what the earlier one holds.
One export is read: the first in that order, newest stamp first, that is whole (each of its files
begins and ends as its kind does), else the first of which a file is readable (its damage is
counted). The others are claimed, not read, and named with the file read in their place.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracemerge.core.errors import InputError, NotATrace, shown
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.ascend.dirs import (
    MSPROF_JSON,
    MSPROF_OUTPUT,
    OUTPUT_DIR,
    PROF_DIR,
    RUN_SUFFIXES,
    SQLITE_MAGIC,
    TRACE_VIEW,
    is_export_db,
    is_text_export,
    is_timeline_db,
    run_dir_of,
)
from tracemerge.sources.base import read_head

_EXPORT_STAMP = re.compile(r"^msprof_(?:slice_\d+_)?(\d+)")
_TAIL_BYTES = 4096
_CLOSERS = {b"[": b"]", b"{": b"}"}


def read_instead(path: Path) -> Path | None:
    """The export of the same run that holds ``path``'s events and is read in its place (the
    first readable slice, for another slice of a sliced msprof export); None when ``path`` is read:
    it is the export chosen, or a text export too damaged to be chosen, read to name its damage."""
    chosen = _chosen_export(path)
    if chosen is None or chosen == path:
        return None
    if path not in slices_of(chosen) and _is_timeline_text(path) and _usable(path) is None:
        return None
    return chosen


def files_read(path: Path) -> list[Path]:
    """What reading ``path`` reads: every slice of the export chosen for its run; any other file
    (a damaged export read to name its damage) alone."""
    return slices_of(path) if _chosen_export(path) == path else [path]


def slices_of(path: Path) -> list[Path]:
    """The slices of the msprof export ``path`` is a slice of, in order; else ``[path]``."""
    m = MSPROF_JSON.match(path.name)
    if m is None or m.group("slice") is None:
        return [path]
    found = []
    for other in path.parent.glob(f"msprof_slice_*_{m.group('stamp')}.json"):
        o = MSPROF_JSON.match(other.name)
        if o is not None and o.group("slice") is not None and o.group("stamp") == m.group("stamp"):
            found.append((int(o.group("slice")), other))
    return [p for _, p in sorted(found)] or [path]


def check_read_here(path: Path) -> None:
    """Raises NotATrace, naming the file read in its place, when ``path`` is not to be read."""
    instead = read_instead(path)
    if instead is None:
        return
    if instead.parent == path.parent and path in slices_of(instead):
        raise NotATrace(path, f"read together with {instead.name}, the first readable slice of the same export")
    raise NotATrace(path, f"not read: {shown(instead)} holds the same events and is read in its place")


def note_not_read(kept: Path, dropped: Losses) -> None:
    """Counts (info) the other export files of ``kept``'s run that are read through ``kept`` or
    not at all: the run report says why each is not read on its own."""
    run = run_dir_of(kept)
    if run is None and kept.parent.name == MSPROF_OUTPUT:
        run = kept.parent.parent  # a renamed PROF_* directory: its text exports are still told apart
    if run is None:
        return
    patterns = ("*", f"{MSPROF_OUTPUT}/*", f"{OUTPUT_DIR}/*", "PROF_*/*", f"PROF_*/{MSPROF_OUTPUT}/*")
    slices = slices_of(kept)
    for other in sorted({p for pattern in patterns for p in run.glob(pattern)}):
        if other == kept or not (is_text_export(other) or is_export_db(other)) or read_instead(other) != kept:
            continue
        if other in slices:
            dropped.add(Stat.EXPORT_READ_ELSEWHERE, 1, f"export slice read with {kept.name}: {shown(other)}")
        else:
            dropped.add(
                Stat.EXPORT_READ_ELSEWHERE,
                1,
                f"same-run export not read ({kept.name} holds its events): {shown(other)}",
            )


def check_export(path: Path) -> None:
    """InputError unless ``path`` begins as its kind of export does (a JSON array or object, an
    SQLite header): a file zero-filled by a crash does not. An empty file passes: its reader says so."""
    try:
        head = read_head(path, 64)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if path.suffix == ".db":
        head, kind, where = head[: len(SQLITE_MAGIC)], "an SQLite database", None
        whole = head == SQLITE_MAGIC
    else:
        head, kind, where = head.lstrip(b" \t\r\n")[:16], "JSON", "1:1"
        whole = head[:1] in (b"[", b"{")
    if head and not whole:
        what = "NUL bytes" if head[:1] == b"\0" else repr(head)
        raise InputError(path, f"not {kind}: it begins with {what} (a damaged export)", where)


def _usable(path: Path) -> Path | None:
    """``path`` when it is an export that begins as one does: a damaged export never hides a good one."""
    try:
        check_export(path)
        return path if path.stat().st_size else None
    except (InputError, OSError):
        return None


def _ends_whole(path: Path) -> bool:
    """Whether a JSON export ends with the bracket it begins with (NUL padding and blanks aside):
    a file cut while being written does not. A DB, or gzip content, is taken as it begins."""
    if path.suffix == ".db":
        return True
    try:
        with path.open("rb") as f:
            first = f.read(64).lstrip(b" \t\r\n")[:1]
            f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            last = f.read(_TAIL_BYTES).rstrip(b" \t\r\n\0")[-1:]
    except OSError:
        return False
    return first not in _CLOSERS or last == _CLOSERS[first]


def _whole(export: Path) -> bool:
    return all(_usable(p) is not None and _ends_whole(p) for p in slices_of(export))


def _readable(export: Path) -> bool:
    return any(_usable(p) is not None for p in slices_of(export))


def _pick(exports: list[Path]) -> Path | None:
    """The first whole export, else the first of which a file is readable; named by its first
    readable file (an empty first slice is never read: the export is read through the next)."""
    found = next(filter(_whole, exports), None) or next(filter(_readable, exports), None)
    return None if found is None else next(p for p in slices_of(found) if _usable(p) is not None)


def _chosen_export(path: Path) -> Path | None:
    """The export read for the run (or bare PROF_* directory) holding ``path``."""
    if path.parent.name == OUTPUT_DIR:
        return _pick(_output_exports(path.parent))
    run = run_dir_of(path)
    if run is not None and run.name.endswith(RUN_SUFFIXES):
        found = _pick(_output_exports(run / OUTPUT_DIR))
        if found is not None:
            return found
    in_text_output = path.parent.name == MSPROF_OUTPUT
    prof = path.parent.parent if in_text_output else path.parent
    if PROF_DIR.match(prof.name):
        return _pick([*_msprof_texts(prof), *_msprof_dbs(prof)])
    return _pick(_msprof_texts(prof)) if in_text_output else None


def _output_exports(output: Path) -> list[Path]:
    """The exports of ASCEND_PROFILER_OUTPUT in the order they are read: trace_view.json, the DBs."""
    if not output.is_dir():
        return []
    return [output / TRACE_VIEW, *sorted(p for p in output.iterdir() if is_timeline_db(p))]


def _is_timeline_text(path: Path) -> bool:
    """trace_view.json, or a slice of msprof_{ts}.json: not a file repeating part of one."""
    if path.name == TRACE_VIEW:
        return path.parent.name == OUTPUT_DIR
    return path.parent.name == MSPROF_OUTPUT and MSPROF_JSON.match(path.name) is not None


def _msprof_texts(prof: Path) -> list[Path]:
    """The msprof_{ts}.json exports (first slices of sliced ones) of a PROF_* directory, newest first."""
    found = [
        p
        for p in (prof / MSPROF_OUTPUT).glob("msprof_*.json")
        if MSPROF_JSON.match(p.name) is not None and slices_of(p)[0] == p
    ]
    return sorted(found, key=_text_order, reverse=True)


def _text_order(export: Path) -> tuple[int, bool, str]:
    """Sort key, the export read first largest: the later stamp, then an unsliced file over slices."""
    m = MSPROF_JSON.match(export.name)
    return _stamp(export), m is not None and m.group("slice") is None, export.name


def _msprof_dbs(prof: Path) -> list[Path]:
    """The msprof_{ts}.db exports of a PROF_* directory, newest first."""
    found = [p for p in [*prof.glob("msprof_*.db"), *prof.glob(f"{MSPROF_OUTPUT}/msprof_*.db")] if is_timeline_db(p)]
    return sorted(found, key=lambda p: (_stamp(p), str(p)), reverse=True)


def _stamp(path: Path) -> int:
    """The export time in the name (msprof_{YYYYmmddHHMMSS}...): a later export has a larger one."""
    m = _EXPORT_STAMP.match(path.name)
    return int(m.group(1)) if m else -1
