"""The discover and read stages: every trace file found, and read once (encoded as it is read
when the output format allows), then the merge plan and the RL phases made of the files' summaries.

:func:`discover_inputs` turns the paths a merge names into candidate files; :func:`read_all`
reads each with :func:`~tracemerge.run.filework.process_file` (where the executor runs it) and returns
a :class:`FirstRead`: every file's job and summary, the plan, and the phase model. Both a merge
(:mod:`tracemerge.pipeline`) and :func:`~tracemerge.analysis.summarize.summarize` run these stages; only a
merge goes on to encode and write.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.clock import AlignOptions, align
from tracemerge.core.errors import FatalError
from tracemerge.core.model import Identity
from tracemerge.core.stats import Losses
from tracemerge.discovery.discover import Candidate, told_apart
from tracemerge.discovery.same_content import read_once
from tracemerge.metrics_map import MetricsMap
from tracemerge.phases import PhaseModel, StepScalars, attach_scalars, derive
from tracemerge.phases.derived_unit import derived_scan, note_run
from tracemerge.phases.rules import PhaseOptions
from tracemerge.plan.planner import make_plan
from tracemerge.plan.types import FileScan, IdCollision, MergePlan, identity_sort_key
from tracemerge.report.outcomes import collect
from tracemerge.report.run_report import RunReport
from tracemerge.run.executors import Executor, SerialExecutor, local_executor, usable_cores
from tracemerge.run.filework import FileJob, FileOutcome
from tracemerge.run.output import check_output
from tracemerge.select import Selection
from tracemerge.store.read_options import ReadOptions
from tracemerge.writers import Writer


class Asked(msgspec.Struct, frozen=True):
    """What a merge (or a summary) was asked, as its stages use it."""

    writer: Writer | None  # None: the files are read for their summaries only, nothing is encoded
    selection: Selection
    clocks: AlignOptions
    phase_rules: PhaseOptions
    metrics_map: MetricsMap
    memory_budget: int
    cores: int = 0  # local processes a merge may use (0: files are read where an executor says)


def asked_of(
    writer: Writer | None,
    selection: Selection,
    clocks: AlignOptions,
    phase_rules: PhaseOptions,
    metrics_map: MetricsMap,
    memory_budget: int,
    jobs: int,
    executor: Executor | None,
) -> tuple[Executor, Asked]:
    """Where the files are read (``executor``, else local processes for ``jobs``), and what the
    stages are asked, as a merge's or a summary's options say."""
    # A preset's own sync spans (AReaL's weight updates) are evidence as the phases choose it.
    clocks = replace(clocks, presets=tuple(p.name for p in phase_rules.presets))
    runner = executor if executor is not None else local_executor(jobs)
    # The CPUs this process may use (its affinity), not the machine's: the cores left over read the
    # parts of large files, and a process pinned to 2 of 64 CPUs must not fork 32 readers.
    usable = usable_cores() if executor is None and jobs != 1 else 0
    cores = min(jobs or usable, usable)
    return runner, Asked(writer, selection, clocks, phase_rules, metrics_map, memory_budget, cores)


class FirstRead(msgspec.Struct):
    """Every file read once: its job, the summaries, and the plan and phases made of them."""

    jobs: dict[Path, FileJob]
    scans: list[FileScan]
    scalars: list[StepScalars]
    scalars_dropped: Losses
    plan: MergePlan
    model: PhaseModel
    derived: FileScan | None
    wide: bool

    @property
    def derived_path(self) -> Path | None:
        return self.derived.path if self.derived is not None else None


def discover_inputs(
    runner: Executor, inputs: Sequence[str | os.PathLike[str]], out_path: Path, force: bool, report: RunReport
) -> tuple[list[Candidate], set[Path]]:
    """The files to merge, and every path named or found (resolved), which no output may replace."""
    found = runner.discover([Path(p) for p in inputs])
    report.ignored.extend(found.ignored)
    report.used.extend(found.used)
    report.notes.extend(found.notes)
    report.skipped.extend(str(e) for e in found.skipped)
    named = {Path(p).resolve() for p in inputs} | {c.path.resolve() for c in found.candidates}
    check_output(out_path, named, force)
    candidates = [c for c in found.candidates if c.path.resolve() != out_path.resolve()]
    if isinstance(runner, SerialExecutor):  # the files are here to compare (a Ray node's are not)
        candidates = read_once(candidates, report)
    candidates = told_apart(candidates)  # over every node's files, copies left out
    if not candidates:
        where = ", ".join(str(p) for p in inputs)
        if report.skipped:
            raise FatalError(f"no usable trace files in {where}: " + "; ".join(report.skipped))
        raise FatalError(f"no trace files found in {where}")
    return candidates, named


def read_all(run: Runner, candidates: list[Candidate], asked: Asked, work: Path, report: RunReport) -> FirstRead:
    """Reads (and, for Perfetto, encodes) every file once, then plans the merge from the summaries."""
    found = len(report.skipped), len(report.ignored)
    try:
        return _read_and_plan(run, candidates, asked, work, report, found, wide=False)
    except IdCollision:  # as rare as two equal 35-bit hashes: encode again, wide
        pass
    try:
        return _read_and_plan(run, candidates, asked, work, report, found, wide=True)
    except IdCollision:
        raise FatalError("two tracks hash to one 63-bit uuid") from None


def _read_and_plan(
    run: Runner,
    candidates: list[Candidate],
    asked: Asked,
    work: Path,
    report: RunReport,
    found: tuple[int, int],
    wide: bool,
) -> FirstRead:
    """:func:`read_all` with track ids of 35 bits, or ``wide`` ones; ``found`` is how many files
    the report listed as skipped and ignored before any was read."""
    writer, selection = asked.writer, asked.selection
    del report.skipped[found[0] :], report.ignored[found[1] :]
    # Chrome JSON keeps each file's laid-out events from its first read for the second pass
    # (a selection of processes is applied while reading: then the file is read again).
    encoding = writer.name if writer is not None and writer.one_pass else ""
    keep_layout = "" if writer is None or writer.one_pass or selection.by_process else writer.name
    # Cores left over once each file has one read parts of the large ones.
    helpers = max(0, asked.cores // len(candidates) - 1)
    parts = run.executor.part_reads(helpers + 1)  # how the executor reads those parts
    # Sequence 1 carries the descriptors; each file gets the next, in discovery order.
    jobs = [
        FileJob(
            c,
            n + 2,
            encoding,
            work / f"{n:06d}.chunk",
            budget=asked.memory_budget,
            selection=selection,
            wide_ids=wide,
            sync=asked.clocks.sync,
            phases=asked.phase_rules.presets,
            read=ReadOptions(asked.metrics_map, parts),
            keep_layout=keep_layout,
        )
        for n, c in enumerate(candidates)
    ]
    scalars: list[StepScalars] = []
    scans = collect(run.map(jobs, "read"), report, scalars)
    if not scans:
        raise FatalError("no usable trace files: " + "; ".join(report.skipped))
    # The stages in their order: align the clocks, derive the phases, plan (the derived tracks
    # are one more unit of the plan).
    alignment = align(scans, asked.clocks, identity_sort_key)
    alignment.offsets.update({s.path: 0 for s in scans if s.path not in alignment.offsets})
    keep = process_filter(selection, scans)
    model = derive(scans, alignment.offsets, asked.phase_rules.presets, asked.phase_rules.steps, keep)
    note_run(model, scans, alignment, keep)
    scalars_dropped = Losses()
    for f in scalars:
        scalars_dropped.update(f.dropped)
    attach_scalars(model, scalars, scalars_dropped)
    derived = derived_scan(model, len(candidates) + 2, work / "phases.chunk", alignment.wall_clock)
    plan = make_plan([*scans, derived] if derived is not None else scans, wide, alignment=alignment)
    by_path = {j.candidate.path: j for j in jobs}
    return FirstRead(by_path, scans, scalars, scalars_dropped, plan, model, derived, wide)


class Runner:
    """Runs file jobs through the executor, in order, saying how far it got."""

    def __init__(self, executor: Executor, progress: Callable[[str], None]) -> None:
        self.executor = executor
        self.progress = progress

    def map(self, jobs: list[FileJob], verb: str) -> Iterator[FileOutcome]:
        for n, outcome in enumerate(self.executor.run(jobs), 1):
            self.progress(f"{verb} {n}/{len(jobs)}: {outcome.candidate.path}")
            yield outcome


def process_filter(selection: Selection, scans: list[FileScan]) -> Callable[[Identity], bool] | None:
    """Which processes --roles, --ranks and --where keep (None: all)."""
    if not selection.by_process:
        return None
    named = {i for s in scans if selection.keeps_file(s.facts) for i in (*s.counts, *s.threads, *s.counter_series)}
    return lambda ident: selection.keeps(ident) and ident in named
