"""Bounded work per value and linear work at any shape: what one hostile value or one odd shape of a
file costs is its own value, said in one line, in a time that does not grow with its magnitude."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from readback import read_pftrace

from tracemerge.core.bounds import MAX_DEPTH, TOO_DEEP, cut_deep
from tracemerge.core.errors import FatalError
from tracemerge.core.stats import Losses, Stat
from tracemerge.layout.nesting import lanes, parents
from tracemerge.pipeline import merge
from tracemerge.sources.metrics.exposition import parse_snapshot

T0_US = 1_700_000_000_000_000


def _kineto(*events: dict | str, **top: object) -> bytes:
    good = [{"ph": "X", "name": f"good{n}", "pid": 1, "tid": 1, "ts": T0_US + 10 * n, "dur": 5} for n in range(80)]
    texts = [json.dumps(e) for e in good[:40]]
    texts += [e if type(e) is str else json.dumps(e) for e in events]
    texts += [json.dumps(e) for e in good[40:]]
    tail = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in top.items())
    return ('{"traceEvents": [' + ", ".join(texts) + "]" + tail + "}").encode()


def _run(tmp_path: Path, files: dict[str, bytes], ext: str = ".pftrace", **options: object):
    run = tmp_path / "run"
    for name, data in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    return merge([run], tmp_path / f"out{ext}", **options)


def _deep(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _event(ph: str, name: str, ts: str | int, args: str | None = None, dur: int | None = None) -> str:
    """One event's text, its ts and args as written (a value json.dumps could not write, or nest)."""
    text = f'{{"ph": "{ph}", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}'
    text += "" if dur is None else f', "dur": {dur}'
    return text + ("" if args is None else f', "args": {args}') + "}"


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
@pytest.mark.parametrize(("depth", "inner"), [(100_000, "1"), (600, "null"), (MAX_DEPTH + 1, "2")])
def test_args_nested_too_deep_lose_that_value_not_the_event(tmp_path: Path, ext: str, depth: int, inner: str) -> None:
    deep = _event("X", "deep", T0_US + 1, f'{{"ok": 7, "v": {_deep(depth, inner)}}}', dur=3)
    instant = _event("i", "mark", T0_US + 2, f'{{"v": {_deep(depth, inner)}}}')
    report = _run(tmp_path, {"rank0.json": _kineto(deep, instant)}, ext)
    assert report.exit_code == 3
    assert dict(report.dropped) == {TOO_DEEP: 2}
    assert (report.written.slices, report.written.instants) == (81, 1)
    if ext == ".json":
        events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
        args = next(e["args"] for e in events if e.get("name") == "deep")
        assert args == {"ok": 7, "v": f"(nested more than {MAX_DEPTH} levels deep: not kept)"}


def test_a_value_just_within_the_limit_is_kept_whole(tmp_path: Path) -> None:
    value = _deep(MAX_DEPTH - 1)  # the args object is level 1: this value's innermost array is level 200
    deep = _event("X", "deep", T0_US + 1, f'{{"v": {value}}}', dur=3)
    report = _run(tmp_path, {"rank0.json": _kineto(deep)}, ".json")
    assert report.exit_code == 0 and not report.dropped
    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    assert next(e["args"] for e in events if e.get("name") == "deep") == {"v": json.loads(value)}


def test_cutting_keeps_the_length_and_every_place_in_the_text() -> None:
    text = b'[{"args": {"a": "[[[[", "b": ' + _deep(300).encode() + b', "c": 1}}, {"args": {}}]'
    cut, where = cut_deep(text, 3)
    assert len(cut) == len(text) and len(where) == 1
    note = f"(nested more than {MAX_DEPTH} levels deep: not kept)"
    assert json.loads(cut) == [{"args": {"a": "[[[[", "b": note, "c": 1}}, {"args": {}}]


def test_deep_lines_and_deep_run_metadata_lose_only_the_value(tmp_path: Path) -> None:
    span = {"name": "step", "start_ns": 1_790_000_000_000_000_000, "end_ns": 1_790_000_000_000_001_000, "rank": 0}
    deep_span = json.dumps({**span, "name": "deep"})[:-1] + f', "args": {{"v": {_deep(100_000)}}}}}'
    report = _run(tmp_path, {"spans.jsonl": (json.dumps(span) + "\n" + deep_span + "\n").encode()})
    assert (report.written.slices, dict(report.dropped)) == (2, {TOO_DEEP: 1})

    run = tmp_path / "ascend"
    shutil.copytree(FIXTURES / "ascend" / "text", run)
    [meta] = run.rglob("profiler_metadata.json")
    meta.write_text(f'{{"x": {_deep(100_000)}, "role": "critic"}}')
    report = merge([run], tmp_path / "ascend.pftrace")
    assert {p.role for p in report.processes} == {"critic"}
    assert report.dropped[TOO_DEEP] == 1


