"""Fuzzing: real fixtures of every format, cut, flipped, retyped, reordered, duplicated and nested,
given numbers of every magnitude and events in odd shapes, must merge or be reported in one line,
never end in an internal error, and the counts must agree; each example within a budget of time and
memory that no value's magnitude or depth and no shape of the file may blow.

The number of examples is bounded so that the default test run stays fast; set
TRACEMERGE_FUZZ_EXAMPLES for a longer campaign (CI runs 600).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import time

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracemerge.core.errors import FatalError
from tracemerge.core.stats import Stat
from tracemerge.pipeline import merge

EXAMPLES = int(os.environ.get("TRACEMERGE_FUZZ_EXAMPLES", "40"))
SAMPLES = {
    "kineto": FIXTURES / "kineto_gpu" / "rank0.pt.trace.json",
    "edge": FIXTURES / "edge_cases" / "rank0.json",
    "perf_tracer": FIXTURES / "rl_run" / "perf_tracer" / "rollout" / "traces-r0.jsonl",
    "sessions": FIXTURES / "clock" / "areal" / "session_tracer" / "rollout" / "sessions-r0.jsonl",
    "spans": FIXTURES / "phases" / "trainer" / "spans.jsonl",
    "ascend_text": next((FIXTURES / "ascend" / "text").rglob("trace_view.json")),
    "prometheus_query": FIXTURES / "metrics_run" / "prometheus" / "query_range.json",
    "prometheus_scrape": sorted((FIXTURES / "metrics_scrapes").rglob("*.prom"))[0],
    "tracker": FIXTURES / "metrics_run" / "trainer" / "metrics.jsonl",
}
NUMBER = re.compile(rb"-?\d+(\.\d+)?")
# Numbers of every magnitude, as numbers and as text: beyond float, int64 and uint64, before 1970,
# exponents no clock reaches, more digits than an exact parse should ever take.
MAGNITUDES = [
    b"1e308", b"-1e308", b"Infinity", b"-Infinity", b"1e17", b"-1e17", b"-1", b"-5", b"0",
    b"18446744073709551621", b"-9223372036854775809", b"123456789012345678901234567890",
    b'"1e999999999"', b'"1e999990"', b'"-1e-999999999"', b'"12abc"', b'"' + b"9" * 5000 + b'"', b"1" * 400,
]  # fmt: skip
# Per example, however odd the input: CPU seconds, and growth of the peak memory of the campaign.
TIME_BUDGET_S = 10.0
MEMORY_BUDGET = 1 << 30
_START_RSS = None


def _mutate(data: bytes, kind: str, at: float, value: bytes, pick: int = 0) -> bytes:
    pos = int(at * len(data))
    if kind == "cut":
        return data[:pos]
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :] if data else data
    if kind == "insert":
        return data[:pos] + value + data[pos:]
    if kind == "duplicate":
        return data[:pos] + data[pos : pos + 200] + data[pos:]
    if kind == "retype":  # a number becomes a string, a null, a list or an object
        numbers = list(NUMBER.finditer(data))
        if not numbers:
            return data
        m = numbers[int(at * len(numbers)) % len(numbers)]
        new = [b'"' + m.group(0) + b'"', b"null", b"[1, 2]", b'{"a": 1}', b"1e400", b"NaN", b"-0"][len(value) % 7]
        return data[: m.start()] + new + data[m.end() :]
    if kind == "reorder":
        lines = data.split(b"\n")
        k = int(at * len(lines))
        return b"\n".join(lines[k:] + lines[:k])
    if kind == "magnitude":  # a number becomes one of any magnitude
        numbers = list(NUMBER.finditer(data))
        if not numbers:
            return data
        m = numbers[int(at * len(numbers)) % len(numbers)]
        return data[: m.start()] + MAGNITUDES[pick % len(MAGNITUDES)] + data[m.end() :]
    if kind == "nest":  # an args value nested far beyond reason, or any number made a deep value
        depth = (50 + len(value) * 40, 201, 1_200, 100_000)[pick % 4]
        deep = b"[" * depth + b"]" * depth if pick % 8 < 4 else b'{"a": ' * depth + b"1" + b"}" * depth
        numbers = list(NUMBER.finditer(data))
        if pick % 16 >= 8 and numbers:
            m = numbers[int(at * len(numbers)) % len(numbers)]
            return data[: m.start()] + deep + data[m.end() :]
        return data.replace(b'"args": {', b'"args": {"deep": ' + deep + b", ", 1).replace(
            b'"args":{', b'"args":{"deep":' + deep + b",", 1
        )
    raise AssertionError(kind)


def _shaped(data: bytes, sample: str, n: int, shape: int) -> bytes:
    """The sample with ``n`` more events in an odd shape: a staircase of slices each overlapping all
    the others, a thread or process each, one flow id shared by all, all at one time; bad lines."""
    t0 = 1_700_000_000_000_000
    if sample in ("kineto", "edge", "ascend_text", "perf_tracer"):
        if shape == 0:
            events = [{"ph": "X", "name": "s", "pid": 1, "tid": 1, "ts": t0 + i, "dur": n} for i in range(n)]
        elif shape == 1:
            # a thread each (n / 6: every thread costs a few writes of its own, linear but not small)
            events = [{"ph": "X", "name": "t", "pid": 1, "tid": i, "ts": t0 + i, "dur": 1} for i in range(n // 6)]
        elif shape == 2:
            events = [{"ph": "X", "name": "f", "pid": 1, "tid": 1, "ts": t0 + 2 * i, "dur": 1} for i in range(n)]
            events += [
                {"ph": "sf"[i % 2], "id": 7, "name": "f", "cat": "f", "pid": 1, "tid": 1, "ts": t0 + 2 * i}
                for i in range(n)
            ]
        else:
            events = [{"ph": "X", "name": "same", "pid": 1, "tid": 1, "ts": t0, "dur": 5 + i % 3} for i in range(n)]
        if sample == "perf_tracer":
            return data + b"".join(json.dumps(e).encode() + b"\n" for e in events)
        text = b", ".join(json.dumps(e).encode() for e in events)
        at = data.find(b"[", max(0, data.find(b'"traceEvents"'))) + 1
        return data[:at] + text + b", " + data[at:] if at else data
    if sample == "spans":
        start = t0 * 1000
        ranks = n // 6 if shape == 1 else 1  # a process each (as a thread each above)
        lines = [{"name": "s", "start_ns": start + i, "end_ns": start + i + n, "rank": i % ranks} for i in range(n)]
        return data + b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    if sample == "sessions":
        record = {
            "session_id": 0,
            "submit_ts": t0 / 1e6,
            "status": "ok",
            "phases": {"generate": [{"start_ts": t0 / 1e6, "end_ts": t0 / 1e6 + 1}]},
        }
        return data + b"".join(json.dumps({**record, "session_id": i}).encode() + b"\n" for i in range(n))
    if sample == "tracker":
        return data + b"".join(json.dumps({"step": i, "data": {"x": i}}).encode() + b"\n" for i in range(n))
    if sample == "prometheus_scrape":
        lines = [f'shape{{i="{i}"}} {i}' if i % 1000 != 999 else "garbage {" for i in range(n)]
        return data + ("# TYPE shape gauge\n" + "\n".join(lines) + "\n").encode()
    if sample == "prometheus_query":
        series = [{"metric": {"__name__": "shape", "i": str(i)}, "values": [[t0 / 1e6, "1"]]} for i in range(n)]
        at = data.find(b'"result": [') + len(b'"result": [')
        return data[:at] + b", ".join(json.dumps(x).encode() for x in series) + b", " + data[at:]
    return data


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sample=st.sampled_from(sorted(SAMPLES)),
    kind=st.sampled_from(["cut", "flip", "insert", "duplicate", "retype", "reorder", "nest", "magnitude", "shape"]),
    at=st.floats(min_value=0.0, max_value=0.999),
    value=st.binary(max_size=12),
    ext=st.sampled_from([".pftrace", ".json"]),
    pick=st.integers(min_value=0, max_value=1 << 16),
)
def test_mutated_inputs_merge_or_are_reported_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, sample: str, kind: str, at: float, value: bytes, ext: str, pick: int
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    src = SAMPLES[sample]
    run = tmp / "run" / src.parent.name
    run.mkdir(parents=True)
    if kind == "shape":  # large enough that work growing faster than the file blows the budget
        data = _shaped(src.read_bytes(), sample, (300, 3_000, 30_000)[pick % 3], pick // 3 % 4)
    else:
        data = _mutate(src.read_bytes(), kind, at, value, pick)
    (run / src.name).write_bytes(data)
    shutil.copy(FIXTURES / "kineto_gpu" / "rank1.pt.trace.json.gz", tmp / "run")  # a good file beside it
    out = tmp / f"out{ext}"
    started = time.process_time()
    try:
        report = merge([tmp / "run"], out)
    except FatalError as exc:  # nothing usable at all: said in one line, nothing written
        assert "\n" not in str(exc)
        assert not out.exists()
        return
    finally:
        _fits_budget(time.process_time() - started)
    assert out.stat().st_size > 0
    for message in report.skipped:
        assert "\n" not in message
    assert set(report.as_dict()["stats"]) <= {stat.value for stat in Stat}  # declared, never "other"
    read, written = report.read, report.written
    assert written.slices <= read.slices and written.instants <= read.instants
    assert written.counters <= read.counters and written.flows <= read.flows
    if report.exit_code == 0:  # exit 0: every event that was read is in the output
        assert (read.slices, read.instants, read.counters, read.flows) == (
            written.slices,
            written.instants,
            written.counters,
            written.flows,
        )


def _peak_rss() -> int:
    """The most memory this process (or a worker of it) has held, in bytes."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, workers) * 1024


