"""The public entry point: ``merge(inputs, output)`` runs discover → read → align → lay out → write.

Each file's heavy work is :func:`process_file`, a plain function of the file and a small
:class:`FileJob`: it reads the file once, lays its events out and encodes them into a chunk of
its own, and returns a :class:`~tracemerge.plan.FileScan` summary. The plan is then made from the
summaries alone, and the output assembled from the chunks in a temporary file next to it, renamed
into place only when whole. With ``jobs > 1`` files are processed in worker processes; the
output is byte-identical either way.

Perfetto output needs one read per file: a chunk refers to tracks by content-derived uuids and
stamps events on its sequence's own clock, which a clock snapshot written before the chunk places
on the trace's timeline. Chrome JSON names pids, tids and times relative to the run start in
every event, so it is encoded in a second pass, with the plan, over the events the first read laid
out and kept (see FileLayout.save); nothing is read twice.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import shutil
import sqlite3
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracemerge.anchors import Watch
from tracemerge.clock import AUTOMATIC, AlignOptions
from tracemerge.discover import Candidate, discover
from tracemerge.errors import FatalError, InputError, NotATrace, shown
from tracemerge.layout import DEFAULT_BUDGET, FileLayout
from tracemerge.model import UNIX_EPOCH, ClockDomain, Identity, ThreadInfo
from tracemerge.phases import (
    AUTO_PHASES,
    PhaseModel,
    PhaseOptions,
    PhaseRules,
    Preset,
    derive,
    summary,
    track_infos,
)
from tracemerge.phases import events as phase_events
from tracemerge.plan import (
    FileScan,
    IdCollision,
    LocalTracks,
    MergePlan,
    PlannedTracks,
    UnitPlan,
    flow_id_base,
    lane_track,
    make_plan,
    resolve_identity,
    role_sort_key,
)
from tracemerge.report import ProcessReport, RunReport
from tracemerge.select import EVERYTHING, Selection, TimeFilter
from tracemerge.writers import WRITERS, Writer, writer_for

# With jobs=0 (automatic), inputs smaller than this are merged in-process: a pool costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20
# Without a clock of their own, µs timestamps at least this large are Unix-epoch time (1973 on).
EPOCH_FLOOR_NS = 10**17
RELATIVE_NO_ANCHOR = ClockDomain("relative µs, no wall-clock anchor", anchored=False)


@dataclass(frozen=True)
class FileJob:
    """What processing one file needs besides the file: all of it small and picklable."""

    candidate: Candidate
    sequence_id: int
    writer: str = ""  # "" for a summary without output (the first of Chrome JSON's two reads)
    chunk: Path | None = None
    unit: UnitPlan | None = None  # Chrome JSON's second read: the planned tracks and time shift
    salts: dict[Identity, str] = field(default_factory=dict)
    budget: int = DEFAULT_BUDGET  # events held in memory before they spill to disk
    selection: Selection = EVERYTHING
    window: tuple[int | None, int | None] | None = None  # in the file's own timestamps
    wide_ids: bool = False  # 63-bit track uuids (after narrow ones collided)
    sync: tuple[str, ...] = ()  # span names that start at one instant in every process (clock evidence)
    phases: tuple[Preset, ...] = ()  # phase rules noted while reading
    # Chrome JSON's first read: build the events' bodies with this writer and keep the laid-out
    # events beside the chunk; its second pass (``saved``: that read's summary) encodes them
    # instead of reading the file again.
    keep_layout: str = ""
    saved: FileScan | None = None


@dataclass
class FileOutcome:
    """What processing one file gave: a summary, or why the file is not used."""

    candidate: Candidate
    scan: FileScan | None = None
    skipped: str | None = None  # one-line reason, naming the file
    ignored: bool = False  # a non-trace met while walking a directory


class _NoOutput:
    """An encoder that writes nothing: a file read only for its summary."""

    def prefix(self, name: str, cat: str) -> bytes:
        return b""

    args_heads = (b"",) * 4096

    def args(self, text: bytes) -> bytes:
        return b""

    def slice_begin(self, *args: Any) -> None: ...

    def slice_end(self, *args: Any) -> None: ...

    def instant(self, *args: Any) -> None: ...

    def counter(self, *args: Any) -> None: ...

    def close(self) -> None: ...


def process_file(job: FileJob) -> FileOutcome:
    """Read one file, lay it out, encode it into ``job.chunk``; summarise it for the plan.

    A file that breaks the reader in a way no check foresaw (a value of a type its format never
    holds, a structure nested beyond reason, more than memory allows) is skipped with the reason:
    the rest of the run is merged.
    """
    # Millions of short-lived tuples and no reference cycles: the cyclic collector would cost a
    # third of the time here, scanning them again and again.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _process_file(job)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return FileOutcome(job.candidate, skipped=f"{shown(job.candidate.path)}: cannot be read ({reason[:200]})")
    except sqlite3.Error as exc:
        return FileOutcome(job.candidate, skipped=f"{shown(job.candidate.path)}: cannot read the database ({exc})")
    finally:
        if enabled:
            gc.enable()


def _layout_files(chunk: Path) -> tuple[Path, Path]:
    """Where a kept layout lies: its index and its run file."""
    return chunk.with_suffix(".layout"), chunk.with_suffix(".runs")


def _process_file(job: FileJob) -> FileOutcome:
    if job.saved is not None:
        return _encode_saved(job, job.saved)
    cand = job.candidate
    keep_layout = bool(job.keep_layout) and job.chunk is not None
    with ExitStack() as stack:
        if job.writer and job.chunk is not None:
            out = stack.enter_context(job.chunk.open("wb"))
            enc = WRITERS[job.writer].unit_encoder(job.sequence_id, out)
        elif keep_layout:  # bodies as the writer encodes them; nothing is written yet
            enc = WRITERS[job.keep_layout].unit_encoder(job.sequence_id, io.BytesIO())
        else:
            enc = _NoOutput()
        store = _layout_files(job.chunk)[1] if keep_layout and job.chunk is not None else None
        layout = FileLayout(
            enc,
            job.budget,
            job.chunk.parent if job.chunk else None,
            Watch(job.sync, PhaseRules(job.phases)),
            store,
        )
        try:
            data = cand.format.read(cand.path, layout)
        except NotATrace as exc:
            return FileOutcome(cand, skipped=str(exc) if cand.explicit else None, ignored=not cand.explicit)
        except InputError as exc:
            return FileOutcome(cand, skipped=str(exc))
        identities: dict = {}

        def identity_of(origin: Any) -> Identity:
            found = identities.get(origin)
            if found is None:
                found = identities[origin] = resolve_identity(origin, data, cand.role_hint, cand.rank_hint)
            return found

        if job.unit is not None:
            tracks: Any = PlannedTracks(job.unit)
            shift = job.unit.shift_ns
        else:
            tracks, shift = LocalTracks(job.salts, job.wide_ids), None
        sel = job.selection
        times = None
        if job.window is not None or sel.min_dur:
            lo, hi = job.window or (None, None)
            times = TimeFilter(lo, hi, sel.min_dur)
        keep = None if sel.roles is None and sel.ranks is None else sel.keeps
        if keep_layout:
            layout.check_memory(0)  # everything to the run file, which the second pass reads
            for key in [*layout.entries, *layout.points, *layout.samples]:
                identity_of(key[0])
        result = layout.finish(
            identity_of, tracks, shift, flow_id_base(job.sequence_id), keep, times, summary_only=not job.writer
        )
        if keep_layout and job.chunk is not None:
            layout.save(_layout_files(job.chunk)[0])
        enc.close()
    if result.ts_min is None:
        return FileOutcome(cand, skipped=f"{shown(cand.path)}: no events")
    clock = data.clock
    if clock is None:
        # The latest event decides: an epoch trace whose first event says 0 is still an epoch trace.
        relative = data.relative_clock or RELATIVE_NO_ANCHOR
        clock = UNIX_EPOCH if (result.ts_max or result.ts_min) >= EPOCH_FLOOR_NS else relative
    threads: dict[Identity, dict] = defaultdict(dict)
    for ident, keys in result.threads.items():
        for key in keys:
            threads[ident][key] = data.threads.get(key) or ThreadInfo(str(key))
    series: dict[Identity, dict] = defaultdict(dict)
    for ident, pairs in result.counter_series.items():
        for key, name in pairs:
            info = data.threads.get(key)
            series[ident][(key, name)] = info.name if info else ""
    dropped = data.dropped
    dropped.update(result.dropped)
    for kind, count in layout.marks_over.items():  # the events are in the output; only not evidence
        dropped[f"{kind} marks beyond the cap per thread (events kept, not used as {kind} evidence)"] += count
    scan = FileScan(
        path=cand.path,
        format=data.format,
        clock=clock,
        sequence_id=job.sequence_id,
        origin_ns=data.origin_ns,
        identities=identities,
        counts=dict(result.read),
        threads=dict(threads),
        counter_series=dict(series),
        ts_min=result.ts_min + data.origin_ns,
        ts_max=(result.ts_max or result.ts_min) + data.origin_ns,
        local_min=result.ts_min,
        dropped=dropped,
        metadata_records=data.metadata_records,
        written=dict(result.written),
        lanes=result.lanes,
        moved_to_lanes=result.moved_to_lanes,
        reversed_flows=result.reversed_flows,
        salts=dict(job.salts),
        filtered=result.filtered,
        marks=_marks(layout.marks, identity_of, data.origin_ns),
        host=data.host,
        mtime_ns=_mtime_ns(cand.path),
    )
    return FileOutcome(cand, scan=scan)


def _encode_saved(job: FileJob, prior: FileScan) -> FileOutcome:
    """Chrome JSON's second pass: encode the events the first read laid out and kept, with the
    plan; nothing of the input is read again."""
    assert job.chunk is not None and job.unit is not None
    index, _ = _layout_files(job.chunk)
    with job.chunk.open("wb") as out:
        enc = WRITERS[job.writer].unit_encoder(job.sequence_id, out)
        layout = FileLayout.load(index, enc, job.budget)
        times = None
        if job.window is not None or job.selection.min_dur:
            lo, hi = job.window or (None, None)
            times = TimeFilter(lo, hi, job.selection.min_dur)
        result = layout.finish(
            prior.identities.__getitem__,
            PlannedTracks(job.unit),
            job.unit.shift_ns,
            flow_id_base(job.sequence_id),
            None,
            times,
        )
        enc.close()
    dropped = Counter(prior.dropped)
    dropped.update(result.dropped)
    filtered = Counter(prior.filtered)
    filtered.update(result.filtered)
    return FileOutcome(
        job.candidate,
        scan=replace(
            prior,
            counts=dict(result.read),
            written=dict(result.written),
            lanes=result.lanes,
            moved_to_lanes=result.moved_to_lanes,
            reversed_flows=result.reversed_flows,
            dropped=dropped,
            filtered=filtered,
            salts=dict(job.salts),
        ),
    )


def _marks(
    marks: dict[tuple[str, Any, Any], list[tuple[int, int]]], identity_of: Callable[[Any], Identity], origin_ns: int
) -> dict[Identity, dict[str, list[tuple[int, int]]]]:
    """Per process and tag, the marks of one thread, in time order: a collective is noted once
    per rank, not once per level that records it. Whole operations follow one another on their
    thread, so the thread whose marks do not overlap and cover the most time is taken (Ascend's
    communication-op row rather than its parallel tasks on a stream, or its launch on the host)."""
    best: dict[Identity, dict[str, list[tuple[int, int]]]] = defaultdict(dict)
    scores: dict[tuple[Identity, str], tuple[bool, int]] = {}
    for (tag, origin, _thread), found in sorted(marks.items(), key=lambda kv: repr(kv[0])):
        ident = identity_of(origin)
        found = sorted((a + origin_ns, b + origin_ns) for a, b in found)
        sequential = all(found[n][0] >= found[n - 1][1] for n in range(1, len(found)))
        score = (sequential, sum(end - start for start, end in found))
        if score > scores.get((ident, tag), (False, -1)):
            best[ident][tag] = found
            scores[(ident, tag)] = score
    return dict(best)


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def merge(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    jobs: int = 0,
    memory_budget: int = DEFAULT_BUDGET,
    selection: Selection = EVERYTHING,
    clocks: AlignOptions = AUTOMATIC,
    phase_rules: PhaseOptions = AUTO_PHASES,
    force: bool = False,
    strict: bool = False,
    on_plan: Callable[[RunReport], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RunReport:
    """Merge every trace found under ``inputs`` into one trace at ``output``.

    ``format`` is ``"perfetto"``, ``"json"`` or ``"json.gz"``; by default the output's extension
    decides (``.json``, ``.json.gz``, anything else Perfetto protobuf). ``jobs`` worker processes
    read and encode files in parallel (0: one per CPU when the inputs are large enough to gain).
    ``memory_budget`` is how many events a file's layout holds in memory before it spills sorted
    runs to a temporary file beside the output (about 200 bytes each). ``selection`` says which
    processes, time window and slice durations to keep (everything by default). ``clocks`` says
    how files are placed on one timeline (:mod:`tracemerge.clock`: automatic by default);
    ``phase_rules`` which phase rules derive the Phases and Pipeline tracks, and which steps to keep.
    ``force`` lets ``output`` replace one of the inputs (which is then left out). ``strict``
    writes nothing when any file is skipped or any event dropped (FatalError naming the first).
    ``on_plan`` is called with the report of what was found before the output is assembled.

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
    report.notes.extend(found.notes)
    report.skipped.extend(str(e) for e in found.skipped)
    _check_output(out_path, [Path(p) for p in inputs], found.candidates, force)
    candidates = [c for c in found.candidates if c.path.resolve() != out_path.resolve()]
    if not candidates:
        where = ", ".join(str(p) for p in inputs)
        if report.skipped:
            raise FatalError(f"no usable trace files in {where}: " + "; ".join(report.skipped))
        raise FatalError(f"no trace files found in {where}")

    work = _work_dir(out_path)
    try:
        workers = min(jobs if jobs > 0 else _auto_jobs(candidates), len(candidates))
        with ExitStack() as stack:
            pool = stack.enter_context(ProcessPoolExecutor(workers)) if workers > 1 else None
            if pool is not None:
                stack.push(_stop_workers_on_error(pool))
            run = _Runner(pool, progress)
            # Sequence 1 carries the descriptors; each file gets the next, in discovery order.
            found_skipped, found_ignored = len(report.skipped), len(report.ignored)
            # Chrome JSON keeps each file's laid-out events from its first read for the second pass
            # (a selection of processes is applied while reading: then the file is read again).
            keep_layout = (
                "" if writer.one_pass or not (selection.roles is None and selection.ranks is None) else writer.name
            )
            for wide in (False, True):
                jobs_ = [
                    FileJob(
                        c,
                        n + 2,
                        writer.name if writer.one_pass else "",
                        work / f"{n:06d}.chunk",
                        budget=memory_budget,
                        selection=selection,
                        wide_ids=wide,
                        sync=clocks.sync,
                        phases=phase_rules.presets,
                        keep_layout=keep_layout,
                    )
                    for n, c in enumerate(candidates)
                ]
                del report.skipped[found_skipped:], report.ignored[found_ignored:]
                scans = _collect(run.map(jobs_, "read"), report)
                if not scans:
                    raise FatalError("no usable trace files: " + "; ".join(report.skipped))
                try:
                    plan = make_plan(scans, wide, clocks)
                    keep = None if selection.roles is None and selection.ranks is None else selection.keeps
                    model = derive(scans, plan.offsets, phase_rules.presets, phase_rules.steps, keep)
                    derived = _derived_scan(model, len(candidates) + 2, work / "phases.chunk", plan)
                    if derived is not None:
                        plan = make_plan([*scans, derived], wide, clocks, plan.alignment)
                    break
                except IdCollision:  # as rare as two equal 35-bit hashes: encode again, wide
                    if wide:
                        raise FatalError("two tracks hash to one 63-bit uuid") from None
            selection = _steps_window(selection, phase_rules.steps, model, plan, report)
            chunk_of = {j.candidate.path: j.chunk for j in jobs_}
            cand_of = {j.candidate.path: j.candidate for j in jobs_}
            # Chrome JSON encodes with the plan. Perfetto re-encodes only files whose threads overlap
            # another file's of the same process in time (they need their own copies), and files
            # that a --window cuts; files wholly outside the window are left out.
            scan_of = {sc.path: sc for sc in scans}
            numbers = summary(model, {p.identity: p.name for p in plan.processes})
            if derived is not None:
                chunk_of[derived.path] = derived.path
                scan_of[derived.path] = _encode_derived(model, plan, writer, derived, memory_budget, wide)
                plan.phase_summary = numbers
            redo = []
            for u in plan.units:
                if derived is not None and u.path == derived.path:
                    continue
                sc = scan_of[u.path]
                place, window = _local_window(selection, u, sc)
                if place == "outside" and writer.one_pass:  # its chunk is written: drop it
                    _leave_out_file(sc, chunk_of[u.path])
                    continue
                if place == "inside":
                    window = None
                if writer.one_pass and u.salts == sc.salts and window is None:
                    continue
                unit = None if writer.one_pass else u
                redo.append(
                    FileJob(
                        cand_of[u.path],
                        u.sequence_id,
                        writer.name,
                        chunk_of[u.path],
                        unit,
                        u.salts,
                        memory_budget,
                        selection,
                        window,
                        wide,
                        clocks.sync,
                        phase_rules.presets,
                        saved=sc if keep_layout else None,
                    )
                )
            if redo:
                # A file read again describes itself anew: its summary replaces the first one.
                for outcome in run.map(redo, "encode"):
                    path = outcome.candidate.path
                    if outcome.scan is None:  # it changed since the plan was made: left out, said so
                        why = outcome.skipped or "no events"
                        report.skipped.append(f"{shown(path)}: changed while being merged, left out ({why})")
                        _leave_out_file(scan_of[path], chunk_of[path], FILE_CHANGED)
                        continue
                    scan_of[path] = outcome.scan
                scans = [scan_of[sc.path] for sc in scans]
            _fill_report(report, plan, scans)
            _note_json_precision(report, writer, scans, plan)
            report.phases = numbers
            report.filtered.update(model.left_out)
            if strict and (report.skipped or report.dropped):
                first = report.skipped[0] if report.skipped else f"dropped input events: {next(iter(report.dropped))}"
                raise FatalError(f"--strict: {first}")
            if on_plan:
                on_plan(report)
            _assemble(plan, list(scan_of.values()), writer, out_path, work, chunk_of)
            report.output_bytes = out_path.stat().st_size
    except OSError as exc:
        raise FatalError(f"{shown(out_path)}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report


def _derived_scan(model: PhaseModel, sequence_id: int, chunk: Path, plan: MergePlan) -> FileScan | None:
    """The summary of the derived tracks (Phases per process, the Pipeline group), as if a file."""
    if model.empty:
        return None
    times = [(e.ts, e.ts + e.dur) for e in phase_events(model)]
    lo, hi = min(a for a, _ in times), max(b for _, b in times)
    return FileScan(
        path=chunk,
        format="derived phases",
        clock=UNIX_EPOCH if plan.wall_clock else RELATIVE_NO_ANCHOR,
        sequence_id=sequence_id,
        origin_ns=0,
        identities={},
        counts={},
        threads=track_infos(model, role_sort_key),
        counter_series={},
        ts_min=lo,
        ts_max=hi,
        local_min=lo,
    )


def _encode_derived(
    model: PhaseModel, plan: MergePlan, writer: Writer, scan: FileScan, budget: int, wide: bool
) -> FileScan:
    """Encode the derived tracks into their chunk, the way a file's events are."""
    unit = next(u for u in plan.units if u.path == scan.path)
    with scan.path.open("wb") as out:
        enc = WRITERS[writer.name].unit_encoder(unit.sequence_id, out)
        layout = FileLayout(enc, budget, scan.path.parent)
        for ev in phase_events(model):
            layout.add_event(ev)
        tracks: Any = LocalTracks({}, wide) if writer.one_pass else PlannedTracks(unit)
        shift = None if writer.one_pass else unit.shift_ns
        result = layout.finish(lambda ident: ident, tracks, shift, flow_id_base(unit.sequence_id))
        enc.close()
    scan.lanes = result.lanes
    return scan


def _steps_window(
    selection: Selection, steps: frozenset[int] | None, model: PhaseModel, plan: MergePlan, report: RunReport
) -> Selection:
    """``--steps``: the time the kept steps span, as a window (within any --window given)."""
    if steps is None:
        return selection
    kept = [(a, b - 1) for n, a, b in model.steps if n in steps]  # the next step starts at b
    if not kept:
        found = ", ".join(str(n) for n in model.found_steps) or "none"
        raise FatalError(f"--steps: no such step in this run (steps found: {found})")
    lo, hi = min(a for a, _ in kept) - plan.base_ns, max(b for _, b in kept) - plan.base_ns
    if selection.window is not None:
        start, end = selection.window
        lo, hi = max(lo, start if start is not None else lo), min(hi, end if end is not None else hi)
    return replace(selection, window=(lo, hi))


def _stop_workers_on_error(pool: ProcessPoolExecutor) -> Callable[..., bool]:
    """An exit callback: when the merge fails or is stopped, end the workers now rather than let
    them finish files nobody will use (the pool's own exit would wait for them)."""

    def stop(exc_type: type | None, *_: object) -> bool:
        if exc_type is not None:
            processes = list((getattr(pool, "_processes", None) or {}).values())  # no public way to stop them
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
        return False

    return stop


class _Runner:
    """Runs file jobs in-process or in the worker pool, in order."""

    def __init__(self, pool: ProcessPoolExecutor | None, progress: Callable[[str], None]) -> None:
        self.pool = pool
        self.progress = progress

    def map(self, jobs: list[FileJob], verb: str) -> Iterator[FileOutcome]:
        outcomes: Iterable[FileOutcome] = (
            map(process_file, jobs) if self.pool is None else self.pool.map(process_file, jobs)
        )
        for n, outcome in enumerate(outcomes, 1):
            self.progress(f"{verb} {n}/{len(jobs)}: {outcome.candidate.path}")
            yield outcome


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


def _leave_out_file(scan: FileScan, chunk: Path, why: str = "") -> None:
    """A file wholly outside the --window (or, ``why`` FILE_CHANGED, one that changed while being
    merged): nothing of it is written."""
    for counts in scan.written.values():
        if why == FILE_CHANGED:
            scan.dropped["events of a file that changed while being merged"] += counts.total
            continue
        scan.filtered["events outside --window"] += counts.slices + counts.instants + counts.counters
        scan.filtered["flows outside --window"] += counts.flows
    scan.written = {}
    scan.lanes = []
    chunk.write_bytes(b"")


# Chrome JSON times are µs that Perfetto reads as doubles: exact to the ns below 2**53 ns of span.
JSON_EXACT_SPAN_NS = 1 << 53


def _note_json_precision(report: RunReport, writer: Writer, scans: list[FileScan], plan: MergePlan) -> None:
    if writer.one_pass:
        return
    ends = [(s.ts_max or 0) + plan.offsets.get(s.path, 0) for s in scans if s.ts_max is not None]
    span = max(ends, default=plan.base_ns) - plan.base_ns
    if span >= JSON_EXACT_SPAN_NS:
        days = span / 86_400e9
        report.notes.append(
            f"the trace spans {days:.0f} days: past {JSON_EXACT_SPAN_NS / 86_400e9:.0f} days Perfetto reads "
            "Chrome JSON times with less than ns precision (and may drop slices that then touch); "
            ".pftrace keeps every ns"
        )


def _check_output(out_path: Path, inputs: list[Path], candidates: list[Candidate], force: bool) -> None:
    """Refuse an output that would destroy something: an input (unless ``force``), or anything
    that is not a regular file we may write (a device, a FIFO, a symlink, a read-only file)."""
    if os.path.lexists(out_path):
        if out_path.is_symlink():
            raise FatalError(f"{shown(out_path)}: is a symbolic link; not replacing it (name the file itself)")
        if not out_path.is_file():
            raise FatalError(f"{shown(out_path)}: is not a regular file; not replacing it")
        if not out_path.stat().st_mode & 0o222:  # its mode, not access(): root may write anything
            raise FatalError(f"{shown(out_path)}: is read-only; not replacing it")
    if force:
        return
    target = out_path.resolve()
    named = {p.resolve() for p in inputs} | {c.path.resolve() for c in candidates}
    if target in named:
        raise FatalError(f"{shown(out_path)}: is one of the inputs; not overwriting it (use --force to replace it)")


def _work_dir(out_path: Path) -> Path:
    out_dir = out_path.parent if str(out_path.parent) else Path(".")
    if not out_dir.is_dir():
        raise FatalError(f"{shown(out_path)}: output directory {out_dir} does not exist")
    try:
        return Path(tempfile.mkdtemp(prefix=".tracemerge-", dir=out_dir))
    except OSError as exc:
        raise FatalError(f"{shown(out_path)}: cannot write in {out_dir} ({exc.strerror or exc})") from None


def _auto_jobs(candidates: list[Candidate]) -> int:
    total = 0
    for c in candidates:
        with suppress(OSError):
            total += c.path.stat().st_size
    return (os.cpu_count() or 1) if total >= PARALLEL_MIN_BYTES else 1


def _collect(outcomes: Iterable[FileOutcome], report: RunReport) -> list[FileScan]:
    scans: list[FileScan] = []
    for outcome in outcomes:
        if outcome.ignored:
            report.ignored.append(outcome.candidate.path)
        elif outcome.skipped:
            report.skipped.append(outcome.skipped)
        elif outcome.scan:
            scans.append(outcome.scan)
    return scans


def _fill_report(report: RunReport, plan: MergePlan, scans: list[FileScan]) -> None:
    procs = {p.identity: ProcessReport(p.name, p.identity.role, p.identity.rank, p.pid) for p in plan.processes}
    for s in scans:
        report.dropped.update(s.dropped)
        report.metadata_records += s.metadata_records
        report.moved_to_lanes += s.moved_to_lanes
        report.reversed_flows += s.reversed_flows
        for ident, counts in s.counts.items():
            proc = procs[ident]
            proc.files.append(s.path)
            proc.clocks.add(s.clock.name)
            proc.read.add(counts)
        for ident, counts in s.written.items():
            procs[ident].written.add(counts)
        report.filtered.update(s.filtered)
    report.processes = [procs[p.identity] for p in plan.processes if procs[p.identity].files]
    report.time_base_unix_ns = plan.base_ns if plan.wall_clock else None
    labels = {p.identity: p.name for p in plan.processes}
    for s in sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + plan.offsets.get(s.path, 0))):
        placed = plan.alignment.sources.get(s.path)
        if placed is None or s.ts_min is None:
            continue
        entry = placed.as_dict()
        entry["processes"] = sorted({labels[i] for i in (*s.counts, *s.threads, *s.counter_series) if i in labels})
        entry["epoch"] = s.clock.anchored
        entry["first_event_ns"] = s.ts_min + placed.offset_ns - plan.base_ns
        report.alignment.append(entry)


def _assemble(
    plan: MergePlan, scans: list[FileScan], writer: Writer, out_path: Path, work: Path, chunk_of: dict[Path, Path]
) -> None:
    scan_of = {s.path: s for s in scans}
    # Lanes opened while encoding carry no names yet: take them from their planned threads.
    planned = {t.uuid: t for t in plan.threads}
    lanes = [lane_track(planned[lane.parent_uuid], lane.lane) for u in plan.units for lane in scan_of[u.path].lanes]
    assembled = work / "assembled"
    with ExitStack() as stack:
        raw = stack.enter_context(assembled.open("wb"))
        out = raw
        if writer.gzip:
            out = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5, mtime=0))
        writer.write_header(out, plan, lanes)
        for unit in plan.units:
            out.write(writer.prologue(unit, scan_of[unit.path].local_min or 0))
            chunk = chunk_of[unit.path]
            with chunk.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            chunk.unlink()
        writer.write_footer(out, plan)
    os.replace(assembled, out_path)
