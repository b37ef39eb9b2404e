"""`open` and `scrape` are network services and answer as such: `open` serves only requests
naming it, until stopped, never with a traceback; `scrape` bounds every target and follows no
redirect elsewhere. Every server here is started by the test, on 127.0.0.1, and stopped by it."""

from __future__ import annotations

import itertools
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.scrape import scrape
from tracemerge.viewer.serve import serve

PAGE = b"# TYPE depth gauge\ndepth 1\n"
TRICKLE_SECONDS = 8  # a slow target sends a byte every 0.3 s for this long, then ends


class _Target(BaseHTTPRequestHandler):
    other_port = 0  # where /to-other redirects
    closing = threading.Event()

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        moves = {
            "/to-ftp": f"ftp://127.0.0.1:{port}/metrics",
            "/to-other": f"http://127.0.0.1:{self.other_port}/metrics",
            "/to-same": "/metrics",
        }
        if self.path in moves:
            self.send_response(302)
            self.send_header("Location", moves[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        if self.path == "/slow":
            end = time.monotonic() + TRICKLE_SECONDS
            while time.monotonic() < end and not self.closing.wait(0.3):
                self.wfile.write(b"#")
                self.wfile.flush()
            return
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None: ...


def _start(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def targets() -> Iterator[tuple[str, str]]:
    """Two metrics servers: the base URL of the one under test and of another one."""
    other = _start(_Target)
    _Target.other_port = other.server_address[1]
    _Target.closing.clear()
    main = _start(_Target)
    try:
        yield f"http://127.0.0.1:{main.server_address[1]}", f"http://127.0.0.1:{other.server_address[1]}"
    finally:
        _Target.closing.set()
        for server in (main, other):
            server.shutdown()
            server.server_close()


def _scrape_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracemerge", "scrape", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("route", ["/to-ftp", "/to-other"])
def test_scrape_follows_no_redirect_to_another_scheme_or_host(
    targets: tuple[str, str], tmp_path: Path, route: str
) -> None:
    base, _ = targets
    done = _scrape_cli(base + route, "--every", "0.1s", "--count", "2", "-o", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    assert "HTTP 302: redirected to another scheme or host, not followed (retried at every tick)" in done.stderr
    assert not (tmp_path / "out").exists()


def test_scrape_follows_a_redirect_on_the_same_server(targets: tuple[str, str], tmp_path: Path) -> None:
    base, _ = targets
    result = scrape([base + "/to-same"], tmp_path, 0.1, count=2)
    assert result.written[base + "/to-same"] == 2
    [folder] = tmp_path.iterdir()
    assert all(p.read_bytes().endswith(PAGE) for p in folder.iterdir())


def test_a_slow_target_delays_neither_the_others_nor_the_end(targets: tuple[str, str], tmp_path: Path) -> None:
    base, other = targets
    started = time.monotonic()
    result = scrape([base + "/slow", other + "/metrics"], tmp_path, 0.2, count=3, timeout=1.0)
    took = time.monotonic() - started
    assert result.written[other + "/metrics"] == 3
    assert result.failed[base + "/slow"] == 3  # each cut off at its deadline
    assert took < 6  # 3 deadlines of 1 s, not the target's 8 s trickle each
    [folder] = tmp_path.iterdir()
    times = sorted(int(p.stem) for p in folder.iterdir())
    assert len(times) == 3 and max(b - a for a, b in itertools.pairwise(times)) < 0.5e9  # on its own ticks


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_scrape_stops_at_once_while_a_target_trickles(targets: tuple[str, str], tmp_path: Path, sig: int) -> None:
    base, other = targets
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tracemerge",
            "scrape",
            f"{base}/slow",
            f"{other}/metrics",
            "--every",
            "0.2s",
            "-o",
            str(out),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not list(out.rglob("*.prom")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(sig)
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=TRICKLE_SECONDS)
        assert time.monotonic() - stopped < 3
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    written = list(out.rglob("*"))
    assert not [p for p in written if p.is_file() and p.suffix != ".prom"]  # no temporary left


_SIGNAL_AT_EACH_LINE = """
import signal, sys
from pathlib import Path
from tracemerge.scrape import scrape, stop_on_signals

url, out, runs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
lines = fire_at = 0

def signal_at_a_line(frame, event, arg):
    global lines
    if event == "line":
        lines += 1
        if lines == fire_at:
            signal.raise_signal(signal.SIGINT)  # its handler runs here, before the line
    return signal_at_a_line

for fire_at in range(1, runs + 1):
    lines = 0
    with stop_on_signals(signal.SIGINT) as stop:
        sys.settrace(signal_at_a_line)
        scrape([url], out, 0.01, stop=stop)
        sys.settrace(None)
    print(fire_at, flush=True)
"""


def test_scrape_stops_whichever_line_the_signal_arrives_at(targets: tuple[str, str], tmp_path: Path) -> None:
    """The stop's handler runs on the main thread between two of its lines, whichever they are:
    the 300 runs each get the signal at the next line of the main thread (the scrape's loop,
    starting fetches, waiting for a tick: about two ticks' worth). A handler setting a
    threading.Event would hang for good at the lines where the loop's wait holds the event's lock."""
    _, other = targets
    runs = 300
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_AT_EACH_LINE, f"{other}/metrics", str(tmp_path), str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(n) for n in range(1, runs + 1)]


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        (["http://127.0.0.1:9/metrics", "http://127.0.0.1:9/other"], "would be written to one folder (127.0.0.1_9)"),
        (["http://127.0.0.1:9/metrics"] * 2, "is given twice"),
        (["http://127.0.0.1:9/a\nwrote fake"], "not an http(s) URL"),
        (["http://127.0.0.1:99999/metrics"], "not an http(s) URL"),
    ],
)
def test_scrape_refuses_targets_that_would_clash_or_are_not_urls(tmp_path: Path, urls: list[str], message: str):
    result = CliRunner().invoke(cli.app, ["scrape", *urls, "-o", str(tmp_path), "--count", "1"])
    assert result.exit_code == 2
    assert message in result.output


def test_scrape_writes_nothing_through_a_linked_folder(targets: tuple[str, str], tmp_path: Path) -> None:
    base, _ = targets
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / base.split("//")[1].replace(":", "_")).symlink_to(elsewhere)
    errors: list[str] = []
    result = scrape([base + "/metrics"], out, 0.1, count=1, on_error=errors.append)
    assert result.written == {} and list(elsewhere.iterdir()) == []
    assert "is a symbolic link; not writing scrapes through it" in errors[0]


