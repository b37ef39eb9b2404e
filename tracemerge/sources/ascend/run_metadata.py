"""The metadata files beside an Ascend run's traces, read for what they say of the run.

``profiler_info_{rank}.json`` gives the rank (its name, else ``rank_id``) and the collection's
clocks: ``end_info`` pairs the realtime and CLOCK_MONOTONIC_RAW at the end, ``start_info`` the
monotonic time at the start, so the start's wall time is the end's less the monotonic span.
``profiler_metadata.json`` gives verl's ``role`` and Megatron's parallel groups. Both are listed in
the run report as used (with what each gave), never as files that are not traces.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from tracemerge.core.model import as_rank
from tracemerge.sources.ascend.dirs import INFO_FILE, METADATA_FILE, is_run_dir, load_json


def metadata_of(path: Path) -> str | None:
    """What a metadata file beside an Ascend run's traces gives, or None when ``path`` is none."""
    if not is_run_dir(path.parent):
        return None
    named = INFO_FILE.match(path.name)
    if named is not None:
        content = load_json(path)
        content = content if isinstance(content, dict) else {}
        rank = int(named.group(1)) if named.group(1) is not None else _rank_id(content)
        said = [f"rank {rank}" if rank is not None else "no rank (not distributed)"]
        window = collection_window(content)
        if window is not None:
            said.append(f"collected {_utc(window[0])} to {_utc(window[1])}")
        return "Ascend run metadata: " + ", ".join(said)
    if path.name == METADATA_FILE:
        content = load_json(path)
        keys = sorted(content) if isinstance(content, dict) else []
        what = f"role {content['role']}" if "role" in keys and isinstance(content["role"], str) else "no role"
        return f"Ascend run metadata: {what}" + (f" ({', '.join(keys)})" if keys else "")
    return None


def collection_window(info: dict[str, Any]) -> tuple[int, int] | None:
    """The collection's start and end, Unix ns, from profiler_info's start_info and end_info."""
    start, end = info.get("start_info"), info.get("end_info")
    if not isinstance(end, dict):
        return None
    end_wall, end_mono = end.get("collectionTimeEnd"), end.get("MonotonicTimeEnd")
    if not _is_int(end_wall):
        return None
    start_mono = start.get("start_monotonic") if isinstance(start, dict) else None
    if not (_is_int(end_mono) and _is_int(start_mono)) or start_mono > end_mono:
        return end_wall, end_wall
    return end_wall - (end_mono - start_mono), end_wall


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _utc(ns: int) -> str:
    """Unix ns as an ISO UTC time to the microsecond."""
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rank_id(content: dict[str, Any]) -> int | None:
    """``rank_id`` (an int or a string), MindSpore's inside ``ms_profiler_info``."""
    ms = content.get("ms_profiler_info")
    return as_rank(content.get("rank_id", ms.get("rank_id") if isinstance(ms, dict) else None))