@pytest.mark.parametrize("option", ["--offsets", "--metrics-map", "--phases"])
def test_option_files_nested_too_deep_are_refused_in_one_line(tmp_path: Path, option: str) -> None:
    from typer.testing import CliRunner

    from tracemerge.cli import main as cli
    from tracemerge.clock import load_offsets
    from tracemerge.metrics_map import load_metrics_map
    from tracemerge.phases.rules import load_rules

    toml = tmp_path / "options.toml"
    toml.write_text('# [[[[ a comment\n[offsets]\nx = "[[[["\ny = ' + _deep(100_000) + "\n")
    load = {"--offsets": load_offsets, "--metrics-map": load_metrics_map, "--phases": load_rules}[option]
    with pytest.raises(ValueError) as refused:
        load(toml)
    assert str(refused.value) == f"{toml}:4: a value nested more than {MAX_DEPTH} levels deep: not read"
    args = ["merge", str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "o.pftrace"), option, str(toml)]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert "levels deep: not read" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("ts", "reason"),
    [
        ("1e308", "X event with unreadable ts"),
        ("-1e308", "X event with unreadable ts"),
        ("Infinity", "X event with unreadable ts"),
        ('"1e999999999"', "X event with unreadable ts"),
        ('"1e999990"', "X event with unreadable ts"),
        ('"1' + "0" * 5000 + '"', "X event with unreadable ts"),
    ],
)
def test_times_of_any_magnitude_cost_nothing_and_are_counted(tmp_path: Path, ts: str, reason: str) -> None:
    bad, instant = _event("X", "bad", ts, dur=1), _event("i", "bad", ts)
    started = time.process_time()
    report = _run(tmp_path, {"rank0.json": _kineto(bad, instant)})
    assert time.process_time() - started < 5  # 1e999990 took 28 s to parse exactly
    assert dict(report.dropped) == {reason: 1, reason.replace("X", "i"): 1}
    assert report.written.slices == 80


def test_integers_beyond_any_double_in_times_and_counter_values(tmp_path: Path) -> None:
    huge, wide = "1" * 400, str(2**64 + 5)
    counter = _event("C", "mem", T0_US + 3, f'{{"huge": {huge}, "wide": {wide}, "text": "{wide}", "ok": 2}}')
    for ext in (".pftrace", ".json"):
        report = _run(tmp_path / ext, {"rank0.json": _kineto(_event("X", "bad", huge, dur=1), counter)}, ext)
        assert dict(report.dropped) == {
            "X event with unreadable ts": 1,
            "C event value that is not a number (beyond a double)": 1,
        }
        assert (report.written.slices, report.written.counters) == (80, 3)
    events = json.loads((tmp_path / ".json" / "out.json").read_text())["traceEvents"]
    drawn = {k: v for e in events if e["ph"] == "C" for k, v in e["args"].items()}
    assert drawn == {"wide": 2.0**64, "text": 2.0**64, "ok": 2}  # as .pftrace holds them: doubles
    scalars = f'{{"step": 0, "data": {{"huge": {huge}, "ok": 1}}}}\n'.encode()
    report = _run(tmp_path / "tracker", {"rank0.json": _kineto(), "trainer/metrics.jsonl": scalars})
    assert report.dropped["tracker value that is not a finite number (not drawn)"] == 1


def test_time_text_with_a_huge_exponent_in_every_text_time_reader(tmp_path: Path) -> None:
    huge = "1e999999999"
    spans = [
        {"name": "good", "start": 1_790_000_000.5, "end": 1_790_000_001},
        {"name": "bad", "start": huge, "end": "1"},
        {"name": "worse", "start": 1_790_000_000, "duration": "1e999990"},
        {"name": "end beyond 64 bits", "start_ns": 4_000_000_000_000_000_000, "duration_ns": 4_000_000_000_000_000_000},
    ]
    series = {"metric": {"__name__": "x"}, "values": [[huge, "1"], [1_790_000_000, "2"]]}
    query = {"status": "success", "data": {"resultType": "matrix", "result": [series]}}
    sessions = [{"session_id": "s", "submit_ts": huge, "status": "ok"}, {"session_id": "t", "submit_ts": 1_790_000_000}]
    started = time.process_time()
    report = _run(
        tmp_path,
        {
            "spans.jsonl": "".join(json.dumps(s) + "\n" for s in spans).encode(),
            "prometheus/q.json": json.dumps(query).encode(),
            "session_tracer/rollout/sessions-r0.jsonl": "".join(json.dumps(s) + "\n" for s in sessions).encode(),
            "rank0.json": _kineto(),
        },
    )
    assert time.process_time() - started < 10
    assert report.dropped["span with unreadable times"] == 3
    assert report.dropped["metric sample with unreadable time or value"] == 1
    assert report.dropped["session record with unreadable submit_ts"] == 1


