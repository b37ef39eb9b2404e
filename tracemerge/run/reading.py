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
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec
from msgspec.structs import replace

from tracemerge.clock import Alignment, AlignOptions, align
from tracemerge.clock.runs import LATEST, Run, choose, one_timeline, owner, runs_of
from tracemerge.core.errors import FatalError, InputError, shown
from tracemerge.core.model import Identity
from tracemerge.core.stats import Losses, Stat
from tracemerge.discovery.archives import Unpacked, is_archive, unpack
from tracemerge.discovery.discover import Candidate, told_apart
from tracemerge.discovery.same_content import read_once
from tracemerge.metrics_map import MetricsMap
from tracemerge.phases import PhaseModel, StepScalars, attach_scalars
from tracemerge.phases.rules import PhaseOptions
from tracemerge.plan.encoded import Encoded
from tracemerge.plan.planner import make_plan, placing_every_file
from tracemerge.plan.types import FileScan, IdCollision, MergePlan, identity_sort_key
from tracemerge.report.findings import Findings, joined
from tracemerge.run.derived_unit import derive_run, derived_scan
from tracemerge.run.executors import Executor, SerialExecutor, local_executor, usable_cores
from tracemerge.run.filework import FileJob, FileOutcome
from tracemerge.run.kept_runs import files_of, note_runs, scalars_kept
from tracemerge.run.output import check_output
from tracemerge.run.passes import first_pass
from tracemerge.select import Selection
from tracemerge.store.read_options import ReadOptions
from tracemerge.writers import Writer

_T = TypeVar("_T")


class Asked(msgspec.Struct, frozen=True):
    """What a merge (or a summary) was asked, as its stages use it."""

    writer: Writer | None  # None: the files are read for their summaries only, nothing is encoded
    selection: Selection
    clocks: AlignOptions
    phase_rules: PhaseOptions
    metrics_map: MetricsMap
    memory_budget: int
    cores: int = 0  # local processes a merge may use (0: files are read where an executor says)
    run: str = LATEST  # --run: which runs among the inputs (tracemerge.clock.runs.check_choice)
    hosts: dict[Path, str] = msgspec.field(default_factory=dict)  # a file's host as an archive's manifest names it


