"""Runs, not files: inputs far apart in time are separate runs; the latest is merged by default."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import msgspec
import pytest
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.analysis.summarize import summarize, summarize_each
from tracemerge.analysis.summary_model import RunHeld, from_numbers
from tracemerge.cli import runs as cli_runs
from tracemerge.cli.main import app
from tracemerge.clock.placement import Alignment, SourceClock
from tracemerge.clock.runs import (
    HOUR_NS,
    MAX_GAP_NS,
    check_choice,
    check_pair,
    choose,
    find_runs,
    gap_limit,
    utc_text,
)
from tracemerge.compare.api import diff as library_diff
from tracemerge.compare.diff import read_numbers
from tracemerge.core.errors import FatalError
from tracemerge.core.model import Identity
from tracemerge.core.stats import Stat
from tracemerge.pipeline import merge
from tracemerge.report.run_report import RunReport

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TWO_RUNS = FIXTURES / "two_runs"
DAY_NS = 86_400 * 10**9
# The first event of fixtures/rl_run (the rollout sessions' first submit), and of its copy a day later.
RUN_1_START = 1_795_966_668_421_000_000
RUN_2_START = RUN_1_START + DAY_NS
RUN_FILES = 7
# The events of one run's files: 2 torch traces of 505, 2 perf-tracer files and the span log of 8,
# 2 session files of 4.
RUN_EVENTS = 505 + 505 + 8 + 8 + 8 + 4 + 4
PROCESSES = [f"{role} · rank {rank}" for role in ("actor", "reward", "rollout") for rank in (0, 1)]
# The third-party corpus beside the repository (../shared/corpus); its tests skip without it.
CORPUS = FIXTURES.parent.parent / "shared" / "corpus"
HTA = CORPUS / "torch" / "HolisticTraceAnalysis" / "tests" / "data"
HTA_PAIR = (
    HTA / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    HTA / "trace_filter" / "sampled_rank-0.json.gz",
)


def test_gap_limit_is_an_hour_ten_file_spans_or_half_a_day() -> None:
    assert gap_limit([]) == HOUR_NS
    assert gap_limit([5 * 10**9]) == HOUR_NS
    assert gap_limit([HOUR_NS // 2]) == 5 * HOUR_NS
    assert gap_limit([3 * HOUR_NS]) == MAX_GAP_NS == 12 * HOUR_NS


def test_run_choice_forms() -> None:
    assert [check_choice(t) for t in ("latest", "all", "2", "2026-11-30T15:37", "2026-11-30 15")] == [
        "latest",
        "all",
        "2",
        "2026-11-30T15:37",
        "2026-11-30 15",
    ]
    for bad in ("0", "yesterday", "-1", "2026-1"):
        with pytest.raises(ValueError, match="--run"):
            check_choice(bad)


def test_two_runs_a_day_apart_are_two_runs_and_the_latest_is_merged(tmp_path: Path) -> None:
    report = merge([TWO_RUNS], tmp_path / "m.pftrace")
    assert [(r["number"], r["start_unix_ns"], r["merged"]) for r in report.runs] == [
        (1, RUN_1_START, False),
        (2, RUN_2_START, True),
    ]
    for r in report.runs:
        assert len(r["files"]) == RUN_FILES and r["processes"] == PROCESSES
        assert {Path(f).relative_to(TWO_RUNS).parts[0] for f in r["files"]} == {f"run_{r['number']}"}
    assert report.runs[0]["start_utc"] == "2026-11-29 15:37:48.421 UTC"
    # The merged trace is the second run alone: its zero is that run's start, its steps are short.
    assert report.time_base_unix_ns == RUN_2_START
    assert all(f.parts[-3] == "run_2" or f.parts[-4] == "run_2" for p in report.processes for f in p.files)
    assert report.read.total == RUN_EVENTS
    walls = [s["wall_ns"] for s in report.phases["steps"]]
    assert walls == [109_186_372, 123_518_626]
    # The other run is counted, file by file, as info: the exit status says everything was merged.
    assert report.losses.count(Stat.OTHER_RUN) == RUN_EVENTS
    assert report.exit_code == 0
    assert any(n.startswith("the inputs hold 2 runs") and "left out 1 (started 2026-11-29" in n for n in report.notes)


def test_run_one_merges_the_earlier_run_alone(tmp_path: Path) -> None:
    report = merge([TWO_RUNS], tmp_path / "m.pftrace", run="1")
    assert [r["merged"] for r in report.runs] == [True, False]
    assert report.time_base_unix_ns == RUN_1_START
    assert [s["wall_ns"] for s in report.phases["steps"]] == [109_186_372, 123_518_626]
    by_start = merge([TWO_RUNS], tmp_path / "s.pftrace", run="2026-11-29T15:37")
    assert [r["merged"] for r in by_start.runs] == [True, False]


def test_run_all_merges_both_onto_one_timeline(tmp_path: Path) -> None:
    report = merge([TWO_RUNS], tmp_path / "m.pftrace", run="all")
    assert [r["merged"] for r in report.runs] == [True, True]
    assert report.read.total == 2 * RUN_EVENTS
    assert report.losses.count(Stat.OTHER_RUN) == 0
    # Each run placed as if alone: the second run's perf-tracer files against its own sessions.
    perf = {Path(a["file"]).relative_to(TWO_RUNS).as_posix(): a for a in report.alignment if "traces-r" in a["file"]}
    assert {name: (a["method"], a["first_event_ns"]) for name, a in perf.items()} == {
        "run_1/perf_tracer/rollout/traces-r0.jsonl": ("session", 0),
        "run_1/perf_tracer/rollout/traces-r1.jsonl": ("session", 5_000_000),
        "run_2/perf_tracer/rollout/traces-r0.jsonl": ("session", DAY_NS),
        "run_2/perf_tracer/rollout/traces-r1.jsonl": ("session", DAY_NS + 5_000_000),
    }
    # As asked: the runs' steps 1 and 0 share a step number a day apart, and a note says so.
    assert max(s["wall_ns"] for s in report.phases["steps"]) > DAY_NS
    assert (
        "--run all: the runs are merged onto one timeline with gaps of up to 24.0 h; steps that share"
        in (report.notes[1])
    )


def test_a_run_that_is_not_there_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(FatalError, match=r"--run 3: no run of the inputs' 2: 1 \(started 2026-11-29"):
        merge([TWO_RUNS], tmp_path / "m.pftrace", run="3")
    assert not (tmp_path / "m.pftrace").exists()


def test_one_run_says_nothing_of_runs(tmp_path: Path) -> None:
    report = merge([FIXTURES / "rl_run"], tmp_path / "m.pftrace")
    assert [r["merged"] for r in report.runs] == [True]
    assert not any("runs" in n for n in report.notes)
    assert report.losses.count(Stat.OTHER_RUN) == 0


def test_files_placed_only_by_sessions_go_with_their_own_run(tmp_path: Path) -> None:
    """The perf-tracer files carry perf_counter times; the session records of either run place
    them alike: each goes with the run whose folder holds it, and the report says so."""
    report = merge([TWO_RUNS], tmp_path / "m.pftrace")
    latest = report.runs[1]
    assert sorted(Path(p).name for p in latest["ambiguous"]) == ["traces-r0.jsonl", "traces-r1.jsonl"]
    assert all("run_2" in p for p in latest["ambiguous"])
    rollout = [p for p in report.processes if p.role == "rollout"]
    assert [p.read.total for p in rollout] == [8 + 4, 8 + 4]  # its perf-tracer file and its session file


def test_summarize_each_run_on_its_own() -> None:
    found = RunReport()
    each = summarize_each([TWO_RUNS], report=found)
    assert [n for n, _ in each] == [1, 2]
    for _, numbers in each:
        assert [s["wall_ns"] for s in numbers["steps"]] == [109_186_372, 123_518_626]
    assert [r["merged"] for r in found.runs] == [True, True]
    assert not any(n.startswith("--run all") for n in found.notes)  # each run on its own timeline
    latest = summarize([TWO_RUNS])
    assert [s.wall_ns for s in latest.steps] == [109_186_372, 123_518_626]


def test_cli_merge_prints_the_run_table_and_summary_reports_each(tmp_path: Path) -> None:
    runner = CliRunner()
    merged = runner.invoke(app, ["merge", str(TWO_RUNS), "-o", str(tmp_path / "m.pftrace")])
    assert merged.exit_code == 0, merged.output
    lines = merged.output.splitlines()
    [header] = [n for n, line in enumerate(lines) if line.startswith("run  started (UTC)            files  processes")]
    assert lines[header].split()[-1] == "merged"
    assert lines[header + 2].startswith("  1  2026-11-29 15:37:48.421      7  6: actor · rank 0")
    assert lines[header + 2].endswith("no (another run)")
    assert lines[header + 3].endswith("yes")
    bad = runner.invoke(app, ["merge", str(TWO_RUNS), "-o", str(tmp_path / "x.pftrace"), "--run", "soon"])
    assert bad.exit_code == 2
    each = runner.invoke(app, ["summary", str(TWO_RUNS), "--run", "all", "--json"])
    assert each.exit_code == 0, each.output
    doc = json.loads(each.stdout)
    assert [s["run"] for s in doc["summaries"]] == [1, 2]
    assert [r["start_unix_ns"] for r in doc["runs"]] == [RUN_1_START, RUN_2_START]
    latest = runner.invoke(app, ["summary", str(TWO_RUNS), "--json"])
    assert [r["merged"] for r in json.loads(latest.stdout)["runs"]] == [False, True]
    assert json.loads(latest.stdout)["run"] == {
        "number": 2,
        "start_unix_ns": RUN_2_START,
        "start_utc": "2026-11-30 15:37:48.421 UTC",
        "runs": 2,
    }
    text = runner.invoke(app, ["summary", str(TWO_RUNS), "--run", "1"])
    assert text.exit_code == 0, text.output
    table = text.stderr.splitlines()
    assert table[0].split() == [
        "run",
        "started",
        "(UTC)",
        "files",
        "steps",
        "median",
        "step",
        "processes",
        "summarized",
    ]
    assert table[2].split()[:7] == ["1", "2026-11-29", "15:37:48.421", "7", "2", "109.186", "ms"]
    assert table[2].endswith("yes") and table[3].endswith("no (another run)")
    assert "note: summarized run 1 of 2; --run N, --run START or --run all for the others" in table
    headline = "phases (areal, verl), 2 step(s), 1 counted (the warm-up left out of the means)"
    assert text.stdout.startswith(f"{headline}\nrun 1 of 2 among the inputs, started 2026-11-29 ")
    missing = runner.invoke(app, ["summary", str(TWO_RUNS), "--run", "2027-01"])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("tracemerge: error: --run 2027-01: no run of the inputs' 2: 1 (started")


@pytest.mark.skipif(not all(p.exists() for p in HTA_PAIR), reason="the third-party corpus is absent")
def test_two_unrelated_hta_traces_give_no_figure_beyond_their_step(tmp_path: Path) -> None:
    folder = tmp_path / "pair"
    folder.mkdir()
    for p in HTA_PAIR:
        shutil.copyfile(p, folder / p.name)
    found = RunReport()
    numbers = summarize([folder], report=found).as_dict()
    assert [len(r["files"]) for r in found.runs] == [1, 1]
    assert [r["merged"] for r in found.runs] == [False, True]
    assert [r["processes"] for r in found.runs] == [["rank 0"], ["rank 34"]]
    # The latest run alone (rank 34's one step): no wait, skew or wall beyond that step.
    [step] = numbers["steps"]
    assert step["step"] == 551 and step["wall_ns"] < 10**9
    each = summarize_each([folder])
    assert [max(s["wall_ns"] for s in n["steps"]) < 10**9 for _, n in each] == [True, True]


class _Scan:
    """A file's summary as find_runs reads it: its path, span and processes."""

    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.path, self.ts_min, self.ts_max = Path(name), lo, hi
        self.counts = {Identity("trainer", int(name[-1])): None}
        self.threads: dict = {}
        self.counter_series: dict = {}


