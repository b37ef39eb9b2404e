"""The critical path of each step across roles and ranks (tracemerge.phases.critical_path): hand-offs
between roles, a late rank in a collective, what bound each segment, and segments tiling each step
exactly, on span logs whose times are known to the nanosecond and on the fixtures."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.model import Identity
from tracemerge.phases.critical_path import step_path
from tracemerge.phases.holdups import Timeline
from tracemerge.pipeline import merge

T0 = 1_790_000_000_000_000_000
MS = 1_000_000
runner = CliRunner()


def _log(path: Path, role: str, spans: list[tuple[int, str, float, float, str]]) -> Path:
    """A span log of one role: (rank, name, start ms, end ms, thread) after T0."""
    lines = [
        {"name": name, "start_ns": T0 + round(a * MS), "end_ns": T0 + round(b * MS), "role": role, "rank": rank}
        | {"thread": thread}
        for rank, name, a, b, thread in spans
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _hand_off_run(tmp_path: Path) -> Path:
    """Rollout generates from 0 to 40 ms. Actor rank 1's step begins at 30 and idles until its
    old_log_prob at 50 (waiting on rollout from 40); rank 0's begins at 45. Both update the actor
    and meet in an all_reduce: rank 0 enters at 70, rank 1 at 80 (rank 0 waits 10 ms on it)."""
    _log(
        tmp_path / "run" / "rollout" / "spans.jsonl", "rollout", [(0, "step", 0, 40, "main"), (0, "gen", 0, 40, "main")]
    )
    actor = [
        *[(0, *s, "main") for s in [("step", 45, 100), ("old_log_prob", 45, 60), ("update_actor", 60, 98)]],
        *[(1, *s, "main") for s in [("step", 30, 100), ("old_log_prob", 50, 62), ("update_actor", 62, 99)]],
        (0, "gloo:all_reduce", 70, 90, "comm"),
        (1, "gloo:all_reduce", 80, 90, "comm"),
    ]
    _log(tmp_path / "run" / "actor" / "spans.jsonl", "actor", actor)
    return tmp_path / "run"


# (role, rank, phase, start ms, end ms, bound by): the walk back from 100 (rank 0, the first of the
# two ending last) meets the all_reduce rank 1 entered last, goes on on rank 1 from its entry, back
# through its phases to its idle time, where rollout's generate ended: the hand-off.
HAND_OFF_PATH = [
    ("rollout", 0, "generate", 0, 40, "host"),
    ("actor", 1, "idle", 40, 50, "waiting on rollout"),
    ("actor", 1, "old_log_prob", 50, 62, "host"),
    ("actor", 1, "update_actor", 62, 80, "host"),
    ("actor", 0, "update_actor", 80, 90, "communication"),
    ("actor", 0, "update_actor", 90, 98, "host"),
    ("actor", 0, "idle", 98, 100, "idle"),
]


def test_hand_off_between_roles_and_a_late_rank_in_a_collective(tmp_path: Path) -> None:
    out = tmp_path / "o.pftrace"
    report = merge([_hand_off_run(tmp_path)], out)
    [step] = report.phases["steps"]
    assert (step["start_ns"], step["end_ns"]) == (T0, T0 + 100 * MS)
    found = report.phases["critical_path"]
    assert found == [
        {
            "step": 0,
            "role": role,
            "rank": rank,
            "process": f"{role} · rank {rank}",
            "phase": phase,
            "start_ns": T0 + a * MS,
            "end_ns": T0 + b * MS,
            "bound_by": bound,
        }
        for role, rank, phase, a, b, bound in HAND_OFF_PATH
    ]
    _assert_tiles(report.phases)
    # The Pipeline's Critical path row: a slice per segment, as drawn.
    rb = read_pftrace(out).set_derived_apart()
    row = rb.derived[("Pipeline", "Critical path")]
    assert sorted((s.name, s.ts - T0, s.dur) for s in row) == sorted(
        (f"{role} · rank {rank} · {phase} ({bound})", a * MS, (b - a) * MS)
        for role, rank, phase, a, b, bound in HAND_OFF_PATH
    )
    # The step table names the longest segment.
    table = runner.invoke(cli.app, ["summary", str(tmp_path / "run")])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[1].endswith("longest on the critical path")
    assert lines[3].endswith("rollout · rank 0 · generate, 40.0 ms (host)")


def test_what_bound_a_phase_segment_from_the_device_time() -> None:
    """Compute where device compute covers at least half of a segment, communication where
    collective device work does, host otherwise or without device activity."""
    ident = Identity("actor", 0, "")
    timeline = Timeline(pieces=[(0, 100, "update_actor"), (100, 200, "update_weights"), (200, 300, "ref")])
    devices = {ident: ([(0, 60), (200, 220)], [(100, 180)])}
    path = step_path(3, {ident: (0, 300)}, {ident: timeline}, devices, "idle")
    assert [(s.phase, s.start, s.end, s.bound_by) for s in path] == [
        ("update_actor", 0, 100, "compute"),
        ("update_weights", 100, 200, "communication"),
        ("ref", 200, 300, "host"),
    ]
    bare = step_path(3, {ident: (0, 300)}, {ident: timeline}, {}, "idle")
    assert [s.bound_by for s in bare] == ["host"] * 3


def _assert_tiles(numbers: dict) -> None:
    """Each step's segments are contiguous and cover exactly [start, end]: their durations sum to
    its wall time."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for seg in numbers["critical_path"]:
        assert seg["start_ns"] < seg["end_ns"]
        by_step[seg["step"]].append(seg)
    assert sorted(by_step) == [s["step"] for s in numbers["steps"]]
    for s in numbers["steps"]:
        found = by_step[s["step"]]
        assert found[0]["start_ns"] == s["start_ns"]
        assert found[-1]["end_ns"] == s["end_ns"]
        assert all(a["end_ns"] == b["start_ns"] for a, b in itertools.pairwise(found))
        assert sum(seg["end_ns"] - seg["start_ns"] for seg in found) == s["wall_ns"]
        assert set(found[0]) == {"step", "role", "rank", "process", "phase", "start_ns", "end_ns", "bound_by"}