# -- tracemerge open ---------------------------------------------------------------------------


def _trace(tmp_path: Path, size: int = 1000) -> Path:
    trace = tmp_path / "m.pftrace"
    trace.write_bytes(b"\x0a" * size)
    return trace


def _raw(port: int, request: bytes) -> int:
    """The status a raw request gets."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return int(sock.makefile("rb").readline().split()[1])


@pytest.mark.parametrize(
    "host", ["evil.example:{port}", "evil.example", "localhost", "localhost:1", "127.0.0.1:1", "[::1]", None]
)
@pytest.mark.parametrize("offline", [False, True])
def test_open_answers_only_requests_naming_it(tmp_path: Path, host: str | None, offline: bool) -> None:
    """A page whose name was rebound to 127.0.0.1 sends its own name as Host: refused."""
    trace = _trace(tmp_path)
    ui = tmp_path / "ui"
    ui.mkdir()
    (ui / "index.html").write_text("<html>ui</html>")
    server = serve(trace, ui_dir=ui if offline else None, port=0)
    port = server.server.server_address[1]
    try:
        for path in ("/trace/m.pftrace", "/"):
            header = b"" if host is None else f"Host: {host.format(port=port)}\r\n".encode()
            assert _raw(port, f"GET {path} HTTP/1.1\r\n".encode() + header + b"Connection: close\r\n\r\n") == 403
        # The loopback by any of its names, with this port: what a browser at the end of an SSH tunnel sends.
        for ours in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", f"[::1]:{port}"):
            request = f"GET /trace/m.pftrace HTTP/1.1\r\nHost: {ours}\r\nConnection: close\r\n\r\n"
            assert _raw(port, request.encode()) == 200, ours
    finally:
        server.close()


def _abort_mid_answer(port: int) -> None:
    """Asks for the trace, reads a little, and resets the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET /trace/m.pftrace HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    sock.recv(100)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("offline", [False, True])
def test_open_serves_until_stopped_and_never_prints_a_traceback(tmp_path: Path, offline: bool) -> None:
    trace = _trace(tmp_path, 32 << 20)  # large enough to be mid-answer when the client goes
    args = ["open", str(trace), "--port", "0", "--no-browser", *(["--offline"] * offline)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracemerge", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not url:
            pytest.skip("no offline Perfetto UI build installed")
        port = int(url.split("127.0.0.1:")[1].split("/")[0])
        for _ in range(3):
            _abort_mid_answer(port)
        host = f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        assert _raw(port, b"GET /%00 HTTP/1.1\r\n" + host) == 404
        assert _raw(port, b"GET /trace/%00 HTTP/1.1\r\n" + host) == 404
        assert _raw(port, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n" + host) == 404
        assert _raw(port, b"GET //[ HTTP/1.1\r\n" + host) in (200, 404)
        assert _raw(port, b"GET /\x1c\x00 HTTP/1.1\r\n" + host) == 400  # a request line str.split() breaks
        for _ in range(2):  # fetched again and again (a reloaded tab), and still there
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/trace/m.pftrace", timeout=30) as response:
                assert len(response.read()) == 32 << 20
        time.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
    what = "the Perfetto UI and the trace" if offline else "the trace"
    assert err.splitlines() == [f"serving {what}; press Ctrl+C to stop"]  # and nothing per request


def test_open_closes_an_idle_connection(tmp_path: Path, monkeypatch) -> None:
    from tracemerge.viewer import serve as serve_module

    assert serve_module._Handler.timeout == serve_module.IDLE_SECONDS == 60  # not None: no wait without end
    monkeypatch.setattr(serve_module._Handler, "timeout", 0.5)
    server = serve(_trace(tmp_path), port=0)
    try:
        with socket.create_connection(("127.0.0.1", server.server.server_address[1]), timeout=10) as sock:
            sock.sendall(b"GET /tra")  # and nothing more
            assert sock.recv(100) == b""  # closed by the server, not left waiting
    finally:
        server.close()
