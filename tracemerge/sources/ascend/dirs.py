"""Ascend profiling directories: where a run's files are, and what they say about rank and role.

A torch_npu run is a directory ``{host}_{pid}_{ts}_ascend_pt`` (MindSpore: ``_ascend_ms``) holding
``profiler_info_{rank}.json``, ``profiler_metadata.json`` and, once parsed, ``ASCEND_PROFILER_OUTPUT/``.
Bare msprof runs are ``PROF_*`` directories. The text and DB readers share these helpers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
from msgspec.structs import replace

from tracemerge.core.bounds import TOO_DEEP, cut_deep
from tracemerge.core.errors import InputError, NotATrace, shown
from tracemerge.core.model import UNIX_EPOCH, SourceData, ThreadInfo, ThreadKey, as_rank, rank_unreadable
from tracemerge.core.stats import Losses, Stat
from tracemerge.naming.paths import PathFacts, ascend_run_facts, path_facts
from tracemerge.sources.base import host_of, read_head

RUN_SUFFIXES = ("_ascend_pt", "_ascend_ms")
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
TRACE_VIEW = "trace_view.json"
MSPROF_OUTPUT = "mindstudio_profiler_output"
SQLITE_MAGIC = b"SQLite format 3\x00"
# The track MSTX markers go to, in both the text and the DB export.
MSTX_THREAD: ThreadKey = ("MSTX", None)
# Where counter tracks sort in a process: after every track of slices (Python 0 … Overlap Analysis 6),
# the DB's tables that the text export does not draw last.
COUNTER_ORDER, OTHER_COUNTER_ORDER = 8, 9
_PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+$")
INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
METADATA_FILE = "profiler_metadata.json"
_DB_FILE = re.compile(r"^(?:ascend_pytorch_profiler|ascend_mindspore_profiler)(?:_(\d+))?\.db$|^msprof_\d+\.db$")
# msprof's text export: the whole timeline, msprof_{ts}.json (msprof_slice_{i}_{ts}.json when cut
# into slices), and files that repeat parts of it (msprof_tx_{ts}.json, step_trace_{ts}.json).
_MSPROF_JSON = re.compile(r"^msprof_(?:slice_(?P<slice>\d+)_)?(?P<stamp>\d+.*)\.json$")
_PART_JSON = re.compile(r"^(?:msprof_tx|step_trace)_(?:slice_\d+_)?\d+.*\.json$")
_DEVICE_INFO = re.compile(r"^info\.json\.\d+$")
_EXPORT_STAMP = re.compile(r"^msprof_(?:slice_\d+_)?(\d+)")
_TAIL_BYTES = 4096
_CLOSERS = {b"[": b"]", b"{": b"}"}


def is_run_dir(path: Path) -> bool:
    return path.name.endswith(RUN_SUFFIXES) or bool(_PROF_DIR.match(path.name))


def run_dir_of(path: Path) -> Path | None:
    """The nearest ``*_ascend_pt`` / ``*_ascend_ms`` (or, failing that, ``PROF_*``) directory above."""
    prof = None
    for parent in path.parents:
        if parent.name.endswith(RUN_SUFFIXES):
            return parent
        if prof is None and _PROF_DIR.match(parent.name):
            prof = parent
    return prof


def is_timeline_db(path: Path) -> bool:
    return bool(_DB_FILE.match(path.name))


def is_text_export(path: Path) -> bool:
    """``trace_view.json`` of a run, or a JSON file of msprof's text export, by name and place."""
    if path.name == TRACE_VIEW:
        return path.parent.name == OUTPUT_DIR
    return path.parent.name == MSPROF_OUTPUT and bool(_MSPROF_JSON.match(path.name) or _PART_JSON.match(path.name))


