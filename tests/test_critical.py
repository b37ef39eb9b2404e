"""Who held each step up (tracemerge.phases.holdups), the Pipeline rows that never hide a step, the
per-step summary, and processes placed without clock evidence: on span logs whose times are
known to the nanosecond, and on the genuine 2-rank torch runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.phases.rules import PhaseOptions
from tracemerge.pipeline import merge

KEEP_WARMUP = PhaseOptions(keep_warmup=True)  # the first step in the means too

READERS = {".pftrace": read_pftrace, ".json": read_chrome_json}
T0 = 1_790_000_000_000_000_000
MS = 1_000_000
runner = CliRunner()


def _log(path: Path, spans: list[tuple[int, str, float, float, str]], role: str = "actor") -> Path:
    """A span log: (rank, name, start ms, end ms, thread) after T0."""
    lines = [
        {
            "name": name,
            "start_ns": T0 + round(a * MS),
            "end_ns": T0 + round(b * MS),
            "role": role,
            "rank": rank,
            "thread": thread,
        }
        for rank, name, a, b, thread in spans
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# Step 0: rank 2 starts 30 ms late; ranks 0 and 1 wait for it in the all_reduce (25 + 15 ms), and
# idle from their own end of the step to its (3 + 2 ms). Step 1: every rank starts at once; rank 1
# computes longest and enters the all_reduce last (ranks 0 and 2 wait 15 + 13 ms for it).
HELD_UP = [
    *[(0, *s) for s in [("step", 0, 96), ("gen", 0, 40), ("update_actor", 40, 95)]],
    *[(1, *s) for s in [("step", 0, 97), ("gen", 0, 45), ("update_actor", 45, 95)]],
    *[(2, *s) for s in [("step", 30, 99), ("gen", 30, 70), ("update_actor", 70, 98)]],
    *[(0, *s) for s in [("step", 100, 150), ("gen", 100, 110), ("update_actor", 110, 148)]],
    *[(1, *s) for s in [("step", 100, 150), ("gen", 100, 125), ("update_actor", 125, 149)]],
    *[(2, *s) for s in [("step", 100, 150), ("gen", 100, 112), ("update_actor", 112, 147)]],
]
ALL_REDUCES = [(0, 50, 80), (1, 60, 80), (2, 75, 80), (0, 120, 140), (1, 135, 140), (2, 122, 140)]


# The critical path of the held-up run (tracemerge.phases.critical_path): (step, rank, phase, start ms,
# end ms, bound by). Step 0 ends on rank 2 (99), which entered the all_reduce last and began the
# step 30 ms after the others (nothing of it before 30: not profiled); step 1 ends on rank 0 (150,
# the first of those ending last), which
# waited from 135 in the all_reduce for rank 1: the walk goes on on rank 1 from its entry.
CRITICAL_PATH = [
    (0, 2, "idle", 0, 30, "not profiled"),
    (0, 2, "generate", 30, 70, "host"),
    (0, 2, "update_actor", 70, 75, "host"),
    (0, 2, "update_actor", 75, 80, "communication"),
    (0, 2, "update_actor", 80, 98, "host"),
    (0, 2, "idle", 98, 99, "idle"),
    (1, 1, "generate", 100, 125, "host"),
    (1, 1, "update_actor", 125, 135, "host"),
    (1, 0, "update_actor", 135, 140, "communication"),
    (1, 0, "update_actor", 140, 148, "host"),
    (1, 0, "idle", 148, 150, "idle"),
]
CRITICAL_PATH_ROW = sorted(
    (f"actor · rank {rank} · {phase} ({bound})", a * MS, (b - a) * MS) for _, rank, phase, a, b, bound in CRITICAL_PATH
)


def _held_up_run(tmp_path: Path) -> Path:
    spans = [(r, n, a, b, "main") for r, n, a, b in HELD_UP]
    spans += [(r, "gloo:all_reduce", a, b, "comm") for r, a, b in ALL_REDUCES]
    return _log(tmp_path / "run" / "actor" / "spans.jsonl", spans)


def _pipeline(rb) -> dict[str, list]:  # type: ignore[no-untyped-def]
    return {track: found for (proc, track), found in rb.derived.items() if proc == "Pipeline"}


def _args(s) -> dict:  # type: ignore[no-untyped-def]
    return s.args.get("args", s.args)


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_the_rank_arriving_last_holds_the_step_up_not_the_one_waiting(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    report = merge([_held_up_run(tmp_path)], out, phase_rules=KEEP_WARMUP)
    steps = {s["step"]: s for s in report.phases["steps"]}
    assert report.phases["critical_path"] == [
        {
            "step": step,
            "role": "actor",
            "rank": rank,
            "process": f"actor · rank {rank}",
            "phase": phase,
            "start_ns": T0 + a * MS,
            "end_ns": T0 + b * MS,
            "bound_by": bound,
        }
        for step, rank, phase, a, b, bound in CRITICAL_PATH
    ]
    assert steps[0] == {
        "step": 0,
        "start_ns": T0,
        "end_ns": T0 + 99 * MS,
        "wall_ns": 99 * MS,
        "period_ns": 100 * MS,
        "partial": False,
        "warmup": True,
        "counted": True,  # (the warm-up kept)
        "start_skew_ns": 30 * MS,
        "end_skew_ns": 3 * MS,
        # The longest wait on it: rank 0's, 25 ms in the all_reduce and 3 ms idle after its own end
        # (rank 1's: 15 + 2). The walk back from its end stays on rank 2 (it entered the all_reduce
        # last) and goes back to the role's start: 30 ms late, then 40 ms of generate, the most.
        "critical": {
            "role": "actor",
            "rank": 2,
            "phase": "generate",
            "ns": 28 * MS,
            "process": "actor · rank 2",
            "cause": "slower phase",
            "cause_ns": 40 * MS,
        },
        "late": {"role": "actor", "rank": 2, "process": "actor · rank 2", "ns": 30 * MS},
    }
    # Step 1: the walk back from rank 0's end (the first of those ending last) meets the
    # all_reduce rank 1 entered last, and goes on on rank 1 from its entry: 35 ms on it, 10 on rank 0.
    # Rank 0 waited longest on it, 15 ms in the all_reduce (rank 2: 13).
    assert steps[1]["critical"] == {
        "role": "actor",
        "rank": 1,
        "phase": "generate",
        "ns": 15 * MS,
        "process": "actor · rank 1",
        "cause": "slower phase",
        "cause_ns": 25 * MS,
    }
    assert steps[1]["late"] == {"role": "actor", "rank": 0, "process": "actor · rank 0", "ns": 0}
    assert (steps[1]["start_skew_ns"], steps[1]["end_skew_ns"]) == (0, 0)
    rows = _pipeline(READERS[ext](out).set_derived_apart())
    held = {(_args(s)["step"], s.name): _args(s) for t, found in rows.items() if t != "Steps" for s in found}
    assert held[(0, "update_actor")] == {
        "step": 0,
        "ranks": 3,
        "late_rank": 2,
        "critical_rank": 2,
        "waited on it": "28.0 ms",  # rank 0's: 25 in the all_reduce, 3 idle from 95 to rank 2's 98
        "start skew": "30.0 ms",
        "end skew": "3.0 ms",
        "spread": "27.0 ms",  # 55 ms on rank 0, 28 on rank 2
        "waited_ns": 28 * MS,
        "start_skew_ns": 30 * MS,
        "end_skew_ns": 3 * MS,
        "spread_ns": 27 * MS,
    }
    # rank 0: 15 ms in the all_reduce and 1 idle after its end (rank 2: 13 + 2)
    assert (held[(1, "update_actor")]["critical_rank"], held[(1, "update_actor")]["waited_ns"]) == (1, 16 * MS)
    assert (held[(1, "update_actor")]["late_rank"], held[(1, "update_actor")]["start_skew_ns"]) == (1, 15 * MS)
    # generate of step 0: no collective, nobody idle (the others went on to update_actor).
    assert (held[(0, "generate")]["critical_rank"], held[(0, "generate")]["waited_ns"]) == (2, 0)
    [step0] = [s for s in rows["Steps"] if s.name == "step 0"]
    assert {k: _args(step0)[k] for k in ("critical", "waited on it", "late", "start skew", "waited_ns")} == {
        "critical": "actor · rank 2 · generate",
        "waited on it": "28.0 ms",
        "late": "actor · rank 2",
        "start skew": "30.0 ms",
        "waited_ns": 28 * MS,
    }
    # Phases that cross go to a second row of the role, the longest first on the first row.
    assert {track: sorted((s.name, s.ts - T0, s.dur) for s in found) for track, found in rows.items()} == {
        "Steps": [("step 0", 0, 99 * MS), ("step 1", 100 * MS, 50 * MS)],
        "actor": [("generate", 0, 70 * MS), ("update_actor", 110 * MS, 39 * MS)],
        "actor · 2": [("generate", 100 * MS, 25 * MS), ("update_actor", 40 * MS, 58 * MS)],
        "Critical path": CRITICAL_PATH_ROW,
    }
    roles = report.phases["roles"]["actor"]["phases"]
    assert roles["update_actor"]["critical"] == {"rank": 2, "process": "actor · rank 2", "ns": 28 * MS, "steps": 1}
    assert roles["update_actor"]["late"] == {"rank": 2, "process": "actor · rank 2", "ns": 30 * MS, "steps": 1}
    assert roles["update_actor"]["p50_ns"] is None  # three ranks: no percentiles


def test_a_collective_of_other_ranks_is_not_matched(tmp_path: Path) -> None:
    """The k-th all_reduce of two ranks that were never in it at once (one left before the other
    entered) is no collective they shared: nobody waited in it."""
    spans = [(r, n, a, b, "main") for r, n, a, b in HELD_UP if r < 2 and a < 100]
    spans += [(0, "gloo:all_reduce", 50, 55, "comm"), (1, "gloo:all_reduce", 60, 80, "comm")]
    report = merge([_log(tmp_path / "run" / "spans.jsonl", spans)], tmp_path / "o.pftrace")
    [step] = report.phases["steps"]
    # Rank 1 ends last (97): rank 0 idles 96 to 97 waiting on it, and that is all.
    assert step["critical"] == {
        "role": "actor",
        "rank": 1,
        "phase": "update_actor",
        "ns": 1 * MS,
        "process": "actor · rank 1",
        "cause": "slower phase",
        "cause_ns": 50 * MS,
    }


def test_steps_overlapping_by_45_us_stay_on_one_row(tmp_path: Path) -> None:
    """Rank 0's step 0 ends 45 µs after rank 1's step 1 starts: the Steps row draws step 0 up to
    step 1's start (its true end in args), and phases crossing by less than 1/100 of their length
    are drawn cut to nest: no step and no phase slice on a second row or in an overlap lane."""
    spans = [
        *[(0, *s, "main") for s in [("step", 0, 10.045), ("gen", 0, 5), ("update_actor", 5, 10.045)]],
        *[(1, *s, "main") for s in [("step", 0, 10), ("gen", 0, 5.02), ("update_actor", 5.02, 10)]],
        *[(0, *s, "main") for s in [("step", 10.045, 20), ("gen", 10.045, 15), ("update_actor", 15, 20)]],
        *[(1, *s, "main") for s in [("step", 10, 20), ("gen", 10, 15), ("update_actor", 15, 20)]],
    ]
    out = tmp_path / "o.pftrace"
    report = merge([_log(tmp_path / "run" / "spans.jsonl", spans)], out)
    rows = _pipeline(read_pftrace(out).set_derived_apart())
    assert sorted(rows) == ["Critical path", "Steps", "actor"]
    assert [(s.name, s.ts - T0, s.dur) for s in rows["Steps"]] == [("step 0", 0, 10 * MS), ("step 1", 10 * MS, 10 * MS)]
    step0 = _args(rows["Steps"][0])
    assert (step0["wall_ns"], step0["overlap_ns"], step0["overlaps next step by"]) == (10_045_000, 45_000, "45.0 µs")
    assert [s["wall_ns"] for s in report.phases["steps"]] == [10_045_000, 10 * MS]
    drawn = {
        (_args(s)["step"], s.name): (s.ts - T0, s.dur, _args(s).get("cut_start_ns"), _args(s).get("cut_end_ns"))
        for s in rows["actor"]
    }
    assert drawn == {
        (0, "update_actor"): (5 * MS, 5_045_000, None, None),
        (0, "generate"): (0, 5 * MS, None, 20_000),  # 5.02 ms cut at 5.0 ms, where update_actor starts
        (1, "generate"): (10_045_000, 4_955_000, 45_000, None),  # from 10.0 ms, cut to step 0's update_actor end
        (1, "update_actor"): (15 * MS, 5 * MS, None, None),
    }


def test_a_process_placed_without_clock_evidence_says_so(tmp_path: Path) -> None:
    run = _held_up_run(tmp_path).parent.parent
    reward = run / "reward" / "spans.jsonl"
    reward.parent.mkdir()
    reward.write_text(json.dumps({"name": "score", "start_ns": 1_000, "end_ns": 4_001_000, "rank": 0}) + "\n")
    far = T0 + 2 * 86_400 * 10**9  # copied two days after the run: its mtime places nothing
    os.utime(reward, ns=(far, far))
    out = tmp_path / "o.pftrace"
    report = merge([run], out)
    assert [a["method"] for a in report.alignment if a["file"] == str(reward)] == ["unrelated"]
    rb = read_pftrace(out).set_derived_apart()
    assert sorted(rb.processes.values()) == [
        "actor · rank 0",
        "actor · rank 1",
        "actor · rank 2",
        "reward · rank 0 (unaligned)",
    ]
    [warning] = _pipeline(rb)["⚠ 1 process unaligned"]
    assert (warning.name, warning.ts, warning.dur) == ("⚠ 1 process unaligned: reward · rank 0", T0, 150 * MS)
    assert _args(warning)["reward · rank 0"] == (
        "spans.jsonl: nothing relates it to the other files, first event placed at the run start"
    )
    assert report.phases["unaligned"] == ["reward · rank 0"]
    assert report.phases["roles"]["reward"] == {"ranks": 1, "active_ns": 4 * MS, "phases": {}}
    table = runner.invoke(cli.app, ["summary", str(run)]).output.splitlines()
    assert table[1] == (
        "⚠ 1 process unaligned (placed without clock evidence): reward · rank 0; left out of skews, late, critical"
        " and waits (their times are not comparable with the others')"
    )


def test_a_run_without_phases_still_warns(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _log(run / "learner" / "spans.jsonl", [(0, "work", 0, 1, "main")], "learner")
    (run / "env").mkdir()
    (run / "env" / "spans.jsonl").write_text(
        json.dumps({"name": "work", "start_ns": 5_000, "end_ns": 9_000, "rank": 0}) + "\n"
    )
    os.utime(run / "env" / "spans.jsonl", ns=(T0 + 10**14, T0 + 10**14))
    out = tmp_path / "o.pftrace"
    report = merge([run], out)
    rb = read_pftrace(out).set_derived_apart()
    assert sorted(_pipeline(rb)) == ["⚠ 1 process unaligned"]
    assert sorted(rb.processes.values()) == ["env · rank 0 (unaligned)", "learner · rank 0"]
    assert report.phases["roles"] == {}


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_genuine_run_names_the_late_rank_not_the_one_waiting_in_gloo(tmp_path: Path, ext: str) -> None:
    """fixtures/rl_run: rank 0 entered step 0 20.2 ms after rank 1 and its gradients' all_reduce
    5.6 ms after it; rank 1 waited in gloo:all_reduce (the longest update_actor, 39.2 ms against
    22.9 ms, is rank 1's: the one that waited)."""
    out = tmp_path / f"out{ext}"
    report = merge([FIXTURES / "rl_run"], out)
    steps = report.phases["steps"]
    # Step 0: rank 1 entered the first all_reduce at 510.605283 ms (its thread's), rank 0 at
    # 516.210225 ms; the second ones were never in at once (rank 1 left before rank 0 entered).
    # Step 1: no all_reduce in common either; rank 1 idled from the end of its step1 span
    # (545.778694, the record_function numbering the step) to rank 0's (554.504860).
    assert [(s["critical"]["process"], s["critical"]["phase"], s["critical"]["ns"]) for s in steps] == [
        ("actor · rank 0", "old_log_prob", 516_210_225 - 510_605_283),
        ("actor · rank 0", "update_actor", 554_504_860 - 545_778_694),
    ]
    rows = _pipeline(READERS[ext](out).set_derived_apart())
    update = {_args(s)["step"]: _args(s) for found in rows.values() for s in found if s.name == "update_actor"}
    assert [(update[n]["late_rank"], update[n]["critical_rank"]) for n in (0, 1)] == [(0, 0), (1, 0)]
    assert update[0]["waited_ns"] == 516_210_225 - 510_605_283  # rank 1's wait in the first all_reduce
    assert list(report.phases["roles"]) == ["rollout", "reward", "actor"]  # pipeline order


def test_summary_prints_a_row_per_step_then_the_roles(tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["summary", str(FIXTURES / "rl_run")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:5] == [
        "phases (areal, verl), 2 step(s), 1 counted (the warm-up left out of the means)",
        (
            "step       wall        period     critical: process · phase      how                   waited on it"
            "  started last      start skew  end skew  longest on the critical path"
        ),
        (
            "---------  ----------  ---------  -----------------------------  --------------------  ------------"
            "  ----------------  ----------  --------  -----------------------------------------------------"
        ),
        # Step 0 is the warm-up; the rollout's step 1 (its global_step) starts 10 ms after step 0.
        (
            "0 warm-up  109.186 ms  10.000 ms  actor · rank 0 · old_log_prob  slower phase 31.6 ms      5.605 ms"
            "  actor · rank 0     19.400 ms  5.000 ms  actor · rank 0 · old_log_prob, 31.6 ms (host)"
        ),
        (
            "1          123.519 ms          -  actor · rank 0 · update_actor  slower phase 24.7 ms      8.726 ms"
            "  rollout · rank 1    5.000 ms  8.726 ms  actor · rank 0 · old_log_prob, 31.6 ms (earlier step)"
        ),
    ]
    assert lines[6] == (
        "per role, in pipeline order; share: of the role's step time (each rank's steps, summed over its ranks)"
    )
    assert [line.split()[:3] for line in lines[9:]] == [
        ["rollout", "2", "generate"],
        ["rollout", "2", "idle"],
        ["reward", "2", "(no"],  # (no phases: active), then the time from its first to its last event
        ["actor", "2", "update_actor"],
        ["actor", "2", "generate"],
        ["actor", "2", "old_log_prob"],
        ["actor", "2", "idle"],
    ]


def test_summary_takes_the_placement_options(tmp_path: Path) -> None:
    plain = json.loads(runner.invoke(cli.app, ["summary", str(FIXTURES / "phases"), "--json"]).output)
    moved = runner.invoke(cli.app, ["summary", str(FIXTURES / "phases"), "--json", "--offset", "trainer=-1ms"])
    assert moved.exit_code == 0, moved.output
    shifted = json.loads(moved.output)
    assert [s["start_ns"] - 1 * MS for s in plain["steps"]] == [s["start_ns"] for s in shifted["steps"]]
    for option in (["--sync", "weight_sync"], ["--no-align"]):  # every clock here is an epoch clock
        placed = runner.invoke(cli.app, ["summary", str(FIXTURES / "phases"), "--json", *option])
        assert placed.exit_code == 0, placed.output
        assert json.loads(placed.output)["steps"] == plain["steps"]
    out = tmp_path / "o.pftrace"
    merge([FIXTURES / "phases"], out)
    refused = runner.invoke(cli.app, ["summary", str(out), "--no-align"])
    assert refused.exit_code == 2
    assert "--no-align place a run" in refused.output


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_the_trace_keeps_the_summary_as_read_and_the_numbers_beside(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    report = merge([FIXTURES / "rl_run"], out)
    kept = _stored_summary(out)
    assert kept["steps"] == [
        "step 0 (warm-up): 109.2 ms, the next 10.0 ms after its start; held up by actor · rank 0 · old_log_prob:"
        " slower phase 31.6 ms (5.6 ms waited on it); started last: actor · rank 0, 19.4 ms after the first of its"
        " role",
        "step 1: 123.5 ms; held up by actor · rank 0 · update_actor: slower phase 24.7 ms (8.7 ms waited on it);"
        " started last: rollout · rank 1, 5.0 ms after the first of its role",
    ]
    # Shares of the counted steps (step 1: step 0 is the warm-up).
    assert kept["roles"] == [
        "rollout (2 ranks): generate 85.6%, idle 14.4% of its step time",
        "reward (2 ranks): no phases; active 132.1 ms (first to last event, summed over ranks)",
        "actor (2 ranks): update_actor 94.4%, generate 4.0%, old_log_prob 1.0%, idle 0.5% of its step time",
    ]
    assert sorted(kept) == ["numbers", "roles", "steps"]
    assert json.loads(kept["numbers"]) == json.loads(json.dumps(report.phases))
    from_trace = runner.invoke(cli.app, ["summary", str(out), "--json"])
    assert json.loads(from_trace.output) == json.loads(json.dumps(report.phases))


def _stored_summary(path: Path) -> dict:
    """The ``summary`` arg of the ``phase summary`` instant, read with the standard library and
    Perfetto's own schema."""
    if path.suffix == ".json":
        [note] = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "phase summary"]
        return note["args"]["summary"]
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    [note] = [p.track_event for p in trace.packet if p.track_event.name == "phase summary"]
    [found] = [a.legacy_json_value for a in note.debug_annotations if a.name == "summary"]
    return json.loads(found)


def test_percentiles_only_for_roles_of_five_ranks_or_more(tmp_path: Path) -> None:
    # (the rollout generates in step 1 alone, the warm-up: kept in the means here)
    report = merge([FIXTURES / "frameworks" / "verl"], tmp_path / "o.pftrace", phase_rules=KEEP_WARMUP)
    roles = report.phases["roles"]
    assert {role: r["ranks"] for role, r in roles.items()} == {
        "rollout": 8,
        "actor-rollout-ref": 2,
        "ref": 2,
        "actor": 2,
        "": 2,
    }  # pipeline order
    totals = sorted(
        sum(s["phases_ns"].get("generate", 0) for s in p["steps"])
        for p in report.phases["processes"]
        if p["role"] == "rollout"
    )
    generate = roles["rollout"]["phases"]["generate"]
    assert (generate["p50_ns"], generate["p90_ns"]) == (totals[3], totals[7])  # nearest rank of 8
    assert all(
        p["p50_ns"] is None and p["p90_ns"] is None for r in list(roles.values())[1:] for p in r["phases"].values()
    )
    verl = str(FIXTURES / "frameworks" / "verl")
    table = runner.invoke(cli.app, ["summary", verl, "--keep-warmup"]).output.splitlines()
    assert table[8].split()[7:9] == ["p50", "p90"]


def test_a_summary_an_older_tracemerge_wrote_is_printed_as_json_only(tmp_path: Path) -> None:
    old = {"preset": "verl", "steps": [0, 1], "roles": {}, "processes": []}
    note = {"ph": "i", "s": "p", "pid": 1, "ts": 0, "name": "phase summary", "cat": "tracemerge"}
    trace = tmp_path / "old.json"
    trace.write_text(json.dumps({"traceEvents": [note | {"args": {"summary": old}}]}))
    assert json.loads(runner.invoke(cli.app, ["summary", str(trace), "--json"]).output) == old
    table = runner.invoke(cli.app, ["summary", str(trace)])
    assert table.exit_code == 1
    assert "an older tracemerge wrote its summary" in table.output
