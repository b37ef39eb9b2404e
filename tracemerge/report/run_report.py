"""The run report: what was found, what was written, and every loss under its statistic, with its messages."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import orjson
from msgspec import field

from tracemerge.core.errors import shown
from tracemerge.core.exit_status import EXIT_INCOMPLETE, EXIT_OK
from tracemerge.core.stats import Losses, Stat
from tracemerge.naming.paths import COORDINATE_ORDER

# Statistics that count parts of events or files, not events: their lines do not say events were dropped.
_NOT_EVENTS = frozenset({Stat.VALUE_TOO_DEEP, Stat.CLOCK_ANCHOR_UNREADABLE, Stat.RANK_UNREADABLE})
# Info statistics of what is in the input as it is and what Perfetto would leave undrawn too: their
# lines say so. The other info lines (a copy read once, zero counters left out, a session start
# missing) say what tracemerge did, and their own message says it.
_PERFETTO_IGNORES = frozenset(
    {
        Stat.FLOW_END_WITHOUT_START,
        Stat.FLOW_START_WITHOUT_END,
        Stat.FLOW_WITHOUT_DIRECTION,
        Stat.METADATA_UNSUPPORTED,
        Stat.METRIC_SERIES_EMPTY,
    }
)
IGNORED_SHOWN = 10  # files that are not traces named on stderr (the report lists them all)
AGAINST_WIDTH = 120  # the alignment table's "against" column (every partner is in --report)


class EventCounts(msgspec.Struct):
    """Events per output kind. ``flows`` counts flow links (an s→f arrow is one link)."""

    slices: int = 0
    instants: int = 0
    counters: int = 0
    flows: int = 0

    def add(self, other: EventCounts) -> None:
        self.slices += other.slices
        self.instants += other.instants
        self.counters += other.counters
        self.flows += other.flows

    @property
    def total(self) -> int:
        return self.slices + self.instants + self.counters + self.flows

    def as_dict(self) -> dict[str, int]:
        return {"slices": self.slices, "instants": self.instants, "counters": self.counters, "flows": self.flows}


class ProcessReport(msgspec.Struct):
    """One (role, rank) process of the merged trace."""

    label: str
    role: str
    rank: int | None
    pid: int
    coords: dict[str, int] = field(default_factory=dict)  # parallel coordinates its file names give
    files: list[Path] = field(default_factory=list)
    clocks: set[str] = field(default_factory=set)
    read: EventCounts = field(default_factory=EventCounts)
    written: EventCounts = field(default_factory=EventCounts)


class RunReport(msgspec.Struct):
    output: Path | None = None
    format: str = ""
    processes: list[ProcessReport] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one-line messages naming each file
    ignored: list[Path] = field(default_factory=list)
    used: list[str] = field(default_factory=list)  # metadata files beside the traces: "<path>: what it gave"
    notes: list[str] = field(default_factory=list)  # worth saying, not a problem
    losses: Losses = field(default_factory=Losses)  # input events not written, per statistic
    filtered: Counter[Stat] = field(default_factory=Counter)  # left out by --roles/--ranks/--window/--min-dur
    metadata_records: int = 0
    moved_to_lanes: int = 0
    reversed_flows: int = 0  # flows whose end was stamped before their start
    output_bytes: int = 0
    parts: list[Path] = field(default_factory=list)  # --split-by: the traces written, then their index
    seconds: float = 0.0
    # How each file was placed on the timeline (tracemerge.clock.SourceClock.as_dict(), plus
    # "processes" and "first_event_ns", its first event after the trace start).
    alignment: list[dict[str, Any]] = field(default_factory=list)
    time_base_unix_ns: int | None = None  # wall-clock time of the trace's zero, when known
    phases: dict[str, Any] = field(default_factory=dict)  # tracemerge.analysis.steps.summary()
    # The runs among the inputs, in time order (tracemerge.clock.runs.Run.as_dict(): number, start,
    # files, processes, whether merged); none when no file's time is wall-clock time.
    runs: list[dict[str, Any]] = field(default_factory=list)

    def with_notes(self, notes: list[str]) -> RunReport:
        """This report with ``notes`` said after its own (what the command line adds)."""
        return msgspec.structs.replace(self, notes=[*self.notes, *notes])

    @property
    def read(self) -> EventCounts:
        total = EventCounts()
        for p in self.processes:
            total.add(p.read)
        return total

    @property
    def written(self) -> EventCounts:
        total = EventCounts()
        for p in self.processes:
            total.add(p.written)
        return total

    @property
    def dropped(self) -> Counter[str]:
        """Input events not written, per message (as far as :attr:`losses` keeps messages)."""
        return Counter(self.losses.by_message())

    @property
    def stats(self) -> Losses:
        """:attr:`losses` and the files skipped (``file_skipped``)."""
        stats = self.losses.copy()
        for message in self.skipped:
            stats.add(Stat.FILE_SKIPPED, 1, message)
        return stats

    @property
    def incomplete(self) -> str | None:
        """What keeps the output from holding every input event: the first file skipped, else the
        first input event lost; None when there is none (what Perfetto would ignore too, such as a
        flow end without a start, is only counted: an info statistic)."""
        if self.skipped:
            return self.skipped[0]
        lost = self.losses.first_loss()
        return f"dropped input events: {lost}" if lost is not None else None

    @property
    def exit_code(self) -> int:
        """0 when everything was merged; 3 when the output is :attr:`incomplete`."""
        return EXIT_INCOMPLETE if self.incomplete is not None else EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output) if self.output else None,
            "parts": [str(p) for p in self.parts],
            "format": self.format,
            "exit_code": self.exit_code,
            "processes": [
                {
                    "label": p.label,
                    "role": p.role,
                    "rank": p.rank,
                    "pid": p.pid,
                    "coords": p.coords,
                    "files": [str(f) for f in p.files],
                    "clocks": sorted(p.clocks),
                    "read": p.read.as_dict(),
                    "written": p.written.as_dict(),
                }
                for p in self.processes
            ],
            "read": self.read.as_dict(),
            "written": self.written.as_dict(),
            "dropped": self.losses.by_message(),
            "stats": self.stats.tally(),
            "filtered": {stat.value: count for stat, count in self.filtered.items() if count},
            "skipped_files": list(self.skipped),
            "ignored_files": [str(p) for p in self.ignored],
            "used_files": list(self.used),
            "notes": list(self.notes),
            "metadata_records": self.metadata_records,
            "slices_moved_to_overlap_lanes": self.moved_to_lanes,
            "flows_ending_before_they_start": self.reversed_flows,
            "output_bytes": self.output_bytes,
            "seconds": round(self.seconds, 3),
            "time_base_unix_ns": self.time_base_unix_ns,
            "alignment": self.alignment,
            "phases": self.phases,
            "runs": self.runs,
        }


def json_bytes(value: Any, indent: bool = True) -> bytes:
    """``value`` as JSON, as ``--report``, the split index and tracemerge's own notes in a trace are
    written. Integers of any size are exact JSON numbers: orjson writes those of 64 bits, the
    standard library the others (a rank read as 10**22 stays 10000000000000000000000; a reader in
    JavaScript rounds it)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else None)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
        return json.dumps(
            value, indent=2 if indent else None, ensure_ascii=False, separators=_SEPARATORS[indent]
        ).encode()


