"""The public entry point: ``merge(inputs, output)`` runs discover → read → align → lay out → write.

Each file's heavy work is :func:`~tracemerge.run.filework.process_file`, a plain function of the file
and a small :class:`~tracemerge.run.filework.FileJob`: it reads the file once, lays its events out and
encodes them into a chunk of its own, and returns a :class:`~tracemerge.plan.types.FileScan` summary;
the derived phase tracks are one more such unit (:mod:`tracemerge.phases.derived_unit`). The plan is then made from the
summaries alone, and the output assembled from the chunks in a temporary file next to it, renamed
into place only when whole. Where files are found and processed is the executor's business
(:mod:`tracemerge.run.executors`: in-process, local worker processes, or the nodes of a Ray cluster
that hold them); the output is byte-identical whichever runs.

Perfetto output needs one read per file: a chunk refers to tracks by content-derived uuids and
stamps events on its sequence's own clock, which a clock snapshot written before the chunk places
on the trace's timeline. Chrome JSON names pids, tids and times relative to the run start in
every event, so it is encoded in a second pass, with the plan, over the events the first read laid
out and kept (see FileLayout.save); nothing is read twice.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

from msgspec.structs import replace

from tracemerge.analysis.steps import stored, summary
from tracemerge.clock import AUTOMATIC, AlignOptions
from tracemerge.clock.offsets import unmatched
from tracemerge.clock.runs import LATEST, check_choice, held
from tracemerge.core.errors import FatalError, shown
from tracemerge.core.stats import Stat
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.phases.derived_unit import encode_derived, steps_window
from tracemerge.phases.rules import AUTO_PHASES, PhaseOptions
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.machines import machine_notes
from tracemerge.plan.types import (
    FileScan,
    UnitPlan,
)
from tracemerge.report.findings import Findings
from tracemerge.report.outcomes import Merged, build_report, json_precision_note
from tracemerge.report.run_report import RunReport
from tracemerge.run.executors import Executor
from tracemerge.run.filework import FileJob, FileOutcome
from tracemerge.run.output import assemble, check_output, check_report, work_dir
from tracemerge.run.passes import encode_again, writes_chunk_first
from tracemerge.run.reading import Asked, FirstRead, Runner, asked_of, discover_inputs, read_all, with_archives
from tracemerge.run.split import Part, groups, step_windows, write_parts
from tracemerge.select import EVERYTHING, Selection
from tracemerge.store.file_layout import DEFAULT_BUDGET
from tracemerge.writers import Writer, writer_for

BEFORE_1970 = "the run starts before 1970 on the wall clock (a negative epoch time, or an --offset)"


def merge(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    jobs: int = 0,
    executor: Executor | None = None,
    split_by: str | None = None,
    memory_budget: int = DEFAULT_BUDGET,
    selection: Selection = EVERYTHING,
    clocks: AlignOptions = AUTOMATIC,
    phase_rules: PhaseOptions = AUTO_PHASES,
    metrics_map: MetricsMap = NO_MAP,
    run: str = LATEST,
    force: bool = False,
    strict: bool = False,
    also_writes: Sequence[str | os.PathLike[str]] = (),
    on_plan: Callable[[RunReport], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RunReport:
    """Merge every trace found under ``inputs`` into one trace at ``output``.

    ``format`` is ``"perfetto"``, ``"json"`` or ``"json.gz"``; by default the output's extension
    decides (``.json``, ``.json.gz``, anything else Perfetto protobuf). ``jobs`` worker processes
    read and encode files in parallel (0: one per CPU when the inputs are large enough to gain);
    ``executor`` (:mod:`tracemerge.run.executors`, e.g. a ``RayExecutor``) replaces them when given.
    ``split_by`` (``"role"``, ``"host"`` or ``"step-window"``) writes one trace per group beside
    ``output`` and an index of them instead of ``output`` itself (:mod:`tracemerge.run.split`).
    ``memory_budget`` is how many events a file's layout holds in memory before it spills them to
    a temporary file beside the output (about 100 bytes each). ``selection`` says which
    processes, time window and slice durations to keep (everything by default). ``clocks`` says
    how files are placed on one timeline (:mod:`tracemerge.clock`: automatic by default);
    ``phase_rules`` which phase rules derive the Phases and Pipeline tracks, and which steps to keep.
    ``metrics_map`` places metric series whose labels name no role and rank.
    ``run`` says which runs to merge when the inputs' timelines lie far apart
    (:mod:`tracemerge.clock.runs`): ``"latest"`` (the default), ``"all"``, a run's number (1 the
    earliest) or the start of its UTC start time; the report lists them all (``report.runs``).
    ``force`` lets ``output`` replace one of the inputs (which is then left out). ``strict``
    writes nothing when the output would be incomplete: a file skipped or an input event lost
    (:attr:`RunReport.incomplete`; FatalError naming the first).
    ``also_writes`` names the files the caller writes once the merge is done (``--report``): each
    is refused before anything is read as the output would be, and when it is the output or an input.
    ``on_plan`` is called with the report of what was found before the output is assembled.

    Raises :class:`~tracemerge.core.errors.FatalError` when no output can be produced; then nothing
    is written. Files that cannot be used are listed in ``report.skipped`` and the run goes on.
    """
    started = time.perf_counter()
    out_path = Path(output)
    try:
        writer = writer_for(out_path, format)
    except ValueError as exc:
        raise FatalError(str(exc)) from None
    progress = on_progress or (lambda _msg: None)
    try:
        run = check_choice(run)
    except ValueError as exc:
        raise FatalError(str(exc)) from None
    runner, asked = asked_of(writer, selection, clocks, phase_rules, metrics_map, memory_budget, jobs, executor, run)
    with ExitStack() as on_error:
        on_error.enter_context(runner)  # left (a cluster disconnected) at once if nothing can be merged
        unpack_into = lambda: _kept_till_the_end(on_error, work_dir(out_path))  # noqa: E731
        found = discover_inputs(runner, inputs, out_path, force, unpack_into)
        asked = with_archives(asked, found.unpacked)
        taken = {Path(p).resolve() for p in also_writes}
        for path in also_writes:
            check_report(Path(path), out_path, found.named)
        progress(f"found {len(found.candidates)} trace files")
        work = work_dir(out_path)
        entered = on_error.pop_all()

    try:
        with entered:
            reader = Runner(runner, progress)
            first = read_all(reader, found.candidates, asked, work, found.findings)
            placed = _placement_findings(first, asked.clocks, writer)
            asked = replace(asked, selection=steps_window(selection, phase_rules.steps, first.model, first.plan))
            numbers = summary(first.model, {p.identity: p.name for p in first.plan.processes})
            if (runs_held := held(first.findings.runs)) is not None:  # which of the inputs' runs the trace is
                numbers["run"] = runs_held
            first = _with_phase_summary(first, numbers)
            files, encoding_said = _encode(reader, first, asked)
            stages = [found.findings, first.findings, placed, encoding_said]
            report = _report(out_path, writer, stages, first, files, numbers)
            if strict and (problem := report.incomplete) is not None:
                raise FatalError(f"--strict: {problem}")
            if on_plan:
                on_plan(report)
            parts: list[Path] = []
            left_out: list[str] = []  # files a part of --split-by step-window could not take
            if split_by is None:
                assemble(first.plan, files, writer, out_path, work)
            else:
                may_write = lambda target: check_output(target, found.named, force, taken)  # noqa: E731
                parts = _write_parts(split_by, reader, first, asked, files, out_path, strict, work, may_write, left_out)
            size = sum(p.stat().st_size for p in parts) if parts else out_path.stat().st_size
    except OSError as exc:
        raise FatalError(f"{shown(out_path)}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - started
    skipped = [*report.skipped, *left_out]
    return replace(report, skipped=skipped, parts=parts, output_bytes=size, seconds=seconds)


def _kept_till_the_end(stack: ExitStack, folder: Path) -> Path:
    """``folder``, removed when the merge is over (however it ends)."""
    stack.callback(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _placement_findings(first: FirstRead, clocks: AlignOptions, writer: Writer) -> Findings:
    """What the report says of the placement: offsets that named no process, a run before 1970,
    the machines of a multi-host trace (those Perfetto writes)."""
    said = Findings()
    for rule in unmatched(clocks.offsets, (p.identity for p in first.plan.processes)):
        said.notes.append(f"offset {rule.text()} names no process of this run: not applied")
    if first.plan.wall_clock and first.plan.base_ns < 0:  # written as placed (the clock snapshot shifts)
        said.notes.append(BEFORE_1970)
    if writer.one_pass:
        said.notes += machine_notes(first.plan)
    return said


def _write_parts(
    split_by: str,
    run: Runner,
    first: FirstRead,
    asked: Asked,
    files: dict[Path, EncodedFile],
    out_path: Path,
    strict: bool,
    work: Path,
    may_write: Callable[[Path], None],
    left_out: list[str],
) -> list[Path]:
    """``--split-by``: each part assembled from the chunks in ``work``, and their index; a file a
    part could not take is named in ``left_out``."""
    writer = asked.writer
    assert writer is not None
    return write_parts(
        split_by,
        _parts(split_by, run, first, asked, files, strict, left_out),
        out_path,
        writer.extensions,
        work,
        first.plan,
        writer.name,
        lambda sub, part_files, staged: assemble(sub, part_files, writer, staged, work, keep=first.derived_path),
        may_write,
    )


def _chunk(job: FileJob) -> Path:
    assert job.chunk is not None  # a merge's jobs all name their chunk
    return job.chunk


def _with_phase_summary(first: FirstRead, numbers: dict) -> FirstRead:
    """``first`` with the summary numbers kept in its plan (the trace holds them where it has
    derived tracks with phases)."""
    if first.derived is None or first.model.empty:
        return first
    return replace(first, plan=replace(first.plan, phase_summary=stored(numbers)))


def _encode(run: Runner, first: FirstRead, asked: Asked) -> tuple[dict[Path, EncodedFile], Findings]:
    """Encodes, with the plan, what the first read could not: the derived tracks; for Chrome JSON
    every file; for Perfetto the files whose threads overlap another file's of the same process in
    time (they need their own copies) and the files a --window cuts. Files wholly outside the
    window are left out. Returns each unit encoded, by path, and the files left out as they
    changed (or were lost) since they were read."""
    writer, plan, derived = asked.writer, first.plan, first.derived
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


def _report(
    out_path: Path,
    writer: Writer,
    stages: list[Findings],
    first: FirstRead,
    files: dict[Path, EncodedFile],
    numbers: dict,
) -> RunReport:
    """The run report, once every file is encoded: what the ``stages`` said, then what was
    merged, left out and lost (each file's losses, the tracker scalars'), and the phase summary
    (``numbers``)."""
    in_order = [files[sc.path] for sc in first.scans]
    notes = []
    for f in first.scalars:
        placed = sum(1 for step in f.values if step in first.model.scalars)
        notes.append(
            f"{shown(f.path)}: tracker scalars of {len(f.values)} steps, {placed} of them on steps of the trace"
        )
    if (precision := json_precision_note(writer, [f.scan for f in in_order], first.plan)) is not None:
        notes.append(precision)
    said = Findings(notes=notes, losses=[*(f.encoded.dropped for f in in_order), first.scalars_dropped])
    merged = Merged(first.plan, in_order, first.model.left_out, numbers)
    return build_report(out_path, writer.name, [*stages, said], merged)


def _parts(
    split_by: str,
    run: Runner,
    first: FirstRead,
    asked: Asked,
    files: dict[Path, EncodedFile],
    strict: bool,
    left_out: list[str],
) -> Iterable[tuple[Part, dict[Path, EncodedFile]]]:
    """The parts of ``--split-by``, each with its files encoded."""
    if split_by == "step-window":
        return _step_parts(first, asked, files, run, strict, left_out)
    scan_of = {path: f.scan for path, f in files.items()}
    return ((part, files) for part in groups(split_by, first.plan, scan_of, first.derived_path))


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


def _step_parts(
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
