"""The device part of ``tracemerge summary``'s tables: per role, the mean of each column of the
breakdown (:mod:`tracemerge.phases.device_time`) over its ranks' steps and its worst rank's; a
process without steps has one row, its whole profiled time."""

from __future__ import annotations

import statistics
from collections import defaultdict

from tracemerge.report.run_report import format_duration, format_table

BREAKDOWN_PARTS = ("wall", "compute", "communication", "overlapped", "free", "preparing", "closing", "wait")
TITLE = (
    "device time per rank and step: compute + communication (exposed) + free + preparing + closing = wall;"
    " overlapped: compute during communication; free: idle between the step's first and last device work;"
    " preparing: before the first, closing: after the last; wait: in collectives, for the last rank to enter"
)


def _mean(rows: list[dict], part: str) -> str:
    # a row an older tracemerge stored has no preparing nor closing (its free holds them); a
    # withheld wait is None (not shown, not averaged)
    values = [v for r in rows if (v := r.get(f"{part}_ns", 0)) is not None]
    return format_duration(round(statistics.fmean(values))) if values else "-"


def breakdown_table(rows: list[dict], counted: set[int] | None = None) -> str:
    """Per role: each part of the device time per rank and step, the mean over its ranks' counted
    steps (all of them when none is counted; a process's whole-time row always) and the worst rank
    (the most time not computing over its steps)."""
    if counted is not None:
        rows = [r for r in rows if r["step"] is None or r["step"] in counted] or rows
    by_role: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_role[r["role"]][r["rank"]].append(r)
    table: list[tuple[str, ...]] = [("role", "ranks", "", *BREAKDOWN_PARTS)]
    for role, ranks in by_role.items():
        steps = [r for found in ranks.values() for r in found]
        per = "mean per step" if any(r["step"] is not None for r in steps) else "mean per rank"
        table.append((role or "-", str(len(ranks)), per, *(_mean(steps, p) for p in BREAKDOWN_PARTS)))
        worst = max(ranks, key=lambda k: (sum(r["wall_ns"] - r["compute_ns"] for r in ranks[k]), -(k or 0)))
        found = ranks[worst]
        label = f"worst: rank {worst}" if worst is not None else "worst: (no rank)"
        table.append(("", "", label, *(_mean(found, p) for p in BREAKDOWN_PARTS)))
    return "\n" + TITLE + "\n" + format_table(table, left=frozenset({0, 2}))
