"""The runs among a merge's inputs (:mod:`tracemerge.clock.runs` finds them): the files and tracker
scalars of those kept, and what the run report says of them all."""

from __future__ import annotations

from tracemerge.clock.runs import Run, Runs, listed, owner
from tracemerge.core.errors import shown
from tracemerge.core.stats import Stat
from tracemerge.phases import StepScalars
from tracemerge.plan.types import FileScan
from tracemerge.report.findings import Findings


def files_of(scans: list[FileScan], runs: Runs, kept: tuple[Run, ...]) -> list[FileScan]:
    """The summaries of the files of the runs ``kept``, and of the files no time places."""
    paths = {p for r in kept for p in r.files} | set(runs.unplaced)
    return [s for s in scans if s.path in paths]


def scalars_kept(scalars: list[StepScalars], runs: Runs, kept: tuple[Run, ...]) -> tuple[list[StepScalars], Findings]:
    """The tracker scalars of the runs ``kept``: keyed by step, with no time, each file belongs to
    the run in whose folder it sits (:func:`~tracemerge.clock.runs.owner`); one that no run's
    folder holds alone goes with those kept. Those of a run left out are counted, value by value."""
    out, said = [], Findings()
    for f in scalars:
        belongs = owner(f.path, runs.runs)
        if belongs is None or belongs in kept:
            out.append(f)
            continue
        values = sum(len(named) for named in f.values.values())
        said.lose(Stat.OTHER_RUN_SCALARS, values, f"{shown(f.path)}: run {belongs.number}, started {belongs.started}")
        said.losses.append(f.dropped)
    return out, said


def note_runs(
    runs: Runs, kept: tuple[Run, ...], left: list[Run], scans: list[FileScan], one_timeline: bool = True
) -> Findings:
    """The runs found (a row each); when there are several, a note naming them (and, when they
    all go on ``one_timeline``, that it has gaps) and, per file of a run left out, its events
    under ``other_run`` (and what its read could not keep, under its own statistics). Nothing is
    said of a single run."""
    said = Findings(runs=[r.as_dict(merged=r in kept) for r in runs.runs])
    if not runs.several:
        return said
    apart = f"gaps of more than {runs.gap_ns / 3.6e12:.3g} h with no event between them"
    if left:
        said.notes.append(
            f"the inputs hold {len(runs.runs)} runs ({apart}): kept {listed(kept)}; left out {listed(left)} "
            "(--run all keeps every run, --run N or --run START one of them)"
        )
    else:
        said.notes.append(f"the inputs hold {len(runs.runs)} runs ({apart}): each kept, {listed(runs.runs)}")
    if not left and one_timeline:
        widest = max(b.start_ns - a.end_ns for a, b in zip(runs.runs, runs.runs[1:], strict=False))
        said.notes.append(
            f"--run all: the runs are merged onto one timeline with gaps of up to {widest / 3.6e12:.1f} h; "
            "steps that share a number in several runs are one step of the summary"
        )
    for r in kept:
        if r.ambiguous:
            names = ", ".join(shown(p) for p in r.ambiguous)
            said.notes.append(
                "placed by records that several runs hold alike (the same session numbers or sync spans), "
                f"kept with run {r.number} as in its folder: {names}"
            )
    if runs.unplaced and left:
        names = ", ".join(shown(p) for p in runs.unplaced)
        said.notes.append(f"files nothing places in time, kept with run {kept[0].number}: {names}")
    by_path = {s.path: s for s in scans}
    for r in left:
        for path in r.files:
            scan = by_path[path]
            events = sum(c.total for c in scan.counts.values())
            said.lose(Stat.OTHER_RUN, events, f"{shown(path)}: run {r.number}, started {r.started}")
            said.losses.append(scan.dropped)
    return said
