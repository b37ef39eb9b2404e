"""Ascend profiling directories: where a run's files are, and what they say about rank and role.

A torch_npu run is a directory ``{host}_{pid}_{ts}_ascend_pt`` (MindSpore: ``_ascend_ms``) holding
``profiler_info_{rank}.json``, ``profiler_metadata.json`` and, once parsed, ``ASCEND_PROFILER_OUTPUT/``.
Bare msprof runs are ``PROF_*`` directories. The text and DB readers share these helpers.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from tracemerge.model import UNIX_EPOCH, SourceData, ThreadInfo, ThreadKey, as_rank
from tracemerge.sources.common import host_of

RUN_SUFFIXES = ("_ascend_pt", "_ascend_ms")
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
# The track MSTX markers go to, in both the text and the DB export.
MSTX_THREAD: ThreadKey = ("MSTX", None)
_PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+$")
_INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_DB_FILE = re.compile(r"^(?:ascend_pytorch_profiler|ascend_mindspore_profiler)(?:_(\d+))?\.db$|^msprof_\d+\.db$")
_MSPROF_JSON = re.compile(r"^msprof_(?:slice_)?\d+.*\.json$")
_DEVICE_INFO = re.compile(r"^info\.json\.\d+$")


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


def is_msprof_json(path: Path) -> bool:
    return bool(_MSPROF_JSON.match(path.name)) and path.parent.name == "mindstudio_profiler_output"


def _load_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def rank_of(run: Path) -> int | None:
    """From ``profiler_info_{rank}.json`` (name, else ``rank_id``, an int or a string), or msprof's
    ``device_*/info.json.N``; None when the run was not distributed."""
    for info in sorted(run.glob("profiler_info*.json")):
        m = _INFO_FILE.match(info.name)
        if not m:
            continue
        if m.group(1) is not None:
            return int(m.group(1))
        content = _load_json(info)
        if isinstance(content, dict):
            rank = as_rank(content.get("rank_id"))
            if rank is None and isinstance(content.get("ms_profiler_info"), dict):
                rank = as_rank(content["ms_profiler_info"].get("rank_id"))
            if rank is not None:
                return rank
    for info in sorted(run.glob("device_*/info.json.*")):
        if _DEVICE_INFO.match(info.name):
            content = _load_json(info)
            if isinstance(content, dict):
                rank = as_rank(content.get("rank_id"))
                if rank is not None:
                    return rank
    return None


def source_data(
    path: Path,
    fmt: str,
    threads: dict[ThreadKey, ThreadInfo],
    dropped: Counter[str],
    metadata_records: int = 0,
    rank: int | None = None,
) -> SourceData:
    """A run file's events, with the rank and role its run directory states (epoch clock)."""
    run = run_dir_of(path)
    if rank is None and run is not None:
        rank = rank_of(run)
    return SourceData(
        path=path,
        format=fmt,
        clock=UNIX_EPOCH,
        threads=threads,
        role_hint=metadata_role(run) if run else None,
        rank_hint=rank,
        tag_hint=run.name if run else None,
        host=host_of(None, run.name) if run else None,
        dropped=dropped,
        metadata_records=metadata_records,
    )


def metadata_role(run: Path) -> str | None:
    """The ``role`` key of ``profiler_metadata.json`` (verl writes it), if any."""
    content = _load_json(run / "profiler_metadata.json")
    if isinstance(content, dict) and isinstance(content.get("role"), str) and content["role"]:
        return content["role"]
    return None


def path_hints(path: Path, root: Path) -> tuple[str | None, int | None]:
    """Role: the directory holding the run (verl's ``{save_path}/{role}/..._ascend_pt``; when the
    run directory itself is given, only if that directory is named like a role); rank: from the
    run's profiler_info."""
    from tracemerge.discover import ROLE_WORDS
    from tracemerge.discover import path_hints as generic_hints  # discover imports the sources

    run = run_dir_of(path)
    if run is None:
        return generic_hints(path, root)
    role = run.parent.name or None
    if run.resolve() == root.resolve() and (role or "").lower() not in ROLE_WORDS:
        role = None  # the run directory itself was given: its parent names a role only if it reads like one
    return role, rank_of(run)


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
