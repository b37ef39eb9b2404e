"""Option values out of range are usage errors in one line (exit 2); selections are ranges, not
lists; `check` and `summary` say in one line when a trace is damaged or foreign."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import engine
from tracemerge.cli import main as cli
from tracemerge.clock import AUTOMATIC
from tracemerge.metrics_map import NO_MAP
from tracemerge.phases.rules import AUTO_PHASES
from tracemerge.run import executors, reading
from tracemerge.select import EVERYTHING

runner = CliRunner()
EPOCH_US = 1_790_000_000_000_000


def _profiler_steps(path: Path, steps: int = 200, rank: int = 0) -> Path:
    """A torch.profiler-like trace: ProfilerStep#0..N-1, each holding one op."""
    events = []
    for n in range(steps):
        t = EPOCH_US + 1000 * n
        events.append(
            {"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t, "dur": 900}
        )
        events.append({"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": t + 10, "dur": 100})
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}}))
    return path


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--steps", "5-3", "--steps: '5-3' ends before it starts"),
        ("--steps", "", "--steps: no number given"),
        ("--ranks", "", "--ranks: no number given"),
        ("--ranks", ",", "--ranks: no number given"),
        ("--ranks", "1-x", "--ranks: not a list of numbers"),
        ("--ranks", "9" * 5000, "--ranks: not a list of numbers"),
        ("--roles", "", "--roles: no role given"),
        ("--where", "dp=", "--where: 'dp='"),
        ("--jobs", "-1", "--jobs: -1 is not a number of processes"),
        ("--min-dur", "-5us", "--min-dur: '-5us' is negative"),
        ("--offset", "actor=+1e400s", "--offset 'actor=+1e400s': duration out of range"),
        ("--offset", "actor=+200y", "not a duration"),
        ("--offset", "/²=1s", "not an offset"),
        ("--offset", "actor=101*365*86400s", "not a duration"),
        ("--offset", f"actor={101 * 365 * 86400}s", "more than 100 years either way"),
        ("--window", "1e999999999s:", "duration out of range"),
        ("--window", "1e-999999999s:", None),  # 0 ns: fine
    ],
    ids=lambda value: value[:24] if isinstance(value, str) else None,
)
def test_option_values_out_of_range_are_one_line_usage_errors(
    tmp_path: Path, option: str, value: str, says: str | None
) -> None:
    out = tmp_path / "o.pftrace"
    result = runner.invoke(cli.app, ["merge", str(FIXTURES / "kineto_gpu"), "-o", str(out), "-q", option, value])
    if says is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()
    assert line.startswith("tracemerge: error: ") and says in line, line
    assert list(tmp_path.iterdir()) == []


def test_an_offset_naming_no_process_is_a_warning(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    args = ["merge", str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "o.pftrace"), "--report", str(report)]
    result = runner.invoke(cli.app, [*args, "--offset", "nosuch=5ms", "--offset", "/1=1ms"])
    assert result.exit_code == 0, result.output
    said = "offset nosuch=+5000000ns names no process of this run: not applied"
    assert f"note: {said}" in result.output.splitlines()
    assert json.loads(report.read_text())["notes"] == [said]  # /1 names rank 1: applied, not noted