def _fits_budget(seconds: float) -> None:
    global _START_RSS
    if _START_RSS is None:
        _START_RSS = _peak_rss()
    assert seconds < TIME_BUDGET_S, f"an example took {seconds:.1f} s of CPU"
    assert _peak_rss() - _START_RSS < MEMORY_BUDGET, "an example held more than the memory budget"


# -- The trust campaign: names in a DB's schema, Host headers, option values -----------------------
# Each example must end within SECONDS and allocate at most its memory budget (tracemalloc's peak).

SECONDS = 30.0
_RESERVED = {"sqlite_sequence", "sqlite_stat1"}


def _within_budget(limit_bytes: int, run):  # type: ignore[no-untyped-def]
    """``run()``'s result; asserts the time and memory it took."""
    import time
    import tracemalloc

    tracemalloc.start()
    started = time.monotonic()
    try:
        return run()
    finally:
        took = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert took < SECONDS, f"took {took:.1f} s"
        assert peak < limit_bytes, f"allocated {peak / 1e6:.1f} MB at the peak"


_IDENTIFIER = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40),
    st.sampled_from(
        ['a"b', "a'b", '"', "'", 'x" JOIN (SELECT 1) AS "y', "'); drop table TASK; --", "a]b", "[x]", "`x`"]
    ),
)