@pytest.mark.parametrize("fixture", ["phases", "rl_run"])
def test_the_fixtures_segments_tile_each_step(fixture: str) -> None:
    result = runner.invoke(cli.app, ["summary", str(FIXTURES / fixture), "--json"])
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output)
    assert numbers["steps"]
    _assert_tiles(numbers)
    bounds = {seg["bound_by"] for seg in numbers["critical_path"]}
    known = {"compute", "communication", "host", "idle", "not profiled", "earlier step"}
    assert bounds <= known | {f"waiting on {r}" for r in numbers["roles"]}


def test_time_before_a_process_first_event_is_not_profiled() -> None:
    """A hand-off gap (rollout's generate ends at 40, the actor's step begins at 100) whose first
    part is before the actor's first event (at 70): not profiled there, waiting on rollout after."""
    rollout, actor = Identity("rollout", 0, ""), Identity("actor", 0, "")
    timelines = {rollout: Timeline(pieces=[(0, 40, "generate")]), actor: Timeline(pieces=[(100, 150, "update_actor")])}
    windows = {rollout: (0, 40), actor: (100, 150)}
    path = step_path(0, windows, timelines, {}, "idle", {rollout: 0, actor: 70})
    assert [(s.ident.role, s.phase, s.start, s.end, s.bound_by) for s in path] == [
        ("rollout", "generate", 0, 40, "host"),
        ("actor", "idle", 40, 70, "not profiled"),
        ("actor", "idle", 70, 100, "waiting on rollout"),
        ("actor", "update_actor", 100, 150, "host"),
    ]
    # Without a hand-off: idle after the first event, not profiled before it.
    alone = step_path(0, {actor: (100, 150)}, {actor: timelines[actor]}, {}, "idle", {actor: 70})
    assert [(s.start, s.end, s.bound_by) for s in alone] == [(100, 150, "host")]
    late = step_path(0, {rollout: (0, 40), actor: (100, 150)}, timelines, {}, "idle", {rollout: 0, actor: 120})
    assert [(s.ident.role, s.start, s.end, s.bound_by) for s in late][:3] == [
        ("rollout", 0, 40, "host"),
        ("actor", 40, 100, "not profiled"),
        ("actor", 100, 150, "host"),
    ]


def test_phases_fixture_time_before_the_actor_profiler_started() -> None:
    """fixtures/phases: in step 0 the walk hands off from actor rank 1 to the trainer. Of that gap,
    the time before rank 1's first event (its profiler's Trace span) is not profiled; it waited on
    the trainer only from then to its ProfilerStep#0, as its own file says."""
    result = runner.invoke(cli.app, ["summary", str(FIXTURES / "phases"), "--json"])
    assert result.exit_code == 0, result.output
    segments = [s for s in json.loads(result.output)["critical_path"] if s["step"] == 0]
    rank1 = [(s["bound_by"], s["start_ns"], s["end_ns"]) for s in segments if (s["role"], s["rank"]) == ("actor", 1)]
    assert [b for b, _, _ in rank1[:2]] == ["not profiled", "waiting on trainer"]
    assert rank1[0][2] == rank1[1][1]
    events = json.loads((FIXTURES / "phases" / "actor" / "rank1.pt.trace.json").read_text())["traceEvents"]
    first = min(Decimal(str(e["ts"])) for e in events if "ts" in e and e.get("ph") != "M")
    step0 = next(Decimal(str(e["ts"])) for e in events if e.get("name") == "ProfilerStep#0")
    assert rank1[1][2] - rank1[1][1] == int((step0 - first) * 1000)
    trainer = [s for s in segments if s["role"] == "trainer"]
    assert trainer[-1]["end_ns"] == rank1[0][1]  # the trainer's last phase ends where the gap begins


def test_a_process_still_in_its_earlier_step() -> None:
    """Before its window of step 1 the actor still ran step 0's update_actor (until 50): that time
    is the actor's, bound by ``earlier step``, not a hand-off from rollout's generate (ended 45)."""
    rollout, actor = Identity("rollout", 0, ""), Identity("actor", 0, "")
    timelines = {
        rollout: Timeline(pieces=[(40, 45, "generate")]),
        actor: Timeline(pieces=[(0, 50, "update_actor"), (60, 100, "update_actor")]),
    }
    path = step_path(1, {rollout: (40, 45), actor: (60, 100)}, timelines, {}, "idle", {rollout: 40, actor: 0})
    assert [(s.ident.role, s.phase, s.start, s.end, s.bound_by) for s in path] == [
        ("actor", "update_actor", 40, 50, "earlier step"),
        ("actor", "idle", 50, 60, "idle"),
        ("actor", "update_actor", 60, 100, "host"),
    ]
