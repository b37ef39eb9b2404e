"""The command line's side of ``--run`` for ``summary DIR``: the runs in the folder, each derived on its own."""

from pathlib import Path
from typing import Any

import typer

from tracemerge.cli import engine
from tracemerge.core.errors import shown, terminal_text
from tracemerge.core.exit_status import EXIT_OK


def _err(message: str) -> None:
    typer.echo(terminal_text(message), err=True)  # the tool's lines kept, any escape from data shown


def summary_of_runs(path: Path, phase_rules: Any, clocks: Any, choice: str) -> dict:
    """``summary DIR``: each run in the folder derived on its own (the files are read once); when
    there are several, their table with each run's steps and median step wall, and a note, on
    stderr; the summary of the run ``choice`` names (the latest by default), with the runs in its
    JSON. ``ValueError`` when ``choice`` names no run."""
    found = engine.RunReport()
    each = dict(engine.summarize_each([path], phase_rules=phase_rules, clocks=clocks, report=found))
    number = engine.chosen_number(found.runs, choice)
    numbers = each[number] if number in each else next(iter(each.values()))
    if len(found.runs) < 2:
        return numbers
    for r in found.runs:
        r["merged"] = r["number"] == number
    numbers["runs"] = found.runs
    numbers["run"] = engine.held(found.runs)  # as a merge of this run records it
    walls = {n: [s["wall_ns"] for s in figures.get("steps", ())] for n, figures in each.items() if n is not None}
    _err(engine.format_runs(found.runs, walls, kept="summarized"))
    _err(f"note: summarized run {number} of {len(found.runs)}; --run N, --run START or --run all for the others")
    _said_notes(found)
    return numbers


def _said_notes(found: Any) -> None:
    """The notes on the runs beyond their list (files several runs' records place alike)."""
    for note in found.notes:
        if not note.startswith("the inputs hold"):
            _err(f"note: {shown(note)}")  # a note is one line, whatever names it holds


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
        walls = {n: [s["wall_ns"] for s in numbers.get("steps", ())] for n, numbers in each if n is not None}
        _err(engine.format_runs(found.runs, walls, kept="summarized"))
        _said_notes(found)
    typer.echo(terminal_text("\n\n".join(texts)))
    return EXIT_OK