def _placed(scans: list[_Scan], wall_clock: bool = True, method: str = "exact") -> Alignment:
    sources = {s.path: SourceClock(s.path, "unix epoch", method, 0, None, 0, "its own clock", "exact") for s in scans}
    return Alignment({s.path: 0 for s in scans}, 0, wall_clock, sources)


def test_a_gap_longer_than_the_limit_starts_a_run_and_a_shorter_one_does_not() -> None:
    second = 10**9
    t0 = 1_790_000_000 * second
    a = _Scan("a0", t0, t0 + second)
    b = _Scan("b1", t0 + second + HOUR_NS, t0 + 2 * second + HOUR_NS)  # exactly the limit after a: same run
    c = _Scan("c2", b.ts_max + HOUR_NS + 1, b.ts_max + HOUR_NS + 1 + second)  # 1 ns more: a new run
    runs = find_runs([c, a, b], _placed([a, b, c]))
    assert runs.gap_ns == HOUR_NS
    assert [(r.number, r.start_ns, r.end_ns, r.files) for r in runs.runs] == [
        (1, a.ts_min, b.ts_max, (Path("a0"), Path("b1"))),
        (2, c.ts_min, c.ts_max, (Path("c2"),)),
    ]
    assert [r.processes for r in runs.runs] == [("trainer · rank 0", "trainer · rank 1"), ("trainer · rank 2",)]
    assert [r.number for r in choose(runs, "latest")] == [2]
    assert [r.number for r in choose(runs, "all")] == [1, 2]


