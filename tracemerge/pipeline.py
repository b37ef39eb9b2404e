"""The public entry point: ``merge(inputs, output)`` runs discover → read → align → lay out → write.

Two passes over the inputs keep memory bounded by the largest file rather than the whole run:
the first reads and summarises every file (:func:`tracemerge.plan.scan`), which is what the plan
needs; the second lays each file out and encodes it into a chunk of its own. The output is
assembled from the chunks in a temporary file next to it and renamed into place only when whole.
Files read in the first pass are kept for the second while they fit in ``cache_events``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from tracemerge.clock import describe
from tracemerge.discover import Candidate, discover
from tracemerge.errors import FatalError, InputError, NotATrace
from tracemerge.merge import lay_out
from tracemerge.model import SourceData
from tracemerge.plan import FileScan, MergePlan, ThreadTrack, make_plan, scan
from tracemerge.report import ProcessReport, RunReport
from tracemerge.writers import Writer, writer_for

DEFAULT_CACHE_EVENTS = 2_000_000


def merge(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    cache_events: int = DEFAULT_CACHE_EVENTS,
    on_plan: Callable[[RunReport], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RunReport:
    """Merge every trace found under ``inputs`` into one trace at ``output``.

    ``format`` is ``"perfetto"``, ``"json"`` or ``"json.gz"``; by default the output's extension
    decides (``.json``, ``.json.gz``, anything else Perfetto protobuf). ``on_plan`` is called with
    the report of what was found before anything is written. Raises
    :class:`~tracemerge.errors.FatalError` when no output can be produced; then nothing is written.
    Files that cannot be used are listed in ``report.skipped`` and the run goes on.
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
        raise FatalError(f"no trace files found in {', '.join(str(p) for p in inputs)}")

    scans: list[FileScan] = []
    cache: dict[Path, SourceData] = {}
    by_path: dict[Path, Candidate] = {}
    cached_events = 0
    for n, cand in enumerate(candidates, 1):
        progress(f"reading {n}/{len(candidates)}: {cand.path}")
        try:
            data = cand.format.read(cand.path)
        except NotATrace as exc:
            if cand.explicit:
                report.skipped.append(str(exc))
            else:
                report.ignored.append(cand.path)
            continue
        except InputError as exc:
            report.skipped.append(str(exc))
            continue
        s = scan(data, cand.role_hint, cand.rank_hint)
        if s.ts_min is None:
            report.skipped.append(f"{cand.path}: no events")
            report.dropped.update(s.dropped)
            continue
        scans.append(s)
        by_path[cand.path] = cand
        if cached_events + len(data.events) <= cache_events:
            cache[cand.path] = data
            cached_events += len(data.events)
    if not scans:
        raise FatalError("no usable trace files: " + "; ".join(report.skipped))

    plan = make_plan(scans)
    _fill_found(report, plan, scans)
    if on_plan:
        on_plan(report)

    _write(report, plan, writer, out_path, cache, by_path, progress)
    report.seconds = time.perf_counter() - started
    return report


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
        chunks: list[Path] = []
        lanes: list[ThreadTrack] = []
        for n, unit in enumerate(plan.units, 1):
            progress(f"writing {n}/{len(plan.units)}: {unit.path}")
            data = cache.pop(unit.path, None)
            if data is None:
                try:
                    data = by_path[unit.path].format.read(unit.path)
                except InputError as exc:
                    raise FatalError(f"{exc} (it changed while being merged)") from None
            chunk = work / f"{n:06d}.chunk"
            with chunk.open("wb") as f:
                encoder = writer.unit_encoder(unit, f)
                result = lay_out(data, unit, encoder)
            chunks.append(chunk)
            lanes.extend(result.lanes)
            report.dropped.update(result.dropped)
            report.dropped.update(getattr(encoder, "dropped", {}))
            report.moved_to_lanes += result.moved_to_lanes
            for ident, counts in result.written.items():
                procs[pid_of[ident]].written.add(counts)
            del data

        assembled = work / "assembled"
        with ExitStack() as stack:
            raw = stack.enter_context(assembled.open("wb"))
            if writer.gzip:
                import gzip

                out = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5, mtime=0))
            else:
                out = raw
            writer.write_header(out, plan, lanes)
            for chunk in chunks:
                with chunk.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
            writer.write_footer(out, plan)
        os.replace(assembled, out_path)
        report.output_bytes = out_path.stat().st_size
    except OSError as exc:
        raise FatalError(f"{out_path}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
