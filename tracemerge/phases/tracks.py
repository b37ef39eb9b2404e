"""The tracks tracemerge derives from a :class:`~tracemerge.phases.PhaseModel`: each process's
``Phases`` track, and the ``Pipeline`` group.

Every slice of the Pipeline nests on its row, so that the layout never moves one to an overlap
lane (where a UI shows it collapsed): the ``Steps`` row draws each step up to the next step's
start at most (its true end and the overlap in its args); each role's phases are packed into rows,
the longest first, each into the first row where it nests, a slice crossing another by at most
1/100 of its length drawn cut to nest (by how much in its args), the others in a further row of
the role (``actor · 2``). A run with processes placed without clock evidence has a warning row
first, one slice over the whole run naming them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

import msgspec
from msgspec import field

from tracemerge.core.model import GROUP_HEADER, Event, Identity, Kind, ThreadInfo
from tracemerge.phases.device_time import worst
from tracemerge.phases.holdups import FOREVER, SLOWER_PHASE, Holdup, order_key
from tracemerge.phases.model import IDLE, PhaseModel, PipelineSlice

PIPELINE = Identity("", None, "Pipeline")  # the top-level group: job steps and per-role phases
PHASES_THREAD: tuple = ("phases",)
STEPS_THREAD: tuple = GROUP_HEADER  # on the Pipeline's own track: a collapsed Pipeline shows the steps
CRITICAL_THREAD: tuple = ("critical path",)
SCALARS_THREAD: tuple = ("scalars",)
UNALIGNED_THREAD: tuple = ("unaligned",)
DEVICE_CAT = "tracemerge.device"
# Categories of what tracemerge derives (never an input's): "tracemerge*".
PHASE_CAT, STEP_CAT, WARNING_CAT = "tracemerge.phase", "tracemerge.step", "tracemerge.warning"
CRITICAL_CAT = "tracemerge.critical"
CUT_AT_MOST = 100  # a role's phase slice is cut to nest in a row by at most 1/100 of its length


def brief(ns: int) -> str:
    """A duration as a person reads it: ``512 ns``, ``18.4 µs``, ``344.4 ms``, ``2.10 s``."""
    sign, size = ("-" if ns < 0 else ""), abs(ns)
    if size < 1_000:
        return f"{sign}{size} ns"
    if size < 1_000_000:
        return f"{sign}{size / 1e3:.1f} µs"
    if size < 1_000_000_000:
        return f"{sign}{size / 1e6:.1f} ms"
    return f"{sign}{size / 1e9:.2f} s"


def role_thread(role: str, row: int = 0) -> tuple:
    return ("role", role) if row == 0 else ("role", role, row)


def unaligned_title(model: PhaseModel) -> str:
    n = len(model.unaligned)
    return f"⚠ {n} process{'es' if n > 1 else ''} unaligned"


def track_infos(model: PhaseModel, role_order: Callable[[str], tuple]) -> dict[Identity, dict[tuple, ThreadInfo]]:
    """The derived tracks: ``Phases`` first in each process; in the Pipeline group the warning
    row, ``Steps``, then each role's rows."""
    out: dict[Identity, dict[tuple, ThreadInfo]] = {
        ident: {PHASES_THREAD: ThreadInfo("Phases", (-1,))} for ident in model.processes
    }
    group: dict[tuple, ThreadInfo] = {}
    if model.unaligned and model.span is not None:
        group[UNALIGNED_THREAD] = ThreadInfo(unaligned_title(model), (-2,))
    if model.processes:
        group[STEPS_THREAD] = ThreadInfo("Steps", (-1, (), ""))
        if model.critical_path:
            group[CRITICAL_THREAD] = ThreadInfo("Critical path", (-1, (), "", 1))
        for role, rows in role_rows(model).items():
            name = role or "(no role)"
            for n in range(len(rows)):
                info = ThreadInfo(name if n == 0 else f"{name} · {n + 1}", (0, role_order(role), role, n))
                group[role_thread(role, n)] = info
        for role, ident in sorted(worst(model.breakdown).items(), key=lambda kv: role_order(kv[0])):
            title = f"{role or '(no role)'} device time · worst: {ident.label}"
            group[device_thread(role)] = ThreadInfo(title, (1, role_order(role), role, 0))
    if group:
        out[PIPELINE] = group
    return out


def device_thread(role: str) -> tuple:
    return ("device", role)


def _device_events(model: PhaseModel) -> Iterator[Event]:
    """Per role of several ranks, its worst rank's device time (:mod:`tracemerge.phases.device_time`): a
    slice over each of its steps, named by the shares, the numbers as args."""
    for role, ident in worst(model.breakdown).items():
        for st, (step, b) in zip(model.processes[ident].steps, model.breakdown[ident], strict=True):
            shares = [(part, getattr(b, part)) for part in ("compute", "communication", "free")]
            shares += [(part, getattr(b, part)) for part in ("preparing", "closing") if getattr(b, part)]
            name = " · ".join(f"{part} {100 * ns / b.wall:.0f}%" if b.wall else f"{part} 0%" for part, ns in shares)
            args = {"step": step, "rank": ident.rank, "process": ident.label, "wall_ns": b.wall}
            args.update({"compute_ns": b.compute, "communication_ns": b.communication})
            args.update({"overlapped_ns": b.overlapped, "free_ns": b.free, "wait_ns": b.wait})
            args.update({"preparing_ns": b.preparing, "closing_ns": b.closing})
            yield Event(Kind.SLICE, st.start, device_thread(role), name, DEVICE_CAT, b.wall, args, PIPELINE)