def test_without_a_wall_clock_or_a_placement_there_is_no_run_by_time() -> None:
    a, b = _Scan("a0", 0, 10), _Scan("b1", 10 * DAY_NS, 10 * DAY_NS + 10)
    runs = find_runs([a, b], _placed([a, b], wall_clock=False))
    assert runs.runs == () and runs.unplaced == (Path("a0"), Path("b1"))
    assert choose(runs, "latest") == () and choose(runs, "1") == ()
    with pytest.raises(ValueError, match="no file of the inputs has a wall clock"):
        choose(runs, "2")
    unrelated = find_runs([a, b], _placed([a, b], method="unrelated"))
    assert unrelated.runs == () and unrelated.unplaced == (Path("a0"), Path("b1"))


def test_a_file_nothing_places_in_time_goes_with_the_run_merged(tmp_path: Path) -> None:
    """A Chrome trace of relative µs and a modification time far from both runs: no wall clock,
    no evidence. It goes with the latest run, at its start; with --run all, at the first's."""
    folder = tmp_path / "runs"
    shutil.copytree(TWO_RUNS, folder)
    loose = folder / "loose" / "worker.json"
    loose.parent.mkdir()
    events = [{"ph": "X", "name": "work", "pid": 7, "tid": 7, "ts": t, "dur": 50} for t in (1000, 2000)]
    loose.write_text(json.dumps({"traceEvents": events}))
    os.utime(loose, (1_000_000_000, 1_000_000_000))  # 2001: near neither run
    for run, base in (("latest", RUN_2_START), ("all", RUN_1_START)):
        report = merge([folder], tmp_path / f"{run}.pftrace", run=run)
        [placed] = [a for a in report.alignment if a["file"] == str(loose)]
        assert (placed["method"], placed["first_event_ns"], report.time_base_unix_ns) == ("unrelated", 0, base)
        assert [len(r["files"]) for r in report.runs] == [RUN_FILES, RUN_FILES]  # in no run by time
    latest = merge([folder], tmp_path / "m.pftrace")
    assert f"files nothing places in time, kept with run 2: {loose}" in latest.notes
    assert latest.read.total == RUN_EVENTS + 2