@settings(
    max_examples=max(EXAMPLES // 4, 8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(table=_IDENTIFIER, column=_IDENTIFIER)
def test_names_in_a_db_schema_never_lose_the_db(
    tmp_path_factory: pytest.TempPathFactory, table: str, column: str
) -> None:
    import sqlite3

    from hypothesis import assume

    from tracemerge.sources.sqlite.guard import quote

    tmp = tmp_path_factory.mktemp("dbname")
    run = tmp / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    with sqlite3.connect(db) as con:
        taken = {name.lower() for (name,) in con.execute("select name from sqlite_master")}
        assume(table.lower() not in taken | _RESERVED and not table.lower().startswith("sqlite_"))
        assume(column.lower() not in ("deviceid", "timestampns"))
        con.execute(f"create table {quote(table)} (deviceId, timestampNs, {quote(column)})")
        con.execute(f"insert into {quote(table)} values (0, 1767225600000000000, 7)")
    con.close()
    before = _db_baseline(tmp_path_factory)
    report = _within_budget(256 << 20, lambda: merge([run], tmp / "out.pftrace"))
    assert report.skipped == [], report.skipped  # the DB is read, whatever the name
    assert report.read.slices == before.slices and report.read.counters >= before.counters


def _db_baseline(factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    global _BASELINE
    if _BASELINE is None:
        _BASELINE = merge([FIXTURES / "ascend" / "db"], factory.mktemp("base") / "out.pftrace").read
    return _BASELINE


_BASELINE = None


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    host=st.one_of(
        st.binary(max_size=300),
        st.sampled_from([b"127.0.0.1", b"localhost:{port}", b"127.0.0.1:{port}", b"[::1]:{port}", b"localhost:1"]),
    ),
    path=st.one_of(st.binary(max_size=300), st.just(b"/trace/m.pftrace")),
)
def test_open_answers_any_request_with_a_status_and_stays_up(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], host: bytes, path: bytes
) -> None:
    import socket

    from tracemerge.viewer.serve import serve

    trace = tmp_path_factory.mktemp("open") / "m.pftrace"
    trace.write_bytes(b"\x0a\x00" * 100)
    server = serve(trace, port=0)
    port = server.server.server_address[1]
    host = host.replace(b"{port}", str(port).encode()).translate(None, b"\r\n")
    path = b"/" + path.lstrip(b"/").translate(None, b" \r\n\t\x0b\x0c")

    def ask(host: bytes, path: bytes) -> int:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
            return int(sock.makefile("rb").readline().split()[1])

    try:
        status = _within_budget(64 << 20, lambda: ask(host, path))
        ours = host.strip(b" \t").lower() in {f"{name}:{port}".encode() for name in ("127.0.0.1", "localhost", "[::1]")}
        # Served only to a request naming this server; anything else a 4xx (403, or 400 when malformed).
        assert 400 <= status < 500 or (status == 200 and ours and path == b"/trace/m.pftrace"), status
        assert ask(f"127.0.0.1:{port}".encode(), b"/trace/m.pftrace") == 200  # still serving
    finally:
        server.close()
    assert capsys.readouterr() == ("", "")  # nothing printed per request, never a traceback


_NUMBER = st.from_regex(r"[-+]?[0-9]{0,24}(\.[0-9]{0,6})?([eE][-+]?[0-9]{1,12})?(ns|us|ms|s|min|x)?", fullmatch=True)
_RANGES = st.from_regex(r"(-?[0-9]{1,24}(-[0-9]{0,24})?,?){0,6}", fullmatch=True)
_OPTION_TEXT = st.one_of(_NUMBER, _RANGES, st.text(max_size=40), st.builds(lambda a, b: f"{a}:{b}", _NUMBER, _NUMBER))


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(text=_OPTION_TEXT)
def test_option_values_parse_or_say_why_in_bounded_time_and_memory(text: str) -> None:
    from tracemerge.clock import parse_offset
    from tracemerge.core.units import MAX_DURATION_NS, parse_duration
    from tracemerge.select import parse_ranks, parse_where, parse_window

    parsers = {
        "ranks": parse_ranks,
        "duration": parse_duration,
        "window": parse_window,
        "where": lambda t: parse_where([f"dp={t}"]),
        "offset": lambda t: parse_offset(f"actor/3={t}"),
    }
    for name, parse in parsers.items():
        try:
            value = _within_budget(1 << 20, lambda parse=parse: parse(text))
        except ValueError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 400, (name, str(exc))
            continue
        if name == "duration":
            assert abs(value) <= MAX_DURATION_NS
        if name == "ranks":
            assert len(value.ranges) <= text.count(",") + 1 and value


@settings(
    max_examples=max(EXAMPLES // 4, 8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    option=st.sampled_from(["--ranks", "--steps", "--min-dur", "--window", "--offset", "--jobs", "--where", "--roles"]),
    text=_OPTION_TEXT,
)
def test_option_values_on_the_command_line_merge_or_are_one_line(
    tmp_path_factory: pytest.TempPathFactory, option: str, text: str
) -> None:
    from typer.testing import CliRunner

    from tracemerge.cli import main as cli

    value = {"--offset": f"rank={text}", "--where": f"dp={text}"}.get(option, text)
    out = tmp_path_factory.mktemp("opt") / "o.pftrace"
    args = ["merge", str(FIXTURES / "kineto_gpu"), "-o", str(out), "-q", option, value]
    result = _within_budget(512 << 20, lambda: CliRunner().invoke(cli.app, args))
    assert result.exit_code in (0, 1, 2, 3), result.output
    if result.exit_code in (1, 2):  # nothing written, said in one line
        assert len(result.output.splitlines()) == 1 and result.output.startswith("tracemerge: error: ")
        assert not out.exists()
    assert "internal error" not in result.output and "Traceback" not in result.output


# -- Names with control characters: nothing from the data reaches the terminal raw -----------------
# A folder (a role), a file name and a role in span content, each any text ending in a line that
# tries to pass for the tool's own: every character printed is printable or a line the tool ends,
# and no line starts with what a name holds after its newline.

_NAME_TEXT = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=40),
    st.sampled_from(["x\x1b[2J", "\r\x1b]0;title\x07", "\u202eevil", "a\rb\tc\x7f\x9b", "\x1b[31m", "\u2028"]),
)


