"""``tracemerge diff BASE NEW`` and the regression gate ``summary --baseline`` shares with it."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from tracemerge.cli import engine
from tracemerge.core.errors import TracemergeError, shown, terminal_text
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_REGRESSION

if TYPE_CHECKING:
    from tracemerge.phases.rules import PhaseOptions


def _say(message: str) -> None:
    typer.echo(shown(message), err=True)  # one line: a name in it cannot forge another


def load(path: Path, phase_rules: "PhaseOptions") -> dict:
    """The phase summary of a run directory (merged now), a trace tracemerge wrote or a summary JSON
    file; exits 1 (or the status of a damaged trace) with one line when there is none."""
    if not path.exists():
        _say(f"error: {shown(path)}: no such file or directory")
        raise typer.Exit(EXIT_FATAL)
    try:
        run = path.is_dir() or engine.is_archive(path)  # a run's folder, or the archive of one
        numbers = engine.summarize([path], phase_rules=phase_rules) if run else engine.read_numbers(path)
    except engine.Unreadable as exc:
        _say(f"error: {exc}")
        raise typer.Exit(exc.status) from None
    except (TracemergeError, OSError, ValueError) as exc:
        _say(f"error: {exc}")
        raise typer.Exit(EXIT_FATAL) from None
    if not numbers or not numbers.get("roles") or not numbers.get("steps"):
        _say(f"error: {shown(path)}: holds no phase summary with steps (merge the run with tracemerge)")
        raise typer.Exit(EXIT_FATAL)
    return numbers


def threshold_of(fail_over: str | None) -> float | None:
    try:
        return None if fail_over is None else engine.parse_threshold(fail_over)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def report(base: dict, new: dict, threshold: float | None, as_json: bool, extra: dict | None = None) -> int:
    """Prints the comparison (and the gate's lines); the exit status: EXIT_REGRESSION when the
    gate fails, else 0."""
    result = engine.compare(base, new)
    failed = engine.regressions(result, threshold) if threshold is not None else []
    if threshold is not None:
        result["gate"] = {"fail_over": threshold, "passed": not failed, "regressions": failed}
    if as_json:
        doc = {**(extra or {}), "diff": result} if extra is not None else result
        typer.echo(engine.json_bytes(doc).decode())
    else:
        typer.echo(terminal_text(engine.format_diff(result)))
        if threshold is not None:
            typer.echo(terminal_text(engine.format_gate(failed, threshold)))
    sys.stdout.flush()
    return EXIT_REGRESSION if failed else 0


def diff(
    base: Annotated[Path, typer.Argument(help="Run directory, merged trace or summary JSON file of the base.")],
    new: Annotated[Path, typer.Argument(help="The same, of the run compared with it.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as one JSON document.")] = False,
    fail_over: Annotated[
        Optional[str],
        typer.Option(
            "--fail-over", help="Exit 4 when a step wall or role · phase grows over this (e.g. 10%) and the noise."
        ),
    ] = None,
    phases: Annotated[
        Optional[str],
        typer.Option(
            "--phases",
            show_default=False,
            help="Phase rules for run directories: auto (the default), verl, areal, skyrl, or a TOML file.",
        ),
    ] = None,
) -> None:
    """Step wall and per role · phase times of NEW against BASE: base, new, delta, delta %, noise.

    Steps are matched by number; each quantity is a mean per step; noise is the spread (standard
    deviation) of the base across ranks and steps.
    """
    threshold = threshold_of(fail_over)
    try:
        rules = engine.PhaseOptions(engine.resolve(phases))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    status = report(load(base, rules), load(new, rules), threshold, as_json)
    raise typer.Exit(status)