def _run_limited(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """A merge that may not use more than 1.5 GB of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    return subprocess.run(
        [sys.executable, "-m", "tracemerge", *args], capture_output=True, text=True, timeout=120, preexec_fn=limit
    )


@pytest.mark.parametrize(("option", "value"), [("--ranks", "0-20000000"), ("--steps", "0-99999999999999999999")])
def test_selections_are_ranges_in_constant_memory(tmp_path: Path, option: str, value: str) -> None:
    trace = _profiler_steps(tmp_path / "rank0.json", steps=5)
    done = _run_limited([str(trace), "-o", str(tmp_path / "o.pftrace"), "-q", option, value], tmp_path)
    assert done.returncode == 0, done.stderr


def test_numbers_hold_ranges_not_members() -> None:
    import tracemalloc

    from tracemerge.select import format_numbers, parse_ranks

    tracemalloc.start()
    ranks = parse_ranks("0-20000000,5,30000000-99999999999999999999")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100_000
    assert 20_000_000 in ranks and 20_000_001 not in ranks and 10**19 in ranks and None not in ranks
    assert parse_ranks("0-2,5") == frozenset({0, 1, 2, 5}) and parse_ranks("3,1-2,2") == frozenset({1, 2, 3})
    assert str(ranks) == "0-20000000,30000000-99999999999999999999"
    assert format_numbers([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_jobs_are_capped_at_the_cpus_and_said(tmp_path: Path, monkeypatch) -> None:
    started: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def pool(count: int, **kwargs):
        started.append(count)
        return real(count, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", pool)  # the executor imports it when it starts one
    monkeypatch.setattr(executors, "usable_cores", lambda: 2)
    monkeypatch.setattr(engine, "usable_cores", lambda: 2)
    report = tmp_path / "r.json"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for n in range(4):
        _profiler_steps(run_dir / f"rank{n}.json", steps=3, rank=n)
    args = ["merge", str(run_dir), "-o", str(tmp_path / "o.pftrace"), "--report", str(report), "--jobs", "100"]
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    said = "--jobs 100: this machine gives it 2 CPUs; 2 processes used"
    assert f"note: {said}" in result.output.splitlines()
    assert said in json.loads(report.read_text())["notes"]
    assert started == [2]


def test_large_files_are_read_in_parts_by_the_cpus_this_process_may_use(monkeypatch) -> None:
    """Cores left over read the parts of large files: counted from the process's affinity, not
    from the machine's CPUs (a process pinned to 2 of 64 must not fork 32 readers)."""
    monkeypatch.setattr(reading.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(reading, "usable_cores", lambda: 2)
    ask = lambda jobs: reading.asked_of(None, EVERYTHING, AUTOMATIC, AUTO_PHASES, NO_MAP, 1000, jobs, None)  # noqa: E731
    assert [ask(jobs)[1].cores for jobs in (0, 1, 2, 64)] == [2, 0, 2, 2]


def test_steps_found_are_the_steps_the_trace_has(tmp_path: Path) -> None:
    trace = _profiler_steps(tmp_path / "rank0.json")
    out = tmp_path / "o.pftrace"
    kept = runner.invoke(cli.app, ["merge", str(trace), "-o", str(out), "-q", "--steps", "3-5"])
    assert kept.exit_code == 0, kept.output
    missing = runner.invoke(cli.app, ["merge", str(trace), "-o", str(out), "-q", "--steps", "300-305"])
    assert missing.exit_code == 1
    assert missing.output.strip() == "tracemerge: error: --steps: no such step in this run (steps found: 0-199)"


# -- check and summary on what is not a whole trace ------------------------------------------------


def _damaged(tmp_path: Path) -> dict[str, tuple[bytes, int, str]]:
    """name -> (bytes, exit status, what the line says)."""
    good = tmp_path / "good.pftrace"
    runner.invoke(cli.app, ["merge", str(FIXTURES / "phases"), "-o", str(good), "-q"])
    data = good.read_bytes()
    deep = b'{"traceEvents": [' + b"[" * 200_000 + b"]" * 200_000 + b"]}"
    return {
        "empty.pftrace": (b"", 1, "empty file: not a trace"),
        "cut.pftrace": (data[: len(data) // 2 + 3], 3, "cut at byte"),
        "zero-filled.pftrace": (data + b"\0" * 4096, 3, "not a packet there (0x00)"),
        "huge-packet.pftrace": (b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 3, "cut at byte 10"),
        "foreign.pftrace": (
            b"\x89PNG\r\n\x1a\n" + bytes(100),
            1,
            "not a trace: neither Perfetto protobuf packets nor JSON",
        ),
        "cut.pftrace.gz": (gzip.compress(data)[:2000], 3, "its gzip stream is cut or corrupt"),
        "cut.json": (
            b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2},\n',
            3,
            "ends before its closing }",
        ),
        # a whole JSON trace keeping no summary (looked for a batch at a time): read as an input
        "deep.json": (deep, 1, "element that is not an object (array) ×1; value nested more than 200 levels deep"),
    }


def test_check_says_in_one_line_when_a_trace_is_damaged_or_foreign(tmp_path: Path) -> None:
    for name, (data, status, says) in _damaged(tmp_path).items():
        if name == "deep.json":
            continue  # whole JSON: trace_processor's to judge
        path = tmp_path / name
        path.write_bytes(data)
        result = runner.invoke(cli.app, ["check", str(path)])
        assert result.exit_code == status, (name, result.output)
        [line] = result.output.splitlines()
        assert line.startswith(f"tracemerge: error: {path}: ") and says in line, line


def test_summary_says_in_one_line_when_a_trace_is_damaged_or_foreign(tmp_path: Path) -> None:
    shapes = {  # whole traces holding a summary of a shape tracemerge never writes
        "list.json": [1, 2],
        "numbers.json": {"numbers": "[1, 2]"},
        "ints.json": {"roles": 5, "steps": 7},
        "no-roles.json": {"steps": []},
    }
    cases = _damaged(tmp_path)
    for name, summary in shapes.items():
        note = {"ph": "i", "name": "phase summary", "cat": "tracemerge", "ts": 0, "pid": 1, "tid": 1}
        data = json.dumps({"traceEvents": [note | {"args": {"summary": summary}}]}).encode()
        cases[name] = (data, 1, "")
    for name, (data, status, says) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        result = runner.invoke(cli.app, ["summary", str(path)])
        assert result.exit_code == status, (name, result.output)
        [line] = result.output.splitlines()
        lead = "no usable trace files: " if name == "deep.json" else ""
        assert line.startswith(f"tracemerge: error: {lead}{path}: ") and says in line, (name, line)
