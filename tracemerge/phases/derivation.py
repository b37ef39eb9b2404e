"""RL phases: where each step's time went, derived from the phase and step marks the files'
reads noted (:mod:`tracemerge.phases.rules` says which names are which).

Steps per process come from its step markers (``ProfilerStep#N`` in any torch trace, or the
preset's); a process without any takes the job's steps (the union of the others' step N); a run
without any step marker counts a step from each start of the phase a process runs first.
Within a step, time belongs to the innermost phase running (a phase nested in another takes
its time from it) and the rest is ``idle``: per process and step, phase times plus idle time
equal the step's time, to the nanosecond. Per step, and per role, step and phase, who started
last and who held the others up is :mod:`tracemerge.phases.holdups`'s (from the collectives each process
took part in). The summary of the numbers is :mod:`tracemerge.analysis.steps`; the tracks drawn
from them :mod:`tracemerge.phases.tracks`.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from tracemerge.core.gc_pause import no_cyclic_gc
from tracemerge.core.model import Identity
from tracemerge.core.stats import Losses, Stat
from tracemerge.evidence.anchors import (
    COLLECTIVE,
    DEVICE_COMM,
    DEVICE_COMPUTE,
    FRAMEWORK_STEPS,
    MSTX,
    NAMED_STEPS,
    PHASE,
    STEP,
    TORCH_STEPS,
    preferred_preset,
)
from tracemerge.evidence.kernel_tally import KernelTimes, joined
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.phases.across import critical_paths, device_breakdown, pipeline, step_holdups, waiting_on
from tracemerge.phases.critical_path import first_events
from tracemerge.phases.device_time import covered, merged, whole_breakdowns
from tracemerge.phases.holdups import FOREVER
from tracemerge.phases.kernels import Busiest, busiest, busiest_per_step
from tracemerge.phases.model import (
    IDLE,
    HasMarks,
    Occurrence,
    PhaseModel,
    ProcessPhases,
    Step,
    StepScalars,
)
from tracemerge.phases.rules import Preset
from tracemerge.phases.step_counting import kinds, numbered

UNPLACED_SCALARS = "tracker scalars of steps the merged trace has no step for"
REPEATED_SCALARS = "tracker scalar given again for one step (the first kept)"


def attach_scalars(model: PhaseModel, files: Iterable[StepScalars], dropped: Losses) -> None:
    """Give each job step the tracker scalars logged for it; count the rest in ``dropped``."""
    steps = {n for n, _, _ in model.steps}
    for found in files:
        for step, values in sorted(found.values.items()):
            if step not in steps:
                dropped.add(Stat.TRACKER_SCALARS_UNPLACED, len(values), UNPLACED_SCALARS)
                continue
            kept = model.scalars.setdefault(step, {})
            for name, value in values.items():
                if name in kept:
                    dropped.add(Stat.TRACKER_VALUE_NOT_NUMBER, 1, REPEATED_SCALARS)
                else:
                    kept[name] = value


Marks = dict[Identity, dict[str, list[tuple[str, int, int]]]]


@no_cyclic_gc()  # millions of span tuples held at once, no reference cycles
def derive(
    scans: Iterable[HasMarks],
    offsets: dict[Path, int],
    presets: tuple[Preset, ...],
    steps_kept: frozenset[int] | None = None,
    keep: Callable[[Identity], bool] | None = None,
    keep_warmup: bool = False,
    unaligned: frozenset[Identity] = frozenset(),
) -> PhaseModel:
    """Phases and steps of every process ``keep`` keeps, on the aligned timeline (file time +
    its offset). The ``unaligned`` processes (placed without clock evidence) are left out of
    what is measured across processes: skews, who was late, waits, critical paths."""
    devices: dict[Identity, dict[str, SpanUnion]] = defaultdict(lambda: defaultdict(SpanUnion))
    scans = list(scans)
    phase_marks, step_marks, collectives = _gather(scans, offsets, keep, devices)
    model = PhaseModel("", {}, [], {})
    _processes(model, phase_marks, step_marks, collectives, presets)
    own_steps = {ident: _own_steps(by_preset, "") for ident, by_preset in step_marks.items()}
    own_steps.update({ident: _own_steps(step_marks.get(ident, {}), p.preset) for ident, p in model.processes.items()})
    job = _job_steps(own_steps, unaligned)
    found: set[int] = set()
    for ident, proc in model.processes.items():
        windows = own_steps[ident] or _by_time(job, proc.occurrences)
        found.update(n for n, _, _ in windows)
        gaps = _gaps(windows)
        if steps_kept is not None:
            kept = [w for w in windows if w[0] in steps_kept]
            inside = [o for o in proc.occurrences if any(a <= o.start < b for _, a, b in kept)]
            model.left_out[Stat.FILTERED_STEP_PHASES] += len(proc.occurrences) - len(inside)
            proc.occurrences = inside
            windows = kept
        _account(proc, windows, _named_spans(step_marks.get(ident, {})))
        proc.timeline.idle = merged([(a, b) for _, a, b in proc.idle] + gaps)
    # The job's steps: every process's, those whose spans alone carry a step (no phase) too.
    steps_of = {i: [w for w in ws if steps_kept is None or w[0] in steps_kept] for i, ws in own_steps.items()}
    steps_of.update({i: [(st.step, st.start, st.end) for st in p.steps] for i, p in model.processes.items()})
    model.steps = _job_steps(steps_of, unaligned)
    model.found_steps = sorted(found.union(*({n for n, _, _ in w} for w in own_steps.values())))
    first = model.found_steps[0] if model.found_steps else None
    model.kinds = kinds(model.steps, model.processes, first, keep_warmup)
    _across(model, scans, offsets, keep, devices, collectives, unaligned)
    if steps_kept is not None and not model.steps:
        model.processes.clear()  # nothing of the run is kept
    return model


def _processes(
    model: PhaseModel,
    phase_marks: Marks,
    step_marks: Marks,
    collectives: dict[Identity, list[tuple[int, int, str]]],
    presets: tuple[Preset, ...],
) -> None:
    """The processes with phases (each with the preset whose phases occur most in it), and those
    with numbered steps and no phase."""
    for ident, by_preset in phase_marks.items():
        preset = _choose(by_preset, presets)
        found = sorted(by_preset.get(preset, ()), key=lambda o: (o[1], -o[2], o[0]))
        if found:
            occurrences = [Occurrence(name, a, b) for name, a, b in _outermost_of_each_phase(found)]
            model.processes[ident] = ProcessPhases(preset, occurrences)
            model.processes[ident].timeline.collectives = sorted(collectives.get(ident, ()))
    for ident, by_preset in step_marks.items():
        # A process with numbered steps (torch's ProfilerStep#N, a file name's step) and no phase
        # still has its steps: all idle, in the Pipeline's Steps row and the summary. One whose
        # spans alone carry a step (a rollout's perf-tracer spans) sets the job steps' bounds.
        if ident not in model.processes and (by_preset.get(TORCH_STEPS) or by_preset.get(NAMED_STEPS)):
            model.processes[ident] = ProcessPhases("", [])
            model.processes[ident].timeline.collectives = sorted(collectives.get(ident, ()))
    model.preset = ", ".join(sorted({p.preset for p in model.processes.values()} - {""}))


def _across(
    model: PhaseModel,
    scans: list[HasMarks],
    offsets: dict[Path, int],
    keep: Callable[[Identity], bool] | None,
    devices: dict[Identity, dict[str, SpanUnion]],
    collectives: dict[Identity, list[tuple[int, int, str]]],
    unaligned: frozenset[Identity],
) -> None:
    """What is measured across processes, of the aligned ones (an unaligned process alone where
    its role or step has no other)."""
    model.roles = pipeline(model.processes, unaligned)
    model.holdups = step_holdups(model.processes, unaligned)
    units = {i: (d[DEVICE_COMPUTE], d[DEVICE_COMM]) for i, d in devices.items()}
    model.breakdown = device_breakdown(model.processes, units, collectives, unaligned)
    model.whole = whole_breakdowns({i: u for i, u in units.items() if i not in model.processes}, scans, offsets)
    model.kernels = busiest(joined((getattr(s, "kernels", {}) for s in scans), keep), units)
    model.step_kernels = _step_kernels(model, scans, offsets, keep)
    first = first_events(scans, offsets, keep)
    model.critical_path = critical_paths(model.processes, units, first, unaligned)
    model.holdups = waiting_on(model.holdups, model.critical_path)
    for proc in model.processes.values():
        proc.timeline.forget_entries()  # (kept for the holdups and the critical paths alone)


def _step_kernels(
    model: PhaseModel, scans: list[HasMarks], offsets: dict[Path, int], keep: Callable[[Identity], bool] | None
) -> dict[Identity, list[tuple[int, Busiest]]]:
    """Per process with steps and kernels: each step's busiest kernels and ops, of its kernels in
    every file (each stream's columns with the shift that puts them on the aligned timeline: its
    file's origin and offset)."""
    parts: dict[Identity, list[tuple[KernelTimes, int]]] = defaultdict(list)
    for s in scans:
        shift = offsets.get(s.path, 0) + getattr(s, "origin_ns", 0)
        for ident, found in getattr(s, "kernel_times", {}).items():
            if ident in model.processes and (keep is None or keep(ident)):
                parts[ident].extend((stream, shift) for stream in found)
    windows = {i: [(st.step, st.start, st.end) for st in model.processes[i].steps] for i in parts}
    busy = {i: [b.compute + b.communication for _, b in rows] for i, rows in model.breakdown.items()}
    return busiest_per_step(parts, windows, busy)


def _gather(
    scans: Iterable[HasMarks],
    offsets: dict[Path, int],
    keep: Callable[[Identity], bool] | None,
    devices: dict[Identity, dict[str, SpanUnion]],
) -> tuple[Marks, Marks, dict[Identity, list[tuple[int, int, str]]]]:
    """The phase and step marks (per process and preset: (name, start, end)) and the collectives
    (per process: (start, end, kind)) of the processes ``keep`` keeps, on the aligned timeline;
    their device activity into ``devices`` (per process and tag)."""
    phase_marks: Marks = defaultdict(lambda: defaultdict(list))
    step_marks: Marks = defaultdict(lambda: defaultdict(list))
    collectives: dict[Identity, list[tuple[int, int, str]]] = defaultdict(list)
    for s in scans:
        shift = offsets.get(s.path, 0)
        for ident, tags in s.marks.items():
            if keep is not None and not keep(ident):
                continue
            for tag, found in tags.items():
                kind, _, rest = tag.partition(" ")
                if kind == COLLECTIVE:
                    collectives[ident].extend([(a + shift, b + shift, rest) for a, b in found])
                if tag in (DEVICE_COMPUTE, DEVICE_COMM):
                    devices[ident][tag].absorb(SpanUnion.of(found), shift)
                if kind not in (PHASE, STEP):
                    continue
                preset, _, what = rest.partition("\t")
                what, _, role = what.partition("\t")
                if role and role != ident.role:
                    continue
                target = phase_marks if kind == PHASE else step_marks
                target[ident][preset].extend((what, a + shift, b + shift) for a, b in found)
    return phase_marks, step_marks, collectives


def _gaps(windows: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The time between a process's steps, and after its last one (all of them, --steps or not)."""
    spans = sorted((a, b) for _, a, b in windows)
    reach = list(itertools.accumulate((b for _, b in spans), max))
    out = [(reach[n], spans[n + 1][0]) for n in range(len(spans) - 1) if spans[n + 1][0] > reach[n]]
    return [*out, (reach[-1], FOREVER)] if spans else out


def _outermost_of_each_phase(found: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Occurrences in (start, longer first) order, less those inside an occurrence of the same
    phase: one phase never nests in itself (a stage file that is ``update_actor`` as a whole, and
    the ``actor_update`` span inside it; two scopes named for one phase)."""
    reach: dict[str, int] = {}
    kept = []
    for name, a, b in found:
        if b <= reach.get(name, a - 1) and a < reach[name]:
            continue
        reach[name] = max(reach.get(name, b), b)
        kept.append((name, a, b))
    return kept


def _choose(by_preset: dict[str, list], presets: tuple[Preset, ...]) -> str:
    """A process's preset: the one whose phases occur most in it (the first named wins ties);
    its MSTX ranges failing that."""
    counts = Counter({preset: len(found) for preset, found in by_preset.items()})
    return preferred_preset(counts, [p.name for p in presets]) or (MSTX if counts[MSTX] else "")


def _own_steps(by_preset: dict[str, list[tuple[str, int, int]]], preset: str) -> list[tuple[int, int, int]]:
    """A process's steps from its markers: torch's numbered ProfilerStep#N first, then the steps
    its spans' args give (each from its first span to its last), then those its files' names give
    (the files of one step joined), else the preset's."""
    torch = sorted((int(n), a, b) for n, a, b in by_preset.get(TORCH_STEPS, ()))
    if torch:  # each ProfilerStep#N row is a step (two captures of one process may both hold #1)
        return torch
    for source in (FRAMEWORK_STEPS, NAMED_STEPS):  # the files a name calls step S are step S
        if by_preset.get(source):
            return numbered(by_preset[source])
    if not preset:
        return []
    found = sorted((a, b) for _, a, b in by_preset.get(preset, ()))
    return [(n, a, b) for n, (a, b) in enumerate(_outermost(found))]


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a < out[-1][1]:
            continue  # nested in (or overlapping) the previous step marker
        out.append((a, b))
    return out


def _job_steps(
    per_process: dict[Identity, list[tuple[int, int, int]]], unaligned: frozenset[Identity]
) -> list[tuple[int, int, int]]:
    """Each step from its first start to its last end over the processes that have it: the
    aligned ones (an unaligned process's clock may be days off), the unaligned where no aligned
    process has the step."""
    spans: dict[int, tuple[int, int, bool]] = {}
    for ident, steps in per_process.items():
        off = ident in unaligned
        for n, a, b in steps:
            lo, hi, was_off = spans.get(n, (a, b, off))
            if was_off and not off:
                lo, hi = a, b
            elif off and not was_off:
                continue
            spans[n] = (min(lo, a), max(hi, b), was_off and off)
    return [(n, a, b) for n, (a, b, _) in sorted(spans.items())]


def _by_time(job: list[tuple[int, int, int]], occurrences: list[Occurrence]) -> list[tuple[int, int, int]]:
    """A process no step marker numbers a step of: the job's steps, when they hold most of its
    phases' time; else a step starts at each start of the phase it runs first, numbered on from
    the job's first step (a trainer whose only numbered neighbours are rollout workers running
    ahead of it, as asynchronous RL does: their steps are no measure of its own)."""
    if job:
        union = merged([(a, b) for _, a, b in job])
        busy = sum(o.end - o.start for o in occurrences)
        if 2 * sum(covered(union, o.start, o.end) for o in occurrences) >= busy:
            return job
    first = min((n for n, _, _ in job), default=0)
    return [(first + n, a, b) for n, a, b in _cycle_steps(occurrences)]


def _cycle_steps(occurrences: list[Occurrence]) -> list[tuple[int, int, int]]:
    """No step marker anywhere: a step starts at each start of the phase the process runs first."""
    if not occurrences:
        return []
    first = occurrences[0].phase
    starts = [o.start for o in occurrences if o.phase == first]
    end = max(o.end for o in occurrences)
    return [(n, a, starts[n + 1] if n + 1 < len(starts) else end) for n, a in enumerate(starts)]


def _named_spans(by_preset: dict[str, list[tuple[str, int, int]]]) -> dict[tuple[int, int], int]:
    """The spans whose args name their step: (start, end) -> step."""
    return {(a, b): int(n) for n, a, b in by_preset.get(FRAMEWORK_STEPS, ())}


def _account(
    proc: ProcessPhases, windows: list[tuple[int, int, int]], named: dict[tuple[int, int], int] | None = None
) -> None:
    """Split each step window between the innermost running phase and idle time. A phase's step
    is the one its args name (``named``), else the one its start falls in.

    A sweep over the window's boundaries with a heap of the running phases, innermost (latest
    started, then shortest) on top: O(n log n) in the phases, however many steps there are.
    """
    occurrences = sorted(proc.occurrences, key=lambda o: (o.start, -o.end))
    starts = [o.start for o in occurrences]
    longest = max((o.end - o.start for o in occurrences), default=0)
    by_start = sorted(windows, key=lambda w: w[1])
    window_starts = [a for _, a, _ in by_start]
    for o in occurrences:
        k = bisect.bisect_right(window_starts, o.start) - 1
        o.step = by_start[k][0] if k >= 0 and o.start < by_start[k][2] else None
        if named:
            o.step = named.get((o.start, o.end), o.step)
    for n, a, b in windows:
        step = Step(n, a, b)
        lo_index = bisect.bisect_left(starts, a - longest)
        inside = [o for o in occurrences[lo_index : bisect.bisect_left(starts, b)] if o.end > a]
        points = sorted({a, b, *(max(o.start, a) for o in inside), *(min(o.end, b) for o in inside)})
        running: list[tuple[int, int, int]] = []  # (-start, end, index): the innermost first
        next_in = 0
        for lo, hi in itertools.pairwise(points):
            while next_in < len(inside) and max(inside[next_in].start, a) <= lo:
                o = inside[next_in]
                heapq.heappush(running, (-o.start, o.end, next_in))
                next_in += 1
            while running and running[0][1] <= lo:  # ended before this piece: gone
                heapq.heappop(running)
            name = inside[running[0][2]].phase if running else IDLE
            _piece(proc.timeline.pieces, lo, hi, name)
            if running:
                step.phases[name] += hi - lo
            else:
                step.idle += hi - lo
                if proc.idle and proc.idle[-1][0] == n and proc.idle[-1][2] == lo:
                    proc.idle[-1] = (n, proc.idle[-1][1], hi)
                else:
                    proc.idle.append((n, lo, hi))
        proc.steps.append(step)
    proc.timeline.pieces.sort()


def _piece(pieces: list[tuple[int, int, str]], lo: int, hi: int, name: str) -> None:
    """Notes that ``name`` ran from ``lo`` to ``hi`` (joined to the piece before when it goes on)."""
    if pieces and pieces[-1][1] == lo and pieces[-1][2] == name:
        pieces[-1] = (pieces[-1][0], hi, name)
    else:
        pieces.append((lo, hi, name))
