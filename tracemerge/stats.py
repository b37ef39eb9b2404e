"""Named statistics of what a merge could not keep, each with a severity, in one table.

Like Perfetto's ``stats`` table: readers count every event they cannot keep under a reason (which
may name a file and place); here each reason is filed under one named statistic with a severity
and a one-line description, so that counts add up across files and the exit status depends on
what was lost, not on how it was worded:

* ``info``: nothing of the trace is lost (Perfetto would ignore it too), e.g. a flow end whose
  start the profiler never wrote;
* ``data_loss``: input events are not in the output;
* ``error``: a whole file could not be used.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    INFO = "info"
    DATA_LOSS = "data_loss"
    ERROR = "error"


@dataclass(frozen=True)
class Stat:
    name: str
    severity: Severity
    description: str
    pattern: re.Pattern[str]


def _stat(name: str, severity: Severity, description: str, pattern: str) -> Stat:
    return Stat(name, severity, description, re.compile(pattern))


STATS: tuple[Stat, ...] = (
    _stat(
        "flow_end_without_start",
        Severity.INFO,
        "flow steps/ends whose start is not in the input",
        r"^flow step/end without a start",
    ),
    _stat(
        "flow_start_without_end",
        Severity.INFO,
        "flow starts whose end is not in the input",
        r"^flow start without an end",
    ),
    _stat(
        "evidence_capped",
        Severity.INFO,
        "events kept but not used as clock or phase evidence (beyond the cap per thread)",
        r"marks beyond the cap",
    ),
    _stat(
        "metadata_unsupported",
        Severity.INFO,
        "metadata records of a kind not shown",
        r"^unsupported metadata record",
    ),
    _stat(
        "metric_sample_nan",
        Severity.INFO,
        "metric samples that are NaN: gaps and staleness markers (nothing to draw)",
        r"^metric sample NaN",
    ),
    _stat(
        "metric_series_empty",
        Severity.INFO,
        "metric series without samples",
        r"^metric series without samples",
    ),
    _stat(
        "metric_counter_single_sample",
        Severity.INFO,
        "cumulative counters sampled once (or at one time): no interval to draw a rate over",
        r"^metric counter without two samples",
    ),
    _stat(
        "metric_counter_interval_end",
        Severity.INFO,
        "cumulative counter samples that only end an interval (a series' last, or one at the time of"
        " the next): each rate is drawn where its interval starts",
        r"^metric counter sample (closing|at the time)",
    ),
    _stat(
        "metric_type_unknown",
        Severity.INFO,
        "metric samples of an unknown type, drawn as gauges",
        r"^metric of unknown type",
    ),
    _stat(
        "metric_created_sample",
        Severity.INFO,
        "metric creation-time samples (_created), which are times, not values",
        r"^metric creation-time sample",
    ),
    _stat(
        "tracker_scalars_unplaced",
        Severity.INFO,
        "step-keyed tracker scalars of steps the merged trace has no step for (not profiled, or left out)",
        r"^tracker scalars of steps",
    ),
    _stat(
        "tracker_value_not_number",
        Severity.INFO,
        "tracker values that are not finite numbers (text, lists, NaN), or repeated for one step",
        r"^tracker value that is not|^tracker scalar given again",
    ),
    _stat(
        "flow_unbound",
        Severity.DATA_LOSS,
        "flow points on no slice of their thread",
        r"^flow point outside any slice|^flow left with one endpoint",
    ),
    _stat(
        "flow_without_id",
        Severity.DATA_LOSS,
        "flow events without an id",
        r"flow event without id",
    ),
    _stat(
        "event_time_unreadable",
        Severity.DATA_LOSS,
        "events whose time is missing, unreadable or out of range",
        r"(without|with unreadable) (ts|dur|times|submit_ts|start_ts)"
        r"|negative dur|ending before it starts|unreadable times",
    ),
    _stat(
        "value_too_deep",
        Severity.DATA_LOSS,
        "values (args, metadata keys) nested more than 200 levels deep: replaced by a note saying so, the event kept",
        r"^value nested more than \d+ levels deep",
    ),
    _stat(
        "clock_anchor_unreadable",
        Severity.DATA_LOSS,
        "files whose clock anchor (baseTimeNanoseconds) is not an integer of ns: placed without it",
        r"^baseTimeNanoseconds that is not",
    ),
    _stat(
        "connection_shared",
        Severity.INFO,
        "Ascend host calls whose connectionId an earlier one already links: their device tasks are "
        "linked (one flow each) from the first",
        r"^\w+ row sharing a connectionId",
    ),
    _stat(
        "metric_value_infinite",
        Severity.DATA_LOSS,
        "metric samples that are +Inf or -Inf",
        r"^metric sample infinite",
    ),
    _stat(
        "metric_snapshot_without_time",
        Severity.DATA_LOSS,
        "metric samples of a snapshot that says not when it was taken",
        r"^metric snapshot without a time",
    ),
    _stat(
        "metric_unreadable",
        Severity.DATA_LOSS,
        "metric results, samples or exposition text that cannot be read",
        r"^metric text unreadable|^query re|^metric sample with unreadable|native histogram",
    ),
    _stat(
        "begin_end_unmatched",
        Severity.DATA_LOSS,
        "B or E events without their pair",
        r"^[BE] event without matching [BE]",
    ),
    _stat(
        "counter_without_value",
        Severity.DATA_LOSS,
        "counter events without a numeric value",
        r"^C event without a numeric value|^counter row without a numeric value",
    ),
    _stat(
        "phase_unsupported",
        Severity.DATA_LOSS,
        "events of a phase type not read",
        r"^unsupported phase|^event without ph",
    ),
    _stat(
        "line_unreadable",
        Severity.DATA_LOSS,
        "lines that are not JSON or not an event",
        r"invalid JSON line|^line is ",
    ),
    _stat(
        "file_damaged",
        Severity.DATA_LOSS,
        "files cut or damaged: the events after the damage",
        r"events after it are lost",
    ),
    _stat(
        "file_changed",
        Severity.DATA_LOSS,
        "events of files that changed while being merged",
        r"changed while being merged",
    ),
    _stat(
        "export_read_elsewhere",
        Severity.INFO,
        "export files of an Ascend run read through another one: a more complete export that holds "
        "their events, or the first slice of a sliced msprof export",
        r"^same-run export not read \(|^export slice read with ",
    ),
    _stat(
        "file_same_content",
        Severity.INFO,
        "input files with the same bytes as another input (a copy): merged once, as the first one found",
        r"^file with the same bytes as another input",
    ),
    _stat(
        "db_rows_not_drawn",
        Severity.INFO,
        "rows of Ascend DB tables the text export keeps out of its timeline too (memory records)",
        r"^\w+ rows not drawn \(the text export keeps them",
    ),
    _stat(
        "counter_all_zero",
        Severity.INFO,
        "Ascend counter series (tracks) whose every value in a file is 0, such as idle accelerators' Acc PMU"
        " levels and modules without memory: left out, one count per series (--keep-zero-counters keeps them)",
        r"^counter series zero throughout the file",
    ),
    _stat(
        "task_info_unjoined",
        Severity.DATA_LOSS,
        "Ascend task detail rows without the globalTaskId that ties them to a task (drawn under its type)",
        r"^\w+ row without a globalTaskId",
    ),
    _stat(
        "db_column_missing",
        Severity.DATA_LOSS,
        "Ascend DB rows not read because their table lacks a column they need",
        r"^\w+ row not read: the table has no \w+ column",
    ),
    _stat(
        "file_trailing_events",
        Severity.DATA_LOSS,
        "files with events after the end of their JSON (another document, such as a second gzip member): not read",
        r"events after the end of the JSON",
    ),
    _stat(
        "file_trailing_data",
        Severity.INFO,
        "files with bytes after the end of their JSON (NUL padding, garbage): ignored, every event kept",
        r"trailing data after the end of the JSON",
    ),
    _stat(
        "file_tail_damaged",
        Severity.DATA_LOSS,
        "files cut or damaged after their event array: every event kept, the keys after the damage lost "
        "(such as baseTimeNanoseconds, the clock's anchor)",
        r"after the event array: the keys from there on are lost",
    ),
    _stat(
        "event_not_object",
        Severity.DATA_LOSS,
        "elements of an event array that are not objects (null, numbers, text, arrays)",
        r"^event array element that is not an object",
    ),
    _stat(
        "counter_value_not_number",
        Severity.DATA_LOSS,
        "counter event values that are neither numbers nor numbers as text (null, true/false, other text)",
        r"^C event value that is not a number",
    ),
    _stat(
        "flow_v2_unbound",
        Severity.DATA_LOSS,
        "flow v2 ends (bind_id) on slices they cannot be bound to here: one nested in a slice that "
        "starts with it and holding others that do, or a B/E slice",
        r"^bind_id flow on a (slice nested|B event)",
    ),
    _stat(
        "nsys_launch_not_captured",
        Severity.INFO,
        "Nsight Systems GPU work whose CUDA runtime call is not in the export (launched before the capture, or "
        "an export without runtime calls): drawn without its flow",
        r"^nsys GPU work whose CUDA runtime call is not in the export",
    ),
    _stat(
        "nsys_range_without_end",
        Severity.INFO,
        "NVTX ranges still open when the capture stopped (no end): drawn as instants at their start",
        r"^nsys NVTX range without an end",
    ),
    _stat(
        "nsys_text_missing",
        Severity.INFO,
        "NVTX rows without text (NULL text and textId): drawn with an empty name",
        r"^nsys NVTX_EVENTS row without text",
    ),
    _stat(
        "nsys_id_unresolved",
        Severity.DATA_LOSS,
        "Nsight Systems rows whose name id points nowhere (StringIds missing or without it): drawn named by the id",
        r"^nsys \w+ row whose \w+ points nowhere",
    ),
    _stat(
        "nsys_rows_not_drawn",
        Severity.INFO,
        "Nsight Systems rows that are no event of the job's timeline: NVTX domain and category names "
        "(they name other rows), nsys's own messages, CPU samples, thread scheduling, CUDA events "
        "without a device time",
        r"^nsys \w+ rows not drawn \(",
    ),
    _stat(
        "nsys_column_missing",
        Severity.DATA_LOSS,
        "Nsight Systems rows not read because their table lacks a column they need",
        r"^nsys \w+ rows not read: the table has no ",
    ),
    _stat(
        "nsys_rows_not_read",
        Severity.DATA_LOSS,
        "Nsight Systems rows of tables (or NVTX event types) tracemerge does not read; an unknown "
        "table is named once, its rows not counted",
        r"^nsys (\w+ rows not read \(|table .* not read \(|NVTX_EVENTS rows of event type .* not read$)",
    ),
    _stat(
        "nsys_session_start_missing",
        Severity.INFO,
        "Nsight Systems exports without a session start time: their clock is placed by the alignment "
        "(collectives, sync spans), not by the wall clock",
        r"^nsys export without a session start time",
    ),
    _stat(
        "nsys_report_read_as_export",
        Severity.INFO,
        "Nsight Systems reports (.nsys-rep) read through their SQLite export beside them",
        r"^nsys report read through this export",
    ),
    _stat(
        "flow_without_direction",
        Severity.INFO,
        "bind_id on slices without flow_in or flow_out: no flow to draw (Perfetto draws none either)",
        r"^bind_id flow on a slice without flow_in or flow_out",
    ),
)
OTHER = Stat("other", Severity.DATA_LOSS, "events not kept for another reason", re.compile(""))
FILES_SKIPPED = Stat("file_skipped", Severity.ERROR, "files that could not be used", re.compile(""))


def stat_of(reason: str) -> Stat:
    """The named statistic a reader's reason is counted under."""
    return next((s for s in STATS if s.pattern.search(reason)), OTHER)


def tally(dropped: Counter[str], skipped: int) -> dict[str, dict]:
    """Per named statistic with a non-zero count: severity, description, count and the reasons."""
    out: dict[str, dict] = {}
    for reason, count in sorted(dropped.items()):
        stat = stat_of(reason)
        entry = out.setdefault(
            stat.name, {"severity": stat.severity.value, "description": stat.description, "count": 0, "reasons": {}}
        )
        entry["count"] += count
        entry["reasons"][reason] = count
    if skipped:
        out[FILES_SKIPPED.name] = {
            "severity": FILES_SKIPPED.severity.value,
            "description": FILES_SKIPPED.description,
            "count": skipped,
            "reasons": {},
        }
    return out


def is_loss(reason: str) -> bool:
    return stat_of(reason).severity is not Severity.INFO
