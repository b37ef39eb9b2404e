"""The derived Phases and Pipeline tracks (:mod:`tracemerge.phases`), written as one more unit of
the output: a summary the plan takes like a file's, and a chunk encoded like a file's events."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from msgspec.structs import replace

from tracemerge.clock.placement import Alignment
from tracemerge.clock.unaligned import unaligned
from tracemerge.core.errors import FatalError
from tracemerge.core.model import UNIX_EPOCH, Identity
from tracemerge.layout.emit import finish
from tracemerge.naming.paths import role_sort_key
from tracemerge.phases.derivation import derive
from tracemerge.phases.model import PhaseModel
from tracemerge.phases.rules import PhaseOptions
from tracemerge.phases.tracks import events as phase_events
from tracemerge.phases.tracks import scalar_series, track_infos
from tracemerge.plan.encoded import Encoded
from tracemerge.plan.types import (
    FileScan,
    LocalTracks,
    MergePlan,
    PlannedTracks,
    UnitPlan,
    flow_id_base,
)
from tracemerge.run.filework import RELATIVE_NO_ANCHOR
from tracemerge.select import Selection, format_numbers
from tracemerge.store.file_layout import FileLayout
from tracemerge.writers import WRITERS, Writer

# The FileScan format of the derived unit (what a split's index leaves out of its inputs).
DERIVED_FORMAT = "derived phases"


def derived_scan(model: PhaseModel, sequence_id: int, chunk: Path, wall_clock: bool) -> FileScan | None:
    """The summary of the derived tracks (Phases per process, the Pipeline group), as if a file."""
    if model.empty and not model.unaligned:
        return None
    times = [(e.ts, e.ts + e.dur) for e in phase_events(model)]
    lo, hi = min(a for a, _ in times), max(b for _, b in times)
    return FileScan(
        path=chunk,
        format=DERIVED_FORMAT,
        clock=UNIX_EPOCH if wall_clock else RELATIVE_NO_ANCHOR,
        sequence_id=sequence_id,
        origin_ns=0,
        identities={},
        counts={},
        threads=track_infos(model, role_sort_key),
        counter_series=scalar_series(model),
        ts_min=lo,
        ts_max=hi,
        local_min=lo,
    )


def derive_run(
    scans: list[FileScan], alignment: Alignment, options: PhaseOptions, keep: Callable[[Identity], bool] | None
) -> PhaseModel:
    """The phase model of a run placed by ``alignment`` (:func:`tracemerge.phases.derive`), with
    what :func:`note_run` says beside it; the processes placed without clock evidence are left out
    of the figures measured across processes."""
    off = frozenset(i for i in unaligned(scans, alignment) if keep is None or keep(i))
    model = derive(scans, alignment.offsets, options.presets, options.steps, keep, options.keep_warmup, off)
    note_run(model, scans, alignment, keep)
    return model


def note_run(
    model: PhaseModel, scans: list[FileScan], alignment: Alignment, keep: Callable[[Identity], bool] | None
) -> None:
    """What the derived tracks and the summary say beside the phases, of the processes ``keep``
    keeps: those placed without clock evidence, the run's first and last event, and each
    process's first to last event (all on the aligned timeline)."""
    model.unaligned = {i: why for i, why in unaligned(scans, alignment).items() if keep is None or keep(i)}
    offsets = alignment.offsets
    spans: dict[Identity, tuple[int, int]] = {}
    for s in scans:
        if s.ts_min is None:
            continue
        lo, hi = s.ts_min + offsets[s.path], (s.ts_max or s.ts_min) + offsets[s.path]
        for ident in {*s.counts, *s.threads, *s.counter_series}:
            if keep is None or keep(ident):
                a, b = spans.get(ident, (lo, hi))
                spans[ident] = (min(a, lo), max(b, hi))
    model.active = {i: b - a for i, (a, b) in spans.items()}
    model.recorded = spans
    if spans:
        model.span = (min(a for a, _ in spans.values()), max(b for _, b in spans.values()))


def encode_derived(
    model: PhaseModel, plan: MergePlan, writer: Writer, scan: FileScan, budget: int, wide: bool
) -> Encoded:
    """Encode the derived tracks into their chunk (``scan.path``), the way a file's events are: on
    a sequence per machine where the run has machines (tracemerge.plan.machines), each process's
    Phases on its; what the chunk holds (the overlap lanes opened, the tracks moved)."""
    unit = next(u for u in plan.units if u.path == scan.path)
    sequences = {unit.sequence_id: 0, **dict(unit.machines)} if writer.one_pass else {unit.sequence_id: 0}
    machine_of = plan.machines.of_process if plan.machines is not None and len(sequences) > 1 else {}
    # Perfetto: times count from the chunk's earliest (its one prologue's), on every sequence.
    shift = None if len(sequences) == 1 else -(scan.local_min or 0)
    # One set of tracks for every sequence: no two of the chunk's tracks get one uuid.
    tracks: Any = LocalTracks({}, wide) if writer.one_pass else PlannedTracks(unit)
    lanes = []
    with scan.path.open("wb") as out:
        for sequence, machine in sequences.items():
            events = [ev for ev in phase_events(model) if machine_of.get(ev.origin, 0) == machine]
            if events or sequence == unit.sequence_id:
                lanes += _encode_sequence(events, unit, sequence, writer, out, (budget, tracks, shift))
    return Encoded(lanes=lanes, moved_ids=tracks.moved if isinstance(tracks, LocalTracks) else {})


def _encode_sequence(
    events: list, unit: UnitPlan, sequence: int, writer: Writer, out: BinaryIO, how: tuple[int, Any, int | None]
) -> list:
    """Derived events encoded on one sequence of the chunk; returns the overlap lanes they opened.
    ``how``: the memory budget, the chunk's tracks, and the shift of a one-pass format's times."""
    budget, tracks, one_pass_shift = how
    enc = WRITERS[writer.name].unit_encoder(sequence, out)
    layout = FileLayout(enc, budget, unit.path.parent)
    for ev in events:
        layout.add_event(ev)
    shift = one_pass_shift if writer.one_pass else unit.shift_ns
    result = finish(layout, _own_identity, tracks, shift, flow_id_base(sequence))
    enc.close()
    return result.lanes


def _own_identity(origin: Any) -> Identity:
    """A derived event's process: its origin is the process's identity (see Event.origin)."""
    return origin


def steps_window(selection: Selection, steps: frozenset[int] | None, model: PhaseModel, plan: MergePlan) -> Selection:
    """``--steps``: the time the kept steps span, as a window (within any --window given)."""
    if steps is None:
        return selection
    kept = [(a, b - 1) for n, a, b in model.steps if n in steps]  # the next step starts at b
    if not kept:
        found = format_numbers(model.found_steps) or "none"
        raise FatalError(f"--steps: no such step in this run (steps found: {found})")
    lo, hi = min(a for a, _ in kept) - plan.base_ns, max(b for _, b in kept) - plan.base_ns
    if selection.window is not None:
        start, end = selection.window
        lo, hi = max(lo, start if start is not None else lo), min(hi, end if end is not None else hi)
    return replace(selection, window=(lo, hi))
