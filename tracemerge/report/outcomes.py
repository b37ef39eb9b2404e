"""The run report filled from what each file's work returned, once the plan is made."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tracemerge.phases import StepScalars
from tracemerge.plan.encoded import Encoded, EncodedFile
from tracemerge.plan.planner import process_coords
from tracemerge.plan.types import FileScan, MergePlan
from tracemerge.report.run_report import ProcessReport, RunReport
from tracemerge.run.filework import FileOutcome
from tracemerge.writers import Writer


def collect(
    outcomes: Iterable[FileOutcome], report: RunReport, scalars: list[StepScalars]
) -> tuple[list[FileScan], dict[Path, Encoded]]:
    """The summaries of the files read, and what laying each out gave by path; files ignored or
    skipped go to ``report``, step-keyed tracker scalars to ``scalars``."""
    scans: list[FileScan] = []
    encoded: dict[Path, Encoded] = {}
    for outcome in outcomes:
        if outcome.ignored:
            report.ignored.append(outcome.candidate.path)
        elif outcome.skipped:
            report.skipped.append(outcome.skipped)
        elif outcome.scan and outcome.encoded:
            scans.append(outcome.scan)
            encoded[outcome.scan.path] = outcome.encoded
        elif outcome.scalars:
            scalars.append(outcome.scalars)
    return scans, encoded


def fill_report(report: RunReport, plan: MergePlan, files: list[EncodedFile]) -> None:
    """Per process what was read and written, every file's losses, and where each file was placed."""
    scans = [f.scan for f in files]
    coords = process_coords(scans)
    procs = {
        p.identity: ProcessReport(p.name, p.identity.role, p.identity.rank, p.pid, dict(coords[p.identity]))
        for p in plan.processes
    }
    for s, encoded in ((f.scan, f.encoded) for f in files):
        report.losses.update(encoded.dropped)
        report.metadata_records += s.metadata_records
        report.moved_to_lanes += encoded.moved_to_lanes
        report.reversed_flows += encoded.reversed_flows
        for ident, counts in encoded.counts.items():
            proc = procs[ident]
            proc.files.append(s.path)
            proc.clocks.add(s.clock.name)
            proc.read.add(counts)
        for ident, counts in encoded.written.items():
            procs[ident].written.add(counts)
        report.filtered.update(encoded.filtered)
    report.processes = [procs[p.identity] for p in plan.processes if procs[p.identity].files]
    report.time_base_unix_ns = plan.base_ns if plan.wall_clock else None
    labels = {p.identity: p.name for p in plan.processes}
    for s in sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + plan.offsets.get(s.path, 0))):
        placed = plan.alignment.sources.get(s.path)
        if placed is None or s.ts_min is None:
            continue
        entry = placed.as_dict()
        entry["processes"] = sorted({labels[i] for i in (*s.counts, *s.threads, *s.counter_series) if i in labels})
        entry["epoch"] = s.clock.anchored
        entry["first_event_ns"] = s.ts_min + placed.offset_ns - plan.base_ns
        report.alignment.append(entry)


# Chrome JSON times are µs that Perfetto reads as doubles: exact to the ns below 2**53 ns of span.
JSON_EXACT_SPAN_NS = 1 << 53


def note_json_precision(report: RunReport, writer: Writer, scans: list[FileScan], plan: MergePlan) -> None:
    if writer.one_pass:
        return
    ends = [(s.ts_max or 0) + plan.offsets.get(s.path, 0) for s in scans if s.ts_max is not None]
    span = max(ends, default=plan.base_ns) - plan.base_ns
    if span >= JSON_EXACT_SPAN_NS:
        days = span / 86_400e9
        report.notes.append(
            f"the trace spans {days:.0f} days: past {JSON_EXACT_SPAN_NS / 86_400e9:.0f} days Perfetto reads "
            "Chrome JSON times with less than ns precision (and may drop slices that then touch); "
            ".pftrace keeps every ns"
        )
