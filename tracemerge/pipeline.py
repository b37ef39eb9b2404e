"""The public entry point: ``merge(inputs, output)`` runs discover → read → align → lay out → write.

Two passes over the inputs keep memory bounded by the largest file rather than the whole run:
the first reads and summarises every file (:func:`scan_file`), which is all the plan needs; the
second lays each file out and encodes it into a chunk of its own (:func:`encode_file`), given
only its :class:`~tracemerge.plan.UnitPlan`. Both are plain functions of their arguments, so with
``jobs > 1`` they run in worker processes. The output is assembled from the chunks in a temporary
file next to it and renamed into place only when whole.

Run serially, files read in the first pass are kept for the second while they fit in
``cache_events``.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

from tracemerge.clock import describe
from tracemerge.discover import Candidate, discover
from tracemerge.errors import FatalError, InputError, NotATrace
from tracemerge.merge import UnitResult, lay_out
from tracemerge.model import SourceData
from tracemerge.plan import FileScan, MergePlan, ThreadTrack, UnitPlan, make_plan, scan
from tracemerge.report import ProcessReport, RunReport
from tracemerge.writers import WRITERS, Writer, writer_for

DEFAULT_CACHE_EVENTS = 100_000
# With jobs=0 (automatic), inputs smaller than this are merged in-process: a pool costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20


@dataclass
class ScanOutcome:
    """What reading one file gave: a scan, or why the file is not used."""

    candidate: Candidate
    scan: FileScan | None = None
    data: SourceData | None = None
    skipped: str | None = None  # one-line reason, naming the file
    ignored: bool = False  # a non-trace met while walking a directory


def scan_file(cand: Candidate, keep_data: bool = False) -> ScanOutcome:
    """Pass 1 for one file: read it and summarise it for the plan."""
    try:
        data = cand.format.read(cand.path)
    except NotATrace as exc:
        return ScanOutcome(cand, skipped=str(exc) if cand.explicit else None, ignored=not cand.explicit)
    except InputError as exc:
        return ScanOutcome(cand, skipped=str(exc))
    s = scan(data, cand.role_hint, cand.rank_hint)
    if s.ts_min is None:
        return ScanOutcome(cand, scan=s, skipped=f"{cand.path}: no events")
    return ScanOutcome(cand, scan=s, data=data if keep_data else None)


def encode_file(
    cand: Candidate, unit: UnitPlan, writer_name: str, chunk: Path, data: SourceData | None = None
) -> UnitResult:
    """Pass 2 for one file: lay it out and encode it into ``chunk``."""
    if data is None:
        try:
            data = cand.format.read(cand.path)
        except InputError as exc:
            raise FatalError(f"{exc} (it changed while being merged)") from None
    with chunk.open("wb") as f:
        encoder = WRITERS[writer_name].unit_encoder(unit, f)
        result = lay_out(data, unit, encoder)
    return result


def merge(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    jobs: int = 0,
    cache_events: int = DEFAULT_CACHE_EVENTS,
    on_plan: Callable[[RunReport], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RunReport:
    """Merge every trace found under ``inputs`` into one trace at ``output``.

    ``format`` is ``"perfetto"``, ``"json"`` or ``"json.gz"``; by default the output's extension
    decides (``.json``, ``.json.gz``, anything else Perfetto protobuf). ``jobs`` worker processes
    read and encode files in parallel (0: one per CPU when the inputs are large enough to gain).
    ``on_plan`` is called with the report of what was found before anything is written.

    Raises :class:`~tracemerge.errors.FatalError` when no output can be produced; then nothing
    is written. Files that cannot be used are listed in ``report.skipped`` and the run goes on.
    """
    started = time.perf_counter()
    out_path = Path(output)
    try:
        writer = writer_for(out_path, format)
    except ValueError as exc:
        raise FatalError(str(exc)) from None
    progress = on_progress or (lambda _msg: None)
    report = RunReport(output=out_path, format=writer.name)

    found = discover([Path(p) for p in inputs])
    report.ignored.extend(found.ignored)
    report.skipped.extend(str(e) for e in found.skipped)
    candidates = [c for c in found.candidates if c.path.resolve() != out_path.resolve()]
    if not candidates:
        where = ", ".join(str(p) for p in inputs)
        if report.skipped:
            raise FatalError(f"no usable trace files in {where}: " + "; ".join(report.skipped))
        raise FatalError(f"no trace files found in {where}")

    workers = min(jobs if jobs > 0 else _auto_jobs(candidates), len(candidates))
    with ExitStack() as stack:
        pool = stack.enter_context(ProcessPoolExecutor(workers)) if workers > 1 else None
        scans, cache = _scan_all(candidates, report, pool, cache_events, progress)
        if not scans:
            raise FatalError("no usable trace files: " + "; ".join(report.skipped))
        plan = make_plan(scans)
        _fill_found(report, plan, scans)
        if on_plan:
            on_plan(report)
        candidate_of = {c.path: c for c in candidates}
        by_path = {s.path: candidate_of[s.path] for s in scans}
        _write(report, plan, writer, out_path, cache, by_path, pool, progress)
    report.seconds = time.perf_counter() - started
    return report


def _auto_jobs(candidates: list[Candidate]) -> int:
    total = 0
    for c in candidates:
        with suppress(OSError):
            total += c.path.stat().st_size
    return (os.cpu_count() or 1) if total >= PARALLEL_MIN_BYTES else 1


def _scan_all(
    candidates: list[Candidate],
    report: RunReport,
    pool: ProcessPoolExecutor | None,
    cache_events: int,
    progress: Callable[[str], None],
) -> tuple[list[FileScan], dict[Path, SourceData]]:
    if pool is None:
        outcomes: Iterator[ScanOutcome] = (scan_file(c, keep_data=True) for c in candidates)
    else:
        outcomes = pool.map(scan_file, candidates)
    scans: list[FileScan] = []
    cache: dict[Path, SourceData] = {}
    cached_events = 0
    for n, outcome in enumerate(outcomes, 1):
        progress(f"read {n}/{len(candidates)}: {outcome.candidate.path}")
        if outcome.ignored:
            report.ignored.append(outcome.candidate.path)
        elif outcome.skipped:
            report.skipped.append(outcome.skipped)
            if outcome.scan:
                report.dropped.update(outcome.scan.dropped)
        elif outcome.scan:
            scans.append(outcome.scan)
            data = outcome.data
            if data is not None and cached_events + len(data.events) <= cache_events:
                cache[outcome.candidate.path] = data
                cached_events += len(data.events)
    return scans, cache


def _fill_found(report: RunReport, plan: MergePlan, scans: list[FileScan]) -> None:
    procs = {p.identity: ProcessReport(p.name, p.identity.role, p.identity.rank, p.pid) for p in plan.processes}
    for s in scans:
        report.dropped.update(s.dropped)
        report.metadata_records += s.metadata_records
        for ident, counts in s.counts.items():
            proc = procs[ident]
            proc.files.append(s.path)
            proc.clocks.add(describe(s.clock))
            proc.read.add(counts)
    report.processes = [procs[p.identity] for p in plan.processes]


def _write(
    report: RunReport,
    plan: MergePlan,
    writer: Writer,
    out_path: Path,
    cache: dict[Path, SourceData],
    by_path: dict[Path, Candidate],
    pool: ProcessPoolExecutor | None,
    progress: Callable[[str], None],
) -> None:
    out_dir = out_path.parent if str(out_path.parent) else Path(".")
    if not out_dir.is_dir():
        raise FatalError(f"{out_path}: output directory {out_dir} does not exist")
    try:
        work = Path(tempfile.mkdtemp(prefix=".tracemerge-", dir=out_dir))
    except OSError as exc:
        raise FatalError(f"{out_path}: cannot write in {out_dir} ({exc.strerror or exc})") from None
    procs = {p.pid: p for p in report.processes}
    pid_of = {p.identity: p.pid for p in plan.processes}
    try:
        chunks = [work / f"{n:06d}.chunk" for n in range(len(plan.units))]
        if pool is None:
            results: Iterator[UnitResult] = (
                encode_file(by_path[u.path], u, writer.name, chunk, cache.pop(u.path, None))
                for u, chunk in zip(plan.units, chunks, strict=True)
            )
        else:
            cands = [by_path[u.path] for u in plan.units]
            results = pool.map(encode_file, cands, plan.units, [writer.name] * len(chunks), chunks)
        lanes: list[ThreadTrack] = []
        for n, (unit, result) in enumerate(zip(plan.units, results, strict=True), 1):
            progress(f"encoded {n}/{len(plan.units)}: {unit.path}")
            lanes.extend(result.lanes)
            report.dropped.update(result.dropped)
            report.moved_to_lanes += result.moved_to_lanes
            report.reversed_flows += result.reversed_flows
            for ident, counts in result.written.items():
                procs[pid_of[ident]].written.add(counts)

        assembled = work / "assembled"
        with ExitStack() as stack:
            raw = stack.enter_context(assembled.open("wb"))
            out = raw
            if writer.gzip:
                out = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5, mtime=0))
            writer.write_header(out, plan, lanes)
            for chunk in chunks:
                with chunk.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                chunk.unlink()
            writer.write_footer(out, plan)
        os.replace(assembled, out_path)
        report.output_bytes = out_path.stat().st_size
    except OSError as exc:
        raise FatalError(f"{out_path}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
