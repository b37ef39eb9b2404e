"""What ``summary`` and ``diff`` take: a run directory or trace files (summarized now), a trace
tracemerge wrote (the summary it keeps), or a summary JSON file; each checked as a
:class:`~tracemerge.analysis.summary_model.Summary` before it is compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracemerge.analysis.summary_model import checked
from tracemerge.clock.runs import LATEST, names_held
from tracemerge.compare.diff import read_numbers
from tracemerge.core.errors import TracemergeError, shown
from tracemerge.core.exit_status import EXIT_FATAL
from tracemerge.core.gc_pause import no_cyclic_gc
from tracemerge.discovery.archives import is_archive
from tracemerge.readback.damage import Unreadable


class NoSummary(TracemergeError):
    """No summary can be had of the path: the message says why in one line; ``status`` is the exit
    status to give."""

    def __init__(self, message: str, status: int = EXIT_FATAL) -> None:
        super().__init__(message)
        self.status = status


def numbers_of(path: Path, phase_rules: object = None, clocks: object = None, run: str = LATEST) -> dict:
    """The checked summary of ``path`` as its JSON (see the module's text). A trace file that keeps
    no summary is read as an input trace, placed by ``clocks`` and derived by ``phase_rules``; of
    the runs among the files read, the one ``run`` names (:func:`tracemerge.clock.runs.choose`).
    A stored summary is of the run it records: ``run`` must name it (or be ``latest``)."""
    if not path.exists():
        raise NoSummary(f"{shown(path)}: no such file or directory")
    if not path.is_dir() and not path.is_file():
        raise NoSummary(f"{shown(path)}: not a regular file (a FIFO, socket or device is not read)")
    numbers = None if path.is_dir() or is_archive(path) else _stored(path)  # a run (or its archive)
    if numbers is None:
        part = split_part(path) if path.is_file() else None
        if part is not None:
            raise NoSummary(part)
        options: dict[str, Any] = {"phase_rules": phase_rules} if phase_rules is not None else {}
        options |= {"clocks": clocks} if clocks is not None else {}
        # Reading a run takes the whole engine: imported only then (not to diff two summaries),
        # with the cyclic collector off (see tracemerge.core.lazy).
        with no_cyclic_gc():
            from tracemerge.analysis.summarize import summary_numbers
        try:
            return summary_numbers([path], **options, run=run)
        except TracemergeError as exc:
            if str(exc).startswith("--run "):  # the run asked is not among the files: say whose
                raise NoSummary(f"{shown(path)}: {exc}") from None
            if path.is_file() and ("already a tracemerge output" in str(exc) or _perfetto(path)):
                raise NoSummary(
                    f"{shown(path)}: a trace keeping no phase summary (tracemerge stores one when its merge"
                    " finds steps or phases): summarize the run's own files"
                ) from None
            raise
    try:
        numbers = checked(numbers, shown(path))
    except ValueError as exc:
        raise NoSummary(str(exc)) from None
    if not names_held(numbers.get("run") or _ONE_RUN, run):
        raise NoSummary(f"{shown(path)}: --run {run}: it keeps the summary of {_held_text(numbers)}")
    return numbers


# What a stored summary without a ``run`` record is of: the one run of its inputs.
_ONE_RUN = {"number": 1, "start_utc": "", "runs": 1}


def _held_text(numbers: dict) -> str:
    held_run = numbers.get("run")
    if not held_run:
        return "one run (its inputs held one)"
    if held_run["number"] is None:
        return f"all {held_run['runs']} runs of its inputs"
    return f"run {held_run['number']} of {held_run['runs']} (started {held_run['start_utc']}) alone"


def _perfetto(path: Path) -> bool:
    return path.name.endswith((".pftrace", ".pftrace.gz", ".perfetto-trace", ".pb"))


def _stored(path: Path) -> dict | None:
    """The summary a trace tracemerge wrote keeps, or a summary JSON file's; None for a file
    of another tool (read as an input trace)."""
    try:
        return read_numbers(path)
    except Unreadable as exc:
        raise NoSummary(str(exc), exc.status) from None
    except (OSError, ValueError, RecursionError) as exc:
        raise NoSummary(f"{shown(path)}: cannot be read ({type(exc).__name__})") from None


def split_part(path: Path) -> str | None:
    """When ``path`` is a part of a ``--split-by`` merge (an index beside lists it) that keeps no
    summary: a line saying where the run's summary is."""
    for index in sorted(path.parent.glob("*.index.json")):
        try:
            doc = json.loads(index.read_bytes())
            files = [t["file"] for t in doc["traces"]] if doc.get("producer") == "tracemerge" else []
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
        if path.name not in files:
            continue
        keeping = [path.parent / f for f in files if f != path.name and _keeps_summary(path.parent / f)]
        where = f"the summary is in {shown(keeping[0])}" if keeping else "no part keeps a summary"
        return f"{shown(path)}: a part of a --split-by merge (index {shown(index)}) keeping no phase summary; {where}"
    return None


def _keeps_summary(path: Path) -> bool:
    try:
        return read_numbers(path) is not None
    except (TracemergeError, OSError, ValueError):
        return False


def comparable(numbers: dict, where: str) -> dict:
    """``numbers`` when each of its steps is a row of numbers; :class:`NoSummary` for a summary an
    older tracemerge stored (its steps as numbers or lines of text), which cannot be compared."""
    if not all(isinstance(s, dict) for s in numbers["steps"]):
        raise NoSummary(f"{where}: an older tracemerge wrote its summary (no numbers per step): merge the run again")
    return numbers
