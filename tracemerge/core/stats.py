"""Named statistics of what a merge could not keep, each with a severity, declared in one table.

Like Perfetto's ``stats`` table (``F(name, 1, kInfo, kAnalysis, "description")``): every statistic
is declared once in :class:`Stat` with its name, severity and a one-line description. Readers and
stages record what they cannot keep in a :class:`Losses` as ``Stat.X`` with a count, and apart from
it a message that says where (a file, a line, a table), so that counts add up across files and the
exit status depends on what was lost, not on how it was worded:

* ``info``: nothing of the trace is lost (Perfetto would ignore it too), e.g. a flow end whose
  start the profiler never wrote;
* ``data_loss``: input events are not in the output;
* ``error``: a whole file could not be used;
* ``filtered``: left out as a selection option asked (``--roles``, ``--window``, ``--min-dur``,
  ``--steps``…): not a loss, and counted apart from the losses, in the report's ``filtered``.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any

from tracemerge.core.message_counts import MessageCounts


class Severity(str, Enum):
    INFO = "info"
    DATA_LOSS = "data_loss"
    ERROR = "error"
    FILTERED = "filtered"


class Stat(Enum):
    """Every statistic: its name in reports (the member's value), severity and description."""

    severity: Severity
    description: str

    def __new__(cls, name: str, severity: Severity, description: str) -> Stat:
        member = object.__new__(cls)
        member._value_ = name
        member.severity = severity
        member.description = description
        return member

    @property
    def is_loss(self) -> bool:
        """Whether input is missing from the output (data_loss or error), which makes the run incomplete."""
        return self.severity in (Severity.DATA_LOSS, Severity.ERROR)

    FILTERED_OUTSIDE_WINDOW = ("filtered_outside_window", Severity.FILTERED, "events outside --window")
    FILTERED_FLOW_OUTSIDE_WINDOW = ("filtered_flow_outside_window", Severity.FILTERED, "flows outside --window")
    FILTERED_SHORT = ("filtered_short", Severity.FILTERED, "slices shorter than --min-dur")
    FILTERED_FLOW_END = (
        "filtered_flow_end",
        Severity.FILTERED,
        "flows with an end left out by --window/--min-dur",
    )
    FILTERED_PROCESS_SLICES = (
        "filtered_process_slices",
        Severity.FILTERED,
        "slices and instants of processes outside --roles/--ranks/--where",
    )
    FILTERED_PROCESS_FLOW_POINTS = (
        "filtered_process_flow_points",
        Severity.FILTERED,
        "flow points of processes outside --roles/--ranks/--where",
    )
    FILTERED_PROCESS_COUNTER_VALUES = (
        "filtered_process_counter_values",
        Severity.FILTERED,
        "counter values of processes outside --roles/--ranks/--where",
    )
    FILTERED_STEP_PHASES = ("filtered_step_phases", Severity.FILTERED, "phase slices of steps outside --steps")
    FLOW_END_WITHOUT_START = (
        "flow_end_without_start",
        Severity.INFO,
        "flow steps/ends whose start is not in the input",
    )
    FLOW_START_WITHOUT_END = ("flow_start_without_end", Severity.INFO, "flow starts whose end is not in the input")
    EVIDENCE_CAPPED = (
        "evidence_capped",
        Severity.INFO,
        "events kept but not used as clock or phase evidence (beyond the cap per thread)",
    )
    METADATA_UNSUPPORTED = ("metadata_unsupported", Severity.INFO, "metadata records of a kind not shown")
    METRIC_SAMPLE_NAN = (
        "metric_sample_nan",
        Severity.INFO,
        "metric samples that are NaN: gaps and staleness markers (nothing to draw)",
    )
    METRIC_SERIES_EMPTY = ("metric_series_empty", Severity.INFO, "metric series without samples")
    METRIC_COUNTER_SINGLE_SAMPLE = (
        "metric_counter_single_sample",
        Severity.INFO,
        "cumulative counters sampled once (or at one time): no interval to draw a rate over",
    )
    METRIC_COUNTER_INTERVAL_END = (
        "metric_counter_interval_end",
        Severity.INFO,
        "cumulative counter samples that only end an interval (a series' last, or one at the time of the "
        "next): each rate is drawn where its interval starts",
    )
    METRIC_TYPE_UNKNOWN = ("metric_type_unknown", Severity.INFO, "metric samples of an unknown type, drawn as gauges")
    METRIC_CREATED_SAMPLE = (
        "metric_created_sample",
        Severity.INFO,
        "metric creation-time samples (_created), which are times, not values",
    )
    TRACKER_SCALARS_UNPLACED = (
        "tracker_scalars_unplaced",
        Severity.INFO,
        "step-keyed tracker scalars of steps the merged trace has no step for (not profiled, or left out)",
    )
    TRACKER_VALUE_NOT_NUMBER = (
        "tracker_value_not_number",
        Severity.INFO,
        "tracker values that are not finite numbers (text, lists, NaN), or repeated for one step",
    )
    FLOW_UNBOUND = ("flow_unbound", Severity.DATA_LOSS, "flow points on no slice of their thread")
    FLOW_WITHOUT_ID = ("flow_without_id", Severity.DATA_LOSS, "flow events without an id")
    EVENT_TIME_UNREADABLE = (
        "event_time_unreadable",
        Severity.DATA_LOSS,
        "events whose time is missing, unreadable or out of range",
    )
    VALUE_TOO_DEEP = (
        "value_too_deep",
        Severity.DATA_LOSS,
        "values (args, metadata keys) nested more than 200 levels deep: replaced by a note saying so, the event kept",
    )
    CLOCK_ANCHOR_UNREADABLE = (
        "clock_anchor_unreadable",
        Severity.DATA_LOSS,
        "files whose clock anchor (Kineto's baseTimeNanoseconds, a scrape's time_unix_ns) is not an integer of ns "
        "a trace can hold: placed without it",
    )
    RANK_UNREADABLE = (
        "rank_unreadable",
        Severity.DATA_LOSS,
        'rank fields (of a file, a span or a record) that are not a rank (text such as "²", a fraction, a '
        "negative number other than -1, which says no rank; thousands of digits): read without them, ranked by "
        "the file name if it gives one",
    )
    CONNECTION_SHARED = (
        "connection_shared",
        Severity.INFO,
        "Ascend host calls whose connectionId an earlier one already links: their device tasks are linked "
        "(one flow each) from the first",
    )
    METRIC_VALUE_INFINITE = ("metric_value_infinite", Severity.DATA_LOSS, "metric samples that are +Inf or -Inf")
    METRIC_SNAPSHOT_WITHOUT_TIME = (
        "metric_snapshot_without_time",
        Severity.DATA_LOSS,
        "metric samples of a snapshot that says not when it was taken",
    )
    METRIC_UNREADABLE = (
        "metric_unreadable",
        Severity.DATA_LOSS,
        "metric results, samples or exposition text that cannot be read",
    )
    BEGIN_END_UNMATCHED = ("begin_end_unmatched", Severity.DATA_LOSS, "B or E events without their pair")
    COUNTER_WITHOUT_VALUE = ("counter_without_value", Severity.DATA_LOSS, "counter events without a numeric value")
    PHASE_UNSUPPORTED = ("phase_unsupported", Severity.DATA_LOSS, "events of a phase type not read")
    LINE_UNREADABLE = ("line_unreadable", Severity.DATA_LOSS, "lines that are not JSON or not an event")
    FILE_DAMAGED = ("file_damaged", Severity.DATA_LOSS, "files cut or damaged: the events after the damage")
    FILE_CHANGED = ("file_changed", Severity.DATA_LOSS, "events of files that changed while being merged")
    EXPORT_READ_ELSEWHERE = (
        "export_read_elsewhere",
        Severity.INFO,
        "export files of an Ascend run read through another one: a more complete export that holds their "
        "events, or the first slice of a sliced msprof export",
    )
    FILE_SAME_CONTENT = (
        "file_same_content",
        Severity.INFO,
        "input files with the same bytes as another input (a copy): merged once, as the first one found",
    )
    OTHER_RUN = (
        "other_run",
        Severity.INFO,
        "events of files of another run among the inputs (far apart in time from the run merged): left out as "
        "--run asked",
    )
    OTHER_RUN_SCALARS = (
        "other_run_scalars",
        Severity.INFO,
        "step-keyed tracker scalars in the folder of another run among the inputs (not the run merged): left out"
        " as --run asked",
    )
    MANIFEST_ENTRY_UNUSED = (
        "manifest_entry_unused",
        Severity.INFO,
        "entries of an archive's perfetto_manifest that could not be used (their files placed by their own evidence)",
    )
    DB_ROWS_NOT_DRAWN = (
        "db_rows_not_drawn",
        Severity.INFO,
        "rows of Ascend DB tables the text export keeps out of its timeline too (memory records)",
    )
    COUNTER_ALL_ZERO = (
        "counter_all_zero",
        Severity.INFO,
        "Ascend counter series (tracks) whose every value in a file is 0, such as idle accelerators' Acc PMU "
        "levels and modules without memory: left out, one count per series (--keep-zero-counters keeps them)",
    )
    TASK_INFO_UNJOINED = (
        "task_info_unjoined",
        Severity.DATA_LOSS,
        "Ascend task detail rows without the globalTaskId that ties them to a task (drawn under its type)",
    )
    DB_ID_UNREADABLE = (
        "db_id_unreadable",
        Severity.DATA_LOSS,
        "Ascend DB rows whose device, thread or plane id is not an integer (text, a fraction): not drawn",
    )
    LINK_UNREADABLE = (
        "link_unreadable",
        Severity.DATA_LOSS,
        "Ascend CONNECTION_IDS rows whose connectionId is NULL or text: the flows they would draw are left out",
    )
    DB_COLUMN_MISSING = (
        "db_column_missing",
        Severity.DATA_LOSS,
        "Ascend DB rows not read because their table lacks a column they need",
    )
    FILE_TRAILING_EVENTS = (
        "file_trailing_events",
        Severity.DATA_LOSS,
        "files with events after the end of their JSON (another document, such as a second gzip member): not read",
    )
    FILE_TRAILING_DATA = (
        "file_trailing_data",
        Severity.INFO,
        "files with bytes after the end of their JSON (NUL padding, garbage): ignored, every event kept",
    )
    FILE_TAIL_DAMAGED = (
        "file_tail_damaged",
        Severity.DATA_LOSS,
        "files cut or damaged after their event array: every event kept, the keys after the damage lost (such"
        " as baseTimeNanoseconds, the clock's anchor)",
    )
    EVENT_NOT_OBJECT = (
        "event_not_object",
        Severity.DATA_LOSS,
        "elements of an event array that are not objects (null, numbers, text, arrays)",
    )
    COUNTER_VALUE_NOT_NUMBER = (
        "counter_value_not_number",
        Severity.DATA_LOSS,
        "counter event values that are neither numbers nor numbers as text (null, true/false, other text)",
    )
    FLOW_V2_UNBOUND = (
        "flow_v2_unbound",
        Severity.DATA_LOSS,
        "flow v2 ends (bind_id) on slices they cannot be bound to here: one nested in a slice that starts "
        "with it and holding others that do, or a B/E slice",
    )
    NSYS_LAUNCH_NOT_CAPTURED = (
        "nsys_launch_not_captured",
        Severity.INFO,
        "Nsight Systems GPU work whose CUDA runtime call is not in the export (launched before the capture, "
        "or an export without runtime calls): drawn without its flow",
    )
    NSYS_RANGE_WITHOUT_END = (
        "nsys_range_without_end",
        Severity.INFO,
        "NVTX ranges still open when the capture stopped (no end): drawn as instants at their start",
    )
    NSYS_TEXT_MISSING = (
        "nsys_text_missing",
        Severity.INFO,
        "NVTX rows without text (NULL text and textId): drawn with an empty name",
    )
    NSYS_ID_UNRESOLVED = (
        "nsys_id_unresolved",
        Severity.DATA_LOSS,
        "Nsight Systems rows whose name id points nowhere (StringIds missing or without it): drawn named by the id",
    )
    NSYS_ROWS_NOT_DRAWN = (
        "nsys_rows_not_drawn",
        Severity.INFO,
        "Nsight Systems rows that are no event of the job's timeline: NVTX domain and category names (they "
        "name other rows), nsys's own messages, CPU samples, thread scheduling, CUDA events without a device "
        "time",
    )
    NSYS_COLUMN_MISSING = (
        "nsys_column_missing",
        Severity.DATA_LOSS,
        "Nsight Systems rows not read because their table lacks a column they need",
    )
    NSYS_ROWS_NOT_READ = (
        "nsys_rows_not_read",
        Severity.DATA_LOSS,
        "Nsight Systems rows of tables (or NVTX event types) tracemerge does not read; an unknown table is "
        "named once, its rows not counted",
    )
    NSYS_SESSION_START_MISSING = (
        "nsys_session_start_missing",
        Severity.INFO,
        "Nsight Systems exports without a session start time: their clock is placed by the alignment "
        "(collectives, sync spans), not by the wall clock",
    )
    NSYS_REPORT_READ_AS_EXPORT = (
        "nsys_report_read_as_export",
        Severity.INFO,
        "Nsight Systems reports (.nsys-rep) read through their SQLite or JSON-lines export beside them",
    )
    NSYS_VALUE_UNREADABLE = (
        "nsys_value_unreadable",
        Severity.DATA_LOSS,
        "Nsight Systems values left out of their event (a BLOB, an infinite or NaN number, an array or object "
        "in a JSON-lines export, a rank that is no number): the event is kept without it",
    )
    DB_TEXT_NOT_UTF8 = (
        "db_text_not_utf8",
        Severity.INFO,
        "text values of SQLite (or nsys JSON-lines) inputs that are not valid UTF-8: read with U+FFFD for "
        "each bad byte, the event kept",
    )
    FLOW_WITHOUT_DIRECTION = (
        "flow_without_direction",
        Severity.INFO,
        "bind_id on slices without flow_in or flow_out: no flow to draw (Perfetto draws none either)",
    )
    FILE_LOST_WITH_NODE = (
        "file_lost_with_node",
        Severity.DATA_LOSS,
        "events of files whose node or task was lost while they were being merged",
    )
    FILE_SKIPPED = ("file_skipped", Severity.ERROR, "files that could not be used")


class Losses(MessageCounts[Stat]):
    """What a reader or stage could not keep: a count per statistic, and apart from it the first
    :data:`~tracemerge.core.message_counts.MESSAGES_KEPT` distinct messages of each (with the file
    and place), in the order they were first recorded (see :class:`MessageCounts`). Picklable: it
    crosses process and Ray boundaries."""

    __slots__ = ()

    @classmethod
    def one(cls, stat: Stat, message: str | None = None, count: int = 1) -> Losses:
        losses = cls()
        losses.add(stat, count, message)
        return losses

    def copy(self) -> Losses:
        losses = Losses()
        losses.update(self)
        return losses

    def first_loss(self) -> str | None:
        """What says first that input is missing from the output: the first message of a loss, else
        (none recorded) the first loss statistic's name and description; None when nothing is lost."""
        message = next((m for (stat, m) in self.messages if stat.is_loss), None)
        if message is not None:
            return message
        stat = next((s for s in self.counts if s.is_loss), None)
        return None if stat is None else f"{stat.value} ({stat.description})"

    def stats(self) -> Iterator[Stat]:
        """The statistics counted, by name."""
        return iter(sorted(self.counts, key=lambda s: s.value))

    def tally(self) -> dict[str, dict[str, Any]]:
        """Per statistic counted, by name: severity, description, count, the messages kept
        (``reasons``) and how many of the count no message kept lists (``more``)."""
        out: dict[str, dict[str, Any]] = {}
        for stat in self.stats():
            reasons = dict(sorted(self.messages_of(stat).items()))
            count = self.counts[stat]
            out[stat.value] = {
                "severity": stat.severity.value,
                "description": stat.description,
                "count": count,
                "reasons": reasons,
                "more": count - sum(reasons.values()),
            }
        return out

    def __repr__(self) -> str:
        return f"Losses({ {s.value: n for s, n in self.counts.items()} })"
