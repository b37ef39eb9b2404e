"""The encode stage: once the plan is made, what the files' first read could not encode, encoded
with it (:func:`encode_with_plan`), and the files of each part of ``--split-by step-window``
encoded again, cut to its step (:func:`step_parts`).

A one-pass format's chunks are written as the files are read: only a file whose threads overlap
another file's of the same process in time (it needs copies of its own), or that a ``--window``
cuts, is read and encoded again. Chrome JSON is encoded here, every file, from the events its
first read kept (or read again, when a selection of processes was applied while reading).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from msgspec.structs import replace

from tracemerge.core.errors import FatalError, shown
from tracemerge.core.stats import Stat
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.types import FileScan, UnitPlan
from tracemerge.report.findings import Findings
from tracemerge.run.derived_unit import encode_derived
from tracemerge.run.filework import FileJob, FileOutcome
from tracemerge.run.passes import encode_again, writes_chunk_first
from tracemerge.run.reading import Asked, FirstRead, Runner
from tracemerge.run.split import Part, step_windows
from tracemerge.select import Selection


def encode_with_plan(run: Runner, first: FirstRead, asked: Asked) -> tuple[dict[Path, EncodedFile], Findings]:
    """Encodes, with the plan, what the first read could not: the derived tracks; for Chrome JSON
    every file; for Perfetto the files whose threads overlap another file's of the same process in
    time (they need their own copies) and the files a --window cuts. Files wholly outside the
    window are left out. Returns each unit encoded, by path, and the files left out as they
    changed (or were lost) since they were read."""
    writer, plan, derived = asked.writer, first.plan, first.derived
    assert writer is not None  # a merge's, whose jobs all have a chunk
    files = {sc.path: EncodedFile(sc, first.encoded[sc.path], _chunk(first.jobs[sc.path])) for sc in first.scans}
    if derived is not None:
        encoded = encode_derived(first.model, plan, writer, derived, asked.memory_budget, first.wide)
        files[derived.path] = EncodedFile(derived, encoded, derived.path)
    redo = []
    for u in plan.units:
        if u.path == first.derived_path:
            continue
        done, job = files[u.path], first.jobs[u.path]
        place, window = _local_window(asked.selection, u, done.scan)
        written = writes_chunk_first(job.pass_)
        if place == "outside" and written:  # its chunk is written: drop it
            files[u.path] = _left_out_file(done)
            continue
        if place == "inside":
            window = None
        if written and u.salts == done.encoded.salts and window is None:
            continue
        again = encode_again(job.pass_, writer, u, done.scan, done.encoded)
        redo.append(replace(job, pass_=again, salts=u.salts, selection=asked.selection, window=window))
    said = Findings()
    # A file read again describes itself anew: its summary replaces the first one.
    for outcome in run.map(redo, "encode") if redo else ():
        path = outcome.candidate.path
        if outcome.scan is None or outcome.encoded is None:
            said.skipped.append(_left_out(outcome))
            files[path] = _left_out_file(files[path], FILE_LOST if outcome.lost else FILE_CHANGED)
            continue
        files[path] = EncodedFile(outcome.scan, outcome.encoded, files[path].chunk)
    return files, said


def _chunk(job: FileJob) -> Path:
    assert job.chunk is not None  # a merge's jobs all name their chunk
    return job.chunk


def _intersect(
    a: tuple[int | None, int | None], b: tuple[int | None, int | None] | None
) -> tuple[int | None, int | None] | None:
    """The time two windows share (None: nothing); ``None`` for ``b`` is no window at all."""
    if b is None:
        return a
    lo = max((x for x in (a[0], b[0]) if x is not None), default=None)
    hi = min((x for x in (a[1], b[1]) if x is not None), default=None)
    return None if lo is not None and hi is not None and lo > hi else (lo, hi)


def _local_window(
    selection: Selection, unit: UnitPlan, scan: FileScan
) -> tuple[str, tuple[int | None, int | None] | None]:
    """Where a file lies against the selection's window ("inside", "cut" or "outside"), and the
    window in the file's own timestamps (None when there is no window)."""
    if selection.window is None or scan.local_min is None:
        return "inside", None
    start, end = selection.window
    lo = None if start is None else start - unit.shift_ns
    hi = None if end is None else end - unit.shift_ns
    first, last = scan.local_min, scan.local_min + (scan.ts_max - scan.ts_min if scan.ts_max is not None else 0)
    if (lo is not None and last < lo) or (hi is not None and first > hi):
        return "outside", (lo, hi)
    if (lo is None or first >= lo) and (hi is None or last <= hi):
        return "inside", (lo, hi)
    return "cut", (lo, hi)


