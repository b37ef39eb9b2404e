"""What is worked out across processes once each has its steps and phases: per role the phase
spans of each step (:func:`pipeline`), who held each step up (:func:`step_holdups`), each rank's
device time per step (:func:`device_breakdown`) and each step's critical path
(:func:`critical_paths`)."""

from __future__ import annotations

from collections import Counter, defaultdict

from msgspec.structs import replace

from tracemerge.core.model import Identity
from tracemerge.phases.critical_path import WAITING_ON, Devices, Segment, step_path
from tracemerge.phases.device_time import Breakdown, Coverage, intersection, step_breakdowns, waits
from tracemerge.phases.holdups import SLOWER_PHASE, WAITING, Holdup, holdup, order_key
from tracemerge.phases.model import IDLE, Occurrence, PipelineSlice, ProcessPhases


def aligned(found: dict[Identity, tuple[int, int]], unaligned: frozenset[Identity]) -> dict[Identity, tuple[int, int]]:
    """The windows of a group measured across processes: the aligned processes', or the first
    (in role and rank order) alone when none is aligned; an unaligned clock may be days off."""
    kept = {i: w for i, w in found.items() if i not in unaligned}
    if kept or not found:
        return kept
    first = min(found, key=order_key)
    return {first: found[first]}


def pipeline(
    processes: dict[Identity, ProcessPhases], unaligned: frozenset[Identity] = frozenset()
) -> dict[str, list[PipelineSlice]]:
    """Per role, per step and phase: first start to last end across the role's ranks, and who
    held it up (:func:`tracemerge.phases.holdups.holdup` of the aligned ranks' spans of it)."""
    groups: dict[tuple[str, int, str], dict[Identity, list[Occurrence]]] = defaultdict(lambda: defaultdict(list))
    for ident, proc in processes.items():
        for o in proc.occurrences:
            if o.step is not None:
                groups[(ident.role, o.step, o.phase)][ident].append(o)
    roles: dict[str, list[PipelineSlice]] = defaultdict(list)
    for (role, step, phase), by_rank in sorted(groups.items(), key=lambda kv: kv[0]):
        windows = {i: (min(o.start for o in found), max(o.end for o in found)) for i, found in by_rank.items()}
        durations = [sum(o.end - o.start for o in found) for found in by_rank.values()]
        measured = aligned(windows, unaligned)
        held = holdup(measured, {i: processes[i].timeline for i in measured}, IDLE)
        lo, hi = min(a for a, _ in windows.values()), max(b for _, b in windows.values())
        roles[role].append(PipelineSlice(phase, step, lo, hi, held, max(durations) - min(durations), len(by_rank)))
    return dict(roles)


def device_breakdown(
    processes: dict[Identity, ProcessPhases],
    devices: Devices,
    collectives: dict[Identity, list[tuple[int, int, str]]],
    unaligned: frozenset[Identity] = frozenset(),
) -> dict[Identity, list[tuple[int, Breakdown]]]:
    """Per process with device activity, per step (in its order): compute, exposed communication,
    overlap, free time and wait (:mod:`tracemerge.phases.device_time`); linear in the spans once
    sorted. The wait in collectives is measured among the aligned processes (none for the others)."""
    windows = {i: [(st.step, st.start, st.end) for st in p.steps] for i, p in processes.items() if i in devices}
    measured = {i: w for i, w in windows.items() if i not in unaligned}
    waited = waits(measured, {i: sorted(collectives.get(i, ())) for i in measured})
    waited.update({i: [0] * len(w) for i, w in windows.items() if i in unaligned})
    out: dict[Identity, list[tuple[int, Breakdown]]] = {}
    for ident, found in windows.items():
        compute, comm = devices[ident]
        unions = Coverage(compute), Coverage(comm), Coverage(intersection(compute, comm))
        numbers = step_breakdowns([(a, b) for _, a, b in found], *unions, waited[ident])
        out[ident] = [(step, n) for (step, _, _), n in zip(found, numbers, strict=True)]
    return out


def step_holdups(
    processes: dict[Identity, ProcessPhases], unaligned: frozenset[Identity] = frozenset()
) -> dict[int, Holdup]:
    """Per job step, who held it up across every aligned process that has the step."""
    windows: dict[int, dict[Identity, tuple[int, int]]] = defaultdict(dict)
    for ident, proc in processes.items():
        for st in proc.steps:
            windows[st.step][ident] = (st.start, st.end)
    timelines = {i: p.timeline for i, p in processes.items()}
    return {n: holdup(aligned(found, unaligned), timelines, IDLE) for n, found in sorted(windows.items())}


def critical_paths(
    processes: dict[Identity, ProcessPhases],
    devices: Devices,
    first: dict[Identity, int],
    unaligned: frozenset[Identity] = frozenset(),
) -> list[Segment]:
    """Per job step, the critical path across every aligned process that has the step (the first
    window of a step a process has twice)."""
    windows: dict[int, dict[Identity, tuple[int, int]]] = defaultdict(dict)
    for ident, proc in processes.items():
        for st in proc.steps:
            windows[st.step].setdefault(ident, (st.start, st.end))
    timelines = {i: p.timeline for i, p in processes.items()}
    return [
        seg
        for n, found in sorted(windows.items())
        for seg in step_path(n, aligned(found, unaligned), timelines, devices, IDLE, first)
    ]


def waiting_on(holdups: dict[int, Holdup], path: list[Segment]) -> dict[int, Holdup]:
    """The holdups whose critical process was ``waiting``: where the step's critical path has it
    waiting on another role (a hand-off), that role's process and phase the path spends longest
    on hold the step up instead (a slower phase, the wait on it the waiting process's); named
    ``waiting on <role>`` when the path shows none of that role's work. The others as they are."""
    waits: dict[tuple[int, Identity], Counter[str]] = defaultdict(Counter)
    work: dict[int, Counter[tuple[Identity, str]]] = defaultdict(Counter)
    for seg in path:
        if seg.bound_by.startswith(WAITING_ON):
            waits[(seg.step, seg.ident)][seg.bound_by] += seg.dur
        elif seg.phase != IDLE:
            work[seg.step][(seg.ident, seg.phase)] += seg.dur
    out = dict(holdups)
    for n, held in holdups.items():
        bounds = waits.get((n, held.critical))
        if held.cause != WAITING or not bounds:
            continue
        bound = min(bounds, key=lambda b: (-bounds[b], b))
        role = bound[len(WAITING_ON) :]
        theirs = {k: ns for k, ns in work[n].items() if (k[0].role or k[0].label) == role}
        if not theirs:
            out[n] = replace(held, cause=bound)
            continue
        who, phase = min(theirs, key=lambda k: (-theirs[k], order_key(k[0]), k[1]))
        out[n] = replace(held, critical=who, phase=phase, waited=bounds[bound], cause=SLOWER_PHASE)
        out[n] = replace(out[n], cause_ns=theirs[(who, phase)])
    return out
