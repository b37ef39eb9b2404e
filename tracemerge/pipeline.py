"""The public entry point: ``merge(inputs, output)`` runs discover → read → align → lay out → write.

Each file's heavy work is :func:`~tracemerge.run.filework.process_file`, a plain function of the file
and a small :class:`~tracemerge.run.filework.FileJob`: it reads the file once, lays its events out and
encodes them into a chunk of its own, and returns a :class:`~tracemerge.plan.types.FileScan` summary;
the derived phase tracks are one more such unit (:mod:`tracemerge.run.derived_unit`). The plan is then made from the
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
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.analysis.steps import stored, summary
from tracemerge.clock import AUTOMATIC, AlignOptions
from tracemerge.clock.offsets import unmatched
from tracemerge.clock.runs import LATEST, check_choice, held
from tracemerge.core.errors import FatalError, shown
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.phases.rules import AUTO_PHASES, PhaseOptions
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.machines import machine_notes
from tracemerge.report.findings import Findings
from tracemerge.report.run_report import RunReport
from tracemerge.run.derived_unit import steps_window
from tracemerge.run.encoding import encode_with_plan, step_parts
from tracemerge.run.executors import Executor
from tracemerge.run.outcomes import Merged, build_report, json_precision_note
from tracemerge.run.output import assemble, check_output, check_report, work_dir
from tracemerge.run.reading import Asked, FirstRead, Found, Runner, asked_of, discover_inputs, read_all, with_archives
from tracemerge.run.split import Part, groups, write_parts
from tracemerge.select import EVERYTHING, Selection
from tracemerge.store.file_layout import DEFAULT_BUDGET
from tracemerge.writers import Writer, writer_for

BEFORE_1970 = "the run starts before 1970 on the wall clock (a negative epoch time, or an --offset)"


class MergeOptions(msgspec.Struct, frozen=True):
    """What a merge is asked besides its inputs and output: :func:`merge`'s keywords (it says what
    each is), gathered into the one value its stages are handed."""

    format: str | None = None
    jobs: int = 0
    executor: Executor | None = None
    split_by: str | None = None
    memory_budget: int = DEFAULT_BUDGET
    selection: Selection = EVERYTHING
    clocks: AlignOptions = AUTOMATIC
    phase_rules: PhaseOptions = AUTO_PHASES
    metrics_map: MetricsMap = NO_MAP
    run: str = LATEST
    force: bool = False
    strict: bool = False
    also_writes: tuple[Path, ...] = ()
    on_plan: Callable[[RunReport], None] | None = None
    on_progress: Callable[[str], None] | None = None


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
    options = MergeOptions(
        format=format,
        jobs=jobs,
        executor=executor,
        split_by=split_by,
        memory_budget=memory_budget,
        selection=selection,
        clocks=clocks,
        phase_rules=phase_rules,
        metrics_map=metrics_map,
        run=run,
        force=force,
        strict=strict,
        also_writes=tuple(Path(p) for p in also_writes),
        on_plan=on_plan,
        on_progress=on_progress,
    )
    return merge_with(inputs, Path(output), options)


def merge_with(inputs: Sequence[str | os.PathLike[str]], out_path: Path, options: MergeOptions) -> RunReport:
    """:func:`merge`, what it is asked gathered in ``options``."""
    started = time.perf_counter()
    try:
        writer = writer_for(out_path, options.format)
        options = replace(options, run=check_choice(options.run))
    except ValueError as exc:
        raise FatalError(str(exc)) from None
    progress = options.on_progress or _said_nowhere
    runner, asked = asked_of(
        writer,
        options.selection,
        options.clocks,
        options.phase_rules,
        options.metrics_map,
        options.memory_budget,
        options.jobs,
        options.executor,
        options.run,
    )
    found, asked, work, entered = _discover(inputs, out_path, options, runner, asked, progress)
    try:
        with entered:
            reader = Runner(runner, progress)
            first, asked, files, report = _read_and_encode(reader, found, asked, out_path, work, options)
            if options.strict and (problem := report.incomplete) is not None:
                raise FatalError(f"--strict: {problem}")
            if options.on_plan:
                options.on_plan(report)
            parts, left_out = _write(reader, first, asked, files, out_path, work, found.named, options)
            size = sum(p.stat().st_size for p in parts) if parts else out_path.stat().st_size
    except OSError as exc:
        raise FatalError(f"{shown(out_path)}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - started
    return replace(report, skipped=[*report.skipped, *left_out], parts=parts, output_bytes=size, seconds=seconds)


def _said_nowhere(message: str) -> None:
    """Progress nobody asked for."""


def _discover(
    inputs: Sequence[str | os.PathLike[str]],
    out_path: Path,
    options: MergeOptions,
    runner: Executor,
    asked: Asked,
    progress: Callable[[str], None],
) -> tuple[Found, Asked, Path, ExitStack]:
    """The discover stage, ``runner`` entered: the files found (archives expanded), ``asked`` with
    what their manifests say, and the work directory beside the output. What it entered is left
    at once (a cluster disconnected, a folder removed) if nothing can be merged, else when the
    stack returned is."""
    with ExitStack() as on_error:
        on_error.enter_context(runner)
        unpack_into = lambda: _kept_till_the_end(on_error, work_dir(out_path))  # noqa: E731
        found = discover_inputs(runner, inputs, out_path, options.force, unpack_into)
        for path in options.also_writes:
            check_report(path, out_path, found.named)
        progress(f"found {len(found.candidates)} trace files")
        work = work_dir(out_path)
        return found, with_archives(asked, found.unpacked), work, on_error.pop_all()


def _read_and_encode(
    reader: Runner, found: Found, asked: Asked, out_path: Path, work: Path, options: MergeOptions
) -> tuple[FirstRead, Asked, dict[Path, EncodedFile], RunReport]:
    """The stages after discover, in their order: read and plan, the phase summary, encode with
    the plan; with ``asked`` as the steps kept narrow it, and the run report of what each said."""
    writer = asked.writer
    assert writer is not None
    first = read_all(reader, found.candidates, asked, work, found.findings)
    placed = _placement_findings(first, asked.clocks, writer)
    steps = options.phase_rules.steps
    asked = replace(asked, selection=steps_window(options.selection, steps, first.model, first.plan))
    numbers = summary(first.model, {p.identity: p.name for p in first.plan.processes})
    if (runs_held := held(first.findings.runs)) is not None:  # which of the inputs' runs the trace is
        numbers["run"] = runs_held
    first = _with_phase_summary(first, numbers)
    files, encoding_said = encode_with_plan(reader, first, asked)
    stages = [found.findings, first.findings, placed, encoding_said]
    return first, asked, files, _report(out_path, writer, stages, first, files, numbers)


def _write(
    run: Runner,
    first: FirstRead,
    asked: Asked,
    files: dict[Path, EncodedFile],
    out_path: Path,
    work: Path,
    named: set[Path],
    options: MergeOptions,
) -> tuple[list[Path], list[str]]:
    """The output assembled from the chunks in ``work`` and moved into place; with ``--split-by``,
    each part and their index: the paths written, and the files a part could not take."""
    writer = asked.writer
    assert writer is not None
    if options.split_by is None:
        assemble(first.plan, files, writer, out_path, work)
        return [], []
    taken = {p.resolve() for p in options.also_writes}
    left_out: list[str] = []
    written = write_parts(
        options.split_by,
        _parts(options.split_by, run, first, asked, files, options.strict, left_out),
        out_path,
        writer.extensions,
        work,
        first.plan,
        writer.name,
        lambda sub, part_files, staged: assemble(sub, part_files, writer, staged, work, keep=first.derived_path),
        lambda target: check_output(target, named, options.force, taken),
    )
    return written, left_out


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


def _with_phase_summary(first: FirstRead, numbers: dict) -> FirstRead:
    """``first`` with the summary numbers kept in its plan (the trace holds them where it has
    derived tracks with phases)."""
    if first.derived is None or first.model.empty:
        return first
    return replace(first, plan=replace(first.plan, phase_summary=stored(numbers)))


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
        return step_parts(first, asked, files, run, strict, left_out)
    scan_of = {path: f.scan for path, f in files.items()}
    return ((part, files) for part in groups(split_by, first.plan, scan_of, first.derived_path))
