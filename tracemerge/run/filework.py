"""A file's heavy work: :func:`process_file`, a plain function of one file and a small :class:`FileJob`.

It reads the file once, lays its events out and encodes them into a chunk of its own, and returns
a :class:`~tracemerge.plan.types.FileScan` summary (with the clock and phase evidence noted while
reading). Nothing else is shared, so it runs in-process, in worker processes or on another
machine alike. Chrome JSON's second pass (:func:`_encode_saved`) encodes the events the first one
kept, with the plan.
"""

from __future__ import annotations

import io
import os
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import msgspec
from msgspec import field
from msgspec.structs import replace

from tracemerge.core.errors import FatalError, InputError, NotATrace, shown
from tracemerge.core.gc_pause import no_cyclic_gc
from tracemerge.core.model import UNIX_EPOCH, ClockDomain, Identity, SourceData, ThreadInfo
from tracemerge.core.stats import Losses, Stat
from tracemerge.discovery.discover import Candidate
from tracemerge.evidence.anchors import Watch
from tracemerge.evidence.kernel_tally import process_kernel_times, process_kernels
from tracemerge.evidence.scan_marks import process_marks, with_named_marks
from tracemerge.layout import emit
from tracemerge.layout.types import Encoder, LayoutResult
from tracemerge.phases import StepScalars
from tracemerge.phases.rules import PhaseRules, Preset
from tracemerge.plan.encoded import Encoded
from tracemerge.plan.types import (
    FileScan,
    LocalTracks,
    PlannedTracks,
    UnitPlan,
    flow_id_base,
    resolve_identity,
)
from tracemerge.run.passes import SUMMARY_ONLY, EncodeChunk, EncodeKept, KeepLayout, Pass
from tracemerge.select import EVERYTHING, Selection, TimeFilter
from tracemerge.store.event_store import DEFAULT_BUDGET, threads_in_order
from tracemerge.store.file_layout import FileLayout
from tracemerge.store.read_options import DEFAULT_READ, ReadOptions
from tracemerge.writers import WRITERS

# Without a clock of their own, µs timestamps at least this large are Unix-epoch time (1973 on).
EPOCH_FLOOR_NS = 10**17
RELATIVE_NO_ANCHOR = ClockDomain("relative µs, no wall-clock anchor", anchored=False)
# A file this large (more than a batch of 16,384 packets, about 1.5 MB of Kineto JSON) is worth
# a process packing its packets ahead: below, there is nothing to overlap.
PACK_AHEAD_MIN = 2 << 20


class FileJob(msgspec.Struct, frozen=True):
    """What processing one file needs besides the file: all of it small and picklable."""

    candidate: Candidate
    sequence_id: int
    pass_: Pass = SUMMARY_ONLY  # what the job makes of the file's events (tracemerge.run.passes)
    chunk: Path | None = None  # where the file's chunk is written or its layout kept, and spills go
    salts: dict[Identity, str] = field(default_factory=dict)
    budget: int = DEFAULT_BUDGET  # events held in memory before they spill to disk
    selection: Selection = EVERYTHING
    window: tuple[int | None, int | None] | None = None  # in the file's own timestamps
    wide_ids: bool = False  # 63-bit track uuids (after narrow ones collided)
    sync: tuple[str, ...] = ()  # span names that start at one instant in every process (clock evidence)
    phases: tuple[Preset, ...] = ()  # phase rules noted while reading
    # What the source is told: where metric series go, and how many processes besides the one
    # running the job may read parts of a large file at once (the same bytes however many).
    # Its keep_zero_counters comes from ``selection``.
    read: ReadOptions = DEFAULT_READ
    # The chunk's folder is the merge's work folder, which the process that plans sees too: the
    # per-kernel columns (device activity, kernel times) spill there past a bound and travel as
    # where they lie. False where it is not (a Ray node's folder): they stay in memory.
    columns_on_disk: bool = True

    @property
    def unit(self) -> UnitPlan | None:
        """The plan's tracks and time shift the pass encodes with (None: the file's own)."""
        return self.pass_.unit if isinstance(self.pass_, (EncodeChunk, EncodeKept)) else None


class FileOutcome(msgspec.Struct):
    """What processing one file gave: a summary, or why the file is not used."""

    candidate: Candidate
    scan: FileScan | None = None  # what the read found (a second pass: the summary it encoded from)
    encoded: Encoded | None = None  # what the file's chunk holds (with ``scan``)
    skipped: str | None = None  # one-line reason, naming the file
    ignored: bool = False  # a non-trace met while walking a directory
    lost: bool = False  # not processed at all: the node or task that held it failed (see executors)
    scalars: StepScalars | None = None  # a file of step-keyed values (they have no time of their own)


def _what_was_there(dropped: Losses) -> str:
    """What a file without events held instead, as the messages it was counted under."""
    if not dropped:
        return ""
    messages = Counter(dropped.by_message())
    shown_reasons = [f"{reason} ×{count}" for reason, count in messages.most_common(3)]
    more = f", {len(messages) - 3} more reasons" if len(messages) > 3 else ""
    return f" (only what is not drawn: {'; '.join(shown_reasons)}{more})"


