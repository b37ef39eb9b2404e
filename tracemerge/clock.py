"""Clock alignment: place every file's timestamps on one timeline.

Files on the Unix-epoch clock are kept as they are. A file whose clock has no wall-clock anchor
(a per-process ``perf_counter`` origin, say) cannot be placed from its own content; it is
shifted so that its first event lands at the run start, the earliest anchored event, and the
report says so. The trace's time base is the earliest placed event: output timestamps are
nanoseconds since then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tracemerge.model import ClockDomain


class HasClock(Protocol):
    path: Path
    clock: ClockDomain
    ts_min: int | None


def align(scans: list[HasClock]) -> tuple[dict[Path, int], int, bool]:
    """Per-file offsets (ns, added to that file's timestamps), the time base, and whether the
    base is a Unix-epoch time (so the output can show wall-clock time)."""
    anchored = [s.ts_min for s in scans if s.clock.anchored and s.ts_min is not None]
    run_start = min(anchored) if anchored else 0
    offsets: dict[Path, int] = {}
    for s in scans:
        if s.clock.anchored or s.ts_min is None:
            offsets[s.path] = 0
        else:
            offsets[s.path] = run_start - s.ts_min
    placed = [s.ts_min + offsets[s.path] for s in scans if s.ts_min is not None]
    base = min(placed) if placed else 0
    return offsets, base, bool(anchored)


def describe(clock: ClockDomain) -> str:
    """How a clock was placed, for the run table."""
    return clock.name if clock.anchored else f"{clock.name}; placed at run start"