def _forged_runs(tmp_path: Path) -> Path:
    """fixtures/two_runs in a folder named with a terminal escape and a newline, its reward role
    renamed so too: names from data in the run table, the notes and the loss lines."""
    folder = tmp_path / FORGED
    shutil.copytree(TWO_RUNS, folder)
    for spans in folder.glob("run_*/reward/spans.jsonl"):
        rows = [json.loads(line) for line in spans.read_text().splitlines()]
        spans.write_text("".join(json.dumps({**row, "role": "rew" + FORGED}) + "\n" for row in rows))
    return folder


FORGED = "x\x1b[2J\nFORGED"
FORGED_SHOWN = "x\\x1b[2J\\nFORGED"


def _no_forged_line(text: str) -> None:
    assert "\x1b" not in text
    assert not [line for line in text.splitlines() if line.startswith("FORGED")]


def test_names_from_data_are_escaped_in_the_run_table_and_notes(tmp_path: Path) -> None:
    folder = _forged_runs(tmp_path)
    runner = CliRunner()
    merged = runner.invoke(app, ["merge", str(folder), "-o", str(tmp_path / "m.pftrace")])
    assert merged.exit_code == 0, merged.output
    _no_forged_line(merged.output)
    [row] = [line for line in merged.stderr.splitlines() if line.startswith("  1  2026-11-29")]
    assert f"6: actor · rank 0, actor · rank 1, rew{FORGED_SHOWN} · rank 0, rew{FORGED_SHOWN} · rank 1 (+2)" in row
    shown_folder = str(tmp_path) + "/" + FORGED_SHOWN
    other_run = f"  left out 505 input events of {shown_folder}/run_1/actor/rank0.pt.trace.json: run 1, started"
    lines = merged.stderr.splitlines()
    assert any(line.startswith(other_run) for line in lines)
    assert any(line.startswith("note: placed by records") and shown_folder in line for line in lines)
    for args in (["--run", "1"], ["--run", "all"]):
        summary = runner.invoke(app, ["summary", str(folder), *args])
        assert summary.exit_code == 0, summary.output
        _no_forged_line(summary.stdout + summary.stderr)
        table = summary.stderr.splitlines()
        assert table[2].startswith("  1  2026-11-29 15:37:48.421      7      2   109.186 ms  6: actor · rank 0")
        assert f"rew{FORGED_SHOWN} · rank 0" in table[2]
        notes = [line for line in table if line.startswith("note: placed by records")]
        assert len(notes) == 2 and all(shown_folder in line for line in notes)
    each = runner.invoke(app, ["summary", str(folder), "--run", "all"])
    assert f"rew{FORGED_SHOWN}" in each.stdout