class _NoOutput:
    """An encoder that writes nothing: a file read only for its summary."""

    def prefix(self, name: str, cat: str) -> bytes:
        return b""

    args_heads: tuple[bytes, ...] = (b"",) * 4096

    def args(self, text: bytes) -> bytes:
        return b""

    flows_bind_by_order = False
    ends_apart = False

    def default_track(self, uuid: int) -> None: ...

    def ends(self, *args: Any) -> None: ...

    def items(self, *args: Any) -> None: ...

    def counter(self, *args: Any) -> None: ...

    def close(self) -> None: ...


@no_cyclic_gc()
def process_file(job: FileJob) -> FileOutcome:
    """Read one file, lay it out, encode it into ``job.chunk``; summarise it for the plan.

    A file that breaks the reader in a way no check foresaw (a value of a type its format never
    holds, a structure nested beyond reason, more than memory allows) is skipped with the reason:
    the rest of the run is merged.
    """
    try:
        return _process_file(job)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return FileOutcome(job.candidate, skipped=f"{shown(job.candidate.path)}: cannot be read ({reason[:200]})")
    except sqlite3.Error as exc:
        return FileOutcome(job.candidate, skipped=f"{shown(job.candidate.path)}: cannot read the database ({exc})")
    except OSError as exc:
        # The input gone or unreadable since it was found (on another node, say): that file is
        # skipped. Any other OSError (the chunk's disk full) fails the run.
        if exc.filename is None or os.fspath(exc.filename) != os.fspath(job.candidate.path):
            raise
        return FileOutcome(job.candidate, skipped=f"{shown(job.candidate.path)}: cannot read: {exc.strerror or exc}")
    except FatalError as exc:  # a process the file's work forked died (a part reader, its packer)
        raise FatalError(f"{shown(job.candidate.path)}: {exc}") from None


def input_bytes(job: FileJob) -> int:
    """The size of the job's file (0 when it is gone: its read says so)."""
    try:
        return job.candidate.path.stat().st_size
    except OSError:
        return 0


def _layout_files(chunk: Path) -> tuple[Path, Path]:
    """Where a kept layout lies: its index and its run file."""
    return chunk.with_suffix(".layout"), chunk.with_suffix(".runs")


def _process_file(job: FileJob) -> FileOutcome:
    if isinstance(job.pass_, EncodeKept):
        return _encode_saved(job, job.pass_)
    cand = job.candidate
    keep_layout = isinstance(job.pass_, KeepLayout) and job.chunk is not None
    with ExitStack() as stack:
        enc = _encoder(job, stack)
        layout = _new_layout(job, enc, keep_layout)
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
                found = identities[origin] = resolve_identity(origin, data, cand.facts)
            return found

        result, tracks = _lay_out_read(job, layout, identity_of, keep_layout)
        # Scanned while a packing process may still write the last batches.
        scan = None if result.ts_min is None else _scan(job, data, layout, result, identities, identity_of)
        enc.close()
    if scan is None:
        if data.step_values:
            return FileOutcome(cand, scalars=StepScalars(cand.path, data.step_values, data.dropped))
        return FileOutcome(cand, skipped=f"{shown(cand.path)}: no events{_what_was_there(data.dropped)}")
    moved = tracks.moved if isinstance(tracks, LocalTracks) else {}
    return FileOutcome(cand, scan=scan, encoded=_laid_out(job, scan, result, moved))


def _encoder(job: FileJob, stack: ExitStack) -> Encoder:
    """What the file's events are encoded with: the writer's encoder into the chunk
    (:class:`EncodeChunk`), or into nothing kept (:class:`KeepLayout`: bodies as the writer
    encodes them, nothing written yet); a summary's encodes nothing."""
    step = job.pass_
    if isinstance(step, EncodeChunk) and job.chunk is not None:
        out = stack.enter_context(job.chunk.open("wb"))
        # A core left idle for the file (its parts would be read at once) packs ahead too.
        ahead = job.read.parts is not None and input_bytes(job) >= PACK_AHEAD_MIN
        enc = WRITERS[step.writer].unit_encoder(job.sequence_id, out, ahead=ahead)
        stack.callback(enc.end)  # its packing process stopped if the file is given up
        return enc
    if isinstance(step, KeepLayout) and job.chunk is not None:
        return WRITERS[step.writer].unit_encoder(job.sequence_id, io.BytesIO())
    return _NoOutput()


def _new_layout(job: FileJob, enc: Encoder, keep_layout: bool) -> FileLayout:
    """The layout a file is read into: spilled beside the chunk (to a named run file when the
    layout is kept for a second pass), watching the job's evidence, with its read options."""
    store = _layout_files(job.chunk)[1] if keep_layout and job.chunk is not None else None
    folder = job.chunk.parent if job.chunk else None
    return FileLayout(
        enc,
        job.budget,
        folder,
        Watch(job.sync, PhaseRules(job.phases)),
        store,
        replace(job.read, keep_zero_counters=job.selection.keep_zero_counters),
        folder if job.columns_on_disk else None,
    )


