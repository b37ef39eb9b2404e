"""Ascend ``ProfilerStep#N`` rows (``trace_view.json`` and the DB's ``PYTORCH_API``) give the steps:
numbers and bounds in the Pipeline's Steps track and in ``summary --json``."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge

ASCEND = FIXTURES / "ascend"
RUN = "host_101_20260101000000000_ascend_pt"
VIEW = Path("ASCEND_PROFILER_OUTPUT") / "trace_view.json"
DB = Path("ASCEND_PROFILER_OUTPUT") / "ascend_pytorch_profiler_0.db"
T0 = 1_767_225_600_000_000_000
STEP_NS = 900_000  # ProfilerStep#1 of the fixture run: [T0, T0 + 900 µs], in both exports
runner = CliRunner()


def copy_run(tmp_path: Path, kind: str, role_folder: str = "actor_update") -> Path:
    run = tmp_path / "in" / role_folder / RUN
    shutil.copytree(ASCEND / kind / "actor_update" / RUN, run)
    return run


def rename_step(run: Path, kind: str, name: str) -> None:
    """The run's ProfilerStep#1 row named ``name``."""
    if kind == "text":
        view = run / VIEW
        view.write_text(view.read_text().replace('"ProfilerStep#1"', json.dumps(name)))
        return
    with sqlite3.connect(run / DB) as con:
        assert con.execute("update STRING_IDS set value = ? where value = 'ProfilerStep#1'", (name,)).rowcount == 1
    con.close()


def drop_mstx(run: Path, kind: str) -> None:
    """The run without its MSTX ranges and marks (its only phases but the stage folder's)."""
    if kind == "text":
        view = run / VIEW
        events = [e for e in json.loads(view.read_text()) if "event_type" not in e.get("args", {})]
        view.write_text(json.dumps(events))
        return
    with sqlite3.connect(run / DB) as con:
        con.execute("delete from MSTX_EVENTS")
    con.close()


def steps_of(out: Path) -> tuple[list[tuple[str, int, int]], dict]:
    """The Pipeline's Steps slices (name, start, duration) and ``summary --json`` of a merged trace."""
    rb = read_pftrace(out).set_derived_apart()
    steps = sorted((s.name, s.ts, s.dur) for s in rb.derived[("Pipeline", "Steps")])
    result = runner.invoke(cli.app, ["summary", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return steps, json.loads(result.output)


@pytest.mark.parametrize("kind", ["text", "db"])
def test_profiler_step_rows_give_the_steps(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    merge([ASCEND / kind], out)
    steps, summary = steps_of(out)
    assert steps == [("step 1", T0, STEP_NS)]
    assert [s["step"] for s in summary["steps"]] == [1]
    [process] = summary["processes"]
    assert process["process"] == "actor · rank 0"
    assert [(s["step"], s["dur_ns"]) for s in process["steps"]] == [(1, STEP_NS)]


@pytest.mark.parametrize("kind", ["text", "db"])
def test_the_step_number_is_the_rows_own(kind: str, tmp_path: Path) -> None:
    """ProfilerStep#50 (the corpus runs' step) is step 50, over the row's own time."""
    run = copy_run(tmp_path, kind)
    rename_step(run, kind, "ProfilerStep#50")
    out = tmp_path / "out.pftrace"
    merge([tmp_path / "in"], out)
    steps, summary = steps_of(out)
    assert steps == [("step 50", T0, STEP_NS)]
    assert [s["step"] for s in summary["steps"]] == [50]
    assert [(s["step"], s["dur_ns"]) for s in summary["processes"][0]["steps"]] == [(50, STEP_NS)]


@pytest.mark.parametrize("kind", ["text", "db"])
def test_a_rank_without_phases_still_gives_its_steps(kind: str, tmp_path: Path) -> None:
    """The corpus' level0/level1 ranks: ProfilerStep#50 and nothing a phase rule matches."""
    run = copy_run(tmp_path, kind, role_folder="actor")
    drop_mstx(run, kind)
    rename_step(run, kind, "ProfilerStep#50")
    out = tmp_path / "out.pftrace"
    merge([tmp_path / "in"], out)
    steps, summary = steps_of(out)
    assert steps == [("step 50", T0, STEP_NS)]
    assert [s["step"] for s in summary["steps"]] == [50]
