"""JSON-lines span logs and session records as their writers produce them: exact times from the
numbers' text, Python's NaN, long first lines, and nothing of a line lost without a count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from readback import read_pftrace

from tracemerge.pipeline import merge

T0 = 1_732_900_000_123_456_789  # ns


def _merge(tmp_path: Path, name: str, text: str | bytes):
    path = tmp_path / "rollout" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if type(text) is bytes else text.encode())
    out = tmp_path / "out.pftrace"
    return merge([path], out), read_pftrace(out)


def _times(rb) -> list[tuple[str, int, int]]:
    return sorted((s.name, s.ts - T0, s.dur) for s in [*rb.slices, *rb.instants] if s.cat != "tracemerge")


def test_span_times_keep_the_nanoseconds_their_text_says(tmp_path: Path) -> None:
    lines = [
        '{"name":"a","start":1732900000.123456789,"end":1732900000.223456789,"rank":0}',
        '{"name":"b","ts":1732900000323456.789,"dur":1.5,"rank":0}',
        '{"name":"c","start_ns":1732900000523456789,"end_ns":null,"rank":0}',
        '{"name":"d","start":"1732900000.623456789","duration":0.000000001,"rank":0}',
    ]
    report, rb = _merge(tmp_path, "spans-r0.jsonl", "\n".join(lines) + "\n")
    assert report.exit_code == 0, report.dropped
    assert _times(rb) == [
        ("a", 0, 100_000_000),
        ("b", 200_000_000, 1_500),
        ("c", 400_000_000, 0),  # end_ns null: an instant, as a span without an end
        ("d", 500_000_000, 1),
    ]


def test_chrome_lines_with_absolute_float_microseconds_are_read_from_their_text(tmp_path: Path) -> None:
    lines = [
        '{"ph":"X","name":"gen","pid":1,"tid":1,"ts":1732900000123456.789,"dur":2.5,"args":{"rank":0}}',
        '{"ph":"i","name":"mark","pid":1,"tid":1,"ts":1732900000123457.000,"s":"t","args":{"rank":0}}',
    ]
    report, rb = _merge(tmp_path, "traces-r0.jsonl", "\n".join(lines) + "\n")
    assert report.exit_code == 0, report.dropped
    assert _times(rb) == [("gen", 0, 2_500), ("mark", 211, 0)]


def test_a_line_python_wrote_with_nan_is_read_as_python_reads_it(tmp_path: Path) -> None:
    line = {"ph": "X", "name": "update", "pid": 1, "tid": 1, "ts": 15234567, "dur": 845123}
    text = json.dumps({**line, "args": {"rank": 0, "loss": float("nan")}}) + "\n"
    text += json.dumps({**line, "ts": 16234567, "args": {"rank": 0, "note": "caf\udcff"}}) + "\n"
    report, rb = _merge(tmp_path, "traces-r0.jsonl", text)
    assert "NaN" in text and report.exit_code == 0, report.dropped
    assert [(s.name, s.dur) for s in rb.slices if s.cat != "tracemerge"] == [("update", 845_123_000)] * 2


# What orjson refuses and Python's json reads, in a line's args: the line is read as Python reads it.
_PYTHON_ONLY_ARGS = {
    "nan": (b'"loss":NaN', {"loss": "null"}),
    "bad byte": (b'"note":"caf\xff"', {"note": "caf\ufffd"}),
    "lone surrogate": (b'"note":"caf\\ud800"', {"note": "caf\ufffd"}),
}


@pytest.mark.parametrize(("member", "args"), _PYTHON_ONLY_ARGS.values(), ids=_PYTHON_ONLY_ARGS.keys())
def test_a_line_read_as_python_reads_it_keeps_the_nanoseconds_of_its_times(
    tmp_path: Path, member: bytes, args: dict
) -> None:
    lines = [
        b'{"name":"a","start":1732900000.123456789,"end":1732900000.223456789,"rank":0,"args":{%s}}',
        b'{"name":"b","ts":1732900000323456.789,"dur":1.5,"rank":0,"args":{%s}}',
        b'{"name":"c","start_ns":1732900000423456789,"duration_ns":7,"rank":0,"args":{%s}}',
        b'{"name":"d","start":1732900000.523456789,"rank":0,"args":{%s}}',
    ]
    report, rb = _merge(tmp_path, "spans-r0.jsonl", b"".join(line % member + b"\n" for line in lines))
    assert report.exit_code == 0 and not report.dropped, report.dropped
    assert _times(rb) == [
        ("a", 0, 100_000_000),
        ("b", 200_000_000, 1_500),
        ("c", 300_000_000, 7),
        ("d", 400_000_000, 0),
    ]
    assert [s.args for s in [*rb.slices, *rb.instants] if s.cat != "tracemerge"] == [{"args": args}] * 4


@pytest.mark.parametrize(("member", "args"), _PYTHON_ONLY_ARGS.values(), ids=_PYTHON_ONLY_ARGS.keys())
def test_a_chrome_line_read_as_python_reads_it_keeps_the_nanoseconds_of_its_times(
    tmp_path: Path, member: bytes, args: dict
) -> None:
    lines = [
        b'{"ph":"X","name":"gen","pid":1,"tid":1,"ts":1732900000123456.789,"dur":2.501,"args":{"rank":0,%s}}',
        b'{"ph":"i","name":"mark","pid":1,"tid":1,"ts":1732900000123457.001,"s":"t","args":{"rank":0,%s}}',
    ]
    report, rb = _merge(tmp_path, "traces-r0.jsonl", b"".join(line % member + b"\n" for line in lines))
    assert report.exit_code == 0 and not report.dropped, report.dropped
    assert _times(rb) == [("gen", 0, 2_501), ("mark", 212, 0)]
    assert [s.args for s in [*rb.slices, *rb.instants] if s.cat != "tracemerge"] == [{"args": {"rank": 0, **args}}] * 2


def test_a_first_line_longer_than_the_head_is_still_claimed(tmp_path: Path) -> None:
    span = {"name": "generate", "start": 1732900000.5, "end": 1732900001.5, "rank": 0, "args": {"text": "x" * 100_000}}
    report, rb = _merge(tmp_path, "spans-r0.jsonl", json.dumps(span) + "\n")
    assert report.exit_code == 0 and not report.ignored
    assert [(s.name, s.dur) for s in rb.slices if s.cat != "tracemerge"] == [("generate", 10**9)]


def test_chrome_json_written_one_event_per_line_is_not_taken_for_json_lines(tmp_path: Path) -> None:
    text = (
        '{"traceEvents":[\n'
        '{"ph":"X","name":"a","pid":10,"tid":11,"ts":1000.123,"dur":5.5},\n'
        '{"ph":"X","name":"b","pid":10,"tid":11,"ts":1010,"dur":1}\n'
        '],"baseTimeNanoseconds":1732900000123456789}\n'
    )
    report, rb = _merge(tmp_path, "rank0.json", text)
    assert report.exit_code == 0, report.dropped
    assert [a["clock"] for a in report.as_dict()["alignment"]] == ["unix epoch (baseTimeNanoseconds)"]
    assert sorted((s.name, s.dur) for s in rb.slices if s.cat != "tracemerge") == [("a", 5_500), ("b", 1_000)]


def test_every_session_record_is_drawn_or_counted(tmp_path: Path) -> None:
    records = [
        {"session_id": 0, "submit_ts": 1732900000.5, "status": "rejected", "phases": {"generate": []}},
        {
            "session_id": 1,
            "submit_ts": "1732900001",
            "phases": {"generate": [{"start_ts": 1732900001.25, "end_ts": "oops"}]},
        },
        {"session_id": 2, "submit_ts": 1732900002, "phases": {"generate": [{"end_ts": 1732900003}]}},
    ]
    report, rb = _merge(tmp_path, "sessions-r0.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    assert dict(report.dropped) == {
        "session phase with unreadable times (end_ts)": 1,
        "session phase without start_ts": 1,
    }
    assert report.as_dict()["stats"]["event_time_unreadable"]["count"] == 2
    # Nothing ran in the rejected session: it is an instant at its submit time.
    assert [(s.name, s.ts) for s in rb.instants if s.cat == "session"] == [("session", 1_732_900_000_500_000_000)]


def test_json_lines_that_only_look_like_a_chrome_trace_are_read_as_json_lines(tmp_path: Path) -> None:
    span = {"name": "generate", "start": 1732900000.25, "end": 1732900000.5, "rank": 0}
    export = {**span, "name": "export", "args": {"traceEvents": 3, "status": "error", "errorType": "timeout"}}
    text = "[rank0] training log starts\n" + json.dumps(span) + "\n" + json.dumps(export) + "\n"
    report, rb = _merge(tmp_path, "spans-r0.jsonl", text)
    assert dict(report.dropped) == {"invalid JSON line (first at line 1)": 1}
    assert sorted(s.name for s in rb.slices if s.cat != "tracemerge") == ["export", "generate"]
