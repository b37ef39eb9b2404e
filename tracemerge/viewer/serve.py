"""``tracemerge open``: serve a trace on 127.0.0.1 for the Perfetto UI to load.

Like Perfetto's own ``open_trace_in_ui``: the trace is served from a local HTTP server and the UI
is pointed at it with a ``#!/?url=`` deep link. The UI is ui.perfetto.dev, or, offline, a locally
installed UI build served from the same server.

It is a network service on the loopback address, and answers as one: only requests naming it in
their ``Host`` header as a loopback address with its port (``127.0.0.1:<port>``, ``localhost:<port>``,
``[::1]:<port>``: what a browser sends through an SSH tunnel too) are served, so a web page whose own
name was made to point at 127.0.0.1 (DNS rebinding) gets a 403; a request it cannot serve (a NUL byte, a path too
long for the file system) is a 4xx; a client that goes away mid-answer ends its connection
quietly; an idle connection is closed after :data:`IDLE_SECONDS`. Nothing is printed per request.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import msgspec

PERFETTO_UI = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001
TRACE_ROUTE = "/trace/"
IDLE_SECONDS = 60
# The names of this machine's loopback a Host header may give (no other name: DNS rebinding).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class _Handler(SimpleHTTPRequestHandler):
    """Serves the trace under /trace/<name> and, offline, the UI build under /; nothing else.

    Only ui.perfetto.dev is allowed to read across origins (and only when it is the UI in use):
    any other page open in the browser gets no CORS header, so it cannot read the trace. Offline,
    the UI comes from this same origin and needs none. Files outside the UI build (symlinks
    included), hidden ones and directory listings are never served.
    """

    trace: Path
    ui_dir: Path | None
    served: threading.Event
    server: ThreadingHTTPServer  # the one serving it (_Server): an IP address and port
    timeout = IDLE_SECONDS

    def __init__(self, *args, trace: Path, ui_dir: Path | None, served: threading.Event, **kwargs) -> None:
        self.trace = trace
        self.ui_dir = ui_dir.resolve() if ui_dir else None
        self.served = served
        super().__init__(*args, directory=str(self.ui_dir or trace.parent), **kwargs)

    def _host_is_ours(self) -> bool:
        """Whether the request names this server in its Host header (else it is answered 403)."""
        host = (self.headers.get("Host") or "").lower()
        if host in {f"{name}:{self.server.server_address[1]}" for name in LOOPBACK_NAMES}:
            return True
        self.send_error(403, "Unknown Host")
        return False

    def do_HEAD(self) -> None:
        if self._host_is_ours():
            super().do_HEAD()

    def end_headers(self) -> None:
        # An error answered before the headers were read (a malformed request line) has none.
        headers = getattr(self, "headers", None)
        if self.ui_dir is None and headers is not None and headers.get("Origin") == PERFETTO_UI:
            self.send_header("Access-Control-Allow-Origin", PERFETTO_UI)
            self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def do_OPTIONS(self) -> None:  # CORS preflight from ui.perfetto.dev
        if not self._host_is_ours():
            return
        if self.ui_dir is not None or self.headers.get("Origin") != PERFETTO_UI or not self._is_trace(self.path):
            self.send_error(404)
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.end_headers()

    @staticmethod
    def _route(path: str) -> str:
        """The request's path, unquoted ("" when it is not a path: ``//[``)."""
        try:
            return urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        except ValueError:
            return ""

    def _is_trace(self, path: str) -> bool:
        route = self._route(path)
        return route.startswith(TRACE_ROUTE) and route[len(TRACE_ROUTE) :] == self.trace.name

    def translate_path(self, path: str) -> str:
        if self._is_trace(path):
            return str(self.trace)
        if self.ui_dir is None:
            return ""
        route = self._route(path).lstrip("/") or "index.html"
        parts = Path(route).parts
        if any(part.startswith(".") for part in parts) or "\0" in route:
            return ""
        try:
            target = (self.ui_dir / route).resolve()
            return str(target) if target.is_relative_to(self.ui_dir) and target.is_file() else ""
        except (OSError, ValueError):  # a name too long for the file system: nothing to serve
            return ""

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404)
        return None

    def do_GET(self) -> None:
        if not self._host_is_ours():
            return
        super().do_GET()
        if self._is_trace(self.path):
            self.served.set()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command prints what matters."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away mid-answer (or any request that failed): its connection is
        closed, quietly; the server goes on."""


class TraceServer(msgspec.Struct):
    """A running server; ``url`` opens the trace in the UI."""

    server: ThreadingHTTPServer
    trace_url: str
    url: str
    served: threading.Event

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(trace: Path, *, ui_dir: Path | None = None, port: int = DEFAULT_PORT) -> TraceServer:
    """Start serving ``trace`` (and the UI build in ``ui_dir``, if given) on 127.0.0.1 in a thread."""
    trace = trace.resolve()
    served = threading.Event()
    handler = partial(_Handler, trace=trace, ui_dir=ui_dir, served=served)
    server = _Server(("127.0.0.1", port), handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    trace_url = f"{base}{TRACE_ROUTE}{urllib.parse.quote(trace.name)}"
    ui = base if ui_dir else PERFETTO_UI
    url = f"{ui}/#!/?url={trace_url}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return TraceServer(server, trace_url, url, served)
