"""``tracemerge open``: serve a trace on 127.0.0.1 for the Perfetto UI to load.

Like Perfetto's own ``open_trace_in_ui``: the trace is served from a local HTTP server and the UI
is pointed at it with a ``#!/?url=`` deep link. The UI is ui.perfetto.dev, or, offline, a locally
installed UI build served from the same server.
"""

from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PERFETTO_UI = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001
TRACE_ROUTE = "/trace/"


class _Handler(SimpleHTTPRequestHandler):
    """Serves the trace under /trace/<name> and, offline, the UI build under /."""

    trace: Path
    served: threading.Event

    def __init__(self, *args, trace: Path, ui_dir: Path | None, served: threading.Event, **kwargs) -> None:
        self.trace = trace
        self.served = served
        super().__init__(*args, directory=str(ui_dir) if ui_dir else str(trace.parent), **kwargs)

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def do_OPTIONS(self) -> None:  # CORS preflight from ui.perfetto.dev
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.end_headers()

    def translate_path(self, path: str) -> str:
        route = urllib.parse.urlsplit(path).path
        if route.startswith(TRACE_ROUTE):
            return str(self.trace) if urllib.parse.unquote(route[len(TRACE_ROUTE) :]) == self.trace.name else ""
        return super().translate_path(path)

    def do_GET(self) -> None:
        super().do_GET()
        if urllib.parse.urlsplit(self.path).path.startswith(TRACE_ROUTE):
            self.served.set()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command prints what matters."""


@dataclass
class TraceServer:
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
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    trace_url = f"{base}{TRACE_ROUTE}{urllib.parse.quote(trace.name)}"
    ui = base if ui_dir else PERFETTO_UI
    url = f"{ui}/#!/?url={trace_url}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return TraceServer(server, trace_url, url, served)
