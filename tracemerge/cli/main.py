"""Command line: ``tracemerge PATH... -o OUT`` (the ``merge`` command is the default)."""

import gc
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from tracemerge import __version__
from tracemerge.cli import diff as cli_diff
from tracemerge.cli import engine, options
from tracemerge.cli import tools as cli_tools
from tracemerge.cli.options import (
    ForceOption,
    FormatOption,
    InputsArgument,
    JobsOption,
    KeepWarmupOption,
    KeepZeroCountersOption,
    MetricsMapOption,
    MinDurOption,
    NoAlignOption,
    OffsetOption,
    OffsetsFileOption,
    OutputOption,
    PhasesOption,
    QuietOption,
    RanksOption,
    RayOption,
    ReportOption,
    RolesOption,
    RunOption,
    SplitByOption,
    StepsOption,
    StrictOption,
    SummaryOption,
    SyncOption,
    WhereOption,
    WindowOption,
)
from tracemerge.core.errors import Stopped, TracemergeError, shown, terminal_text
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_INCOMPLETE, EXIT_OK, leave_after

if TYPE_CHECKING:
    from collections.abc import Callable

    from tracemerge.report.run_report import RunReport

# The usage errors of the click typer runs on (typer 0.28 carries a copy of its own): a class
# found at run time, of either click.
_CLICK_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _DefaultToMerge(TyperGroup):
    """Lets ``tracemerge ./runs -o x`` mean ``tracemerge merge ./runs -o x``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["merge", *args]
        # A bare --ray (last, or before another option) starts a Ray instance here.
        args = [
            "--ray=local" if a == "--ray" and (n + 1 == len(args) or args[n + 1].startswith("-")) else a
            for n, a in enumerate(args)
        ]
        return super().parse_args(ctx, args)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        """Usage errors in one line, ``tracemerge: error: <what is wrong>`` (exit 2)."""
        # Ignored below: mypy holds that ``args`` may reach the base's fourth parameter,
        # standalone_mode; typer passes main no more than the first three.
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except _CLICK_ERROR as exc:
            if not exc.format_message():  # no arguments at all: the help, as click shows it
                exc.show()
                sys.exit(exc.exit_code)
            bare = isinstance(exc, typer.BadParameter) and exc.param is None and exc.param_hint is None
            _say(f"error: {shown(' '.join((exc.message if bare else exc.format_message()).split()))}")
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


app = typer.Typer(
    cls=_DefaultToMerge,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help text: rich's renderer costs more start-up than the rest of the command line.
    rich_markup_mode=None,
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
    typer.echo(terminal_text(message), err=True)


def _say(message: str) -> None:
    _err(f"tracemerge: {shown(message)}")  # one line: a name in it cannot forge another


@app.command(short_help="Merge traces into one clock-aligned trace (the default command).")
def merge(
    inputs: InputsArgument,
    output: OutputOption,
    format: FormatOption = None,
    report_text: ReportOption = None,
    jobs: JobsOption = 0,
    ray: RayOption = None,
    split_by: SplitByOption = None,
    roles: RolesOption = None,
    ranks: RanksOption = None,
    where: WhereOption = None,
    window: WindowOption = None,
    min_dur: MinDurOption = None,
    keep_zero_counters: KeepZeroCountersOption = False,
    sync: SyncOption = None,
    offset: OffsetOption = None,
    offsets_file: OffsetsFileOption = None,
    no_align: NoAlignOption = False,
    run: RunOption = "latest",
    phases: PhasesOption = None,
    keep_warmup: KeepWarmupOption = False,
    steps: StepsOption = None,
    summary: SummaryOption = False,
    metrics_map_file: MetricsMapOption = None,
    force: ForceOption = False,
    strict: StrictOption = False,
    quiet: QuietOption = False,
) -> None:
    """Merge traces into one clock-aligned trace with a process per role and rank."""
    try:
        jobs, notes = options.jobs_used(jobs, ray)
        output_path = options.output_file(output)
        report = options.output_file(report_text, "--report", "report.json") if report_text is not None else None
        selection = options.selection(roles, ranks, where, window, min_dur, keep_zero_counters)
        format = options.output_format(format)
        clocks = options.placement(sync, offset, offsets_file, no_align)
        run = engine.check_choice(run)
        phase_rules = options.phase_options(phases, steps, keep_warmup)
        split_by = options.split_kind(split_by)
        metrics_map = options.metrics_map(metrics_map_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with engine.progress_bar(enabled=not quiet) as on_progress:
        try:
            asked = engine.MergeOptions(
                format=format,
                jobs=jobs,
                executor=engine.ray_executor(ray) if ray is not None else None,
                split_by=split_by,
                selection=selection,
                clocks=clocks,
                phase_rules=phase_rules,
                metrics_map=metrics_map,
                run=run,
                force=force,
                strict=strict,
                also_writes=(report,) if report is not None else (),
                on_plan=_plan_shown(on_progress, quiet),
                on_progress=on_progress,
            )
            result = engine.merge_with(inputs, output_path, asked)
        except (TracemergeError, OSError) as exc:
            on_progress.pause()
            _say(f"error: {exc}")
            raise typer.Exit(EXIT_FATAL) from None
    raise typer.Exit(_said(result.with_notes(notes), report, summary, quiet))


def _plan_shown(on_progress: Any, quiet: bool) -> "Callable[[RunReport], None]":
    """What a merge shows of the plan on stderr (unless ``quiet``): the processes found, how each
    file was placed, and the runs among the inputs; the progress bar paused for it."""

    def show(r: "RunReport") -> None:
        if not quiet:
            on_progress.pause()
            _err(engine.format_found(r))
            _err(engine.format_alignment(r))
            if runs := engine.format_runs(r.runs):
                _err(runs)

    return show


def _said(result: "RunReport", report: Path | None, summary: bool, quiet: bool) -> int:
    """The run report written (--report) and printed (--summary, the outcome); the exit status."""
    report_failed = False
    if report is not None:
        try:
            engine.write_whole(report, engine.json_bytes(result.as_dict()))
        except OSError as exc:
            # The trace is written whole: the run is incomplete, not failed; no part of a report is left.
            _say(f"error: cannot write report {shown(report)}: {exc.strerror or exc}")
            report_failed = True
    outcome = engine.format_outcome(result)
    if summary:
        typer.echo(terminal_text(engine.format_summary(result.phases)))
    if not quiet:
        _err(outcome)
    elif result.exit_code:
        _err("\n".join(line for line in outcome.splitlines()[1:]))
    return result.exit_code or (EXIT_INCOMPLETE if report_failed else EXIT_OK)


_Stopped = Stopped
_stop = Stopped.on_signal


def run() -> NoReturn:
    """The command's entry point (``tracemerge``, ``python -m tracemerge``): :func:`main`, and the
    process ends with its status (:func:`~tracemerge.core.exit_status.leave_after`)."""
    leave_after(main)


def main() -> None:
    # numpy's BLAS would start a thread per core as numpy is imported, which spin for a while
    # (0.1 s of CPU at each start on 2 cores); nothing here multiplies matrices.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    finally:
        # The work is done and the process exits: the interpreter's exit would run the cyclic
        # collector over what is still alive several times as it tears the modules down (0.1 s
        # after merging a 23 MB rank); frozen, it is left to the exit alone.
        gc.freeze()


@app.command(short_help="Where each step's time went, and who held it up.")
def summary(
    path: Annotated[
        Path, typer.Argument(help="A run directory or trace file (summarized now), a merged trace or a summary JSON.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as one JSON document.")] = False,
    phases: PhasesOption = None,
    keep_warmup: KeepWarmupOption = False,
    sync: SyncOption = None,
    offset: OffsetOption = None,
    offsets_file: OffsetsFileOption = None,
    no_align: NoAlignOption = False,
    run: RunOption = "latest",
    baseline: Annotated[
        Optional[Path], typer.Option("--baseline", help="Compare with this run, trace or summary JSON (as diff).")
    ] = None,
    fail_over: Annotated[
        Optional[str], typer.Option("--fail-over", help="With --baseline: exit 4 on growth over this (e.g. 10%).")
    ] = None,
    min_delta: cli_diff.MinDeltaOption = None,
    steps: cli_diff.StepsOption = None,
    roles: cli_diff.RolesOption = None,
) -> None:
    """Per step: wall time, who held it up and who started last; per role and phase: total, share, idle.

    A run directory or a trace file other than tracemerge's is read and summarized without writing
    a trace, placed as a merge places it (--sync, --offset, --offsets, --no-align); a trace
    tracemerge wrote keeps the summary of its own merge. --steps and --roles keep only those.
    """
    how = cli_diff.gating(steps, roles, keep_warmup, fail_over, min_delta)
    if (fail_over is not None or min_delta is not None) and baseline is None:
        raise typer.BadParameter("--fail-over and --min-delta gate on a --baseline: name one")
    if not path.exists():
        _say(f"error: {shown(path)}: no such file or directory")
        raise typer.Exit(EXIT_FATAL)
    try:
        rules = engine.resolve(phases)
        clocks = options.placement(sync, offset, offsets_file, no_align)
        a_run = path.is_dir() or engine.is_archive(path)  # a run's folder, or the archive of one
        run = engine.check_choice(run)
        if not a_run and run != "latest":
            raise ValueError("--run chooses among the runs of a run directory, not of a trace file")
        if baseline is not None and run == "all":
            raise ValueError("--baseline compares one run: choose it with --run (latest by default)")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    placed = bool(clocks.offsets or sync or no_align)
    if placed and path.is_file() and _keeps_summary(path):
        raise typer.BadParameter("--sync, --offset, --offsets and --no-align place a run, not a merged trace")
    # a run summarized now derives the kept steps alone (a stored summary's rows are filtered)
    kept_steps = engine.PhaseOptions(rules, how.steps, keep_warmup)
    if a_run:
        numbers = _summary_of_run(path, kept_steps, clocks, run, as_json)
    else:
        numbers = cli_diff.load(path, kept_steps, clocks if placed else None, False)
    phase_rules = engine.PhaseOptions(rules, keep_warmup=keep_warmup)
    if not as_json and not engine.per_step(numbers):
        _say(f"error: {path}: an older tracemerge wrote its summary (--json prints it; merge the run again)")
        raise typer.Exit(EXIT_FATAL)
    if baseline is not None:  # the summary, then the comparison with the baseline (and its gate)
        base = cli_diff.load(baseline, phase_rules)
        numbers = cli_diff.compared(numbers, path)
        if not as_json:
            typer.echo(terminal_text(engine.format_summary(engine.kept(numbers, how.steps, how.roles))) + "\n")
        raise typer.Exit(cli_diff.report(base, numbers, how, as_json, extra={"summary": numbers}))
    kept = engine.kept(numbers, how.steps, how.roles)
    typer.echo(engine.json_bytes(kept).decode() if as_json else terminal_text(engine.format_summary(kept)))


def _summary_of_run(path: Path, phase_rules: Any, clocks: Any, run: str, as_json: bool) -> dict:
    """``summary DIR``: the summary of the run ``run`` chooses among those in the folder (with
    ``all``, each run's printed here and the command ends); one line and exit 1 when none is read."""
    from tracemerge.cli import runs as cli_runs  # summary's alone: not loaded at every start

    try:
        if run == "all":
            raise typer.Exit(cli_runs.each_run(path, phase_rules, clocks, as_json))
        return cli_runs.summary_of_runs(path, phase_rules, clocks, run)
    except (TracemergeError, OSError, ValueError) as exc:
        _say(f"error: {exc}")
        raise typer.Exit(EXIT_FATAL) from None


def _keeps_summary(path: Path) -> bool:
    """Whether ``path`` is a trace tracemerge wrote with its summary, or a summary JSON file."""
    try:
        return engine.read_numbers(path) is not None
    except (TracemergeError, OSError, ValueError):
        return False


# check, open and scrape: tracemerge.cli.tools, registered here after merge and summary.
app.command(short_help="Load a trace into trace_processor: import stats and counts.")(cli_tools.check)
app.command(name="open", short_help="Serve a trace to the Perfetto UI until Ctrl+C.")(cli_tools.open_)
app.command(short_help="Record Prometheus /metrics pages during a run.")(cli_tools.scrape)
app.command(short_help="Compare two runs; with --fail-over, a regression gate.")(cli_diff.diff)
