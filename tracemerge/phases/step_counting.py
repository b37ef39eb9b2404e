"""Steps as the framework counts them, and which of them a mean may count.

A span belongs to step k when the framework says so: torch's ``ProfilerStep#k``, the step its
args give it (AReaL's ``global_step``, a span log's ``step``, a rollout's ``version``:
:data:`tracemerge.evidence.anchors.STEP_ARGS`), the step a file's name gives (verl's ``step<S>``).
A process none of these numbers takes its steps by time: the job's steps where they hold most of
its phases, else a step at each start of the phase it runs first, numbered on from the job's first
(:func:`tracemerge.phases.derivation.derive`).

A job step runs from its first to its last event across every process (its ``wall``); its
``period`` is step k+1's start minus its start (pipelined and asynchronous RL overlap steps, so the
period, not the wall, is the pace; none without a step k+1 starting after it). A step is
**partial** when no process did real work in it: the longest time one process spent in it is under
1/:data:`PARTIAL_UNDER` of the median of that over the job's steps (torch's trailing
``ProfilerStep#N`` the schedule writes as it stops, a step one role recorded for a moment). The
first step of the run is the **warm-up** when a later step is not partial. Means, shares and gates
count a step when it is neither partial nor the warm-up (the warm-up too with ``--keep-warmup``).
"""

from __future__ import annotations

import statistics

from tracemerge.core.model import Identity
from tracemerge.phases.model import ProcessPhases, StepKind

PARTIAL_UNDER = 10  # a step whose busiest process spent under 1/10 of the usual in it is partial

Window = tuple[int, int, int]  # (step, start, end)


def numbered(found: list[tuple[str, int, int]]) -> list[Window]:
    """Per step number, its first start to its last end (spans: (number, start, end))."""
    spans: dict[int, tuple[int, int]] = {}
    for n, a, b in found:
        lo, hi = spans.get(int(n), (a, b))
        spans[int(n)] = (min(lo, a), max(hi, b))
    return [(n, a, b) for n, (a, b) in sorted(spans.items())]


def kinds(
    steps: list[Window], processes: dict[Identity, ProcessPhases], first: int | None, keep_warmup: bool
) -> dict[int, StepKind]:
    """Each job step's :class:`StepKind`; ``first``: the run's first step, --steps or not."""
    busiest: dict[int, int] = {}
    for proc in processes.values():
        for st in proc.steps:
            busiest[st.step] = max(busiest.get(st.step, 0), st.dur)
    usual = statistics.median(busiest.values()) if busiest else 0
    partial = {n for n, _, _ in steps if PARTIAL_UNDER * busiest.get(n, 0) < usual}
    real_after = any(n != first and n not in partial for n, _, _ in steps)
    starts = {n: a for n, a, _ in steps}
    # Step k+1's start minus step k's: none without a step k+1, nor when it starts first (two runs'
    # files, or clocks placed wrong).
    period = {n: starts[n + 1] - a for n, a in starts.items() if starts.get(n + 1, a - 1) >= a}
    out = {}
    for n, _, _ in steps:
        warmup = n == first and real_after
        counted = n not in partial and (keep_warmup or not warmup)
        out[n] = StepKind(n in partial, warmup, counted, period.get(n))
    return out
