"""Steps as the framework counts them: AReaL's global_step, torch's ProfilerStep#N with its
trailing marker, the warm-up, the period; figures measured across processes only among aligned
ones; causes named (tracemerge.phases.step_counting, tracemerge.phases.holdups)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from builders import kineto_device
from conftest import FIXTURES
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.analysis.summarize import summarize
from tracemerge.cli import main as cli
from tracemerge.phases.rules import PhaseOptions

runner = CliRunner()
AREAL = FIXTURES / "frameworks" / "areal"
# the third-party corpus beside the repository (../shared/corpus); its tests skip without it
HTA_PAIR = (
    FIXTURES.parent.parent / "shared" / "corpus" / "torch" / "HolisticTraceAnalysis" / "tests" / "data" / "trace_filter"
)
EPOCH_US = 1_790_000_000_000_000


def _areal_schedule() -> dict[int, tuple[int, int]]:
    """Per global_step, the first start and last end of the spans naming it, on the wall clock
    (each process's perf_counter origin from the generator's truth)."""
    import make_areal_run as gen

    found: dict[int, tuple[int, int]] = {}
    for (role, rank), origin in gen.ORIGINS_NS.items():
        path = AREAL / gen.TRIAL / "perf_tracer" / role / f"traces-r{rank}.jsonl"
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e.get("ph") != "X":
                continue
            a = origin + 1000 * e["ts"]
            b, step = a + 1000 * e["dur"], e["args"]["global_step"]
            lo, hi = found.get(step, (a, b))
            found[step] = (min(lo, a), max(hi, b))
    return found


def test_areal_steps_read_as_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every role's spans name their global_step: a step runs from its first span to its last across
    the roles (the master's train.rollout at t0 + 2k s to its train.update_weights' end, 1.91004 s
    later), one every 2 s; the actors' steps are no longer cut between their own first phases."""
    monkeypatch.syspath_prepend(str(FIXTURES.parent / "fixtures"))
    import make_areal_run as gen

    truth = _areal_schedule()
    numbers = summarize([AREAL]).as_dict()
    steps = numbers["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    for s in steps:
        t0 = gen.RUN_START_NS + s["step"] * gen.STEP_NS
        assert (s["start_ns"], s["end_ns"]) == truth[s["step"]] == (t0, t0 + 1_910_040_000)
        assert s["wall_ns"] == 1_910_040_000
    assert [s["period_ns"] for s in steps] == [gen.STEP_NS, gen.STEP_NS, None]
    assert [(s["warmup"], s["partial"], s["counted"]) for s in steps] == [
        (True, False, False),
        (False, False, True),
        (False, False, True),
    ]
    # Each actor's steps are its own spans of the step: compute_logp at t0 + 1.201 s to the end of its
    # engine's weight update.
    actor = next(p for p in numbers["processes"] if p["process"] == "actor · rank 0")
    assert [s["step"] for s in actor["steps"]] == [0, 1, 2]
    # The role table counts steps 1 and 2: the master's rollout is 1.2 s of each.
    assert numbers["roles"]["master"]["phases"]["generate"]["total_ns"] == 2 * 1_200_000_000
    kept = summarize([AREAL], phase_rules=PhaseOptions(keep_warmup=True)).as_dict()
    assert [s["counted"] for s in kept["steps"]] == [True, True, True]
    assert kept["roles"]["master"]["phases"]["generate"]["total_ns"] == 3 * 1_200_000_000


def _trailing_marker_run(tmp_path: Path) -> Path:
    """Two ranks, three steps of 1 ms, then the 3 µs ProfilerStep#4 torch writes as the schedule stops."""
    steps = [(0, 1000), (1000, 2000), (2000, 3000), (3000, 3003)]
    for rank in (0, 1):
        kernels = [("gemm", 7, a + 100, a + 600) for a, _ in steps[:3]]
        kineto_device(tmp_path / "run" / f"rank{rank}.pt.trace.json", rank, steps, kernels)
    return tmp_path / "run"


def test_a_trailing_profiler_step_is_partial_and_left_out_of_the_means(tmp_path: Path) -> None:
    numbers = summarize([_trailing_marker_run(tmp_path)]).as_dict()
    steps = numbers["steps"]
    assert [(s["step"], s["wall_ns"]) for s in steps] == [(1, 1_000_000), (2, 1_000_000), (3, 1_000_000), (4, 3_000)]
    assert [s["start_ns"] - EPOCH_US * 1000 for s in steps] == [0, 1_000_000, 2_000_000, 3_000_000]
    assert [s["period_ns"] for s in steps] == [1_000_000, 1_000_000, 1_000_000, None]
    assert [(s["partial"], s["warmup"], s["counted"]) for s in steps] == [
        (False, True, False),
        (False, False, True),
        (False, False, True),
        (True, False, False),
    ]
    # Each rank's idle time in the role table: steps 2 and 3 alone, 1 ms each, all of it idle.
    [role] = numbers["roles"].values()
    assert (role["ranks"], role["step_ns"], role["idle_ns"], role["not_profiled_ns"]) == (2, 4_000_000, 4_000_000, 0)
    table = runner.invoke(cli.app, ["summary", str(tmp_path / "run")]).output.splitlines()
    assert (
        table[0] == "phases (none: steps only), 4 step(s), 2 counted (the warm-up and 1 partial left out of the means)"
    )
    assert [line.split()[:3] for line in table[3:7]] == [
        ["1", "warm-up", "1.000"],
        ["2", "1.000", "ms"],
        ["3", "1.000", "ms"],
        ["4", "partial", "3.0"],
    ]
    kept = runner.invoke(cli.app, ["summary", str(tmp_path / "run"), "--keep-warmup", "--json"])
    assert kept.exit_code == 0, kept.output
    assert [s["counted"] for s in json.loads(kept.output)["steps"]] == [True, True, True, False]


def _log(path: Path, spans: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    return path


def test_idle_the_profiler_did_not_record_is_not_profiled(tmp_path: Path) -> None:
    """Rank 0 numbers three steps of 10 ms (``step`` spans); rank 1's log holds its gen spans alone,
    from 4 ms to 26 ms: the job's steps are its steps, and its time in them before its first event
    and after its last is not profiled (not idle)."""
    t0, ms = EPOCH_US * 1000, 1_000_000
    rank0 = [{"name": "step", "start_ns": t0 + 10 * k * ms, "end_ns": t0 + (10 * k + 10) * ms} for k in range(3)]
    rank0 += [{"name": "gen", "start_ns": t0 + 10 * k * ms, "end_ns": t0 + (10 * k + 6) * ms} for k in range(3)]
    rank1 = [{"name": "gen", "start_ns": t0 + a * ms, "end_ns": t0 + b * ms} for a, b in ((4, 6), (10, 16), (20, 26))]
    run = tmp_path / "run"
    _log(run / "r0" / "spans.jsonl", [dict(s, role="actor", rank=0) for s in rank0])
    _log(run / "r1" / "spans.jsonl", [dict(s, role="actor", rank=1) for s in rank1])
    numbers = summarize([run], phase_rules=PhaseOptions(keep_warmup=True)).as_dict()
    [one] = [p for p in numbers["processes"] if p["rank"] == 1]
    assert [(s["step"], s["dur_ns"], s["idle_ns"], s["not_profiled_ns"]) for s in one["steps"]] == [
        (0, 10 * ms, 4 * ms, 4 * ms),  # 0-4 ms before its first event; 6-10 idle
        (1, 10 * ms, 4 * ms, 0),
        (2, 10 * ms, 0, 4 * ms),  # 26-30 ms after its last event
    ]
    role = numbers["roles"]["actor"]
    assert (role["step_ns"], role["idle_ns"], role["not_profiled_ns"]) == (60 * ms, 12 * ms + 8 * ms, 8 * ms)
    assert role["not_profiled_fraction"] == 8 / 60
    table = runner.invoke(cli.app, ["summary", str(run), "--keep-warmup"]).output.splitlines()
    assert [line.split()[:5] for line in table if "idle" in line.split() or "profiled" in line.split()][-2:] == [
        ["actor", "2", "idle", "20.000", "ms"],
        ["actor", "2", "not", "profiled", "8.000"],
    ]


def test_an_unaligned_process_is_left_out_of_the_cross_rank_figures(tmp_path: Path) -> None:
    """A rank whose file nothing relates to the others (placed at the run start) starts 'late' by
    nothing anyone measured: it is in the steps' own rows, never in skews, waits or critical paths."""
    t0 = EPOCH_US * 1000
    ms = 1_000_000
    run = tmp_path / "run"
    aligned = [{"name": "step", "start_ns": t0 + 10 * k * ms, "end_ns": t0 + 10 * k * ms + 8 * ms} for k in range(2)]
    aligned += [{"name": "gen", "start_ns": t0 + 10 * k * ms, "end_ns": t0 + 10 * k * ms + 5 * ms} for k in range(2)]
    _log(run / "actor" / "r0.jsonl", [dict(s, role="actor", rank=0) for s in aligned])
    # rank 1: a monotonic clock (no anchor), days from anything: placed without evidence
    other = [{"name": "step", "start_ns": 10 * k * ms + 7 * ms, "end_ns": 10 * k * ms + 9 * ms} for k in range(2)]
    other += [{"name": "gen", "start_ns": 10 * k * ms + 7 * ms, "end_ns": 10 * k * ms + 8 * ms} for k in range(2)]
    path = _log(run / "actor1" / "r1.jsonl", [dict(s, role="actor", rank=1) for s in other])
    far = t0 + 8 * 86_400 * 10**9
    os.utime(path, ns=(far, far))
    numbers = summarize([run]).as_dict()
    assert numbers["unaligned"] == ["actor · rank 1"]
    for s in numbers["steps"]:
        assert (s["start_skew_ns"], s["end_skew_ns"]) == (0, 0)
        assert s["late"]["rank"] == 0 and s["critical"]["rank"] == 0
        assert s["critical"]["ns"] == 0
        assert (s["start_ns"], s["wall_ns"]) == (t0 + 10 * s["step"] * ms, 8 * ms)  # rank 0's steps
    assert {seg["rank"] for seg in numbers["critical_path"]} == {0}
    assert all(p["late"] is None or p["late"]["rank"] == 0 for p in numbers["roles"]["actor"]["phases"].values())
    table = runner.invoke(cli.app, ["summary", str(run)]).output.splitlines()
    assert table[1].endswith(
        "left out of skews, late, critical and waits (their times are not comparable with the others')"
    )
    assert numbers["unaligned_why"] == {
        "actor · rank 1": "r1.jsonl: nothing relates it to the other files, first event placed at the run start"
    }
    assert (
        table[2]
        == "  actor · rank 1: r1.jsonl: nothing relates it to the other files, first event placed at the run start"
    )


@pytest.mark.skipif(not HTA_PAIR.is_dir(), reason="the shared corpus is absent")
def test_a_pair_of_unrelated_traces_yields_no_figure_beyond_its_step() -> None:
    numbers = summarize([HTA_PAIR]).as_dict()
    assert numbers["steps"]
    lo, hi = min(s["start_ns"] for s in numbers["steps"]), max(s["end_ns"] for s in numbers["steps"])
    for s in numbers["steps"]:
        wall = s["wall_ns"]
        assert 0 < wall <= hi - lo
        assert s.get("start_skew_ns", 0) <= wall and s.get("end_skew_ns", 0) <= wall
        if s.get("critical"):
            assert s["critical"]["ns"] is None or s["critical"]["ns"] <= wall
            assert s["critical"]["cause_ns"] <= wall
    walls = {s["step"]: s["wall_ns"] for s in numbers["steps"]}
    for row in numbers["breakdown"]:
        assert row["wait_ns"] is None or row["wait_ns"] <= row["wall_ns"] <= hi - lo
    for seg in numbers["critical_path"]:
        assert seg["end_ns"] - seg["start_ns"] <= walls[seg["step"]]


@pytest.mark.skipif(not HTA_PAIR.is_dir(), reason="the shared corpus is absent")
def test_unrelated_runs_give_no_period_across_them(tmp_path: Path) -> None:
    """Two HTA traces of separate runs, 692 days apart, each its own step (551 and 1009): no
    period spans them (step 552 and 1010 are in neither), nobody is late or waited on."""
    data = HTA_PAIR.parent
    for found in (
        "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "distributed_info_unavailable/distributed_info_not_found.json.gz",
    ):
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / Path(found).name).write_bytes((data / found).read_bytes())
    # by default the latest run alone (rank 34's step 551: one step, so no warm-up left out)
    latest = summarize([tmp_path / "run"]).as_dict()["steps"]
    assert [(s["step"], s["period_ns"], s["warmup"], s["counted"]) for s in latest] == [(551, None, False, True)]
    numbers = summarize([tmp_path / "run"], run="all").as_dict()
    steps = numbers["steps"]
    assert [(s["step"], s["period_ns"], s["warmup"], s["counted"]) for s in steps] == [
        (551, None, True, False),
        (1009, None, False, True),
    ]
    assert [(s["start_skew_ns"], s["end_skew_ns"], s["critical"]["ns"]) for s in steps] == [(0, 0, 0), (0, 0, 0)]


def test_the_collapsed_pipeline_shows_the_steps(tmp_path: Path) -> None:
    """A UI draws a collapsed top-level group from the slices on its own track (v52): the steps sit
    on the Pipeline's own track, no Steps track of their own; the other rows stay its children."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

    out = tmp_path / "o.pftrace"
    from tracemerge.pipeline import merge

    merge([FIXTURES / "rl_run"], out)
    trace = official.Trace()
    trace.ParseFromString(out.read_bytes())
    descriptors = [p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")]
    [group] = [d for d in descriptors if d.name == "Pipeline" and not d.HasField("process")]
    assert not group.parent_uuid
    assert not [d for d in descriptors if d.name == "Steps"]
    children = sorted(d.name for d in descriptors if d.parent_uuid == group.uuid)
    assert children == ["Critical path", "actor", "actor · 2", "actor · 3", "actor · 4", "rollout", "rollout · 2"]
    rb = read_pftrace(out)
    steps = rb.derived[("Pipeline", "Steps")]
    assert [(s.name, s.track) for s in steps] == [("step 0", group.uuid), ("step 1", group.uuid)]


def test_a_rank_blocked_on_another_role_names_that_role_s_work() -> None:
    """AReaL's actors idle until the master's 250 ms train.rollout is done: the step was held up by
    the master's slower phase (the actor's wait on it beside), not by the actor the walk ends on; in
    verl's step 3 the actor waits on a process of no role, named by its label."""
    areal = summarize([FIXTURES / "clock" / "areal"]).as_dict()
    for s in areal["steps"]:
        c = s["critical"]
        assert (c["process"], c["phase"], c["cause"], c["cause_ns"]) == (
            "master · rank 0",
            "generate",
            "slower phase",
            250_000_000,
        )
    # Waited on it: the actor's wait on the master on the critical path, where the walk ended on an
    # actor; none where it ended on the master itself (steps 4 and 5: the master ended them last).
    waited = [s["critical"]["ns"] for s in areal["steps"]]
    assert waited == [55_013_000, 55_014_000, 55_020_000, 55_017_000, 0, 0, 55_028_000, 55_017_000]
    verl = summarize([FIXTURES / "frameworks" / "verl"]).as_dict()
    [step3] = [s for s in verl["steps"] if s["step"] == 3]
    assert (step3["critical"]["process"], step3["critical"]["phase"]) == ("rank 0", "train_batch")
    bounds = {seg["bound_by"] for seg in verl["critical_path"] if seg["step"] == 3}
    assert "waiting on rank 0" in bounds and "waiting on " not in bounds
