"""Ascend profiling directories: where a run's files are, and what they say about rank and role.

A torch_npu run is a directory ``{host}_{pid}_{ts}_ascend_pt`` (MindSpore: ``_ascend_ms``) holding
``profiler_info_{rank}.json``, ``profiler_metadata.json`` and, once parsed, ``ASCEND_PROFILER_OUTPUT/``.
Bare msprof runs are ``PROF_*`` directories. The text and DB readers share these helpers
(:mod:`tracemerge.sources.ascend.exports` chooses which export of a run is read when it has several).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
from msgspec.structs import replace

from tracemerge.core.bounds import TOO_DEEP, cut_deep
from tracemerge.core.errors import shown
from tracemerge.core.model import UNIX_EPOCH, SourceData, ThreadInfo, ThreadKey, as_rank, rank_unreadable
from tracemerge.core.stats import Losses, Stat
from tracemerge.naming.paths import PathFacts, ascend_run_facts, path_facts
from tracemerge.sources.base import host_of

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
PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+$")
INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
METADATA_FILE = "profiler_metadata.json"
_DB_FILE = re.compile(r"^(?:ascend_pytorch_profiler|ascend_mindspore_profiler)(?:_(\d+))?\.db$|^msprof_\d+\.db$")
# msprof's text export: the whole timeline, msprof_{ts}.json (msprof_slice_{i}_{ts}.json when cut
# into slices), and files that repeat parts of it (msprof_tx_{ts}.json, step_trace_{ts}.json).
MSPROF_JSON = re.compile(r"^msprof_(?:slice_(?P<slice>\d+)_)?(?P<stamp>\d+.*)\.json$")
_PART_JSON = re.compile(r"^(?:msprof_tx|step_trace)_(?:slice_\d+_)?\d+.*\.json$")
_DEVICE_INFO = re.compile(r"^info\.json\.\d+$")


def is_run_dir(path: Path) -> bool:
    return path.name.endswith(RUN_SUFFIXES) or bool(PROF_DIR.match(path.name))


def run_dir_of(path: Path) -> Path | None:
    """The nearest ``*_ascend_pt`` / ``*_ascend_ms`` (or, failing that, ``PROF_*``) directory above."""
    prof = None
    for parent in path.parents:
        if parent.name.endswith(RUN_SUFFIXES):
            return parent
        if prof is None and PROF_DIR.match(parent.name):
            prof = parent
    return prof


def is_timeline_db(path: Path) -> bool:
    return bool(_DB_FILE.match(path.name))


def is_text_export(path: Path) -> bool:
    """``trace_view.json`` of a run, or a JSON file of msprof's text export, by name and place."""
    if path.name == TRACE_VIEW:
        return path.parent.name == OUTPUT_DIR
    return path.parent.name == MSPROF_OUTPUT and bool(MSPROF_JSON.match(path.name) or _PART_JSON.match(path.name))


def is_export_db(path: Path) -> bool:
    """A profiler DB where the exporters put it: ``ASCEND_PROFILER_OUTPUT/``, or a ``PROF_*``
    directory (or its ``mindstudio_profiler_output/``) for msprof's."""
    if not is_timeline_db(path):
        return False
    if not path.name.startswith("msprof_"):
        return path.parent.name == OUTPUT_DIR
    prof = path.parent.parent if path.parent.name == MSPROF_OUTPUT else path.parent
    return bool(PROF_DIR.match(prof.name))


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
