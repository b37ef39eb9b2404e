"""Nothing is destroyed, nothing vanishes silently: output safety, unusable inputs, hostile names."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge

runner = CliRunner()


def run(*args: str):
    return runner.invoke(cli.app, ["merge", *args])


def test_output_naming_an_input_is_refused_unless_forced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    victim = run_dir / "rank0.pt.trace.json"
    before = victim.read_bytes()
    result = run(str(run_dir), "-o", str(victim))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"tracemerge: error: {victim}: is one of the inputs; not overwriting it (use --force to replace it)"
    )
    assert victim.read_bytes() == before
    forced = run(str(run_dir), "-o", str(victim), "--force", "-q")
    assert forced.exit_code == 0, forced.output
    merged = json.loads(victim.read_text())  # now the merged trace (Chrome JSON, by its name)
    assert merged["metadata"]["producer"] == "tracemerge"
    # rank 1 and the Pipeline group of its ProfilerStep#N steps
    assert {e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"} == {"Pipeline", "rank 1"}


def test_output_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "out.pftrace"
    os.mkfifo(fifo)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(fifo))
    assert result.exit_code == 1
    assert "is not a regular file; not replacing it" in result.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)

    target = tmp_path / "elsewhere.pftrace"
    target.write_bytes(b"keep")
    link = tmp_path / "link.pftrace"
    link.symlink_to(target)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(link))
    assert result.exit_code == 1
    assert "is a symbolic link" in result.output
    assert link.is_symlink() and target.read_bytes() == b"keep"

    result = run(str(FIXTURES / "kineto_gpu"), "-o", "/dev/null")
    assert result.exit_code == 1
    assert "/dev/null: is not a regular file" in result.output


def test_read_only_output_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"old")
    out.chmod(0o444)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(out))
    assert result.exit_code == 1
    assert f"{out}: is read-only" in result.output
    assert out.read_bytes() == b"old" and stat.S_IMODE(out.stat().st_mode) == 0o444


def test_strict_writes_nothing_when_an_input_event_is_lost(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    victim = run_dir / "rank0.pt.trace.json"
    victim.write_bytes(victim.read_bytes()[:5_000])  # cut: the events before the cut are salvaged
    out = tmp_path / "out.pftrace"
    result = run(str(run_dir), "-o", str(out), "--strict", "-q")
    assert result.exit_code == 1
    assert result.output.startswith(f"tracemerge: error: --strict: dropped input events: {victim}:")
    assert len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert run(str(run_dir), "-o", str(out), "-q").exit_code == 3  # without it: written, incomplete


def test_strict_accepts_what_is_only_counted(tmp_path: Path) -> None:
    # Info statistics (here a metric of unknown type, drawn as a gauge, and counters sampled
    # once) lose no input event: the exit status is 0, and --strict writes the trace.
    out = tmp_path / "out.pftrace"
    report = merge([FIXTURES / "metrics_scrapes"], out, strict=True)
    assert dict(report.dropped) == {
        "metric of unknown type (drawn as a gauge)": 3,
        "metric counter without two samples in time (no interval for a rate)": 5,
    }
    assert report.incomplete is None and report.exit_code == 0
    assert out.stat().st_size > 0


def test_an_existing_output_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"old")
    assert run(str(FIXTURES / "kineto_gpu"), "-o", str(out), "-q").exit_code == 0
    assert out.read_bytes() != b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace"]


def _kineto_bytes() -> bytes:
    return (FIXTURES / "kineto_gpu" / "rank0.pt.trace.json").read_bytes()


def _merge_dir(tmp_path: Path, files: dict[str, bytes], *extra: str):
    run_dir = tmp_path / "run"
    for name, data in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(data)
    return run(str(run_dir), "-o", str(tmp_path / "out.pftrace"), "--report", str(tmp_path / "r.json"), *extra)


def _report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "r.json").read_text())


def test_a_gzip_stream_cut_short_is_salvaged(tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(_kineto_bytes())
    result = _merge_dir(tmp_path, {"rank0.json.gz": data[: len(data) * 2 // 3]})
    assert result.exit_code == 3, result.output
    assert "unexpected end of data); events after it are lost (the ones before are kept)" in result.output
    assert _report(tmp_path)["read"]["slices"] > 0


def test_a_json_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    result = _merge_dir(tmp_path, {"rank0.json": b"\xef\xbb\xbf" + _kineto_bytes()})
    assert result.exit_code == 0, result.output
    assert _report(tmp_path)["read"]["slices"] == 28


@pytest.mark.parametrize("first", [b'{"name": "thread_na', b"garbage"])
def test_a_jsonl_file_whose_first_line_is_broken_is_read(tmp_path: Path, first: bytes) -> None:
    lines = (FIXTURES / "rl_run" / "perf_tracer" / "rollout" / "traces-r0.jsonl").read_bytes()
    result = _merge_dir(tmp_path, {"rollout/traces-r0.jsonl": first + b"\n" + lines})
    assert result.exit_code == 3
    assert "dropped 1 input events: invalid JSON line (first at line 1)" in result.output
    assert _report(tmp_path)["read"]["slices"] == 6


def test_nan_and_a_bad_utf8_byte_do_not_lose_the_file(tmp_path: Path) -> None:
    data = _kineto_bytes().replace(b'"aten::', b'"at\xffen::', 1)
    data = data.replace(b'"dur":', b'"x":NaN,"dur":', 1)
    result = _merge_dir(tmp_path, {"rank0.json": data})
    assert result.exit_code == 0, result.output
    assert _report(tmp_path)["read"]["slices"] == 28


def test_symlinked_directories_are_read_once_and_loops_end(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "real").mkdir(parents=True)
    (run_dir / "real" / "rank0.json").write_bytes(_kineto_bytes())
    (run_dir / "other").mkdir()
    (run_dir / "other" / "link").symlink_to(run_dir / "real")  # another way to the same files
    (run_dir / "real" / "loop").symlink_to(run_dir)  # back up: a loop
    result = run(str(run_dir), "-o", str(tmp_path / "out.pftrace"), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    report = _report(tmp_path)
    assert report["read"]["slices"] == 28
    assert len(report["notes"]) == 2 and all("read once" in n for n in report["notes"])


def test_a_fifo_in_a_scanned_directory_is_named_not_opened(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rank0.json").write_bytes(_kineto_bytes())
    os.mkfifo(run_dir / "rank1.json")
    result = run(str(run_dir), "-o", str(tmp_path / "out.pftrace"))  # would block forever if opened
    assert result.exit_code == 3
    assert f"skipped {run_dir / 'rank1.json'}: not a regular file (FIFO): not read" in result.output


def test_an_empty_trace_file_is_named(tmp_path: Path) -> None:
    result = _merge_dir(tmp_path, {"rank0.json": _kineto_bytes(), "PROF/ascend_pytorch_profiler_1.db": b""})
    assert result.exit_code == 3
    assert "ascend_pytorch_profiler_1.db: empty file" in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rank0.json").write_bytes(_kineto_bytes())
    locked = run_dir / "rank1.json"
    locked.write_bytes(_kineto_bytes())
    locked.chmod(0)
    result = run(str(run_dir), "-o", str(tmp_path / "out.pftrace"))
    assert result.exit_code == 3
    assert f"skipped {locked}: cannot read: Permission denied" in result.output


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"ts": 1e30, "dur": 1}, "X event with unreadable ts"),
        ({"ts": 10**20, "dur": 1}, "X event with unreadable ts"),
        ({"ts": -1_700_000_000_000_000, "dur": 1}, "X event with unreadable ts"),
    ],
)
def test_timestamps_no_trace_can_hold_are_dropped_not_wrapped(tmp_path: Path, event: dict, reason: str) -> None:
    good = {"ph": "X", "name": "good", "pid": 1, "tid": 1, "ts": 1_700_000_000_000_000, "dur": 5}
    bad = {"ph": "X", "name": "bad", "pid": 1, "tid": 1, **event}
    result = _merge_dir(tmp_path, {"rank0.json": json.dumps({"traceEvents": [good, bad]}).encode()})
    assert result.exit_code == 3
    report = _report(tmp_path)
    assert report["dropped"] == {reason: 1}
    assert report["written"]["slices"] == 1


def test_a_database_with_wrong_types_loses_those_rows_and_the_rest_is_merged(tmp_path: Path) -> None:
    """A NULL time and a text device id cost their rows only (counted under their table): the
    rest of the DB and the other files are merged."""
    import sqlite3

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run_dir / "npu")
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir / "gpu")
    # The two fixtures were recorded days apart: two runs, both merged as asked.
    both = ("--run", "all")
    before = run(str(run_dir), "-o", str(tmp_path / "before.pftrace"), "--report", str(tmp_path / "before.json"), *both)
    assert before.exit_code == 0
    [db] = (run_dir / "npu").rglob("*.db")
    with sqlite3.connect(db) as con:
        con.execute("update TASK set startNs = NULL where rowid = 1")
        con.execute("update TASK set deviceId = 'x' where rowid = 3")
    result = run(str(run_dir), "-o", str(tmp_path / "out.pftrace"), "--report", str(tmp_path / "r.json"), *both)
    assert result.exit_code == 3
    assert "skipped" not in result.output and "internal error" not in result.output
    report, was = _report(tmp_path), json.loads((tmp_path / "before.json").read_text())
    assert [r["merged"] for r in report["runs"]] == [True, True]
    assert report["dropped"] == {"TASK row with unreadable times": 1, "TASK row whose deviceId is not an integer": 1}
    assert report["written"]["slices"] == was["written"]["slices"] - 2  # two compute tasks, one slice each


def test_database_rows_still_in_the_wal_file_are_read(tmp_path: Path) -> None:
    import sqlite3

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run_dir)
    [db] = run_dir.rglob("*.db")
    with sqlite3.connect(db) as con:
        con.execute("pragma journal_mode=wal")
    con = sqlite3.connect(db)
    con.execute("pragma wal_autocheckpoint=0")
    columns = len(con.execute("select * from MSTX_EVENTS limit 1").fetchone())
    row = con.execute("select * from MSTX_EVENTS where endNs > startNs limit 1").fetchone()
    con.execute(f"insert into MSTX_EVENTS values ({','.join('?' * columns)})", row)
    con.commit()
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)  # the DB with its -wal, as a writer killed before a checkpoint leaves it
    con.close()
    before = merge([FIXTURES / "ascend" / "db"], tmp_path / "a.pftrace").read.slices
    assert merge([copy], tmp_path / "b.pftrace").read.slices == before + 1


def test_file_names_cannot_forge_or_colour_a_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    evil = "evil\nwrote fake.pftrace\x1b[31m.json"
    (run_dir / evil).write_bytes(_kineto_bytes())
    (run_dir / "note\x1b[2J.txt").write_text("x")
    result = run(str(run_dir), "-o", str(tmp_path / "out.pftrace"))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("wrote")] == [
        line for line in result.output.splitlines() if line.startswith(f"wrote {tmp_path}")
    ]
    assert "evil\\nwrote fake.pftrace\\x1b[31m.json" in result.output


def test_usage_and_report_errors_have_their_exit_codes(tmp_path: Path) -> None:
    bad_format = run(str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "o.pftrace"), "--format", "xml")
    assert bad_format.exit_code == 2
    no_report = run(
        str(FIXTURES / "kineto_gpu"),
        "-o",
        str(tmp_path / "o.pftrace"),
        "--report",
        str(tmp_path / "no" / "r.json"),
        "-q",
    )
    assert no_report.exit_code == 3  # the trace is written whole; the report is not
    assert (tmp_path / "o.pftrace").stat().st_size > 0
    assert no_report.output.startswith("tracemerge: error: cannot write report")


def test_the_same_run_in_another_folder_gives_the_same_bytes(tmp_path: Path) -> None:
    """Files of one process that overlap in time get their own copies of its threads; their ids
    must not depend on where the run lies."""
    from builders import kineto

    for top in ("a", "bb"):
        kineto(tmp_path / top / "run" / "actor" / "step1" / "rank0.json", rank=0)
        # same times: overlap (other names: a copy with the same bytes would be read once)
        kineto(tmp_path / top / "run" / "actor" / "step2" / "rank0.json", rank=0, names=("c", "d"))
    first = merge([tmp_path / "a" / "run"], tmp_path / "a.pftrace")
    merge([tmp_path / "bb" / "run"], tmp_path / "b.pftrace")
    from readback import read_pftrace

    assert first.moved_to_lanes == 0
    names = sorted(name for _, name in read_pftrace(tmp_path / "a.pftrace").threads.values())
    assert names == ["CPU thread 11 (python)", "CPU thread 11 (python) (step2/rank0.json)"]
    assert (tmp_path / "a.pftrace").read_bytes() == (tmp_path / "b.pftrace").read_bytes()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stopped_merge_leaves_no_workers_and_no_temporary_files(tmp_path: Path, sig: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    work = tmp_path / "in"
    subprocess.run(
        [sys.executable, str(root / "bench" / "make_workload.py"), str(work), "--ranks", "4", "--mb", "24"],
        check=True,
        capture_output=True,
    )
    out = tmp_path / "out" / "merged.pftrace"
    out.parent.mkdir()
    out.write_bytes(b"the previous trace")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracemerge", str(work), "-o", str(out), "-j", "2", "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not list(out.parent.glob(".tracemerge-*/*.chunk")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # the workers under way (the merge takes seconds more: the signal comes mid-merge)
    assert proc.poll() is None
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert err.strip() in ("tracemerge: interrupted", f"tracemerge: stopped by {sig}")
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert alive == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["merged.pftrace"]
    assert out.read_bytes() == b"the previous trace"  # kept whole until a new one is complete


def test_a_gzip_bomb_is_refused_not_read(tmp_path: Path, monkeypatch) -> None:
    import gzip

    from tracemerge.sources import base

    monkeypatch.setattr(base, "MAX_WHOLE_FILE", 1 << 20)
    line = b'{"name": "step", "start_ns": 1790000000000000000, "end_ns": 1790000000000001000, "rank": 0}\n'
    result = _merge_dir(tmp_path, {"rank0.json": _kineto_bytes(), "spans.jsonl.gz": gzip.compress(line * 20_000)})
    assert result.exit_code == 3
    assert "spans.jsonl.gz: decompresses to more than 1 MiB: not read whole" in result.output


def test_a_file_that_changes_between_the_two_reads_is_left_out_not_fatal(tmp_path: Path, monkeypatch) -> None:
    """A file read twice (Chrome JSON with a selection of processes) that gains a thread in
    between cannot be encoded with its plan: it is left out and named, the rest is written."""
    from tracemerge.run import executors
    from tracemerge.select import Selection

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    victim = run_dir / "rank0.pt.trace.json"
    real = executors.process_file

    def grows(job):
        if job.unit is not None and job.candidate.path == victim:  # the second read
            top = json.loads(victim.read_text())
            top["traceEvents"].append({"ph": "X", "name": "new", "pid": 4242, "tid": 99999, "ts": 1.0, "dur": 1.0})
            victim.write_text(json.dumps(top))
        return real(job)

    monkeypatch.setattr(executors, "process_file", grows)
    report = merge([run_dir], tmp_path / "out.json", jobs=1, selection=Selection(ranks=frozenset({0, 1})))
    assert report.exit_code == 3
    assert [s.split(":")[0] for s in report.skipped] == [str(victim)]
    assert "changed while being merged, left out" in report.skipped[0]
    out = json.loads((tmp_path / "out.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in out["traceEvents"] if e.get("name") == "process_name"}
    inputs = {e["pid"] for e in out["traceEvents"] if e["ph"] == "X" and not e.get("cat", "").startswith("tracemerge")}
    assert {names[pid] for pid in inputs} == {"rank 1"}  # rank 1's events only (the steps are derived)


def test_an_unwritable_output_is_found_before_any_input_is_read(tmp_path: Path, monkeypatch) -> None:
    from tracemerge.core.errors import FatalError
    from tracemerge.run import executors

    def never(job):
        raise AssertionError(f"read {job.candidate.path} before checking the output")

    monkeypatch.setattr(executors, "process_file", never)
    with pytest.raises(FatalError, match=r"cannot write the output: its folder .* does not exist"):
        merge([FIXTURES / "kineto_gpu"], tmp_path / "missing" / "out.pftrace")


def test_json_output_says_when_its_times_lose_precision(tmp_path: Path) -> None:
    day = 86_400 * 10**9
    lines = [
        {"name": "early", "start_ns": 1_700_000_000 * 10**9, "end_ns": 1_700_000_000 * 10**9 + 1000, "rank": 0},
        {
            "name": "late",
            "start_ns": 1_700_000_000 * 10**9 + 200 * day,
            "end_ns": 1_700_000_000 * 10**9 + 200 * day + 7,
            "rank": 0,
        },
    ]
    log = tmp_path / "run" / "spans.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    as_json = merge([log.parent], tmp_path / "out.json")
    assert [n for n in as_json.notes if "200 days" in n and "less than ns precision" in n]
    assert as_json.exit_code == 0
    assert not merge([log.parent], tmp_path / "out.pftrace").notes