FILE_CHANGED = "changed"
FILE_LOST = "lost"


def _left_out(outcome: FileOutcome, part: str = "") -> str:
    """The line a file that failed its second read leaves in the report: lost with its node or
    task (no other node holds it), or changed since the plan was made; ``part`` names the
    ``--split-by`` part it is left out of."""
    left = f"left out of {part}" if part else "left out"
    if outcome.lost:
        return f"{outcome.skipped}, {left}"
    return f"{shown(outcome.candidate.path)}: changed while being merged, {left} ({outcome.skipped or 'no events'})"


def _left_out_file(done: EncodedFile, why: str = "") -> EncodedFile:
    """A file wholly outside the --window (or, ``why`` FILE_CHANGED, one that changed while being
    merged): nothing of it is written, its chunk emptied; what it would have written counted."""
    dropped, filtered = done.encoded.dropped.copy(), Counter(done.encoded.filtered)
    for counts in done.encoded.written.values():
        if why == FILE_CHANGED:
            dropped.add(Stat.FILE_CHANGED, counts.total, "events of a file that changed while being merged")
            continue
        if why == FILE_LOST:
            dropped.add(Stat.FILE_LOST_WITH_NODE, counts.total, "events of a file lost with its node or task")
            continue
        filtered[Stat.FILTERED_OUTSIDE_WINDOW] += counts.slices + counts.instants + counts.counters
        filtered[Stat.FILTERED_FLOW_OUTSIDE_WINDOW] += counts.flows
    done.chunk.write_bytes(b"")
    nothing = replace(done.encoded, written={}, lanes=[], dropped=dropped, filtered=filtered)
    return replace(done, encoded=nothing)


def step_parts(
    first: FirstRead,
    asked: Asked,
    files: dict[Path, EncodedFile],
    run: Runner,
    strict: bool,
    left_out: list[str],
) -> Iterator[tuple[Part, dict[Path, EncodedFile]]]:
    """``--split-by step-window``: per step, every file that shares time with it encoded again, cut
    to it (and to the --window or --steps time asked) as ``--window`` cuts (Chrome JSON from the
    events its first read kept)."""
    plan, writer = first.plan, asked.writer
    assert writer is not None  # a merge's
    for group, step_window in step_windows(first.model.steps, plan.base_ns):
        window = _intersect(step_window, asked.selection.window)
        if window is None:
            continue
        units, jobs, part_files = [], [], dict(files)
        for u in plan.units:
            if u.path == first.derived_path:  # every part carries the whole run's Phases and Pipeline tracks
                units.append(u)
                continue
            job, done = first.jobs[u.path], files[u.path]
            place, local = _local_window(replace(job.selection, window=window), u, done.scan)
            if place == "outside":
                continue
            units.append(u)
            again = encode_again(job.pass_, writer, u, done.scan, done.encoded)
            jobs.append(replace(job, pass_=again, salts=u.salts, window=local))
        lost = set()
        for outcome in run.map(jobs, "split"):
            path = outcome.candidate.path
            if outcome.scan is None or outcome.encoded is None:  # as in the main pass; the part holds nothing of it
                left_out.append(_left_out(outcome, group))
                if strict:  # raised before any part is moved into place
                    raise FatalError(f"--strict: {left_out[-1]}")
                lost.add(path)
                continue
            part_files[path] = EncodedFile(outcome.scan, outcome.encoded, files[path].chunk)
        yield Part(group, [u for u in units if u.path not in lost], window), part_files