def is_export_db(path: Path) -> bool:
    """A profiler DB where the exporters put it: ``ASCEND_PROFILER_OUTPUT/``, or a ``PROF_*``
    directory (or its ``mindstudio_profiler_output/``) for msprof's."""
    if not is_timeline_db(path):
        return False
    if not path.name.startswith("msprof_"):
        return path.parent.name == OUTPUT_DIR
    prof = path.parent.parent if path.parent.name == MSPROF_OUTPUT else path.parent
    return bool(_PROF_DIR.match(prof.name))


def load_json(path: Path, dropped: Losses | None = None) -> Any:
    """A small JSON file's value; None when it cannot be read. Values nested too deep for any
    decoder are replaced (counted in ``dropped``), the rest of the file read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        data, where = cut_deep(data, 1)
        if not where:
            return _python_json(data)
    if dropped is not None:
        dropped.add(Stat.VALUE_TOO_DEEP, len(where), TOO_DEEP)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _python_json(data)


def _python_json(data: bytes) -> Any:
    """``data`` as Python's json reads it (NaN, Infinity, a bad byte): one such value does not cost
    the rest of the file (its rank_id, its clock); None when it is not JSON even so."""
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def rank_of(run: Path, dropped: Losses | None = None) -> int | None:
    """From ``profiler_info_{rank}.json`` (name, else ``rank_id``, an int or a string), or msprof's
    ``device_*/info.json.N``; None when the run was not distributed. What cannot be read of those
    files is counted in ``dropped``."""
    for info in sorted(run.glob("profiler_info*.json")):
        m = INFO_FILE.match(info.name)
        if not m:
            continue
        if m.group(1) is not None:
            return int(m.group(1))
        content = load_json(info, dropped)
        if isinstance(content, dict):
            rank = as_rank(content.get("rank_id"))
            if rank is None and isinstance(content.get("ms_profiler_info"), dict):
                rank = as_rank(content["ms_profiler_info"].get("rank_id"))
            if rank is not None:
                return rank
            if dropped is not None and rank_unreadable(content.get("rank_id")):
                dropped.add(Stat.RANK_UNREADABLE, 1, f"{shown(info.name)}: rank_id that is not a rank: read without it")
    for info in sorted(run.glob("device_*/info.json.*")):
        if _DEVICE_INFO.match(info.name):
            content = load_json(info)
            if isinstance(content, dict):
                rank = as_rank(content.get("rank_id"))
                if rank is not None:
                    return rank
    return None


def source_data(
    path: Path,
    fmt: str,
    threads: dict[ThreadKey, ThreadInfo],
    dropped: Losses,
    metadata_records: int = 0,
    rank: int | None = None,
) -> SourceData:
    """A run file's events, with the rank and role its run directory states (epoch clock)."""
    run = run_dir_of(path)
    if rank is None and run is not None:
        rank = rank_of(run, dropped)
    return SourceData(
        path=path,
        format=fmt,
        clock=UNIX_EPOCH,
        threads=threads,
        role_hint=metadata_role(run, dropped) if run else None,
        rank_hint=rank,
        tag_hint=run.name if run else None,
        host=host_of(None, run.name) if run else None,
        dropped=dropped,
        metadata_records=metadata_records,
    )


def metadata_role(run: Path, dropped: Losses | None = None) -> str | None:
    """The ``role`` key of ``profiler_metadata.json`` (verl writes it), if any."""
    content = load_json(run / METADATA_FILE, dropped)
    if isinstance(content, dict) and isinstance(content.get("role"), str) and content["role"]:
        return content["role"]
    return None


def path_hints(path: Path, root: Path) -> PathFacts:
    """What the folders around a run say (:func:`tracemerge.naming.paths.ascend_run_facts`), with the
    rank its profiler_info states."""
    run = run_dir_of(path)
    if run is None:
        return path_facts(path, root)
    facts = ascend_run_facts(run, root)
    if facts.file_rank_label is not None:
        return facts  # an engine's run: its profiler_info rank is engine-local, its label says it
    return replace(facts, rank=rank_of(run))


