"""``summary TRACE --steps``: the roles' totals are those of the steps kept, as the run directory's
own summary of those steps gives them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tracemerge.cli import main as cli

FIXTURES = Path(__file__).parent.parent / "fixtures"
runner = CliRunner()


def _summary(*args: str) -> dict:
    result = runner.invoke(cli.app, ["summary", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _totals(numbers: dict) -> dict:
    """Per role and phase: total, mean, max; per role: step time, idle and time not profiled."""
    out = {}
    for role, r in numbers["roles"].items():
        if "active_ns" in r:
            out[role] = r["active_ns"]
            continue
        phases = {n: (p["total_ns"], p["mean_ns"], p["max_ns"], p["share"]) for n, p in r["phases"].items()}
        out[role] = (r["step_ns"], r["idle_ns"], r["not_profiled_ns"], phases)
    return out


def test_role_totals_of_a_merged_trace_are_those_of_the_steps_kept(tmp_path: Path) -> None:
    merged = tmp_path / "m.pftrace"
    done = runner.invoke(cli.app, [str(FIXTURES / "rl_run"), "-o", str(merged), "-q"])
    assert done.exit_code == 0, done.output
    whole = _summary(str(merged))
    step_one = _summary(str(merged), "--steps", "1")
    of_the_run = _summary(str(FIXTURES / "rl_run"), "--steps", "1")
    assert [s["step"] for s in step_one["steps"]] == [1]
    assert _totals(step_one) == _totals(of_the_run)
    # the warm-up asked for alone: its own totals (62.060 ms of update), not the counted step 1 (39.238 ms)
    assert step_one["roles"]["actor"]["phases"]["update_actor"]["total_ns"] == 39_238_220
    assert whole["roles"]["actor"]["phases"]["update_actor"]["total_ns"] == 39_238_220  # warm-up left out
    warmup = _summary(str(merged), "--steps", "0")
    assert warmup["roles"]["actor"]["phases"]["update_actor"]["total_ns"] == 62_060_448
    assert _totals(warmup) == _totals(_summary(str(FIXTURES / "rl_run"), "--steps", "0"))
    # who held a phase up is per step: not kept in a merged trace, so not shown rather than wrong
    assert step_one["roles"]["actor"]["phases"]["update_actor"]["critical"] is None
    assert any("held up by and started last" in line for line in step_one["withheld"])
    assert "held up by and started last" not in " ".join(whole.get("withheld", []))
