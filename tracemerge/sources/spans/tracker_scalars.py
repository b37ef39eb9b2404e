"""Step-keyed tracker scalars: the JSONL an experiment tracker's file logger writes.

One line per logged step, either verl's file logger shape ``{"step": 12, "data": {"timing_s/gen":
41.2, ...}}`` or flat ``{"step": 12, "generate/trajectory_time_llm_mean": 3.1, ...}`` (SkyRL's
trainer metrics; ``global_step`` or ``_step`` also name the step). The values have no time of
their own: they are attached to the steps of the merged trace (:mod:`tracemerge.phases`), as args
of each Pipeline step slice and as counter samples at its start.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tracemerge.core.model import SourceData
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.base import read_bytes
from tracemerge.sources.json.lines import JsonLines
from tracemerge.sources.spans.recognise import SCALARS_NAME as NAME
from tracemerge.sources.spans.recognise import STEP_KEYS, step_of
from tracemerge.store.file_layout import FileLayout


def _scalars(obj: dict) -> dict[str, Any]:
    data = obj.get("data")
    if type(data) is dict:
        return data
    return {k: v for k, v in obj.items() if k not in STEP_KEYS}


def read(path: Path, layout: FileLayout) -> SourceData:
    dropped = Losses()
    values: dict[int, dict[str, float]] = {}
    lines = JsonLines(read_bytes(path))
    for _, obj in lines:
        step = step_of(obj) if type(obj) is dict else None
        if step is None:
            dropped.add(Stat.LINE_UNREADABLE, 1, "line is not a step record")
            continue
        found = values.setdefault(step, {})
        for key, value in _scalars(obj).items():
            if type(value) in (int, float) and _finite(value):
                found[str(key)] = value
            else:
                dropped.add(Stat.TRACKER_VALUE_NOT_NUMBER, 1, "tracker value that is not a finite number (not drawn)")
    lines.account(path, dropped)
    return SourceData(path=path, format=NAME, clock=None, threads={}, dropped=dropped, step_values=values)


def _finite(value: float) -> bool:
    """Whether a number is finite as a double (an integer beyond any double is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
