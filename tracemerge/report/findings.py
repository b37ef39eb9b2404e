"""What a stage of a merge (or a summary) has to say in the run report: its :class:`Findings`,
returned beside what the stage made.

A stage gathers its own findings in the order it meets them; the run report is then made once
from every stage's, in the stages' order (:func:`tracemerge.run.outcomes.build_report`). A
stage tried again (with wide track ids) returns findings anew: nothing said by the first try is
undone, it is never said.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import field

from tracemerge.core.stats import Losses, Stat
from tracemerge.report.run_report import RunReport


class Findings(msgspec.Struct):
    """Files skipped (a line each, naming the file), files ignored, metadata files used, notes,
    the runs among the inputs (the read stage's), and what was lost."""

    skipped: list[str] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    # In the order found, each added to the report's losses in turn: a statistic keeps the first
    # messages it is given, so the order decides which are listed.
    losses: list[Losses] = field(default_factory=list)

    def lose(self, stat: Stat, count: int, message: str) -> None:
        self.losses.append(Losses.one(stat, message, count))


def joined(*stages: Findings) -> Findings:
    """The findings of ``stages``, one after the other."""
    return Findings(
        skipped=[line for s in stages for line in s.skipped],
        ignored=[path for s in stages for path in s.ignored],
        used=[line for s in stages for line in s.used],
        notes=[note for s in stages for note in s.notes],
        runs=[run for s in stages for run in s.runs],
        losses=[losses for s in stages for losses in s.losses],
    )


def all_losses(stages: Findings) -> Losses:
    """The losses of ``stages`` added up in the order they were found."""
    total = Losses()
    for losses in stages.losses:
        total.update(losses)
    return total


def tell(report: RunReport, said: Findings) -> None:
    """``said`` added to a report the caller holds (``summarize(report=...)``): what was found,
    skipped and ignored, the notes and losses, and the runs among the inputs."""
    report.skipped.extend(said.skipped)
    report.ignored.extend(said.ignored)
    report.used.extend(said.used)
    report.notes.extend(said.notes)
    report.runs = said.runs
    for losses in said.losses:
        report.losses.update(losses)
