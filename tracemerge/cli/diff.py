"""``tracemerge diff BASE NEW`` and the regression gate ``summary --baseline`` shares with it."""

import sys
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Optional

import typer

from tracemerge.cli import engine
from tracemerge.core.errors import TracemergeError, shown, terminal_text
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_REGRESSION


def _say(message: str) -> None:
    typer.echo(f"tracemerge: {shown(message)}", err=True)  # one line: no name in it forges another


class Gating(NamedTuple):
    """What is compared and how it is gated: --steps, --roles, --keep-warmup, --fail-over, --min-delta."""

    steps: Any = None  # the step numbers kept (None: all)
    roles: frozenset[str] | None = None
    keep_warmup: bool = False
    threshold: float | None = None  # --fail-over, a fraction
    min_delta: int = 0  # ns


def gating(
    steps: str | None, roles: str | None, keep_warmup: bool, fail_over: str | None, min_delta: str | None
) -> Gating:
    """The options parsed; typer.BadParameter (exit 2) for one that is not."""
    try:
        least = engine.parse_duration(min_delta) if min_delta is not None else 0
        if least < 0:
            raise ValueError(f"--min-delta: {min_delta!r} is negative")
        return Gating(
            engine.parse_ranks(steps, "--steps") if steps is not None else None,
            engine.parse_roles(roles) if roles is not None else None,
            keep_warmup,
            engine.parse_threshold(fail_over) if fail_over is not None else None,
            least,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def load(path: Path, phase_rules: object, clocks: object = None, compared: bool = True, run: str = "latest") -> dict:
    """The checked summary of a run directory or trace files (summarized now: of the run ``run``
    names among them), a trace tracemerge wrote or a summary JSON file; exits with one line (1, or
    3 for a damaged trace) when there is none (or, to be ``compared``, when an older tracemerge
    wrote it)."""
    try:
        numbers = engine.numbers_of(path, phase_rules, clocks, run)
        return engine.comparable(numbers, engine.shown(path)) if compared else numbers
    except engine.NoSummary as exc:
        _say(f"error: {exc}")
        raise typer.Exit(exc.status) from None
    except engine.Unreadable as exc:
        _say(f"error: {exc}")
        raise typer.Exit(exc.status) from None
    except (TracemergeError, OSError, ValueError) as exc:
        _say(f"error: {exc}")
        raise typer.Exit(EXIT_FATAL) from None


def compared(numbers: dict, path: Path) -> dict:
    """``numbers`` when they can be compared; exits 1 with one line when an older tracemerge wrote them."""
    try:
        return engine.comparable(numbers, engine.shown(path))
    except engine.NoSummary as exc:
        _say(f"error: {exc}")
        raise typer.Exit(exc.status) from None


def report(base: dict, new: dict, how: Gating, as_json: bool, extra: dict | None = None) -> int:
    """Prints the comparison (and the gate's lines); the exit status: EXIT_REGRESSION when the
    gate fails, else 0."""
    result = engine.compare(base, new, steps=how.steps, roles=how.roles, keep_warmup=how.keep_warmup)
    verdict = None
    if how.threshold is not None:
        verdict = result["gate"] = engine.gate(result, how.threshold, how.min_delta)
    if as_json:
        doc = {**(extra or {}), "diff": result} if extra is not None else result
        typer.echo(engine.json_bytes(doc).decode())
    else:
        typer.echo(terminal_text(engine.format_diff(result)))
        if verdict is not None:
            typer.echo(terminal_text(engine.format_gate(verdict)))
    sys.stdout.flush()
    return EXIT_REGRESSION if verdict is not None and not verdict["passed"] else 0


StepsOption = Annotated[Optional[str], typer.Option("--steps", help="Compare only these steps, e.g. 3-5.")]
RolesOption = Annotated[Optional[str], typer.Option("--roles", help="Compare only these roles, e.g. actor,rollout.")]
MinDeltaOption = Annotated[
    Optional[str], typer.Option("--min-delta", help="With --fail-over: ignore growth shorter than this, e.g. 1ms.")
]
KeepWarmupOption = Annotated[
    bool, typer.Option("--keep-warmup", help="Count the warm-up steps in the medians and the gate (left out).")
]


def diff(
    base: Annotated[Path, typer.Argument(help="Run directory, trace file, merged trace or summary JSON of the base.")],
    new: Annotated[Path, typer.Argument(help="The same, of the run compared with it.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as one JSON document.")] = False,
    fail_over: Annotated[
        Optional[str],
        typer.Option(
            "--fail-over",
            help="Exit 4 when the step wall, a role · phase, or a role's device compute or communication grows"
            " over this (e.g. 10%) and the noise.",
        ),
    ] = None,
    min_delta: MinDeltaOption = None,
    steps: StepsOption = None,
    roles: RolesOption = None,
    keep_warmup: KeepWarmupOption = False,
    phases: Annotated[
        Optional[str],
        typer.Option(
            "--phases",
            show_default=False,
            help="Phase rules for run directories: auto (the default), verl, areal, skyrl, or a TOML file.",
        ),
    ] = None,
    run: Annotated[
        str,
        typer.Option(
            "--run",
            help="Of inputs holding several runs (far apart in time), the one compared: latest, a run's number"
            " or its UTC start, for both sides; or BASE:NEW, one for each (e.g. 1:2).",
        ),
    ] = "latest",
) -> None:
    """Step wall, per role · phase and device times of NEW against BASE: base, new, delta, noise.

    When both runs have the same steps, step k is compared with step k; otherwise the median of
    each run's counted steps (warm-up and partial steps left out). Noise: the spread of the
    per-step change (paired), or of the base's steps.
    """
    how = gating(steps, roles, keep_warmup, fail_over, min_delta)
    if min_delta is not None and fail_over is None:
        raise typer.BadParameter("--min-delta sets the gate of --fail-over: name one")
    try:
        rules = engine.PhaseOptions(engine.resolve(phases))
        base_run, new_run = engine.check_pair(run)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    sides = [
        (side, load(path, rules, run=choice))
        for side, path, choice in (("base", base, base_run), ("new", new, new_run))
    ]
    for side, numbers in sides:
        if held := numbers.get("run"):  # the inputs held several runs: which one is compared
            which = "all" if held["number"] is None else f"run {held['number']}, started {held['start_utc']},"
            _say(f"note: {side} is {which} of the {held['runs']} runs its inputs hold (--run chooses)")
    raise typer.Exit(report(sides[0][1], sides[1][1], how, as_json))
