"""The command line: exit codes, one-line errors, whole-or-nothing output."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import kineto
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import main as cli

runner = CliRunner()


def run(*args: str):
    return runner.invoke(cli.app, list(args))


def test_default_command_merges_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "merged.pftrace"
    result = run(str(FIXTURES / "rl_run"), "-o", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["role", "rank", "files", "events", "phases", "clock"]
    # 8 perf-tracer events and the 2 phases of each of its 2 session records
    assert lines[2].split()[:4] == ["rollout", "0", "2", "12"]
    assert any(line.split()[:4] == ["actor", "1", "1", "505"] for line in lines)
    assert out.stat().st_size > 0
    assert "wrote" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["merged.pftrace"]  # no temporary files left


def test_explicit_merge_subcommand_and_format_option(tmp_path: Path) -> None:
    out = tmp_path / "merged.out"
    result = run("merge", str(FIXTURES / "kineto_gpu"), "-o", str(out), "--format", "json", "-q")
    assert result.exit_code == 0, result.output
    assert result.output == ""
    assert json.loads(out.read_text())["traceEvents"]


def test_report_json(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "m.pftrace"), "--report", str(report), "-q")
    assert result.exit_code == 0
    data = json.loads(report.read_text())
    assert data["exit_code"] == 0
    assert data["read"] == data["written"] == {"slices": 56, "instants": 8, "counters": 12, "flows": 12}
    assert data["slices_moved_to_overlap_lanes"] == 2
    assert [p["label"] for p in data["processes"]] == ["rank 0", "rank 1"]


def test_a_file_cut_while_written_is_salvaged_with_one_line_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    kineto(root / "actor" / "rank0.json", rank=0)
    broken = root / "actor" / "rank1.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "name": "kept", "ts": 1, "dur": 2},\n  {"ph": "X", "ts": ')
    result = run(str(root), "-o", str(tmp_path / "m.pftrace"), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 3
    lines = result.output.splitlines()
    lost = [n for n, line in enumerate(lines) if str(broken) in line]
    assert [lines[n] for n in lost] == [
        f"  dropped 1 input events: {broken}:2:21: invalid JSON (unexpected end of data); "
        "events after it are lost (the ones before are kept)"
    ]
    assert lines[lost[0] - 1] == "file_damaged 1 (data_loss): files cut or damaged: the events after the damage"
    assert "Traceback" not in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [p["read"]["slices"] for p in report["processes"] if p["rank"] == 1] == [1]  # the complete event


def test_a_file_broken_before_its_first_event_is_skipped_with_one_line(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    kineto(root / "actor" / "rank0.json", rank=0)
    broken = root / "actor" / "rank1.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "ts": ')
    result = run(str(root), "-o", str(tmp_path / "m.pftrace"))
    assert result.exit_code == 3
    skipped = [line for line in result.output.splitlines() if line.startswith("skipped")]
    assert skipped == [f"skipped {broken}:1:36: invalid JSON (unexpected end of data)"]  # where it ends
    assert (tmp_path / "m.pftrace").exists()


def test_dropped_events_are_reported_with_reasons(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    events = [
        {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1_790_000_000_000_000, "dur": 5},
        {"ph": "X", "name": "no dur", "pid": 1, "tid": 1, "ts": 1_790_000_000_000_000},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 1_790_000_000_000_009},
        {"ph": "b", "name": "async", "id": 1, "pid": 1, "tid": 1, "ts": 1_790_000_000_000_001},
        {"ph": "s", "name": "lonely", "cat": "c", "id": 4, "pid": 1, "tid": 1, "ts": 1_790_000_000_000_001},
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    result = run(str(path), "-o", str(tmp_path / "m.json"))
    assert result.exit_code == 3
    assert "dropped 1 input events: X event without dur" in result.output
    assert "dropped 1 input events: E event without matching B" in result.output
    assert "dropped 1 input events: unsupported phase 'b'" in result.output
    # As the input has it (Perfetto ignores a dangling flow too): counted, not a loss.
    assert "info: 1 flow start without an end (as in the input; Perfetto ignores these too)" in result.output
    assert "statistics: begin_end_unmatched 1 (data_loss), event_time_unreadable 1 (data_loss), " in result.output


def test_explicit_non_trace_file_is_skipped(tmp_path: Path) -> None:
    kineto(tmp_path / "rank0.json", rank=0)
    other = tmp_path / "config.yaml"
    other.write_text("lr: 0.1\n")
    result = run(str(tmp_path / "rank0.json"), str(other), "-o", str(tmp_path / "m.pftrace"))
    assert result.exit_code == 3
    assert f"skipped {other}: not a trace format tracemerge reads" in result.output


@pytest.mark.parametrize("existing", [True, False])
def test_fatal_error_writes_nothing(tmp_path: Path, existing: bool) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.json").write_text('{"traceEvents": [')
    out = tmp_path / "merged.pftrace"
    if existing:
        out.write_bytes(b"previous")
    result = run(str(tmp_path / "in"), "-o", str(out))
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("tracemerge: error: no usable trace files: ")
    assert str(tmp_path / "in" / "bad.json") in line
    assert (out.read_bytes() == b"previous") if existing else not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in", *(["merged.pftrace"] if existing else [])])


def test_missing_input_and_missing_output_directory(tmp_path: Path) -> None:
    result = run(str(tmp_path / "nope"), "-o", str(tmp_path / "m.pftrace"))
    assert result.exit_code == 1
    assert result.output.strip() == f"tracemerge: error: {tmp_path / 'nope'}: no such file or directory"
    kineto(tmp_path / "rank0.json", rank=0)
    result = run(str(tmp_path / "rank0.json"), "-o", str(tmp_path / "missing" / "m.pftrace"), "-q")
    assert result.exit_code == 1
    assert result.output.strip().startswith("tracemerge: error: ")
    assert "does not exist" in result.output


def test_empty_directory_is_fatal(tmp_path: Path) -> None:
    result = run(str(tmp_path), "-o", str(tmp_path / "m.pftrace"))
    assert result.exit_code == 1
    assert result.output.strip() == f"tracemerge: error: no trace files found in {tmp_path}"


def test_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    kineto(tmp_path / "rank0.json", rank=0)
    result = run(str(tmp_path), "-o", str(tmp_path / "m.x"), "--format", "xml")
    assert result.exit_code == 2
    assert "unknown output format 'xml'" in result.output


def test_internal_error_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    kineto(tmp_path / "rank0.json", rank=0)

    def boom(*_a, **_k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr("tracemerge.layout.emit.finish", boom)
    monkeypatch.delenv("TRACEMERGE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["tracemerge", str(tmp_path), "-o", str(tmp_path / "m.pftrace")])
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli.main()
    finally:
        gc.unfreeze()  # main() leaves the collector frozen for the exit; this process goes on
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "tracemerge: internal error: RuntimeError: kaboom (set TRACEMERGE_DEBUG=1 for a traceback)"
    assert not (tmp_path / "m.pftrace").exists()


def test_main_leaves_what_is_alive_to_the_exit(monkeypatch) -> None:
    """The cyclic collector is not run over the merge's leftovers as the interpreter exits."""
    monkeypatch.setattr(sys, "argv", ["tracemerge", "--version"])
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli.main()
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    assert exit_info.value.code == 0 and frozen > 0