def asked_of(
    writer: Writer | None,
    selection: Selection,
    clocks: AlignOptions,
    phase_rules: PhaseOptions,
    metrics_map: MetricsMap,
    memory_budget: int,
    jobs: int,
    executor: Executor | None,
    run: str = LATEST,
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
    return runner, Asked(writer, selection, clocks, phase_rules, metrics_map, memory_budget, cores, run)


class Reads(msgspec.Struct, frozen=True):
    """Every file read once: its job, and what the reads gave (the summaries, what laying each
    out gave by path, the files of step-keyed tracker scalars)."""

    jobs: dict[Path, FileJob]
    scans: list[FileScan]
    encoded: dict[Path, Encoded]
    scalars: list[StepScalars]
    findings: Findings  # the files skipped and ignored


class FirstRead(msgspec.Struct, frozen=True):
    """Every file read once: its job, the summaries, and the plan and phases made of them."""

    jobs: dict[Path, FileJob]
    scans: list[FileScan]
    encoded: dict[Path, Encoded]  # what the first read's lay-out gave, by path
    scalars: list[StepScalars]
    scalars_dropped: Losses
    plan: MergePlan
    model: PhaseModel
    derived: FileScan | None
    wide: bool
    findings: Findings  # what the read said: files skipped and ignored, the runs, what was left out

    @property
    def derived_path(self) -> Path | None:
        return self.derived.path if self.derived is not None else None


class Found(msgspec.Struct, frozen=True):
    """The discover stage's result: the files to merge, every path named or found (resolved),
    which no output may replace, the archives named that were expanded to be read, and what the
    stage said (files skipped and ignored, metadata used, copies read once)."""

    candidates: list[Candidate]
    named: set[Path]
    unpacked: list[Unpacked]
    findings: Findings


def discover_inputs(
    runner: Executor,
    inputs: Sequence[str | os.PathLike[str]],
    out_path: Path,
    force: bool,
    unpack_into: Callable[[], Path] | None = None,
) -> Found:
    """The files to merge under ``inputs`` (archives expanded into a folder ``unpack_into`` makes)."""
    paths, unpacked, archives_said = _unpacked([Path(p) for p in inputs], unpack_into)
    found = runner.discover(paths)
    found_said = Findings(
        skipped=[str(e) for e in found.skipped], ignored=list(found.ignored), used=list(found.used), notes=found.notes
    )
    named = {Path(p).resolve() for p in inputs} | {c.path.resolve() for c in found.candidates}
    check_output(out_path, named, force)
    candidates = [c for c in found.candidates if c.path.resolve() != out_path.resolve()]
    copies_said = Findings()
    if isinstance(runner, SerialExecutor):  # the files are here to compare (a Ray node's are not)
        candidates, copies_said = read_once(candidates)
    candidates = told_apart(candidates)  # over every node's files, copies left out
    said = joined(archives_said, found_said, copies_said)
    if not candidates:
        where = ", ".join(str(p) for p in inputs)
        if said.skipped:
            raise FatalError(f"no usable trace files in {where}: " + "; ".join(said.skipped))
        raise FatalError(f"no trace files found in {where}")
    return Found(candidates, named, unpacked, said)


def _unpacked(paths: list[Path], unpack_into: Callable[[], Path] | None) -> tuple[list[Path], list[Unpacked], Findings]:
    """The inputs, each archive among them (tracemerge.discovery.archives) as the folder it was
    expanded into; what an archive held that is not read is said."""
    said = Findings()
    if unpack_into is None or not any(is_archive(p) for p in paths):
        return paths, [], said
    into = unpack_into()
    expanded, unpacked, seen = [], [], set()
    for path in paths:
        if not is_archive(path):
            expanded.append(path)
            continue
        if path.resolve() in seen:  # named twice: read once
            continue
        seen.add(path.resolve())
        try:
            archive = unpack(path, into)
        except InputError as exc:
            said.skipped.append(str(exc))
            continue
        unpacked.append(archive)
        expanded.append(archive.folder)
        said.skipped.extend(str(e) for e in archive.skipped)
        for unused in archive.unused:
            said.lose(Stat.MANIFEST_ENTRY_UNUSED, 1, str(unused))
        said.notes.extend(archive.notes)
    return expanded, unpacked, said


def with_archives(asked: Asked, unpacked: list[Unpacked]) -> Asked:
    """What the archives' manifests say, as the stages take it: hosts, and clocks pinned."""
    if not unpacked:
        return asked
    hosts = {path: host for archive in unpacked for path, host in archive.hosts.items()}
    pins = tuple(pin for archive in unpacked for pin in archive.pins)
    return replace(asked, hosts=hosts, clocks=replace(asked.clocks, pinned=asked.clocks.pinned + pins))


def read_all(run: Runner, candidates: list[Candidate], asked: Asked, work: Path, earlier: Findings) -> FirstRead:
    """Reads (and, for Perfetto, encodes) every file once, then plans the merge from the summaries
    of the files of the runs ``asked.run`` keeps (:mod:`tracemerge.clock.runs`); ``earlier`` is
    what the stages before said (the files they skipped are named when no file is usable)."""
    return _with_wide_retry(lambda wide: _read_and_plan(run, candidates, asked, work, earlier, wide))


def read_each_run(
    run: Runner, candidates: list[Candidate], asked: Asked, work: Path, earlier: Findings
) -> tuple[list[tuple[Run | None, FirstRead]], Findings]:
    """Every file read once, then each run among them placed and derived on its own, in time
    order (one entry, its run None, when the inputs hold one run or none that time places); and
    what the read said."""

    def each(wide: bool) -> tuple[list[tuple[Run | None, FirstRead]], Findings]:
        reads = _read(run, candidates, asked, work, earlier, wide)
        runs = runs_of(reads.scans, asked.clocks, identity_sort_key)
        said = joined(reads.findings, note_runs(runs, runs.runs, [], reads.scans, one_timeline=False))
        if not runs.several:
            return [(None, _plan(reads, asked, work, wide, len(candidates), said, runs.placed))], said
        out: list[tuple[Run | None, FirstRead]] = []
        for one in runs.runs:
            mine = replace(
                reads,
                scans=files_of(reads.scans, runs, (one,)),
                scalars=[f for f in reads.scalars if owner(f.path, runs.runs) in (one, None)],
            )
            out.append((one, _plan(mine, asked, work, wide, len(candidates), said)))
        return out, said

    return _with_wide_retry(each)


def _with_wide_retry(read: Callable[[bool], _T]) -> _T:
    """``read(wide)`` with track ids of 35 bits, else (an overlap lane hashed to another track's id,
    or the narrow ids ran out: tracemerge.plan.unique_ids) again with wide ones: what the first
    try found and said is dropped with it."""
    try:
        return read(False)
    except IdCollision:  # an overlap lane whose 35-bit uuid is another track's: encode again, wide
        pass
    try:
        return read(True)
    except IdCollision:
        raise FatalError("two tracks hash to one 63-bit uuid") from None


def _read_and_plan(
    run: Runner, candidates: list[Candidate], asked: Asked, work: Path, earlier: Findings, wide: bool
) -> FirstRead:
    """:func:`read_all` with track ids of 35 bits, or ``wide`` ones."""
    reads = _read(run, candidates, asked, work, earlier, wide)
    runs = runs_of(reads.scans, asked.clocks, identity_sort_key)
    alignment = runs.placed
    try:
        kept = choose(runs, asked.run)
    except ValueError as exc:
        raise FatalError(str(exc)) from None
    left = [r for r in runs.runs if r not in kept]
    said = joined(reads.findings, note_runs(runs, kept, left, reads.scans))
    if left:  # the runs kept placed anew, as if alone: their start is the trace's zero
        scalars, scalars_said = scalars_kept(reads.scalars, runs, kept)
        reads = replace(reads, scans=files_of(reads.scans, runs, kept), scalars=scalars)
        said = joined(said, scalars_said)
        alignment = None
    elif runs.several:
        alignment = one_timeline(runs, reads.scans, asked.clocks, identity_sort_key)
    return _plan(reads, asked, work, wide, len(candidates), said, alignment)


def _read(run: Runner, candidates: list[Candidate], asked: Asked, work: Path, earlier: Findings, wide: bool) -> Reads:
    """Every file read (and encoded when the output allows); what the reads said names the files
    skipped and ignored."""
    selection = asked.selection
    step = first_pass(asked.writer, selection)
    # Cores left over once each file has one read parts of the large ones.
    helpers = max(0, asked.cores // len(candidates) - 1)
    parts = run.executor.part_reads(helpers + 1)  # how the executor reads those parts
    # Sequence 1 carries the descriptors; each file gets the next, in discovery order.
    jobs = [
        FileJob(
            c,
            n + 2,
            step,
            work / f"{n:06d}.chunk",
            budget=asked.memory_budget,
            selection=selection,
            wide_ids=wide,
            sync=asked.clocks.sync,
            phases=asked.phase_rules.presets,
            read=ReadOptions(asked.metrics_map, parts),
        )
        for n, c in enumerate(candidates)
    ]
    reads = collect({j.candidate.path: j for j in jobs}, run.map(jobs, "read"))
    if not reads.scans:
        raise FatalError(_nothing_usable([*earlier.skipped, *reads.findings.skipped], reads.scalars))
    return reads


def collect(jobs: dict[Path, FileJob], outcomes: Iterable[FileOutcome]) -> Reads:
    """What the ``jobs`` gave: the summaries of the files read, what laying each out gave, the
    step-keyed tracker scalars, and the files ignored and skipped."""
    scans: list[FileScan] = []
    encoded: dict[Path, Encoded] = {}
    scalars: list[StepScalars] = []
    said = Findings()
    for outcome in outcomes:
        if outcome.ignored:
            said.ignored.append(outcome.candidate.path)
        elif outcome.skipped:
            said.skipped.append(outcome.skipped)
        elif outcome.scan and outcome.encoded:
            scans.append(outcome.scan)
            encoded[outcome.scan.path] = outcome.encoded
        elif outcome.scalars:
            scalars.append(outcome.scalars)
    return Reads(jobs, scans, encoded, scalars, said)


def _plan(
    reads: Reads,
    asked: Asked,
    work: Path,
    wide: bool,
    files: int,
    said: Findings,
    alignment: Alignment | None = None,
) -> FirstRead:
    """The stages after reading, in their order: align the clocks (unless ``alignment`` is
    given), derive the phases, plan (the derived tracks are one more unit of the plan);
    ``files`` is how many were read (the derived tracks take the sequence after theirs); ``said``
    what the read said."""
    # An archive's manifest names the machine a file is on.
    scans = [replace(s, host=asked.hosts[s.path]) if s.path in asked.hosts else s for s in reads.scans]
    if alignment is None:
        alignment = align(scans, asked.clocks, identity_sort_key)
    alignment = placing_every_file(alignment, scans)
    keep = process_filter(asked.selection, scans)
    model = derive_run(scans, alignment, asked.phase_rules, keep)
    scalars_dropped = Losses()
    for f in reads.scalars:
        scalars_dropped.update(f.dropped)
    attach_scalars(model, reads.scalars, scalars_dropped)
    derived = derived_scan(model, files + 2, work / "phases.chunk", alignment.wall_clock)
    units = [*scans, derived] if derived is not None else scans
    plan = make_plan(units, wide, alignment=alignment, encoded=reads.encoded)
    return FirstRead(reads.jobs, scans, reads.encoded, reads.scalars, scalars_dropped, plan, model, derived, wide, said)


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


def _nothing_usable(skipped: list[str], scalars: list[StepScalars]) -> str:
    """Why no file gave a trace: the files skipped, else what the files read hold instead."""
    if skipped:
        return "no usable trace files: " + "; ".join(skipped)
    if scalars:
        names = ", ".join(shown(s.path) for s in scalars[:3]) + (
            f" and {len(scalars) - 3} more" if len(scalars) > 3 else ""
        )
        return (
            f"no usable trace files: only tracker scalars ({names}), which are drawn on the steps of a trace;"
            " merge them with the run's traces"
        )
    return "no usable trace files: the files read hold no events"