def test_integers_beyond_64_bits_are_written_exactly(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tracemerge.cli import main as cli

    rank = 2**64 + 5
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace.json").write_bytes(_kineto(distributedInfo={"rank": rank}))
    ascend = run / "npu"
    shutil.copytree(FIXTURES / "ascend" / "text", ascend)
    [info] = ascend.rglob("profiler_info_*.json")
    info.rename(info.with_name(f"profiler_info_{10**22}.json"))
    for ext in (".pftrace", ".json"):
        out, report = tmp_path / f"out{ext}", tmp_path / f"report{ext}.json"
        # The synthetic trace and the Ascend fixture lie years apart: two runs, both merged as asked.
        args = ["merge", str(run), "-o", str(out), "--report", str(report), "-q", "--run", "all"]
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 0, result.output
        assert {p["rank"] for p in json.loads(report.read_text())["processes"]} >= {rank, 10**22}
        assert f'"rank": {rank}' in report.read_text()


def test_negative_times_of_an_epoch_clock_never_break_the_clock_snapshot(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": T0_US, "dur": 5},
        {"ph": "i", "name": "before 1970", "pid": 1, "tid": 1, "ts": -1},
    ]
    epoch = 1_700_000_000_000_000_000
    spans = [
        {"name": "b", "start_ns": -5, "end_ns": 3, "role": "trainer", "rank": 0},
        {"name": "c", "start_ns": epoch, "end_ns": epoch + 20, "role": "trainer", "rank": 0},
    ]
    report = _run(
        tmp_path,
        {
            "rank0.json": json.dumps({"traceEvents": events}).encode(),
            "trainer/spans.jsonl": "".join(json.dumps(s) + "\n" for s in spans).encode(),
        },
    )
    assert report.exit_code == 0
    back = read_pftrace(tmp_path / "out.pftrace")
    assert back.realtime_base is not None
    times = {s.name: s.ts for s in back.slices + back.instants}
    assert times["before 1970"] == -1000 and times["b"] == -5
    assert times["a"] == T0_US * 1000 and times["c"] == epoch
    assert report.notes == ["the run starts before 1970 on the wall clock (a negative epoch time, or an --offset)"]


def test_prometheus_times_out_of_range_are_counted(tmp_path: Path) -> None:
    page = '# TYPE x gauge\nx 1 100000000000000000\nx{a="b"} 2 -100000000000000000\n# TYPE y gauge\ny 3\n# EOF\n'
    dropped = Losses()
    points = parse_snapshot(page, 1_700_000_000 * 10**9, None, dropped)
    assert len(points) == 1 and dropped.by_message() == {"metric sample with unreadable time": 2}
    assert dropped.counts == {Stat.METRIC_UNREADABLE: 2}
    header = "# tracemerge-scrape time_unix_ns=123456789012345678901234567890 url=http://h:1/metrics\n"
    report = _run(tmp_path, {"a.prom": (header + "# TYPE x gauge\nx 1\n").encode(), "rank0.json": _kineto()})
    assert [s.split(": ", 1)[1] for s in report.skipped] == [
        "scrape time out of range (time_unix_ns=123456789012345678901234567890)"
    ]


def test_a_loop_of_symbolic_links_is_skipped_with_its_reason(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.json").write_bytes(_kineto())
    (run / "a.json").symlink_to(run / "b.json")
    (run / "b.json").symlink_to(run / "a.json")
    report = merge([run], tmp_path / "out.pftrace")
    assert report.skipped == [
        f"{run / 'a.json'}: a loop of symbolic links: not read",
        f"{run / 'b.json'}: a loop of symbolic links: not read",
    ]
    assert report.written.slices == 80
    loop = tmp_path / "loop.pftrace"
    loop.symlink_to(loop)  # an output that names itself: refused in one line, as any link is
    with pytest.raises(FatalError, match=r"loop\.pftrace: is a symbolic link; not replacing it"):
        merge([run], loop)


@pytest.mark.parametrize(("base", "kind"), [('"12abc"', "text"), ("1.7e18", "a float"), ("[1]", "an array")])
def test_a_base_time_that_is_no_integer_is_said(tmp_path: Path, base: str, kind: str) -> None:
    data = f'{{"traceEvents": [{_event("X", "a", 5, dur=1)}], "baseTimeNanoseconds": {base}}}'
    report = _run(tmp_path, {"rank0.json": data.encode()})
    assert dict(report.dropped) == {
        f"baseTimeNanoseconds that is not an integer of ns ({kind}): the file is placed without it": 1
    }
    assert report.exit_code == 3


def test_ten_thousand_threads_in_one_process(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": t, "ts": T0_US + t, "dur": 1} for t in range(10_001)]
    report = _run(tmp_path, {"rank0.json": json.dumps({"traceEvents": events}).encode()}, ".json")
    assert report.exit_code == 0 and report.written.slices == 10_001
    written = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    assert len({(e["pid"], e["tid"]) for e in written if e["ph"] == "X"}) == 10_001


def test_a_staircase_of_slices_each_overlapping_all_others_is_laid_out_in_n_log_n() -> None:
    n = 60_000  # 24,000 took 44 s before
    starts = np.arange(n, dtype=np.int64)
    ends = starts + n
    started = time.process_time()
    found = lanes(starts, ends, parents(starts, ends))
    assert time.process_time() - started < 5
    assert found.tolist() == list(range(n))  # each overlaps every other: a lane each


def test_a_connection_id_shared_by_many_rows_makes_one_flow_per_task(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    before = merge([run], tmp_path / "before.pftrace").written.flows
    n = 1500
    with sqlite3.connect(db) as con:
        con.execute("create table C2 as select * from CANN_API")  # without its unique connectionId
        con.execute("drop table CANN_API")
        con.execute("alter table C2 rename to CANN_API")
        cann = [r[1] for r in con.execute("pragma table_info(CANN_API)")]
        task = [r[1] for r in con.execute("pragma table_info(TASK)")]
        crow, trow = con.execute("select * from CANN_API").fetchone(), con.execute("select * from TASK").fetchone()
        for i in range(n):
            values = {**dict(zip(cann, crow, strict=True)), "connectionId": 777_777}
            values["startNs"] = crow[cann.index("startNs")] + 10 * i
            values["endNs"] = values["startNs"] + 5
            con.execute(f"insert into CANN_API values ({','.join('?' * len(cann))})", [values[c] for c in cann])
            values = {**dict(zip(task, trow, strict=True)), "connectionId": 777_777, "globalTaskId": 10**9 + i}
            values["startNs"] = trow[task.index("startNs")] + 10 * i
            values["endNs"] = values["startNs"] + 5
            con.execute(f"insert into TASK values ({','.join('?' * len(task))})", [values[c] for c in task])
    started = time.process_time()
    report = merge([run], tmp_path / "out.pftrace")
    assert time.process_time() - started < 20  # n x n flows took minutes and 1.5 GB
    assert report.written.flows == before + n  # one flow per task, from the first host call
    assert report.dropped == Counter(
        {"CANN_API row sharing a connectionId with an earlier one (its tasks linked from it)": n - 1}
    )
    assert report.exit_code == 0


@pytest.mark.parametrize("openmetrics", [False, True])
def test_bad_prometheus_lines_cost_time_linear_in_the_page(openmetrics: bool) -> None:
    lines = ["# TYPE x gauge"] + [f'x{{i="{i}"}} {i}' for i in range(20_000)]
    bad = list(lines)
    for k in range(1, 20_001, 1000):
        bad[k] = "garbage line {"
    end = "# EOF\n" if openmetrics else ""

    def cost(page: list[str]) -> tuple[float, Losses, int]:
        dropped = Losses()
        started = time.process_time()
        points = parse_snapshot("\n".join(page) + "\n" + end, 10**18, None, dropped)
        return time.process_time() - started, dropped, len(points)

    clean, _, _ = cost(lines)
    spent, dropped, kept = cost(bad)
    assert kept == 19_980 and dropped.counts == {Stat.METRIC_UNREADABLE: 20}
    assert spent < 6 * clean + 0.5  # a parse of the page per bad line and more made it 60 times the clean one


@pytest.mark.skipif(sys.version_info < (3, 11), reason="possessive quantifiers: Python 3.11 on")
def test_a_long_string_of_escapes_costs_the_tokenizer_no_memory_per_escape() -> None:
    """Serialized JSON in an arg: a string of 1 MB with 200,000 escapes and 50,000 braces, read
    past in a pass whose memory does not grow with its escapes (a loop over a character or an
    escape at a time kept about 120 bytes per character)."""
    text = json.dumps({"config": json.dumps([{"k": n} for n in range(50_000)])}).encode()
    tracemalloc.start()
    try:
        kept, where = cut_deep(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kept is text and where == []
    assert peak < 2 * len(text)