def _printed_safely(output: str) -> None:
    assert all(c == "\n" or c.isprintable() for c in output), repr(output)
    assert not [line for line in output.splitlines() if line.lstrip().startswith("FORGED")], output


@settings(max_examples=max(EXAMPLES // 4, 8), deadline=None)
@given(role=_NAME_TEXT, name=_NAME_TEXT, span_role=_NAME_TEXT)
def test_names_with_control_characters_never_reach_the_terminal(
    tmp_path_factory: pytest.TempPathFactory, role: str, name: str, span_role: str
) -> None:
    from builders import areal_jsonl, kineto
    from hypothesis import assume
    from typer.testing import CliRunner

    from tracemerge.cli import main as cli

    role, name, span_role = (f"{text}\nFORGED {n}" for n, text in enumerate((role, name, span_role)))
    assume(not role.startswith(".") and not name.startswith("."))
    assume(len(role.encode()) < 200 and len(name.encode()) < 200)
    tmp = tmp_path_factory.mktemp("names")
    kineto(tmp / "run" / role / f"{name}.pt.trace.json", rank=0)
    areal_jsonl(tmp / "run" / "spans" / "traces-r1.jsonl", rank=1, role=span_role)
    (tmp / "run" / f"{name}_worker_process_1.nsys-rep").write_bytes(b"NSYS")
    runner = CliRunner()
    merged = runner.invoke(cli.app, ["merge", str(tmp / "run"), "-o", str(tmp / "out.pftrace")])
    assert merged.exit_code == 3, merged.output  # the .nsys-rep is skipped, saying how to export it
    _printed_safely(merged.output)
    summary = runner.invoke(cli.app, ["summary", str(tmp / "run")])
    assert summary.exit_code == 0, summary.output
    _printed_safely(summary.output)


# -- Nsight Systems: any value of any column read, in the SQLite and the JSON-lines form; side files -----

NSYS_EXPORT = FIXTURES / "nsys" / "torchrun" / "train_2gpu.sqlite"
NSYS_LINES = FIXTURES / "nsys_jsonl" / "torchrun" / "train_2gpu.jsonl"
# Every column an nsys reader reads, by table.
NSYS_COLUMNS = {
    "NVTX_EVENTS": (
        *("start", "end", "eventType", "text", "textId", "globalTid", "endGlobalTid", "domainId"),
        *("category", "jsonText", "int64Value", "uint64Value", "doubleValue"),
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "nameId", "correlationId", "returnValue"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        *("start", "end", "globalPid", "deviceId", "contextId", "streamId"),
        *("correlationId", "demangledName", "gridX", "blockZ", "registersPerThread", "staticSharedMemory"),
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "bytes", "copyKind", "srcKind", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "memKind", "value", "streamId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "syncType", "eventId", "streamId", "contextId"),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ("timestamp", "eventId", "streamId", "contextId"),
    "GPU_METRICS": ("timestamp", "typeId", "metricId", "value"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "StringIds": ("id", "value"),
    "ThreadNames": ("nameId", "globalTid"),
    "PROCESSES": ("pid", "name"),
    "META_DATA_CAPTURE": ("name", "value"),
    "TARGET_INFO_SYSTEM_ENV": ("name", "value"),
    "TARGET_INFO_SESSION_START_TIME": ("utcEpochNs",),
    "TARGET_INFO_CUDA_STREAM": ("processId", "streamId", "flag"),
    "PROFILER_OVERHEAD": ("start", "end", "globalTid", "nameId"),
}
_TORCH_TEXT = st.lists(
    st.sampled_from([", op_id = ", ", seq = ", ", sizes = [", "]", "[", ", input_op_ids = ", "1", "23", "x", "²", "٣"]),
    max_size=12,
).map("".join)
_SQL_VALUE = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=8),
    _TORCH_TEXT,
    st.sampled_from(['RANK="²"', 'RANK="' + "7" * 5000 + '"', "RANK=1", "Hostname", "PROCESS_0:ENVIRONMENT_VARIABLE"]),
)
_NOT_UTF8 = st.binary(min_size=1, max_size=8).filter(lambda b: _invalid_utf8(b))


def _invalid_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return True
    return False


def _nsys_baseline(factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    global _NSYS_BASELINE
    if _NSYS_BASELINE is None:
        _NSYS_BASELINE = merge([NSYS_EXPORT], factory.mktemp("nsys_base") / "out.json").written
    return _NSYS_BASELINE


_NSYS_BASELINE = None


def _one_value_at_most(report, base) -> None:  # type: ignore[no-untyped-def]
    """The export was read, every statistic declared, and one bad value cost at most one event."""
    assert report.skipped == [], report.skipped
    assert set(report.as_dict()["stats"]) <= {stat.value for stat in Stat}
    written = report.written
    assert written.slices + written.instants >= base.slices + base.instants - 1


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    column=st.sampled_from([(t, c) for t, cs in NSYS_COLUMNS.items() for c in cs]),
    row=st.integers(min_value=0, max_value=1 << 16),
    value=st.one_of(_SQL_VALUE, _NOT_UTF8.map(lambda b: ("text", b))),
)
def test_any_value_in_an_nsys_export_costs_at_most_its_event(
    tmp_path_factory: pytest.TempPathFactory, column: tuple[str, str], row: int, value: object
) -> None:
    import sqlite3

    from tracemerge.sources.sqlite.guard import quote

    tmp = tmp_path_factory.mktemp("nsysvalue")
    db = tmp / "in" / NSYS_EXPORT.name
    db.parent.mkdir()
    shutil.copyfile(NSYS_EXPORT, db)
    table, name = column
    with sqlite3.connect(db) as con:
        rowids = [r for (r,) in con.execute(f"select rowid from {quote(table)}")]
        if type(value) is tuple:  # text that is not UTF-8
            sql, value = (
                f"update or ignore {quote(table)} set {quote(name)} = cast(? as text) where rowid = ?",
                value[1],
            )
        else:  # "or ignore": a NULL where the schema says NOT NULL leaves the row as it was
            sql = f"update or ignore {quote(table)} set {quote(name)} = ? where rowid = ?"
        try:
            con.execute(sql, (value, rowids[row % len(rowids)]))
        except sqlite3.IntegrityError:  # an INTEGER PRIMARY KEY holds integers only: nothing to read
            return
    con.close()
    base = _nsys_baseline(tmp_path_factory)
    report = _within_budget(256 << 20, lambda: merge([db], tmp / "out.json", jobs=1))
    _one_value_at_most(report, base)


_JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    _TORCH_TEXT,
)
_JSON_VALUE = st.one_of(
    st.recursive(
        _JSON_SCALAR,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=6,
    ),
    st.sampled_from([b"Infinity", b"-Infinity", b"NaN", b"9e999", b"1" * 400, b'"\\ud800"', b'"\xff"']),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.integers(min_value=0, max_value=1 << 16),
    key=st.one_of(
        st.sampled_from(sorted({c for cs in NSYS_COLUMNS.values() for c in cs} | {"table"})), st.text(max_size=8)
    ),
    value=_JSON_VALUE,
    whole=st.one_of(st.none(), st.binary(max_size=40)),
)
def test_any_value_in_an_nsys_json_lines_export_costs_at_most_its_event(
    tmp_path_factory: pytest.TempPathFactory, line: int, key: str, value: object, whole: bytes | None
) -> None:
    """A value of any JSON type (or none JSON reads strictly) in any key of any line, or a line of
    any bytes in place of a row."""
    lines = NSYS_LINES.read_bytes().splitlines()
    at = line % len(lines)
    if whole is not None:
        lines[at] = whole.replace(b"\n", b" ")
    else:
        text = json.dumps(value) if type(value) is not bytes else value.decode("utf-8", "surrogateescape")
        obj = json.loads(lines[at])
        obj[key] = "\x00MARK\x00"
        lines[at] = json.dumps(obj).replace('"\\u0000MARK\\u0000"', text).encode("utf-8", "surrogateescape")
    tmp = tmp_path_factory.mktemp("nsysline")
    path = tmp / "in" / NSYS_LINES.name
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines) + b"\n")
    base = _nsys_baseline(tmp_path_factory)
    try:
        report = _within_budget(256 << 20, lambda: merge([path], tmp / "out.json", jobs=1))
    except FatalError as exc:  # the first line names the format: without it, no nsys export
        assert at == 0 and "\n" not in str(exc) and "not a trace format tracemerge reads" in str(exc)
        return
    _one_value_at_most(report, base)