def _lay_out_read(
    job: FileJob, layout: FileLayout, identity_of: Callable[[Any], Identity], keep_layout: bool
) -> tuple[LayoutResult, LocalTracks | PlannedTracks]:
    """Lay out what was read on the planned tracks (Chrome JSON's second read) or on the file's
    own, kept for a second pass when ``keep_layout``; the result, and the tracks it named."""
    encoding = isinstance(job.pass_, EncodeChunk)
    if job.unit is not None:
        tracks: Any = PlannedTracks(job.unit)
        shift = job.unit.shift_ns
    else:
        tracks, shift = LocalTracks(job.salts, job.wide_ids), None
    sel = job.selection
    times = _time_filter(job)
    keep = None
    if sel.by_process:
        keep = sel.keeps if sel.keeps_file(job.candidate.facts) else _keeps_nothing
    if keep_layout:  # the second pass names the processes of everything kept
        keys = [k for k, _ in [*threads_in_order(layout.entries), *threads_in_order(layout.points)]]
        for key in [*keys, *layout.samples]:
            identity_of(key[0])
    result = emit.finish(
        layout, identity_of, tracks, shift, flow_id_base(job.sequence_id), keep, times, summary_only=not encoding
    )
    if keep_layout and job.chunk is not None:
        layout.save(_layout_files(job.chunk)[0])
    return result, tracks


def _scan(
    job: FileJob,
    data: SourceData,
    layout: FileLayout,
    result: LayoutResult,
    identities: dict,
    identity_of: Callable[[Any], Identity],
) -> FileScan:
    """The summary of a file read and laid out, for the plan."""
    cand, notes = job.candidate, layout.notes
    assert result.ts_min is not None
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
    for kind, count in notes.marks_over.items():  # the events are in the output; only not evidence
        message = f"{kind} marks beyond the cap per thread (events kept, not used as {kind} evidence)"
        dropped.add(Stat.EVIDENCE_CAPPED, count, message)
    return FileScan(
        path=cand.path,
        format=data.format,
        clock=clock,
        sequence_id=job.sequence_id,
        origin_ns=data.origin_ns,
        identities=identities,
        counts=dict(result.read),
        threads=dict(threads),
        counter_series=dict(series),
        series_descriptions=data.series_descriptions,
        ts_min=result.ts_min + data.origin_ns,
        ts_max=(result.ts_max or result.ts_min) + data.origin_ns,
        local_min=result.ts_min,
        dropped=dropped,
        metadata_records=data.metadata_records,
        marks=with_named_marks(
            process_marks(notes.marks, identity_of, data.origin_ns), cand.facts, result, data.origin_ns
        ),
        kernels=process_kernels(layout.kernels.by_stream, identity_of),
        kernel_times=process_kernel_times(layout.kernels.times, identity_of),
        facts=cand.facts,
        host=data.host,
        mtime_ns=_mtime_ns(cand.path),
    )


def _laid_out(job: FileJob, scan: FileScan, result: LayoutResult, moved: dict[tuple, int]) -> Encoded:
    """What a read's lay-out gave (``moved``: the tracks it gave another uuid than their hash);
    its counts and losses are the summary's: the file was read and laid out in one go."""
    return Encoded(
        counts=scan.counts,
        written=dict(result.written),
        dropped=scan.dropped,
        filtered=result.filtered,
        lanes=result.lanes,
        moved_to_lanes=result.moved_to_lanes,
        reversed_flows=result.reversed_flows,
        salts=dict(job.salts),
        moved_ids=moved,
    )


def _encode_saved(job: FileJob, step: EncodeKept) -> FileOutcome:
    """Chrome JSON's second pass: encode the events the first read laid out and kept, with the
    plan; nothing of the input is read again."""
    assert job.chunk is not None
    prior, first = step.first, step.laid_out
    index, _ = _layout_files(job.chunk)
    with job.chunk.open("wb") as out:
        enc = WRITERS[step.writer].unit_encoder(job.sequence_id, out)
        layout = FileLayout.load(index, enc, job.budget)
        result = emit.finish(
            layout,
            prior.identities.__getitem__,
            PlannedTracks(step.unit),
            step.unit.shift_ns,
            flow_id_base(job.sequence_id),
            None,
            _time_filter(job),
        )
        enc.close()
    dropped = first.dropped.copy()
    dropped.update(result.dropped)
    filtered = Counter(first.filtered)
    filtered.update(result.filtered)
    encoded = Encoded(
        counts=dict(result.read),
        written=dict(result.written),
        dropped=dropped,
        filtered=filtered,
        lanes=result.lanes,
        moved_to_lanes=result.moved_to_lanes,
        reversed_flows=result.reversed_flows,
        salts=dict(job.salts),
    )
    return FileOutcome(job.candidate, scan=prior, encoded=encoded)


def _keeps_nothing(ident: Identity) -> bool:
    return False


def _time_filter(job: FileJob) -> TimeFilter | None:
    """What ``--window`` (in the file's own timestamps) and ``--min-dur`` keep of a file; None: all."""
    if job.window is None and not job.selection.min_dur:
        return None
    lo, hi = job.window or (None, None)
    return TimeFilter(lo, hi, job.selection.min_dur)


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
