"""The library's ``summarize()``: a merge's numbers, without encoding or writing a trace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from tracemerge.analysis.summarize import summarize
from tracemerge.clock import AlignOptions, parse_offset
from tracemerge.phases.rules import PhaseOptions, resolve
from tracemerge.pipeline import merge
from tracemerge.readback.damage import stored_summary
from tracemerge.report.run_report import RunReport

RUNS = ["phases", "frameworks/verl", "frameworks/verl_old", "kineto_gpu", "ascend", "clock/gloo", "nsys/torchrun"]


@pytest.mark.parametrize("run", RUNS)
def test_summarize_gives_the_numbers_a_merge_stores(tmp_path: Path, run: str) -> None:
    merged = merge([FIXTURES / run], tmp_path / "run.pftrace")
    assert summarize([FIXTURES / run]).as_dict() == merged.phases


@pytest.mark.parametrize("run", ["frameworks/verl", "kineto_gpu", "ascend"])
def test_a_chrome_json_merge_stores_the_numbers_of_a_perfetto_one(tmp_path: Path, run: str) -> None:
    """Chrome JSON's first read only summarizes each file; a verl file's step, told by its folder
    name, and the device activity of Kineto's kernels and Ascend's tasks must be noted all the
    same."""
    as_json = merge([FIXTURES / run], tmp_path / "run.json").phases
    as_perfetto = merge([FIXTURES / run], tmp_path / "run.pftrace").phases
    assert as_json == as_perfetto
    assert stored_summary(tmp_path / "run.json") == stored_summary(tmp_path / "run.pftrace")


def test_verl_steps_come_from_the_step_folders() -> None:
    numbers = summarize([FIXTURES / "frameworks/verl"])
    assert [s.step for s in numbers.steps] == [1, 2, 3]


def test_kernel_time_is_only_the_kernels() -> None:
    """25 GEMM kernels of 90 µs per 4 ms step on rank 0 of the Kineto GPU fixture: compute is
    the kernels' union, not the step (a summary-only read once took every event for a kernel)."""
    merged = summarize([FIXTURES / "kineto_gpu"]).as_dict()
    rows = merged["breakdown"]
    assert rows, "the fixture's kernels give breakdown rows"
    for row in rows:
        parts = ("compute_ns", "communication_ns", "free_ns", "preparing_ns", "closing_ns")
        assert sum(row[p] for p in parts) == row["wall_ns"]
        assert row["compute_ns"] < row["wall_ns"]


def test_summarize_writes_nothing_beside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "phases", run)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    report = RunReport()
    numbers = summarize([run], report=report, jobs=1)
    assert numbers.steps
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not report.skipped


def test_summarize_places_and_derives_as_asked(tmp_path: Path) -> None:
    """--offset and --phases reach the summary as they reach a merge."""
    shifted = AlignOptions(offsets=(parse_offset("trainer=+1s"),))
    moved = summarize([FIXTURES / "phases"], clocks=shifted).as_dict()
    assert moved == merge([FIXTURES / "phases"], tmp_path / "moved.pftrace", clocks=shifted).phases
    assert [s["end_ns"] - s["start_ns"] for s in moved["steps"]] != [
        s.end_ns - s.start_ns for s in summarize([FIXTURES / "phases"]).steps
    ]
    areal = PhaseOptions(resolve("areal"))
    as_areal = summarize([FIXTURES / "phases"], phase_rules=areal)
    assert as_areal.as_dict() == merge([FIXTURES / "phases"], tmp_path / "areal.pftrace", phase_rules=areal).phases
    assert as_areal.preset != summarize([FIXTURES / "phases"]).preset


def test_phase_rules_are_named_as_the_command_line_names_them(tmp_path: Path) -> None:
    """A preset's name, ``auto`` or a rules file's path, as ``--phases`` takes them."""
    by_name = summarize([FIXTURES / "phases"], phase_rules="areal")
    assert by_name == summarize([FIXTURES / "phases"], phase_rules=PhaseOptions(resolve("areal")))
    assert summarize([FIXTURES / "phases"], phase_rules="auto") == summarize([FIXTURES / "phases"])
    rules = tmp_path / "rules.toml"
    rules.write_text('[[phase]]\nname = "learn"\nmatch = "^update_actor$"\n')
    mine = summarize([FIXTURES / "phases"], phase_rules=rules)
    assert mine.preset == "rules"  # a rules file's preset is named after the file
    # the rules file's phase, in the processes' steps (the role table counts the steps after the
    # warm-up, and this fixture's trainer runs update_actor in step 0 alone)
    assert {name for p in mine.processes for st in p.steps for name in st.phases_ns} == {"learn"}
    with pytest.raises(ValueError, match="neither a preset"):
        summarize([FIXTURES / "phases"], phase_rules="nosuch")


def test_diff_is_a_library_call_with_a_typed_result(tmp_path: Path) -> None:
    from tracemerge.compare.api import Comparison, diff

    base = summarize([FIXTURES / "phases"])
    slower = base.as_dict()
    for p in slower["processes"]:
        for s in p["steps"]:
            s["phases_ns"] = {k: v * 2 for k, v in s["phases_ns"].items()}
    found = diff(base, slower, fail_over="10%")
    assert isinstance(found, Comparison) and not found.passed
    assert {(r.role, r.name) for r in found.gate.regressions} == {("actor", n) for n in base.roles["actor"].phases} | {
        ("trainer", n) for n in base.roles["trainer"].phases
    }
    assert found.format().splitlines()[-1].startswith("gate failed: 7 over 10%: ")
    same = diff(FIXTURES / "phases", str(FIXTURES / "phases"), fail_over=0.1, phase_rules="verl")
    assert same.passed and same.gate.compared == 8 and same.mode == "paired"
    assert diff(base, base).gate is None


def test_a_json_trace_s_summary_is_found_without_reading_the_whole_trace(tmp_path: Path) -> None:
    """The note is looked for a batch of events at a time: text that no JSON reader takes, a
    megabyte after the note, is never reached (loading the whole file would fail on it)."""
    from tracemerge.readback.stored_summary import read_summary

    merge([FIXTURES / "kineto_gpu"], tmp_path / "run.json")
    text = (tmp_path / "run.json").read_bytes()
    note_end = text.index(b"\n", text.index(b'"name":"phase summary"')) + 1
    filler = b"".join(b'{"ph":"i","name":"pad","ts":%d,"pid":9,"tid":9},\n' % k for k in range(20_000))
    broken = text[:note_end] + filler + b"{not json},\n" + text[note_end:]
    (tmp_path / "broken.json").write_bytes(broken)
    expected = read_summary(tmp_path / "run.json")
    assert isinstance(expected, dict) and [s["step"] for s in expected["steps"]] == [1, 2]
    assert read_summary(tmp_path / "broken.json") == expected
    # a JSON trace of another tool holds none, read through in batches; a summary of its own is no trace
    assert read_summary(FIXTURES / "kineto_gpu" / "rank0.pt.trace.json") is None