def test_python_dash_m_and_version() -> None:
    done = subprocess.run([sys.executable, "-m", "tracemerge", "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.strip().startswith("tracemerge ")


@pytest.mark.parametrize(
    ("status", "code", "err"), [("None", 0, ""), ("3", 3, ""), ("'no such run'", 1, "no such run\n")]
)
def test_the_process_ends_with_the_command_status_after_its_exit_handlers(status, code, err) -> None:
    """``leave_after`` (the entry point's end): the command's status, what it printed and the
    exit handlers' output flushed, and nothing run after it."""
    script = (
        "import atexit, sys\n"
        "from tracemerge.core.exit_status import leave_after\n"
        "atexit.register(print, 'handler ran')\n"
        "def command():\n    print('written', end=' ')\n"
        f"    sys.exit({status})\n"
        "leave_after(command)\n"
        "print('after')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (code, "written handler ran\n", err)


def test_the_process_waits_for_a_thread_still_running() -> None:
    script = (
        "import threading, time\n"
        "from tracemerge.core.exit_status import leave_after\n"
        "def late():\n    time.sleep(0.2)\n    print('thread done', flush=True)\n"
        "leave_after(lambda: threading.Thread(target=late).start())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "thread done\n")


def _modules_after(*args: str) -> set[str]:
    """The modules a ``tracemerge ARGS`` run has loaded when it ends (in a fresh interpreter;
    ``main``, as ``run`` would leave no time to list them)."""
    script = (
        "import sys\n"
        f"sys.argv = ['tracemerge', *{list(args)!r}]\n"
        "from tracemerge.cli import main as cli\n"
        "try:\n    cli.main()\n"
        "except SystemExit as done:\n    assert done.code in (0, None), done.code\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_version_and_help_load_the_command_line_alone() -> None:
    """Start-up: ``--version`` and ``--help`` import typer and the command line's own few modules,
    not the engine, numpy, the JSON libraries or protobuf."""
    light = {"tracemerge", "tracemerge.cli", "tracemerge.cli.main", "tracemerge.cli.diff", "tracemerge.cli.tools"}
    light |= {"tracemerge.cli.options"}
    light |= {
        "tracemerge.cli.engine",
        "tracemerge.core",
        "tracemerge.core.errors",
        "tracemerge.core.exit_status",
        "tracemerge.core.lazy",
        "tracemerge.core.gc_pause",
    }
    for flag in ("--version", "--help"):
        loaded = _modules_after(flag)
        assert {m for m in loaded if m.split(".")[0] == "tracemerge"} == light, flag
        assert not loaded & {"numpy", "msgspec", "orjson", "google.protobuf", "sqlite3"}, flag


def test_a_merge_in_one_process_loads_no_pool_and_no_diff(tmp_path: Path) -> None:
    """What a one-file merge does not use is not imported: the process pool (multiprocessing),
    ``diff`` and its statistics, numpy's masked arrays (``np.unique`` imports them)."""
    out = tmp_path / "m.pftrace"
    loaded = _modules_after(str(FIXTURES / "kineto_gpu" / "rank0.pt.trace.json"), "-o", str(out), "-q")
    assert out.stat().st_size > 0
    assert "tracemerge.pipeline" in loaded and "numpy" in loaded
    assert not loaded & {"multiprocessing", "concurrent.futures.process", "tracemerge.compare.diff", "numpy.ma"}


def test_what_perfetto_ignores_too_is_counted_but_not_a_loss(tmp_path: Path) -> None:
    """GPU traces routinely hold flow ends whose start the profiler never wrote."""
    path = tmp_path / "rank0.json"
    events = [
        {"ph": "X", "name": "kernel", "pid": 1, "tid": 7, "ts": 1_790_000_000_000_000, "dur": 5},
        {"ph": "f", "name": "ac2g", "cat": "ac2g", "id": 9, "bp": "e", "pid": 1, "tid": 7, "ts": 1_790_000_000_000_001},
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    result = run(str(path), "-o", str(tmp_path / "m.pftrace"), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "info: 1 flow step/end without a start" in result.output
    stats = json.loads((tmp_path / "r.json").read_text())["stats"]
    assert stats == {
        "flow_end_without_start": {
            "severity": "info",
            "description": "flow steps/ends whose start is not in the input",
            "count": 1,
            "reasons": {"flow step/end without a start": 1},
            "more": 0,
        }
    }


def test_loading_the_engine_runs_no_collection_and_leaves_the_collector_on() -> None:
    """The engine's modules are imported with the cyclic collector off, then kept out of its
    passes: their objects hold no garbage cycles."""
    script = (
        "import gc\n"
        "from tracemerge.cli import engine\n"
        "runs = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and runs.append(info['generation']))\n"
        "engine.merge\n"
        "gc.callbacks.clear()\n"
        "print(len(runs), gc.isenabled(), gc.get_freeze_count() > 10000)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "True", "True"]


def test_a_library_s_lazy_names_freeze_nothing_of_the_caller() -> None:
    """Only the command line's table freezes what is alive (its process is its own): a library
    caller's objects stay within the collector's reach after ``from tracemerge.phases import derive``."""
    script = "import gc\nfrom tracemerge.phases import derive\nprint(gc.isenabled(), gc.get_freeze_count())\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "0"]


@pytest.mark.parametrize("trailing", ["/", ""])
def test_an_output_naming_a_folder_is_a_usage_error_and_nothing_is_written(tmp_path: Path, trailing: str) -> None:
    folder = tmp_path / "out"
    if not trailing:
        folder.mkdir()
    result = run(str(FIXTURES / "kineto_gpu"), "-o", f"{folder}{trailing}")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"tracemerge: error: -o: {folder}{trailing} names a folder; name the trace file, e.g. {folder}/merged.pftrace"
    )
    assert folder.exists() is not bool(trailing)  # no file named like the folder was written


def test_an_output_in_a_folder_that_does_not_exist_says_so(tmp_path: Path) -> None:
    out = tmp_path / "none" / "m.pftrace"
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(out), "-q")
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"tracemerge: error: {out}: cannot write the output: its folder {out.parent} does not exist (create it first)"
    )


def test_tracker_scalars_alone_say_why_nothing_is_merged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_bytes((FIXTURES / "metrics_run" / "trainer" / "metrics.jsonl").read_bytes())
    result = run(str(run_dir), "-o", str(tmp_path / "m.pftrace"), "-q")
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"tracemerge: error: no usable trace files: only tracker scalars ({run_dir / 'metrics.jsonl'}), "
        "which are drawn on the steps of a trace; merge them with the run's traces"
    )


def test_a_hidden_trace_in_a_folder_is_named_not_read_and_read_when_named(tmp_path: Path) -> None:
    kineto(tmp_path / "d" / ".rank0.pt.trace.json", rank=0)
    kineto(tmp_path / "d" / "rank1.pt.trace.json", rank=1, names=("c",))
    (tmp_path / "d" / ".rank1.pt.trace.json.swp").write_bytes(b"\x00swap")
    result = run(str(tmp_path / "d"), "-o", str(tmp_path / "m.pftrace"), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["notes"] == [
        f"{tmp_path / 'd' / '.rank0.pt.trace.json'}: a hidden file, not read (name it on the command line to merge it)"
    ]
    assert report["read"]["slices"] == 1
    named = run(str(tmp_path / "d" / ".rank0.pt.trace.json"), "-o", str(tmp_path / "h.pftrace"), "-q")
    assert named.exit_code == 0, named.output


def test_a_report_naming_a_folder_is_a_usage_error_and_nothing_is_written(tmp_path: Path) -> None:
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "m.pftrace"), "--report", f"{tmp_path}/r/")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"tracemerge: error: --report: {tmp_path}/r/ names a folder; name the file, e.g. {tmp_path}/r/report.json"
    )
    assert list(tmp_path.iterdir()) == []
