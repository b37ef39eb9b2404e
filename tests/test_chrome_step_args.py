"""A Chrome-event JSON file whose spans name their step in their args (AReaL's perf tracer saves
``global_step`` on every span in its Chrome trace as in its JSON lines): the steps are counted
by it, as for the JSON lines, not by time windows."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tracemerge.cli import main as cli

AREAL = Path(__file__).parent.parent / "fixtures" / "clock" / "areal" / "perf_tracer"
runner = CliRunner()


def _as_chrome_json(source: Path, out: Path, shift: int) -> None:
    """``source``'s JSON lines as one Chrome trace, each span's ``global_step`` + ``shift``."""
    events = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    for e in events:
        if "global_step" in e.get("args", {}):
            e["args"]["global_step"] += shift
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"traceEvents": events}, indent=1))


def _steps(path: Path) -> list[tuple[int, int, int]]:
    """Each step's number, start (from the first step's: the files are placed on the wall clock
    by their own times, which a copy does not keep) and wall."""
    result = runner.invoke(cli.app, ["summary", str(path), "--json"])
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)["steps"]
    return [(s["step"], s["start_ns"] - steps[0]["start_ns"], s["wall_ns"]) for s in steps]


def test_spans_global_step_in_a_chrome_trace_numbers_the_steps(tmp_path: Path) -> None:
    for source in sorted(AREAL.rglob("*.jsonl")):
        _as_chrome_json(source, tmp_path / source.relative_to(AREAL).with_suffix(".json"), shift=100)
    from_lines = _steps(AREAL)
    from_chrome = _steps(tmp_path)
    assert [n for n, _, _ in from_lines] == list(range(8))
    # the framework's numbers (100 on), the same windows as the JSON lines give
    assert from_chrome == [(n + 100, start, wall) for n, start, wall in from_lines]