def scalar_series(model: PhaseModel) -> dict[Identity, dict[tuple, str]]:
    """The derived counter tracks: one per tracker scalar, in the Pipeline group."""
    names = sorted({name for values in model.scalars.values() for name in values})
    return {PIPELINE: {(SCALARS_THREAD, name): "" for name in names}} if names else {}


def events(model: PhaseModel) -> Iterator[Event]:
    """Every derived slice, on the aligned timeline; ``origin`` is the process's identity."""
    for ident, proc in model.processes.items():
        for o in proc.occurrences:
            args = {"step": o.step} if o.step is not None else None
            yield Event(Kind.SLICE, o.start, PHASES_THREAD, o.phase, PHASE_CAT, o.end - o.start, args, ident)
        for step, a, b in proc.idle:
            yield Event(Kind.SLICE, a, PHASES_THREAD, IDLE, PHASE_CAT, b - a, {"step": step}, ident)
    if model.unaligned and model.span is not None:
        yield _unaligned_event(model)
    if not model.processes:
        return
    yield from _step_events(model)
    yield from _critical_events(model)
    yield from _device_events(model)
    for role, rows in role_rows(model).items():
        for n, row in enumerate(rows):
            for p, a, b in row.placed:
                args = phase_args(p, a - p.start, p.end - b)
                yield Event(Kind.SLICE, a, role_thread(role, n), p.phase, PHASE_CAT, b - a, args, PIPELINE)


