"""`scrape` writes only metrics pages, never credentials, never through a link. Every server here
is started by the test, on 127.0.0.1, and stopped by it."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge
from tracemerge.scrape import page_problem, public, scrape

PAGE = b"# TYPE depth gauge\ndepth 1\n"
BODIES = {
    "/metrics": PAGE,
    "/gzip": gzip.compress(PAGE),
    "/html": b"<!DOCTYPE html><html><body>login</body></html>",
    "/binary": b"depth 1\n\x00\x01\x02",
    "/latin1": b'# TYPE d gauge\nd{x="\xe9"} 1\n',
    "/garbage": b"this is not metrics text\n",
}


class _Target(BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []  # the Authorization header of each request

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = BODIES[self.path]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None: ...


@pytest.fixture
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Target.seen.clear()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_credentials_are_sent_and_written_nowhere(base: str, tmp_path: Path) -> None:
    out = tmp_path / "scrapes"
    messages: list[str] = []
    result = scrape([f"http://u%40x:s3cret@{base}/metrics"], out, 0.05, count=1, on_error=messages.append)
    assert sum(result.written.values()) == 1 and messages == []
    assert _Target.seen == ["Basic dUB4OnMzY3JldA=="]  # u@x:s3cret
    [written] = _files(out)
    assert written.parent.name == base.replace(":", "_")
    text = written.read_text()
    assert text.splitlines()[0].endswith(f" url=http://{base}/metrics")
    assert "s3cret" not in text and "s3cret" not in str(written)
    assert merge([out], tmp_path / "m.pftrace").written.counters == 1


def test_a_failing_target_with_credentials_is_named_without_them(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.app, ["scrape", "http://u:s3cret@127.0.0.1:1/m", "-o", str(tmp_path), "--count", "1"]
    )
    assert result.exit_code == 1
    assert "s3cret" not in result.output
    assert "tracemerge: http://127.0.0.1:1/m: cannot connect" in result.output


def test_public_drops_only_the_credentials() -> None:
    assert public("https://a:b@h:9/p/x@y?q=@") == "https://h:9/p/x@y?q=@"
    assert public("http://h/m") == "http://h/m"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/gzip", "a gzip-compressed page (not asked for), not written"),
        ("/html", "an HTML or XML page, not metrics text, not written"),
        ("/binary", "binary data (a NUL byte), not written"),
        ("/latin1", "not text (byte 20 is not UTF-8), not written"),
        ("/garbage", "not Prometheus metrics text (metric text unreadable (first at line 1: "),
    ],
)
def test_a_page_that_is_not_metrics_text_is_a_failed_scrape(base: str, tmp_path: Path, path: str, why: str) -> None:
    out = tmp_path / "scrapes"
    result = CliRunner().invoke(cli.app, ["scrape", f"http://{base}{path}", "-o", str(out), "--count", "1"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[1].startswith(f"tracemerge: http://{base}{path}: {why}")
    assert lines[2] == f"wrote 0 scrape(s) of 0 URL(s) to {out}; 1 failed"
    assert _files(tmp_path) == []


def test_page_problem_passes_metrics_text() -> None:
    assert page_problem(PAGE) is None
    assert page_problem(b"") is None  # an engine with no metrics yet
    assert page_problem(b"# TYPE a counter\na_total 1\n# EOF\n") is None


def test_an_output_folder_that_is_a_link_is_refused(base: str, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    result = CliRunner().invoke(
        cli.app, ["scrape", f"http://{base}/metrics", "-o", str(tmp_path / "link"), "--count", "1", "-q"]
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"tracemerge: error: {tmp_path / 'link'}: is a symbolic link; not writing scrapes through it"
    )
    assert _files(real) == [] and _Target.seen == []