def test_a_note_on_the_runs_is_one_line_whatever_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    """The notes summary prints beside the run table are escaped as they are printed, not only
    where they are made: a note naming a file unescaped still prints as one line."""
    found = RunReport(notes=["the inputs hold 2 runs: skipped", f"kept with run 2: {FORGED}/a.json"])
    cli_runs._said_notes(found)
    assert capsys.readouterr().err == f"note: kept with run 2: {FORGED_SHOWN}/a.json\n"


def test_the_trace_records_which_run_it_holds(tmp_path: Path) -> None:
    """The summary a merge stores names the run it is of (its number, start, and the runs the
    inputs held), and ``summary TRACE`` says it; the typed summary keeps it."""
    runner = CliRunner()
    for choice, number, start in (("latest", 2, RUN_2_START), ("1", 1, RUN_1_START), ("all", None, RUN_1_START)):
        out = tmp_path / f"{choice}.pftrace"
        report = merge([TWO_RUNS], out, run=choice)
        held = {"number": number, "start_unix_ns": start, "start_utc": utc_text(start), "runs": 2}
        assert report.phases["run"] == held
        stored = read_numbers(out)
        assert stored is not None and stored["run"] == held
        assert from_numbers(stored).run == RunHeld(number, start, utc_text(start), 2)
        text = runner.invoke(app, ["summary", str(out)])
        assert text.exit_code == 0, text.output
        said = text.stdout.splitlines()[1]
        if number is None:
            assert said == "all 2 runs among the inputs, on one timeline from 2026-11-29 15:37:48.421 UTC"
        else:
            assert said == f"run {number} of 2 among the inputs, started {utc_text(start)}"
    assert utc_text(RUN_2_START) == "2026-11-30 15:37:48.421 UTC"
    one = merge([FIXTURES / "rl_run"], tmp_path / "one.pftrace")
    assert "run" not in one.phases and "run" not in (read_numbers(tmp_path / "one.pftrace") or {})
    assert from_numbers(one.phases).run is msgspec.UNSET


