"""What the summary's figures are checked against before they are shown, and the idle time the
profiler did not record.

* **not profiled**: a process's idle time in a step before its first event or after its last one
  (its profiler, or the process, had not started or had stopped): nothing says whether it was
  busy, so it is not ``idle`` (recorded, doing nothing);
* **impossible figures** are withheld, each with a line saying which and why: a wait longer
  than the step it is in. (A phase's time in a step is part of the step by construction, and a
  step is made of the run's events; the processes placed without clock evidence, whose times
  could put a wait days long, are left out of what is measured across processes.)
"""

from __future__ import annotations

from tracemerge.phases.device_time import covered
from tracemerge.phases.model import ProcessPhases


def unrecorded(proc: ProcessPhases, recorded: tuple[int, int] | None) -> dict[int, int]:
    """Per step of ``proc``: its idle time outside ``recorded`` (its first to last event)."""
    out: dict[int, int] = {}
    if recorded is None:
        return out
    first, last = recorded
    for step, a, b in proc.idle:
        outside = (b - a) - covered([(first, last)], a, b)
        if outside:
            out[step] = out.get(step, 0) + outside
    return out


def withhold(numbers: dict) -> list[str]:
    """Sets to None each figure of ``numbers`` (as :func:`tracemerge.analysis.steps.summary`
    makes them) that cannot be true, and says which and why, a line each: a wait on the critical
    process, or a rank's wait in collectives, longer than its step (clocks placed wrong)."""
    lines = []
    for s in numbers["steps"]:
        c = s.get("critical")
        if c and c["ns"] is not None and c["ns"] > s["wall_ns"]:
            lines.append(f"step {s['step']}: the wait on {c['process']} is longer than the step: not shown")
            c["ns"] = None
    for row in numbers.get("breakdown") or []:
        if row["wait_ns"] is not None and row["wait_ns"] > row["wall_ns"]:
            who = f"rank {row['rank']}" if row["rank"] is not None else row["role"] or "a process"
            lines.append(f"step {row['step']}: {who}'s wait in collectives is longer than its step: not shown")
            row["wait_ns"] = None
    return lines
