"""``tracemerge check``: what Perfetto's trace_processor makes of a trace file."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
from msgspec import field

from tracemerge.core.errors import shown
from tracemerge.report.run_report import format_table
from tracemerge.viewer.trace_processor import TraceProcessor, TraceProcessorError

# Per-process counts as trace_processor attributes them: thread tracks (and tracks under them)
# belong to the thread's process, process-scoped tracks to the process.
_SLICE_OWNER = (
    "select s.id, s.dur, s.track_id, coalesce(t.upid, pt.upid) as upid from slice s "
    "left join thread_track tt on s.track_id = tt.id left join thread t using (utid) "
    "left join process_track pt on s.track_id = pt.id"
)


class ProcessCounts(msgspec.Struct):
    pid: int
    name: str
    tracks: int = 0  # tracks holding slices (threads, streams, the process's own)
    slices: int = 0  # including zero-duration slices and instants
    counters: int = 0
    flows: int = 0
    machine: str = ""  # the machine it is on, in a trace of several (its name where trace_processor has one)


class CheckResult(msgspec.Struct):
    path: Path
    problems: list[dict[str, Any]] = field(default_factory=list)  # error/data_loss stats > 0
    notes: list[dict[str, Any]] = field(default_factory=list)  # info stats > 0
    processes: list[ProcessCounts] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_trace(path: str | os.PathLike[str], shell: str | os.PathLike[str] | None = None) -> CheckResult:
    """Load ``path`` into trace_processor; raises TraceProcessorUnavailable / TraceProcessorError."""
    result = CheckResult(Path(path))
    with TraceProcessor.any(shell) as tp:
        tp.load(path)
        stats = tp.query(
            "select name, idx, severity, source, value, description from stats where value > 0 order by name, idx"
        )
        result.problems = [s for s in stats if s["severity"] in ("error", "data_loss")]
        result.notes = [s for s in stats if s["severity"] not in ("error", "data_loss")]
        procs = {
            r["upid"]: ProcessCounts(r["pid"], r["name"] or "")
            for r in tp.query("select upid, pid, name from process where pid != 0 or name is not null")
        }
        counts: dict[str, dict[int, int]] = defaultdict(dict)
        queries = {
            "tracks": f"select upid, count(distinct track_id) as n from ({_SLICE_OWNER}) group by 1",
            "slices": f"select upid, count(*) as n from ({_SLICE_OWNER}) group by 1",
            "counters": "select p.upid, count(*) as n from counter c "
            "join process_counter_track p on c.track_id = p.id group by 1",
            "flows": f"select o.upid, count(*) as n from flow f "
            f"join ({_SLICE_OWNER}) o on f.slice_out = o.id group by 1",
        }
        for key, sql in queries.items():
            for row in tp.query(sql):
                counts[key][row["upid"]] = row["n"]
        for upid, proc in procs.items():
            for key in queries:
                setattr(proc, key, counts[key].get(upid, 0))
        for upid, machine in _machines(tp).items():
            if upid in procs:
                procs[upid].machine = machine
        result.processes = [p for p in procs.values() if p.tracks or p.slices or p.counters]
    return result


def _machines(tp: TraceProcessor) -> dict[int, str]:
    """Each process on a machine other than the trace's own: the machine's name (v58+ keep one),
    else its id in the trace. Nothing from a trace_processor that has no machines."""
    for name in ("m.name", "null"):  # v52 has machines, without names
        try:
            rows = tp.query(
                f"select p.upid, m.raw_id, {name} as name from process p join machine m on p.machine_id = m.id "
                "where m.raw_id != 0"
            )
        except TraceProcessorError:
            continue
        return {r["upid"]: r["name"] or f"machine {r['raw_id']}" for r in rows}
    return {}


def format_check(result: CheckResult) -> str:
    machines = any(p.machine for p in result.processes)  # a column of its own in a trace of several
    rows = [("pid", "process", *(("machine",) if machines else ()), "tracks", "slices", "counters", "flows")]
    for p in result.processes:
        where = (p.machine or "-",) if machines else ()
        rows.append((str(p.pid), p.name, *where, str(p.tracks), f"{p.slices:,}", f"{p.counters:,}", f"{p.flows:,}"))
    left = frozenset({1, 2}) if machines else frozenset({1})
    lines = [f"{shown(result.path)}: loaded by trace_processor", format_table(rows, left=left)]
    for s in [*result.notes, *result.problems]:
        idx = f"[{s['idx']}]" if s["idx"] is not None else ""
        level = s["severity"] if s in result.problems else "info"
        detail = f": {s['description']}" if s in result.problems else ""
        lines.append(f"{level}: {s['name']}{idx} = {s['value']}{detail}")
    lines.append("no import errors or data losses" if result.ok else f"{len(result.problems)} import problems")
    return "\n".join(lines)
