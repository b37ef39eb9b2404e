"""The run report, made once from what the stages returned: their findings, and once the plan is
made and every file encoded, what was merged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from tracemerge.core.stats import Stat
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.planner import process_coords
from tracemerge.plan.types import FileScan, MergePlan
from tracemerge.report.findings import Findings, all_losses, joined
from tracemerge.report.run_report import ProcessReport, RunReport
from tracemerge.writers import Writer


class Merged(msgspec.Struct, frozen=True):
    """What was merged: the plan, each file encoded (in the order read), what the phases left
    out on request (``--steps``), and the phase summary."""

    plan: MergePlan
    files: list[EncodedFile]
    left_out: Counter[Stat]
    phases: dict[str, Any]


def build_report(output: Path | None, format: str, stages: Sequence[Findings], merged: Merged | None) -> RunReport:
    """The run report of ``output``: what ``stages`` said, in their order, and what was merged."""
    said = joined(*stages)
    return RunReport(
        output=output,
        format=format,
        skipped=said.skipped,
        ignored=said.ignored,
        used=said.used,
        notes=said.notes,
        losses=all_losses(said),
        runs=said.runs,
        **(_merged_fields(merged) if merged is not None else {}),
    )


def _merged_fields(merged: Merged) -> dict[str, Any]:
    """The report's fields of what was merged: per process, in total, and per file placed."""
    files, plan = merged.files, merged.plan
    filtered: Counter[Stat] = Counter()
    for f in files:
        filtered.update(f.encoded.filtered)
    filtered.update(merged.left_out)
    return {
        "processes": _processes(plan, files),
        "filtered": filtered,
        "metadata_records": sum(f.scan.metadata_records for f in files),
        "moved_to_lanes": sum(f.encoded.moved_to_lanes for f in files),
        "reversed_flows": sum(f.encoded.reversed_flows for f in files),
        "alignment": _alignment(plan, [f.scan for f in files]),
        "time_base_unix_ns": plan.base_ns if plan.wall_clock else None,
        "phases": merged.phases,
    }


def merged_findings(files: Sequence[EncodedFile]) -> Findings:
    """What every file encoded lost (its read's losses too), in the order read."""
    return Findings(losses=[f.encoded.dropped for f in files])


def _processes(plan: MergePlan, files: Sequence[EncodedFile]) -> list[ProcessReport]:
    """Per process of the trace that a file holds: what was read and written, its files and clocks."""
    coords = process_coords([f.scan for f in files])
    procs = {
        p.identity: ProcessReport(p.name, p.identity.role, p.identity.rank, p.pid, dict(coords[p.identity]))
        for p in plan.processes
    }
    for f in files:
        for ident, counts in f.encoded.counts.items():
            proc = procs[ident]
            proc.files.append(f.scan.path)
            proc.clocks.add(f.scan.clock.name)
            proc.read.add(counts)
        for ident, counts in f.encoded.written.items():
            procs[ident].written.add(counts)
    return [procs[p.identity] for p in plan.processes if procs[p.identity].files]


def _alignment(plan: MergePlan, scans: list[FileScan]) -> list[dict[str, Any]]:
    """Where each file was placed, in the order of its first event on the trace's timeline."""
    labels = {p.identity: p.name for p in plan.processes}
    placed_files = []
    for s in sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + plan.offsets.get(s.path, 0))):
        placed = plan.alignment.sources.get(s.path)
        if placed is None or s.ts_min is None:
            continue
        entry = placed.as_dict()
        entry["processes"] = sorted({labels[i] for i in (*s.counts, *s.threads, *s.counter_series) if i in labels})
        entry["epoch"] = s.clock.anchored
        entry["first_event_ns"] = s.ts_min + placed.offset_ns - plan.base_ns
        placed_files.append(entry)
    return placed_files


# Chrome JSON times are µs that Perfetto reads as doubles: exact to the ns below 2**53 ns of span.
JSON_EXACT_SPAN_NS = 1 << 53


def json_precision_note(writer: Writer, scans: list[FileScan], plan: MergePlan) -> str | None:
    """The note a Chrome JSON trace too long for ns precision in Perfetto carries (None: none)."""
    if writer.one_pass:
        return None
    ends = [(s.ts_max or 0) + plan.offsets.get(s.path, 0) for s in scans if s.ts_max is not None]
    span = max(ends, default=plan.base_ns) - plan.base_ns
    if span < JSON_EXACT_SPAN_NS:
        return None
    days = span / 86_400e9
    return (
        f"the trace spans {days:.0f} days: past {JSON_EXACT_SPAN_NS / 86_400e9:.0f} days Perfetto reads "
        "Chrome JSON times with less than ns precision (and may drop slices that then touch); "
        ".pftrace keeps every ns"
    )
