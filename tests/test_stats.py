"""The statistics table (tracemerge.core.stats) and the reports made with it: every statistic declared
once with a severity and a description; every report, of every fixture and of hostile inputs,
counts only declared statistics (no ``other``), each with its messages, and exact counts."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_fuzz import SAMPLES, _mutate
from typer.testing import CliRunner

from tracemerge.cli.main import app
from tracemerge.core.errors import FatalError
from tracemerge.core.message_counts import MESSAGES_KEPT
from tracemerge.core.stats import Losses, Severity, Stat
from tracemerge.pipeline import merge
from tracemerge.report.run_report import RunReport, format_outcome

DECLARED = {stat.value: stat for stat in Stat}


def assert_declared(report: RunReport) -> None:
    """Every statistic of ``report`` is declared in the table, with its severity and description;
    each count is its messages' and the rest's; the exit status follows the severities."""
    stats = report.as_dict()["stats"]
    assert "other" not in stats
    for name, entry in stats.items():
        stat = DECLARED[name]
        assert (entry["severity"], entry["description"]) == (stat.severity.value, stat.description)
        assert entry["count"] == sum(entry["reasons"].values()) + entry["more"] > 0
        assert entry["more"] >= 0
    lost = any(DECLARED[name].severity is not Severity.INFO for name in stats)
    assert report.exit_code == (3 if lost else 0)


def counts(report: RunReport) -> dict[str, int]:
    return {name: entry["count"] for name, entry in report.as_dict()["stats"].items()}


def test_the_table_declares_each_statistic_once_with_a_severity_and_a_description() -> None:
    names = [stat.value for stat in Stat]
    assert len(Stat.__members__) == len(Stat) == len(set(names))  # a name given twice would be an alias
    assert "other" not in names
    for stat in Stat:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", stat.value) and stat.name == stat.value.upper()
        assert isinstance(stat.severity, Severity)
        assert stat.description and stat.description == stat.description.strip() and "\n" not in stat.description
    assert len({stat.description for stat in Stat}) == len(Stat)
    assert Stat.FILE_SKIPPED.severity is Severity.ERROR
    assert Stat.FILE_LOST_WITH_NODE.severity is Severity.DATA_LOSS


def test_losses_count_every_event_and_keep_the_first_messages_of_each_statistic() -> None:
    losses = Losses()
    for n in range(MESSAGES_KEPT + 5):
        losses.add(Stat.LINE_UNREADABLE, 2, f"line {n}")
    losses.add(Stat.LINE_UNREADABLE, 3, "line 0")
    losses.add(Stat.LINE_UNREADABLE)  # counted without a message
    losses.add(Stat.FLOW_END_WITHOUT_START, 0, "nothing")  # a count of 0 is no statistic
    assert losses.counts == {Stat.LINE_UNREADABLE: 2 * (MESSAGES_KEPT + 5) + 3 + 1}
    kept = losses.messages_of(Stat.LINE_UNREADABLE)
    assert list(kept) == [f"line {n}" for n in range(MESSAGES_KEPT)] and kept["line 0"] == 5
    entry = losses.tally()["line_unreadable"]
    assert (entry["count"], sum(entry["reasons"].values()), entry["more"]) == (54, 43, 11)
    assert pickle.loads(pickle.dumps(losses)) == losses  # crosses process and Ray boundaries


def test_losses_add_up_and_the_first_loss_says_what_is_missing() -> None:
    first, second = Losses(), Losses()
    first.add(Stat.FLOW_END_WITHOUT_START, 1, "flow step/end without a start")
    second.add(Stat.FILE_DAMAGED, 1, "a.json:2:1: invalid JSON; events after it are lost")
    second.add(Stat.FLOW_END_WITHOUT_START, 2, "flow step/end without a start")
    assert first.first_loss() is None
    first.update(second)
    assert first.counts == {Stat.FLOW_END_WITHOUT_START: 3, Stat.FILE_DAMAGED: 1}
    assert first.by_message() == {
        "flow step/end without a start": 3,
        "a.json:2:1: invalid JSON; events after it are lost": 1,
    }
    assert first.first_loss() == "a.json:2:1: invalid JSON; events after it are lost"
    assert Losses.one(Stat.FILE_CHANGED, count=4).first_loss() == f"file_changed ({Stat.FILE_CHANGED.description})"


def test_the_report_shows_each_statistic_with_its_messages_under_it() -> None:
    report = RunReport(output=Path("m.pftrace"), format="pftrace")
    report.losses.add(Stat.EVENT_TIME_UNREADABLE, 2, "X event without dur")
    report.losses.add(Stat.EVENT_TIME_UNREADABLE, 1, "X event with negative dur")
    report.losses.add(Stat.FLOW_END_WITHOUT_START, 1, "flow step/end without a start")
    for n in range(MESSAGES_KEPT + 2):
        report.losses.add(Stat.VALUE_TOO_DEEP, 1, f"a.json: value {n}")
    report.skipped.append("b.json: empty file")
    lines = format_outcome(report).splitlines()[1:]
    deep = [f"  data loss: 1 × a.json: value {n}" for n in sorted(range(MESSAGES_KEPT), key=str)]
    assert lines == [
        "event_time_unreadable 3 (data_loss): events whose time is missing, unreadable or out of range",
        "  dropped 2 input events: X event without dur",
        "  dropped 1 input events: X event with negative dur",
        "flow_end_without_start 1 (info): flow steps/ends whose start is not in the input",
        "  info: 1 flow step/end without a start (as in the input; Perfetto ignores these too)",
        f"value_too_deep {MESSAGES_KEPT + 2} (data_loss): {Stat.VALUE_TOO_DEEP.description}",
        *deep,
        "  data loss: 2 × more, not listed one by one",
        "statistics: event_time_unreadable 3 (data_loss), file_skipped 1 (error), flow_end_without_start 1 (info), "
        f"value_too_deep {MESSAGES_KEPT + 2} (data_loss)",
        "skipped b.json: empty file",
    ]
    stats = report.as_dict()["stats"]
    assert stats["file_skipped"] == {
        "severity": "error",
        "description": "files that could not be used",
        "count": 1,
        "reasons": {"b.json: empty file": 1},
        "more": 0,
    }
    assert stats["value_too_deep"]["more"] == 2 and report.incomplete == "b.json: empty file"


# Every fixture folder (and each bad Nsight Systems export alone): the statistics it counts.
FIXTURE_STATS = {
    "ascend": {"counter_all_zero": 8, "file_skipped": 1, "flow_unbound": 8},
    "clock/areal": {},
    "clock/gloo": {},
    "edge_cases": {},
    "frameworks/areal": {},
    "frameworks/skyrl": {},
    "frameworks/verl": {"file_skipped": 2},
    "frameworks/verl_old": {},
    "kineto_gpu": {},
    "machines/two_hosts": {},
    "machines/two_hosts.tar": {},
    "metrics_run": {"metric_counter_interval_end": 2},
    "metrics_scrapes": {"metric_counter_single_sample": 5, "metric_type_unknown": 3},
    "nsys/mixed": {},
    "nsys/torchrun": {"nsys_launch_not_captured": 2, "nsys_range_without_end": 1, "nsys_rows_not_drawn": 7},
    "nsys/verl": {},
    "nsys/bad/dangling_ids.sqlite": {"nsys_id_unresolved": 4},
    "nsys/bad/missing_column.sqlite": {"nsys_column_missing": 2},
    "nsys/bad/no_session_start.sqlite": {"nsys_session_start_missing": 1},
    "nsys/bad/no_string_ids.sqlite": {"nsys_id_unresolved": 2},
    "nsys/bad/null_text.sqlite": {"nsys_text_missing": 2},
    "nsys/bad/unknown_rows.sqlite": {"nsys_rows_not_read": 4},
    "nsys_jsonl/mixed": {},
    "nsys_jsonl/torchrun": {"nsys_launch_not_captured": 2, "nsys_range_without_end": 1, "nsys_rows_not_drawn": 7},
    "nsys_jsonl/verl": {},
    "nsys_jsonl/bad/dangling_ids.jsonl": {"nsys_id_unresolved": 4},
    "nsys_jsonl/bad/missing_column.jsonl": {"nsys_column_missing": 2},
    "nsys_jsonl/bad/no_session_start.jsonl": {"nsys_session_start_missing": 1},
    "nsys_jsonl/bad/no_string_ids.jsonl": {"nsys_id_unresolved": 2},
    "nsys_jsonl/bad/null_text.jsonl": {"nsys_text_missing": 2},
    "nsys_jsonl/bad/unknown_rows.jsonl": {"nsys_rows_not_read": 4},
    "phases": {},
    "precision": {},
    "rl_run": {},
    # run_1 left out as another run (the latest is merged): the events of its 7 files.
    "two_runs": {"other_run": 1042},
}


def test_every_fixture_is_listed() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders == {name.split("/")[0] for name in FIXTURE_STATS}
    bad = {f"nsys/bad/{p.name}" for p in (FIXTURES / "nsys" / "bad").iterdir()} - {"nsys/bad/not_nsys.sqlite"}
    assert bad <= set(FIXTURE_STATS)


@pytest.mark.parametrize("name", sorted(FIXTURE_STATS))
def test_every_fixture_counts_declared_statistics_exactly(tmp_path: Path, name: str) -> None:
    report = merge([FIXTURES / name], tmp_path / "m.pftrace")
    assert_declared(report)
    assert counts(report) == FIXTURE_STATS[name]


T0 = 1_790_000_000_000_000


def _hostile_chrome() -> bytes:
    """A Chrome trace with one event of nearly every kind a reader cannot keep."""
    events = [
        {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": T0, "dur": 50},
        {"ph": "X", "name": "no dur", "pid": 1, "tid": 1, "ts": T0},
        {"ph": "X", "name": "no ts", "pid": 1, "tid": 1, "dur": 3},
        {"ph": "X", "name": "negative", "pid": 1, "tid": 1, "ts": T0, "dur": -3},
        {"ph": "X", "name": "bad ts", "pid": 1, "tid": 1, "ts": "abc", "dur": 3},
        {"ph": "E", "pid": 1, "tid": 2, "ts": T0 + 9},
        {"ph": "B", "name": "open", "pid": 1, "tid": 3, "ts": T0 + 9},
        {"ph": "b", "name": "async", "id": 1, "pid": 1, "tid": 1, "ts": T0 + 1},
        {"name": "no ph", "pid": 1, "tid": 1, "ts": T0 + 1},
        {"ph": "s", "name": "lonely", "cat": "c", "id": 4, "pid": 1, "tid": 1, "ts": T0 + 1},
        {"ph": "f", "name": "end", "cat": "c", "id": 5, "bp": "e", "pid": 1, "tid": 1, "ts": T0 + 2},
        {"ph": "s", "name": "no id", "cat": "c", "pid": 1, "tid": 1, "ts": T0 + 2},
        {"ph": "s", "name": "away", "cat": "c", "id": 6, "pid": 1, "tid": 9, "ts": T0 + 2},
        {"ph": "f", "name": "away", "cat": "c", "id": 6, "bp": "e", "pid": 1, "tid": 9, "ts": T0 + 3},
        {"ph": "C", "name": "c", "pid": 1, "ts": T0 + 1, "args": {"v": "x"}},
        {"ph": "C", "name": "c", "pid": 1, "ts": T0 + 2, "args": {}},
        {"ph": "M", "name": "weird_meta", "pid": 1, "args": {}},
        {"ph": "i", "name": "no ts"},
        {"ph": "X", "name": "deep", "pid": 1, "tid": 1, "ts": T0 + 5, "dur": 1, "args": {"d": "DEEP"}},
        {"ph": "X", "name": "bind", "pid": 1, "tid": 1, "ts": T0 + 5, "dur": 1, "bind_id": 3},
        {"ph": "X", "name": "bind2", "pid": 1, "tid": 1, "ts": T0 + 5, "dur": 1, "bind_id": "zz", "flow_out": True},
    ]
    text = json.dumps({"traceEvents": events, "baseTimeNanoseconds": "12abc"})
    text = text.replace('"DEEP"', "[" * 300 + "]" * 300).replace(
        '"traceEvents": [', '"traceEvents": [null, 3, "x", [1], '
    )
    return text.encode() + b'\n{"traceEvents": [{"ph": "X"}]}'  # a second document after the first


def _hostile_spans() -> bytes:
    lines = (FIXTURES / "rl_run" / "perf_tracer" / "rollout" / "traces-r0.jsonl").read_bytes()
    return lines + b'garbage\n[1]\n{"x": 1}\n{"name": "s", "start_ns": 5, "end_ns": 1}\n'


HOSTILE_STATS = {
    "rank0.json": (
        _hostile_chrome,
        {
            "begin_end_unmatched": 2,
            "clock_anchor_unreadable": 1,
            "counter_value_not_number": 1,
            "counter_without_value": 1,
            "event_not_object": 4,
            "event_time_unreadable": 5,
            "file_trailing_events": 1,
            "flow_end_without_start": 1,
            "flow_start_without_end": 1,
            "flow_unbound": 2,
            "flow_without_direction": 1,
            "flow_without_id": 2,
            "metadata_unsupported": 1,
            "phase_unsupported": 2,
            "value_too_deep": 1,
        },
    ),
    "traces-r0.jsonl": (_hostile_spans, {"event_time_unreadable": 1, "line_unreadable": 3}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_STATS))
def test_hostile_files_count_declared_statistics_exactly(tmp_path: Path, name: str) -> None:
    make, expected = HOSTILE_STATS[name]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).write_bytes(make())
    report = merge([tmp_path / "run"], tmp_path / "m.pftrace")
    assert_declared(report)
    assert counts(report) == expected
    assert sum(report.dropped.values()) == sum(expected.values())  # every count under a message


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_mutated_fixtures_count_only_declared_statistics(tmp_path: Path, sample: str) -> None:
    """The fuzz test's samples, each cut, flipped, given an odd insert, retyped, nested deep and
    given numbers of odd magnitude (what the fuzz test draws at random, here at fixed places)."""
    src = SAMPLES[sample]
    for n, kind in enumerate(("cut", "flip", "insert", "retype", "nest", "magnitude")):
        run = tmp_path / kind / "run"
        run.mkdir(parents=True)
        (run / src.name).write_bytes(_mutate(src.read_bytes(), kind, 0.3 + n / 10, b'{"ph": "B", ', 5))
        try:
            report = merge([run], run.parent / "m.pftrace")
        except FatalError:
            continue
        assert_declared(report)


def test_the_json_report_holds_the_declared_statistics(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rank0.json").write_bytes(_hostile_chrome())
    result = CliRunner().invoke(
        app, ["merge", str(tmp_path / "run"), "-o", str(tmp_path / "m.json"), "--report", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 3, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert {name: entry["count"] for name, entry in data["stats"].items()} == HOSTILE_STATS["rank0.json"][1]
    assert data["stats"]["event_not_object"]["reasons"] == {
        f"event array element that is not an object ({kind})": 1 for kind in ("array", "null", "number", "string")
    }
    for name in data["stats"]:
        assert f"\n{name} {data['stats'][name]['count']:,} ({DECLARED[name].severity.value}): " in result.output