_SEPARATORS = {True: (",", ": "), False: (",", ":")}


def format_table(rows: Sequence[tuple[str, ...]], left: frozenset[int] = frozenset()) -> str:
    """A plain-text table: header, rule, rows; columns in ``left`` left-aligned, others right.
    Every cell is escaped (:func:`shown`): a name from the data cannot break a row or colour it."""
    rows = [tuple(shown(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.ljust(w) if i in left or n == 0 else c.rjust(w) for i, (c, w) in pairs]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def clipped(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, its end replaced by ``…`` when cut (the report keeps it whole)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def format_found(report: RunReport) -> str:
    """The table of what was found, one row per (role, rank) process."""
    presets = {p["process"]: p["preset"] for p in report.phases.get("processes", ())}
    # A column per parallel coordinate that some process's file names give (tp, pp, dp, cp, ...).
    given = {k for p in report.processes for k in p.coords}
    keys = [k for k in COORDINATE_ORDER if k in given] + sorted(given - set(COORDINATE_ORDER))
    rows = [("role", "rank", *keys, "files", "events", "phases", "clock")]
    for p in report.processes:
        # A process without a rank is told apart by its tag (a file or run directory, an instance),
        # a role-less rank maybe by its OS process ("0 · pid 4242").
        tag = _tag_of(p)
        rank = (tag or "?") if p.rank is None else str(p.rank)
        if p.rank is not None and tag.startswith(f"rank {p.rank} · "):
            rank = tag.removeprefix("rank ")
        clocks = "; ".join(sorted(p.clocks))
        coords = (str(p.coords[k]) if k in p.coords else "-" for k in keys)
        phases = presets.get(p.label, "-")
        rows.append((p.role or "-", rank, *coords, str(len(p.files)), f"{p.read.total:,}", phases, clocks))
    return format_table(rows, left=frozenset({0, 1, len(keys) + 4, len(keys) + 5}))


def _tag_of(p: ProcessReport) -> str:
    """What tells a process without a rank apart: its label less the role."""
    return p.label[len(p.role) + 3 :] if p.role and p.label.startswith(f"{p.role} · ") else p.label


def format_duration(ns: int, signed: bool = False) -> str:
    """``18.4 µs``, ``1.250 ms``, ``2.10 s`` (``+``/``-`` first when ``signed``)."""
    sign = ("-" if ns < 0 else "+") if signed else ("-" if ns < 0 else "")
    size = abs(ns)
    if size < 1_000:
        text = f"{size} ns"
    elif size < 1_000_000:
        text = f"{size / 1e3:.1f} µs"
    elif size < 1_000_000_000:
        text = f"{size / 1e6:.3f} ms"
    else:
        text = f"{size / 1e9:.3f} s"
    return sign + text


def format_alignment(report: RunReport) -> str:
    """The alignment table: per file, how it was placed, by how much, and how sure that is."""
    rows = [("process", "file", "method", "offset", "±", "anchors", "against")]
    for a in report.alignment:
        offset = (
            format_duration(a["offset_ns"], signed=True)
            if a["epoch"]
            else (f"starts at {format_duration(a['first_event_ns'], signed=True)}")
        )
        unc = a["uncertainty_ns"]
        rows.append(
            (
                shown(", ".join(a["processes"]) or "-"),
                shown(Path(a["file"]).name),
                a["method"],
                offset,
                "?" if unc is None else format_duration(unc),
                str(a["anchors"]) if a["anchors"] else "-",
                clipped(shown(a["against"]), AGAINST_WIDTH),
            )
        )
    lines = [format_table(rows, left=frozenset({0, 1, 2, 6}))]
    unrelated = [a for a in report.alignment if a["method"] == "unrelated"]
    if unrelated:
        lines.append(
            f"{len(unrelated)} file(s) share no clock evidence with the rest (no collectives, --sync spans or "
            "session records): placed at the run start, not aligned; use --sync NAME or --offset ROLE[/RANK]=±DUR"
        )
    if any(a["method"] == "mtime" for a in report.alignment):
        lines.append("files placed by their modification time are aligned only roughly (low confidence)")
    return "\n".join(lines)


def format_runs(runs: list[dict[str, Any]], steps: dict[int, list[int]] | None = None, kept: str = "merged") -> str:
    """The table of the runs found when the inputs hold several ("" for one): per run its start
    in UTC, files and processes, and whether it was ``kept`` (merged, summarized); with
    ``steps`` (a run's step walls, ns, by its number), how many steps and their median wall."""
    if len(runs) < 2:
        return ""
    figures = ("steps", "median step") if steps is not None else ()
    rows = [("run", "started (UTC)", "files", *figures, "processes", kept)]
    for r in runs:
        started = r["start_utc"].removesuffix(" UTC")
        walls = sorted(steps.get(r["number"], [])) if steps is not None else []
        median = format_duration(walls[(len(walls) - 1) // 2]) if walls else "-"
        shown_figures = (str(len(walls)), median) if steps is not None else ()
        kept_text = "yes" if r["merged"] else "no (another run)"
        rows.append(
            (
                str(r["number"]),
                started,
                str(len(r["files"])),
                *shown_figures,
                _processes_text(r["processes"]),
                kept_text,
            )
        )
    return format_table(rows, left=frozenset({1, 3 + len(figures), 4 + len(figures)}))


def _processes_text(labels: list[str], shown_at_most: int = 4) -> str:
    more = f" (+{len(labels) - shown_at_most})" if len(labels) > shown_at_most else ""
    return f"{len(labels)}: " + ", ".join(labels[:shown_at_most]) + more


def format_outcome(report: RunReport) -> str:
    """What was written and every loss, with reasons."""
    w = report.written
    what = shown(report.output)
    if report.parts:
        what = f"{len(report.parts) - 1} traces and their index {shown(report.parts[-1])}"
    lines = [
        f"wrote {what} ({report.format}, {report.output_bytes / 1e6:.1f} MB) "
        f"in {report.seconds:.1f} s: "
        f"{len(report.processes)} processes, {w.slices:,} slices, {w.instants:,} instants, "
        f"{w.counters:,} counter values, {w.flows:,} flows"
    ]
    if report.moved_to_lanes:
        lines.append(f"{report.moved_to_lanes:,} overlapping slices moved to overlap lanes beside their thread")
    if report.reversed_flows:
        lines.append(
            f"{report.reversed_flows:,} flows end before they start (host/device clock skew): "
            "drawn from the earlier slice"
        )
    for stat, count in sorted((+report.filtered).items(), key=lambda kv: (-kv[1], kv[0].value)):
        lines.append(f"left out {count:,} {stat.description} (as asked)")
    lines.extend(format_losses(report.losses))
    stats = report.stats
    if stats:
        counts = ", ".join(f"{stat.value} {stats.count(stat):,} ({stat.severity.value})" for stat in stats.stats())
        lines.append(f"statistics: {counts}")
    for message in report.skipped:
        lines.append(f"skipped {shown(message)}")
    for message in report.notes:
        lines.append(f"note: {shown(message)}")
    if report.used:
        names = ", ".join(shown(used.split(": ", 1)[0]) for used in report.used[:IGNORED_SHOWN])
        more = f" and {len(report.used) - IGNORED_SHOWN} more" if len(report.used) > IGNORED_SHOWN else ""
        lines.append(f"used {len(report.used)} metadata files beside the traces: {names}{more} (all in --report)")
    if report.ignored:
        names = ", ".join(shown(p) for p in report.ignored[:IGNORED_SHOWN])
        more = f" and {len(report.ignored) - IGNORED_SHOWN} more" if len(report.ignored) > IGNORED_SHOWN else ""
        lines.append(f"ignored {len(report.ignored)} files that are not traces: {names}{more} (all in --report)")
    return "\n".join(lines)


def format_losses(losses: Losses) -> list[str]:
    """Per statistic, by name: a line naming it, then its messages, most counted first."""
    lines = []
    for stat in losses.stats():
        count = losses.count(stat)
        lines.append(f"{stat.value} {count:,} ({stat.severity.value}): {stat.description}")
        messages = losses.messages_of(stat)
        for message, n in sorted(messages.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {_loss_line(stat, shown(message), n)}")
        unlisted = count - sum(messages.values())
        if unlisted:
            lines.append(f"  {_loss_line(stat, 'more, not listed one by one', unlisted)}")
    return lines


def _loss_line(stat: Stat, message: str, count: int) -> str:
    if stat is Stat.OTHER_RUN:
        return f"left out {count:,} input events of {message} (as --run asked)"
    if stat is Stat.OTHER_RUN_SCALARS:
        return f"left out {count:,} tracker values of {message} (as --run asked)"
    if stat in _NOT_EVENTS:
        return f"data loss: {count:,} × {message}"
    if stat.is_loss:
        return f"dropped {count:,} input events: {message}"
    if stat in _PERFETTO_IGNORES:
        return f"info: {count:,} {message} (as in the input; Perfetto ignores these too)"
    return f"info: {count:,} {message}"