def unusable_reason(directory: Path) -> str | None:
    """Why a run directory holds nothing to merge (raw data only, or summaries only), else None."""
    if not is_run_dir(directory):
        return None
    output = directory / OUTPUT_DIR
    if directory.name.endswith(RUN_SUFFIXES):
        if not output.is_dir():
            if any(directory.glob("PROF_*/mindstudio_profiler_output/msprof_*")) or any(
                directory.glob("PROF_*/msprof_*.db")
            ):
                return None
            return (
                "raw Ascend profiling data only (no ASCEND_PROFILER_OUTPUT); parse it first with "
                f"python -c \"from torch_npu.profiler.profiler import analyse; analyse('{directory}')\""
            )
        if not (output / "trace_view.json").is_file() and not any(is_timeline_db(p) for p in output.iterdir()):
            return "ASCEND_PROFILER_OUTPUT holds summaries only (no trace_view.json or profiler DB): no timeline"
        return None
    if any(p.name.endswith(RUN_SUFFIXES) for p in directory.parents):
        return None  # a PROF_ directory inside an _ascend_pt run: the run directory speaks for it
    has_timeline = any(directory.glob("mindstudio_profiler_output/msprof_*.json")) or any(
        directory.glob("**/msprof_*.db")
    )
    if not has_timeline:
        return (
            "raw msprof data only (no mindstudio_profiler_output); export it first with "
            f"msprof --export=on --output={directory}"
        )
    return None


# -- one run, several exports -------------------------------------------------------------------
# A run exported more than once holds its events several times: trace_view.json (or, without it,
# the profiler DB) holds every msprof event of the run; in a bare PROF_* directory msprof_{ts}.json
# (as trace_view.json over the DB, the text export first) holds what msprof_{ts}.db, msprof_tx_*.json
# and step_trace_*.json hold, and an export written again (a later stamp) what the earlier one holds.
# One export is read: the first in that order, newest stamp first, that is whole (each of its files
# begins and ends as its kind does), else the first of which a file is readable (its damage is
# counted). The others are claimed, not read, and named with the file read in their place.


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
    m = _MSPROF_JSON.match(path.name)
    if m is None or m.group("slice") is None:
        return [path]
    found = []
    for other in path.parent.glob(f"msprof_slice_*_{m.group('stamp')}.json"):
        o = _MSPROF_JSON.match(other.name)
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
    if _PROF_DIR.match(prof.name):
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
    return path.parent.name == MSPROF_OUTPUT and _MSPROF_JSON.match(path.name) is not None


def _msprof_texts(prof: Path) -> list[Path]:
    """The msprof_{ts}.json exports (first slices of sliced ones) of a PROF_* directory, newest first."""
    found = [
        p
        for p in (prof / MSPROF_OUTPUT).glob("msprof_*.json")
        if _MSPROF_JSON.match(p.name) is not None and slices_of(p)[0] == p
    ]
    return sorted(found, key=_text_order, reverse=True)


def _text_order(export: Path) -> tuple[int, bool, str]:
    """Sort key, the export read first largest: the later stamp, then an unsliced file over slices."""
    m = _MSPROF_JSON.match(export.name)
    return _stamp(export), m is not None and m.group("slice") is None, export.name


def _msprof_dbs(prof: Path) -> list[Path]:
    """The msprof_{ts}.db exports of a PROF_* directory, newest first."""
    found = [p for p in [*prof.glob("msprof_*.db"), *prof.glob(f"{MSPROF_OUTPUT}/msprof_*.db")] if is_timeline_db(p)]
    return sorted(found, key=lambda p: (_stamp(p), str(p)), reverse=True)


def _stamp(path: Path) -> int:
    """The export time in the name (msprof_{YYYYmmddHHMMSS}...): a later export has a larger one."""
    m = _EXPORT_STAMP.match(path.name)
    return int(m.group(1)) if m else -1