def test_diff_run_choice_forms() -> None:
    assert check_pair("latest") == ("latest", "latest")
    assert check_pair("2") == ("2", "2")
    assert check_pair("1:2") == ("1", "2")
    assert check_pair("latest:1") == ("latest", "1")
    # A start time has colons: when the whole value is one, it is for both sides.
    assert check_pair("2026-11-29T15:37") == ("2026-11-29T15:37", "2026-11-29T15:37")
    assert check_pair("2026-11-29T15:37:2026-11-30") == ("2026-11-29T15:37", "2026-11-30")
    for bad in ("all", "1:all", "1:2:3", "soon:1", ":"):
        with pytest.raises(ValueError, match="--run"):
            check_pair(bad)


def test_diff_compares_the_runs_run_names(tmp_path: Path) -> None:
    """A folder of two runs, the first without its reward role: --run BASE:NEW picks each side's
    run (the reward role appears or vanishes), one choice is for both, and each side's run is said."""
    folder = tmp_path / "runs"
    shutil.copytree(TWO_RUNS, folder)
    (folder / "run_1" / "reward" / "spans.jsonl").unlink()
    runner = CliRunner()

    def diffed(*args: str) -> tuple[dict, list[str]]:
        done = runner.invoke(app, ["diff", str(folder), str(folder), "--json", *args])
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout), done.stderr.splitlines()

    doc, said = diffed("--run", "1:2")
    assert (doc["appeared"], doc["vanished"], doc["steps_matched"]) == (["reward"], [], [0, 1])
    assert said == [
        "tracemerge: note: base is run 1, started 2026-11-29 15:37:48.421 UTC, of the 2 runs its inputs hold"
        " (--run chooses)",
        "tracemerge: note: new is run 2, started 2026-11-30 15:37:48.421 UTC, of the 2 runs its inputs hold"
        " (--run chooses)",
    ]
    doc, _ = diffed("--run", "2026-11-30:2026-11-29T15")
    assert (doc["appeared"], doc["vanished"]) == ([], ["reward"])
    doc, said = diffed("--run", "1")
    assert (doc["appeared"], doc["vanished"]) == ([], [])
    assert [line.split(",")[0] for line in said] == [
        "tracemerge: note: base is run 1",
        "tracemerge: note: new is run 1",
    ]
    doc, said = diffed()  # the latest of each
    assert (doc["appeared"], doc["vanished"]) == ([], [])
    assert [line.split(",")[0] for line in said] == [
        "tracemerge: note: base is run 2",
        "tracemerge: note: new is run 2",
    ]
    missing = runner.invoke(app, ["diff", str(folder), str(folder), "--run", "1:3"])
    assert missing.exit_code == 1
    assert missing.stderr.startswith(f"tracemerge: error: {folder}: --run 3: no run of the inputs' 2: 1 (started")
    assert runner.invoke(app, ["diff", str(folder), str(folder), "--run", "all"]).exit_code == 2


