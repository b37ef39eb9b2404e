"""The command line's side of ``--run``: the runs a summary found, and ``summary DIR --run all``."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tracemerge.cli import engine
from tracemerge.core.exit_status import EXIT_OK

if TYPE_CHECKING:
    from tracemerge.report.run_report import RunReport


def _err(message: str) -> None:
    typer.echo(message, err=True)


def said_runs(found: "RunReport", numbers: dict) -> None:
    """When the folder holds several runs: their table and the note naming them (stderr), and
    the runs in the summary's JSON."""
    if len(found.runs) < 2:
        return
    numbers["runs"] = found.runs
    _err(engine.format_runs(found.runs))
    for note in found.notes:
        _err(f"note: {note}")


def each_run(path: Path, phase_rules: Any, clocks: Any, as_json: bool) -> int:
    """``summary DIR --run all``: the summary of each run in the folder, each on its own."""
    found = engine.RunReport()
    each = engine.summarize_each([path], phase_rules=phase_rules, clocks=clocks, report=found)
    started = {r["number"]: r["start_utc"] for r in found.runs}
    if as_json:
        shown_runs = [{"run": n, "summary": numbers} for n, numbers in each]
        typer.echo(engine.json_bytes({"runs": found.runs, "summaries": shown_runs}).decode())
        return EXIT_OK
    texts = []
    for n, numbers in each:
        head = f"run {n} of {len(each)}, started {started[n]}\n" if n is not None else ""
        texts.append(head + engine.format_summary(numbers))
    if len(each) > 1:
        _err(engine.format_runs(found.runs))
    typer.echo("\n\n".join(texts))
    return EXIT_OK