def _unaligned_event(model: PhaseModel) -> Event:
    """The warning row's one slice, over the whole run: which processes are not aligned, and why."""
    assert model.span is not None
    lo, hi = model.span
    found = sorted(model.unaligned, key=order_key)
    shown = ", ".join(i.label for i in found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    args: dict = {"what": "placed without clock evidence: their times are not aligned with the rest"}
    args.update({i.label: "; ".join(model.unaligned[i]) for i in found})
    name = f"{unaligned_title(model)}: {shown}"
    return Event(Kind.SLICE, lo, UNALIGNED_THREAD, name, WARNING_CAT, hi - lo, args, PIPELINE)


def _step_events(model: PhaseModel) -> Iterator[Event]:
    """The Steps row: each job step up to the next one's start at most, and its tracker scalars."""
    ordered = sorted(model.steps, key=lambda s: (s[1], s[0]))
    for k, (step, a, b) in enumerate(ordered):
        drawn = min(b, ordered[k + 1][1]) if k + 1 < len(ordered) else b
        scalars = model.scalars.get(step, {})
        args = {"step": step, **step_args(model.holdups.get(step), b - a, b - drawn), **_kind_args(model, step)}
        args.update(scalars)
        yield Event(Kind.SLICE, a, STEPS_THREAD, f"step {step}", STEP_CAT, drawn - a, args, PIPELINE)
        for name, value in scalars.items():
            yield Event(Kind.COUNTER, a, SCALARS_THREAD, name, STEP_CAT, value=value, origin=PIPELINE)


def _kind_args(model: PhaseModel, step: int) -> dict:
    """A step's period (to the next step's start), and whether it is the warm-up or partial
    (left out of the means: :mod:`tracemerge.phases.step_counting`)."""
    kind = model.kinds.get(step)
    if kind is None:
        return {}
    args: dict = {}
    if kind.period is not None:
        args.update({"period": brief(kind.period), "period_ns": kind.period})
    args.update({flag: True for flag, on in (("warm-up", kind.warmup), ("partial", kind.partial)) if on})
    return args


def _critical_events(model: PhaseModel) -> Iterator[Event]:
    """The Critical path row: each step's segments, up to the next step's start at most (as the
    Steps row draws it), named ``role · rank · phase``, what bound it as args."""
    starts = sorted(a for _, a, _ in model.steps)
    for seg in model.critical_path:
        k = bisect.bisect_right(starts, seg.start)
        end = min(seg.end, starts[k]) if k < len(starts) else seg.end
        if end <= seg.start:
            continue
        args = {"step": seg.step, "role": seg.ident.role, "rank": seg.ident.rank, "phase": seg.phase}
        args.update({"bound by": seg.bound_by, "dur_ns": seg.dur})
        if end < seg.end:
            args["cut_ns"] = seg.end - end
        name = f"{who(seg.ident, seg.phase)} ({seg.bound_by})"
        yield Event(Kind.SLICE, seg.start, CRITICAL_THREAD, name, CRITICAL_CAT, end - seg.start, args, PIPELINE)


def who(ident: Identity, phase: str | None = None) -> str:
    return f"{ident.label} · {phase}" if phase else ident.label


def step_args(held: Holdup | None, wall: int, overlap: int) -> dict:
    """A step's args: wall time, who held it up, who started last (if anyone started later than
    the first), skews (readable, then raw)."""
    args: dict = {"wall": brief(wall), "wall_ns": wall}
    if overlap:
        args.update({"overlaps next step by": brief(overlap), "overlap_ns": overlap})
    if held is None:
        return args
    slower = held.cause in ("", SLOWER_PHASE)  # else its phase is not what held the step up
    args.update({"critical": who(held.critical, held.phase if slower else None), "waited on it": brief(held.waited)})
    if held.cause:  # how the critical process held it up (see tracemerge.phases.holdups)
        args["how"] = f"{held.cause} {brief(held.cause_ns)}"
    if held.start_skew:  # else all started at once: nobody is late
        args["late"] = who(held.late)
    args.update({"start skew": brief(held.start_skew), "end skew": brief(held.end_skew)})
    args.update({"critical_rank": held.critical.rank, "waited_ns": held.waited})
    if held.start_skew:
        args["late_rank"] = held.late.rank
    args.update({"start_skew_ns": held.start_skew, "end_skew_ns": held.end_skew})
    return args


def phase_args(p: PipelineSlice, cut_start: int, cut_end: int) -> dict:
    """A role's phase slice args: ranks; of several, the rank that started last and the critical
    one, skews and spread (readable, then raw); how much of it is cut to nest, if any."""
    args: dict = {"step": p.step, "ranks": p.ranks}
    if p.ranks > 1:
        args.update(_holdup_args(p))
    if cut_start or cut_end:
        args["cut to nest"] = brief(cut_start + cut_end)
        args.update({k: v for k, v in (("cut_start_ns", cut_start), ("cut_end_ns", cut_end)) if v})
    return args


def _holdup_args(p: PipelineSlice) -> dict:
    held = p.holdup
    return {
        "late_rank": held.late.rank,
        "critical_rank": held.critical.rank,
        "waited on it": brief(held.waited),
        "start skew": brief(held.start_skew),
        "end skew": brief(held.end_skew),
        "spread": brief(p.spread_ns),
        "waited_ns": held.waited,
        "start_skew_ns": held.start_skew,
        "end_skew_ns": held.end_skew,
        "spread_ns": p.spread_ns,
    }


class Row(msgspec.Struct):
    """One row of a role: the slices placed on it (as drawn) and their bounds, to test nesting."""

    placed: list[tuple[PipelineSlice, int, int]] = field(default_factory=list)
    by_start: list[tuple[int, int]] = field(default_factory=list)
    by_end: list[tuple[int, int]] = field(default_factory=list)

    def crossing(self, s: int, e: int) -> list[tuple[int, int]]:
        """The slices of the row that [s, e) neither holds, nor is held by, nor misses."""
        out = []
        k = bisect.bisect_right(self.by_start, (s, FOREVER))
        while k < len(self.by_start) and self.by_start[k][0] < e:
            if self.by_start[k][1] > e:
                out.append(self.by_start[k])
            k += 1
        k = bisect.bisect_right(self.by_end, (s, FOREVER))
        while k < len(self.by_end) and self.by_end[k][0] < e:
            if self.by_end[k][1] < s:
                out.append((self.by_end[k][1], self.by_end[k][0]))
            k += 1
        return out

    def add(self, p: PipelineSlice, s: int, e: int) -> None:
        self.placed.append((p, s, e))
        bisect.insort(self.by_start, (s, e))
        bisect.insort(self.by_end, (e, s))

    def fit(self, p: PipelineSlice) -> tuple[int, int] | None:
        """Where ``p`` nests on this row (cut by at most 1/CUT_AT_MOST of it), None if nowhere."""
        s, e = p.start, p.end
        crossed = self.crossing(s, e)
        if not crossed:
            return s, e
        for a, b in crossed:
            s, e = (max(s, b), e) if a < p.start else (s, min(e, a))
        if s < e and (s - p.start) + (p.end - e) <= (p.end - p.start) // CUT_AT_MOST and not self.crossing(s, e):
            return s, e
        return None


def role_rows(model: PhaseModel) -> dict[str, list[Row]]:
    """Each role's phase slices packed into rows on which they nest: the longest first, each on the
    first row it fits (deterministic: ties by start, phase and step)."""
    out: dict[str, list[Row]] = {}
    for role, slices in model.roles.items():
        rows: list[Row] = []
        for p in sorted(slices, key=lambda p: (p.start - p.end, p.start, p.phase, p.step)):
            for row in rows:
                found = row.fit(p)
                if found is not None:
                    row.add(p, *found)
                    break
            else:
                rows.append(Row())
                rows[-1].add(p, p.start, p.end)
        out[role] = rows
    return out