@settings(
    max_examples=max(EXAMPLES // 2, 8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    suffix=st.sampled_from(["-wal", "-journal"]),
    head=st.sampled_from([b"", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83", b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"]),
    body=st.binary(max_size=4096),
)
def test_any_side_file_beside_an_export_is_read_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, suffix: str, head: bytes, body: bytes
) -> None:
    tmp = tmp_path_factory.mktemp("side")
    db = tmp / "in" / NSYS_EXPORT.name
    db.parent.mkdir()
    shutil.copyfile(NSYS_EXPORT, db)
    db.with_name(db.name + suffix).write_bytes(head + body)
    before = sorted((p.name, p.read_bytes()) for p in db.parent.iterdir())
    report = _within_budget(256 << 20, lambda: merge([db, FIXTURES / "kineto_gpu"], tmp / "out.json", jobs=1))
    assert sorted((p.name, p.read_bytes()) for p in db.parent.iterdir()) == before  # nothing changed beside it
    for message in report.skipped:
        assert "\n" not in message and message.startswith(str(db))
    if not report.skipped:
        assert report.written.slices >= _nsys_baseline(tmp_path_factory).slices


@settings(max_examples=EXAMPLES * 25, deadline=None)
@given(text=st.one_of(_TORCH_TEXT, st.builds("{}{}".format, st.text(max_size=8), _TORCH_TEXT)))
def test_the_emit_nvtx_parser_reads_what_the_expression_did(text: str) -> None:
    """torch_op names texts as ``(.*?)(?:, seq = (\\d+))?, op_id = (\\d+)(?:, sizes = (\\[.*?\\]))?
    (?:, input_op_ids = (.*))?`` fully matched does, with ASCII digits, in linear time."""
    from tracemerge.sources.nsys.nvtx import torch_op

    expression = re.compile(
        r"(.*?)(?:, seq = ([0-9]{1,18}))?, op_id = ([0-9]{1,18})(?:, sizes = (\[.*?\]))?(?:, input_op_ids = (.*))?",
        re.S,
    )
    found = expression.fullmatch(text)
    assert torch_op(text) == (found.groups() if found else None)