def test_diff_run_of_a_merged_trace_must_be_the_run_it_holds(tmp_path: Path) -> None:
    merge([TWO_RUNS], tmp_path / "m.pftrace", run="1")
    merge([FIXTURES / "rl_run"], tmp_path / "one.pftrace")
    runner = CliRunner()
    same = runner.invoke(app, ["diff", str(tmp_path / "m.pftrace"), str(TWO_RUNS), "--run", "1"])
    assert same.exit_code == 0, same.output
    other = runner.invoke(app, ["diff", str(tmp_path / "m.pftrace"), str(TWO_RUNS), "--run", "2"])
    assert other.exit_code == 1
    assert other.stderr == (
        f"tracemerge: error: {tmp_path / 'm.pftrace'}: --run 2: it keeps the summary of run 1 of 2"
        " (started 2026-11-29 15:37:48.421 UTC) alone\n"
    )
    one = runner.invoke(app, ["diff", str(tmp_path / "one.pftrace"), str(TWO_RUNS), "--run", "2:2"])
    assert one.exit_code == 1
    assert one.stderr.endswith("--run 2: it keeps the summary of one run (its inputs held one)\n")
    assert runner.invoke(app, ["diff", str(tmp_path / "one.pftrace"), str(TWO_RUNS), "--run", "1:2"]).exit_code == 0


def _with_scalars(tmp_path: Path) -> Path:
    """fixtures/two_runs with a tracker's step-keyed scalars in each run's folder (loss 10, 11 in
    run 1's; 20, 21 in run 2's) and one beside both runs' folders."""
    folder = tmp_path / "runs"
    shutil.copytree(TWO_RUNS, folder)
    for n in (1, 2):
        rows = [{"step": s, "loss": 10 * n + s, "lr": 0.5} for s in (0, 1)]
        (folder / f"run_{n}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "grad_norm": 3.5}) + "\n")
    return folder


def _scalars_drawn(trace: Path) -> dict[str, list[float]]:
    rb = read_pftrace(trace)
    return {name: [v for _, v in rb.counters[t]] for t, (p, name) in rb.counter_tracks.items() if p < 0}


def test_tracker_scalars_go_with_the_run_in_whose_folder_they_sit(tmp_path: Path) -> None:
    """Tracker scalars have steps, not times: each file belongs to the run whose files share its
    folder; the run left out's are counted; one beside every run goes with the run merged."""
    folder = _with_scalars(tmp_path)
    for choice, loss in (("latest", [20.0, 21.0]), ("1", [10.0, 11.0])):
        out = tmp_path / f"{choice}.pftrace"
        report = merge([folder], out, run=choice)
        assert _scalars_drawn(out) == {"loss": loss, "lr": [0.5, 0.5], "grad_norm": [3.5]}
        left = 2 if choice == "1" else 1
        assert report.losses.count(Stat.OTHER_RUN_SCALARS) == 4  # two steps of two values
        assert report.losses.messages_of(Stat.OTHER_RUN_SCALARS) == {
            f"{folder}/run_{left}/metrics.jsonl: run {left}, started {utc_text(RUN_1_START + (left - 1) * DAY_NS)}": 4
        }
        assert report.losses.count(Stat.OTHER_RUN) == RUN_EVENTS
        assert report.exit_code == 0
    both = merge([folder], tmp_path / "all.pftrace", run="all")
    assert both.losses.count(Stat.OTHER_RUN_SCALARS) == 0
    # --run all: steps 0 and 1 of both runs are one step each; the second value of a name is counted.
    assert both.losses.count(Stat.TRACKER_VALUE_NOT_NUMBER) == 4


def test_library_diff_takes_run_as_the_command_line_does(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(TWO_RUNS, folder)
    (folder / "run_1" / "reward" / "spans.jsonl").unlink()
    assert (library_diff(folder, folder, run="1:2").appeared, library_diff(folder, folder).appeared) == (["reward"], [])
    with pytest.raises(ValueError, match="--run: diff compares one run of each side"):
        library_diff(folder, folder, run="all")
