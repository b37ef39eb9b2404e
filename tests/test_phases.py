"""Derived phases: exact per-step accounting, the Phases and Pipeline tracks, presets, rules files,
--steps and `tracemerge summary`, on fixtures whose phase times are known (fixtures/phases)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES
from expected import exact_ns, load_json
from readback import read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.stats import Stat
from tracemerge.evidence.anchors import PRESET_NAMES
from tracemerge.phases.rules import PRESETS, PhaseOptions, load_rules, resolve
from tracemerge.pipeline import merge
from tracemerge.sources.chrome import events as chrome_events

PHASES = FIXTURES / "phases"
READERS = {".pftrace": read_pftrace, ".json": read_chrome_json}
VERL_ANNOTATIONS = {
    "actor_compute_log_prob": "old_log_prob",
    "actor_update": "update_actor",
    "update_weights": "update_weights",
}
runner = CliRunner()


def process(numbers: dict, label: str) -> dict:
    [found] = [p for p in numbers["processes"] if p["process"] == label]
    return found


def derived(rb, process_label: str, track: str) -> list[tuple[str, int, int]]:
    return sorted((s.name, s.ts, s.dur) for s in rb.derived[(process_label, track)])


def test_trainer_timers_are_accounted_to_the_nanosecond(tmp_path: Path) -> None:
    """Three steps of 13, 14 and 15 ms: gen 5 ms, old_log_prob 1.5 ms, update_actor 5 ms holding
    update_weights' last 1 ms, and 1.5 ms between them that no phase runs."""
    report = merge([PHASES / "trainer"], tmp_path / "out.pftrace")
    trainer = process(report.phases, "trainer · rank 0")
    assert trainer["preset"] == "verl"
    assert [s["step"] for s in trainer["steps"]] == [0, 1, 2]
    assert [s["dur_ns"] for s in trainer["steps"]] == [13_000_000, 14_000_000, 15_000_000]
    for n, step in enumerate(trainer["steps"]):
        assert step["phases_ns"] == {
            "generate": 5_000_000,
            "old_log_prob": 1_500_000,
            "update_actor": 4_000_000,
            "update_weights": 1_000_000,
        }
        assert step["idle_ns"] == 1_500_000 + n * 1_000_000
    # The role's numbers count steps 1 and 2: step 0 is the warm-up.
    assert [(s["step"], s["warmup"], s["counted"]) for s in report.phases["steps"]] == [
        (0, True, False),
        (1, False, True),
        (2, False, True),
    ]
    role = report.phases["roles"]["trainer"]
    assert role["step_ns"] == 29_000_000
    assert role["idle_ns"] == 6_000_000
    assert role["not_profiled_ns"] == 0
    assert role["phases"]["update_actor"]["total_ns"] == 8_000_000


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_phases_track_holds_each_phase_and_idle_exactly(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    merge([PHASES / "trainer"], out)
    rb = READERS[ext](out)
    lines = [json.loads(line) for line in (PHASES / "trainer" / "spans.jsonl").read_text().splitlines()]
    names = {"gen": "generate"}
    want = [
        (names.get(e["name"], e["name"]), e["start_ns"], e["end_ns"] - e["start_ns"])
        for e in lines
        if e["name"] != "step"
    ]
    steps = sorted((e["start_ns"], e["end_ns"]) for e in lines if e["name"] == "step")
    for a, b in steps:
        phases = sorted((s, s + d) for name, s, d in want if a <= s < b)
        gaps = [(a, phases[0][0]), (phases[0][1], phases[1][0]), (phases[-1][1], b)]
        want += [("idle", lo, hi - lo) for lo, hi in gaps if hi > lo]
    assert derived(rb, "trainer · rank 0", "Phases") == sorted(want)
    assert derived(rb, "Pipeline", "Steps") == [(f"step {n}", a, b - a) for n, (a, b) in enumerate(steps)]
    # Input events are all still there, apart from what is derived.
    assert len(rb.slices) == len(lines)


def _annotations(path: Path) -> tuple[list, list]:
    """(ProfilerStep#N windows, verl annotations) of a genuine torch trace, in exact ns."""
    top = load_json(path)
    base = top["baseTimeNanoseconds"]
    steps, phases = [], []
    for e in top["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "user_annotation":
            continue
        start, dur = base + exact_ns(e["ts"]), exact_ns(e["dur"])
        if e["name"].startswith("ProfilerStep#"):
            steps.append((int(e["name"].split("#")[1]), start, start + dur))
        elif e["name"] in VERL_ANNOTATIONS:
            phases.append((VERL_ANNOTATIONS[e["name"]], start, dur))
    return sorted(steps), sorted(phases)


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_genuine_torch_actors_steps_and_phases(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    report = merge([PHASES], out)
    rb = READERS[ext](out)
    for rank in (0, 1):
        steps, phases = _annotations(PHASES / "actor" / f"rank{rank}.pt.trace.json")
        assert [n for n, _, _ in steps] == [0, 1, 2]
        label = f"actor · rank {rank}"
        mine = process(report.phases, label)
        assert [(s["step"], s["dur_ns"]) for s in mine["steps"]] == [(n, b - a) for n, a, b in steps]
        got = [x for x in derived(rb, label, "Phases") if x[0] != "idle"]
        assert got == phases
        for step in mine["steps"]:
            assert sum(step["phases_ns"].values()) + step["idle_ns"] == step["dur_ns"]
    # The Pipeline's actor rows: per step and phase, first start to last end across both ranks,
    # each nesting on its row (none in an overlap lane); the one crossing another by at most 1/100
    # of its length drawn cut by that much.
    rows = {t[1] for t in rb.derived if t[0] == "Pipeline"}
    assert rows == {"Critical path", "Steps", "actor", "actor · 2", "trainer"}
    pipeline = {
        (s.args.get("args", s.args)["step"], s.name): s
        for t in ("actor", "actor · 2")
        for s in rb.derived[("Pipeline", t)]
    }
    per_rank = [_annotations(PHASES / "actor" / f"rank{r}.pt.trace.json") for r in (0, 1)]
    for (step, name), s in pipeline.items():
        spans = []
        for r, (steps, phases) in enumerate(per_rank):
            window = next((a, b) for n, a, b in steps if n == step)
            spans += [(r, t, d) for p, t, d in phases if p == name and window[0] <= t < window[1]]
        args = s.args.get("args", s.args)
        lo, hi = min(t for _, t, _ in spans), max(t + d for _, t, d in spans)
        assert s.ts - args.get("cut_start_ns", 0) == lo
        assert s.ts + s.dur + args.get("cut_end_ns", 0) == hi
        assert args.get("cut_start_ns", 0) + args.get("cut_end_ns", 0) <= (hi - lo) // 100
        durations = {r: sum(d for rr, _, d in spans if rr == r) for r in (0, 1)}
        starts = {r: min(t for rr, t, _ in spans if rr == r) for r in (0, 1)}
        ends = {r: max(t + d for rr, t, d in spans if rr == r) for r in (0, 1)}
        assert args["spread_ns"] == max(durations.values()) - min(durations.values())
        assert args["start_skew_ns"] == max(starts.values()) - min(starts.values())
        assert args["end_skew_ns"] == max(ends.values()) - min(ends.values())
        assert args["late_rank"] == max((0, 1), key=lambda r: (starts[r], -r))
        assert args["ranks"] == 2
    assert len(pipeline) == 9  # 3 steps x 3 phases
    # update_weights of step 0 begins 7.106 µs before update_actor ends on rank 1: drawn from there.
    assert (
        pipeline[(0, "update_weights")].args.get("args", pipeline[(0, "update_weights")].args)["cut_start_ns"] == 7_106
    )
    # Rank 1 entered step 0 54.3 ms after rank 0: in update_actor rank 0 waited for it in the
    # first two all_reduces (to their entry on rank 1, at most its own time in them) and idled from
    # its end of update_actor to rank 1's (then update_weights began).
    ar0, ar1 = (
        _all_reduces(PHASES / "actor" / "rank0.pt.trace.json"),
        _all_reduces(PHASES / "actor" / "rank1.pt.trace.json"),
    )
    waits = sum(min(b1 - a0, e0 - a0) for (a0, e0), (b1, _) in zip(ar0[:2], ar1[:2], strict=True))

    def first(rank: int, name: str) -> tuple[int, int]:  # (start, end) of the rank's first one
        _, t, d = next(p for p in per_rank[rank][1] if p[0] == name)
        return t, t + d

    idle = min(first(0, "update_weights")[0], first(1, "update_actor")[1]) - first(0, "update_actor")[1]
    update0 = pipeline[(0, "update_actor")].args.get("args", pipeline[(0, "update_actor")].args)
    assert (update0["late_rank"], update0["critical_rank"], update0["waited_ns"]) == (1, 1, waits + idle)
    held = {k: s.args.get("args", s.args)["critical_rank"] for k, s in pipeline.items()}
    assert held == {
        (0, "old_log_prob"): 1,
        (0, "update_actor"): 1,
        (0, "update_weights"): 1,
        (1, "old_log_prob"): 0,
        (1, "update_actor"): 0,
        (1, "update_weights"): 1,
        (2, "old_log_prob"): 1,
        (2, "update_actor"): 0,
        (2, "update_weights"): 1,
    }


def _all_reduces(path: Path) -> list[tuple[int, int]]:
    """(start, end) in exact ns of the gloo:all_reduce ops of a torch trace, on the thread that
    spends most time in them (the one whose marks the merge keeps)."""
    top = load_json(path)
    base = top["baseTimeNanoseconds"]
    by_thread: dict = {}
    for e in top["traceEvents"]:
        if e.get("ph") == "X" and e["name"] == "gloo:all_reduce":
            start = base + exact_ns(e["ts"])
            by_thread.setdefault(e["tid"], []).append((start, start + exact_ns(e["dur"])))
    return sorted(max(by_thread.values(), key=lambda found: sum(b - a for a, b in found)))


def test_steps_and_phases_read_as_columns_are_those_read_one_by_one(tmp_path: Path, monkeypatch) -> None:
    """Slices named as evidence (ProfilerStep#N, verl annotations) inside typed batches are noted
    as their rows are handed over: the same trace and accounting as the per-event path gives."""
    batched: list[int] = []  # per typed batch read as columns, its ProfilerStep slices
    as_columns = chrome_events.add_columns

    def counted(reader, batch: list, *args) -> None:
        batched.append(sum(e.name.startswith("ProfilerStep#") for e in batch))
        as_columns(reader, batch, *args)

    monkeypatch.setattr(chrome_events, "add_columns", counted)
    column = merge([PHASES], tmp_path / "columns.pftrace", jobs=1)
    assert batched == [3, 3]  # each torch trace in one batch
    monkeypatch.setattr(chrome_events, "_COLUMNS_FROM", 1 << 40)
    each = merge([PHASES], tmp_path / "each.pftrace", jobs=1)
    assert batched == [3, 3]
    assert [len(p["steps"]) for p in column.phases["processes"]] == [3, 3, 3]
    assert column.phases == each.phases
    assert (tmp_path / "columns.pftrace").read_bytes() == (tmp_path / "each.pftrace").read_bytes()


@pytest.mark.parametrize("run", ["rl_run", "phases", "clock/areal"])
def test_every_rank_and_step_adds_up(tmp_path: Path, run: str) -> None:
    report = merge([FIXTURES / run], tmp_path / "out.pftrace")
    assert report.phases["processes"]
    for proc in report.phases["processes"]:
        for step in proc["steps"]:
            assert sum(step["phases_ns"].values()) + step["idle_ns"] == step["dur_ns"], (proc["process"], step)


def _span_log(path: Path, names: list[str], role: str = "trainer") -> Path:
    t0 = 1_790_000_000_000_000_000
    lines = [
        {
            "name": name,
            "start_ns": t0 + n * 10_000_000,
            "end_ns": t0 + n * 10_000_000 + 4_000_000,
            "role": role,
            "rank": 0,
        }
        for n, name in enumerate(names)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("preset", "names", "phases"),
    [
        (
            "verl",
            ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor"],
            ["generate", "reward", "old_log_prob", "ref", "adv", "update_actor"],
        ),
        ("verl", ["rollout_generate", "compute_rm_score", "critic_update"], ["generate", "reward", "update_critic"]),
        (
            "areal",
            ["train.rollout", "train.recompute_logp", "train.ppo_update", "train.update_weights"],
            ["generate", "old_log_prob", "update_actor", "update_weights"],
        ),
        (
            "skyrl",
            ["generate", "fwd_logprobs_values_reward", "train_critic_and_policy", "sync_weights"],
            ["generate", "fwd_logprobs_values_reward", "train_critic_and_policy", "sync_weights"],
        ),
    ],
)
def test_presets_are_detected_from_the_names(tmp_path: Path, preset: str, names: list[str], phases: list[str]) -> None:
    report = merge([_span_log(tmp_path / "run" / "spans.jsonl", names)], tmp_path / "out.pftrace")
    assert report.phases["preset"] == preset
    [proc] = report.phases["processes"]
    got = Counter(k for step in proc["steps"] for k, v in step["phases_ns"].items() if v)
    assert sorted(got) == sorted(phases)


def test_ascend_mstx_ranges_are_phases_by_the_presets_names(tmp_path: Path) -> None:
    """An MSTX range a preset names (verl's rollout_generate) is that phase, in the text and the DB
    exports alike; one no preset names is a phase of its own name (the mstx preset)."""
    report = merge([FIXTURES / "ascend" / "prof"], tmp_path / "out.pftrace")
    assert report.phases["preset"] == "verl"
    [proc] = report.phases["processes"]
    assert proc["steps"][0]["phases_ns"] == {"generate": 800_000}
    for kind in ("text", "db"):
        report = merge([FIXTURES / "ascend" / kind], tmp_path / f"{kind}.pftrace")
        [proc] = report.phases["processes"]
        assert proc["steps"][0]["phases_ns"] == {"update_actor": 100_000, "generate": 800_000}, kind


def test_a_rules_file_with_role_filter_and_step_marker(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[phase]]\nmatch = "^fwd"\nname = "forward"\n\n'
        '[[phase]]\nmatch = "^opt"\nname = "optimizer"\nrole = "learner"\n\n'
        '[[step]]\nmatch = "^iteration$"\n'
    )
    t0 = 1_790_000_000_000_000_000
    lines = []
    for role in ("learner", "actor"):
        for n in range(2):
            t = t0 + n * 10_000_000
            lines += [
                {"name": "iteration", "start_ns": t, "end_ns": t + 9_000_000, "role": role, "rank": 0},
                {"name": "fwd_pass", "start_ns": t + 1_000_000, "end_ns": t + 3_000_000, "role": role, "rank": 0},
                {"name": "opt_step", "start_ns": t + 4_000_000, "end_ns": t + 6_000_000, "role": role, "rank": 0},
            ]
    log = tmp_path / "run" / "spans.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = merge([log], tmp_path / "out.pftrace", phase_rules=PhaseOptions(resolve(str(rules))))
    learner = process(report.phases, "learner · rank 0")
    actor = process(report.phases, "actor · rank 0")
    assert [s["phases_ns"] for s in learner["steps"]] == [{"forward": 2_000_000, "optimizer": 2_000_000}] * 2
    assert [s["phases_ns"] for s in actor["steps"]] == [{"forward": 2_000_000}] * 2  # optimizer: learner only
    assert [s["dur_ns"] for s in actor["steps"]] == [9_000_000, 9_000_000]
    assert [s["idle_ns"] for s in actor["steps"]] == [7_000_000, 7_000_000]


def test_rules_file_errors_name_the_file_and_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[phase]]\nmatch = "("\n')
    with pytest.raises(ValueError, match=r"bad.toml: phase rule 1: bad regex"):
        load_rules(bad)
    bad.write_text('[[step]]\nmatch = "x"\n')
    with pytest.raises(ValueError, match=r"no \[\[phase\]\] rule"):
        load_rules(bad)
    with pytest.raises(ValueError, match="neither a preset"):
        resolve("nonesuch")
    assert resolve("verl") == (PRESETS["verl"],)


def test_the_presets_are_the_ones_the_clock_stage_names() -> None:
    """The clock stage names the presets without importing them (it comes before the phases)."""
    assert tuple(PRESETS) == PRESET_NAMES


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_steps_keeps_only_those_steps(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    report = merge([PHASES / "trainer"], out, phase_rules=PhaseOptions(steps=frozenset({1})))
    rb = READERS[ext](out)
    assert [(s[0]) for s in derived(rb, "Pipeline", "Steps")] == ["step 1"]
    lines = [json.loads(line) for line in (PHASES / "trainer" / "spans.jsonl").read_text().splitlines()]
    [step1] = [e for e in lines if e["name"] == "step"][1:2]
    inside = [e for e in lines if e["start_ns"] < step1["end_ns"] and e["end_ns"] > step1["start_ns"]]
    assert sorted(s.name for s in rb.slices) == sorted(e["name"] for e in inside)
    assert report.filtered[Stat.FILTERED_OUTSIDE_WINDOW] == len(lines) - len(inside)
    assert report.filtered[Stat.FILTERED_STEP_PHASES] == 8
    assert report.exit_code == 0


def test_steps_that_do_not_exist_are_an_error(tmp_path: Path) -> None:
    result = runner.invoke(
        cli.app, ["merge", str(PHASES / "trainer"), "-o", str(tmp_path / "o.pftrace"), "--steps", "7"]
    )
    assert result.exit_code == 1
    assert "no such step in this run (steps found: 0-2)" in result.output


def test_summary_command_and_json(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    report = merge([PHASES], out)
    from_trace = runner.invoke(cli.app, ["summary", str(out), "--json"])
    assert from_trace.exit_code == 0, from_trace.output
    assert json.loads(from_trace.output) == json.loads(json.dumps(report.phases))
    from_run = runner.invoke(cli.app, ["summary", str(PHASES), "--json"])
    assert json.loads(from_run.output) == json.loads(from_trace.output)
    table = runner.invoke(cli.app, ["summary", str(out)])
    assert table.exit_code == 0
    lines = table.output.splitlines()
    # A row per step first: rank 1 started step 0 last (its profiler began 54.3 ms after rank 0's)
    # and held it up by that, rank 0 waiting for it in gloo:all_reduce; in steps 1 and 2 its
    # update_actor was the slower. Step 0 is the warm-up, left out of the means.
    assert lines[:6] == [
        "phases (verl), 3 step(s), 2 counted (the warm-up left out of the means)",
        (
            "step       wall       period     critical: process · phase      how                   waited on it"
            "  started last    start skew  end skew  longest on the critical path"
        ),
        (
            "---------  ---------  ---------  -----------------------------  --------------------  ------------"
            "  --------------  ----------  --------  ---------------------------------------------"
        ),
        # the longest: rank 1's time before its profiler's first event, not a wait on the trainer
        (
            "0 warm-up  76.686 ms  13.000 ms  actor · rank 1                 started late 54.3 ms     54.793 ms"
            "  actor · rank 1   54.284 ms   31.2 µs  actor · rank 1 · idle, 42.9 ms (not profiled)"
        ),
        (
            "1          75.854 ms  14.000 ms  actor · rank 1 · update_actor  slower phase 7.2 ms         9.5 µs"
            "  actor · rank 1     46.0 µs    9.5 µs  actor · rank 1 · idle, 29.9 ms (not profiled)"
        ),
        (
            "2          75.495 ms          -  actor · rank 1 · update_actor  slower phase 7.5 ms       736.3 µs"
            "  actor · rank 1      8.2 µs  736.3 µs  actor · rank 1 · idle, 15.9 ms (not profiled)"
        ),
    ]
    # Then per role, in pipeline order, no percentiles for fewer than 5 ranks; of steps 1 and 2.
    assert lines[8].split() == [
        "role", "ranks", "phase", "total", "share", "mean/rank", "max/rank", "held", "up", "by", "started", "last"
    ]  # fmt: skip
    rows = {tuple(line.split()[:3:2]): line.split() for line in lines[10:]}
    assert [line.split()[0] for line in lines[10:]] == ["actor"] * 4 + ["trainer"] * 5
    assert rows[("trainer", "generate")][3:5] == ["10.000", "ms"]
    assert rows[("trainer", "idle")][3:6] == ["6.000", "ms", "20.7%"]
    assert (
        " ".join(rows[("actor", "update_actor")][10:])
        == "rank 0: 29.7 µs waited, 2 step(s) rank 1: 178.7 µs late, 2 step(s)"
    )
    none = tmp_path / "plain.json"
    none.write_text('{"traceEvents": []}')
    assert runner.invoke(cli.app, ["summary", str(none)]).exit_code == 1


def test_merge_summary_option_prints_the_table(tmp_path: Path) -> None:
    result = runner.invoke(
        cli.app, ["merge", str(PHASES / "trainer"), "-o", str(tmp_path / "o.pftrace"), "--summary", "-q"]
    )
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "phases (verl), 3 step(s), 2 counted (the warm-up left out of the means)"


def test_run_table_names_each_process_preset(tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["merge", str(FIXTURES / "rl_run"), "-o", str(tmp_path / "o.pftrace")])
    rows = {tuple(line.split()[:2]): line.split() for line in result.output.splitlines()[2:8]}
    assert rows[("actor", "0")][4] == "verl"
    assert rows[("rollout", "0")][4] == "areal"
    assert rows[("reward", "0")][4] == "-"


def test_roles_filter_drops_their_phases_too(tmp_path: Path) -> None:
    from tracemerge.select import Selection

    out = tmp_path / "o.pftrace"
    report = merge([FIXTURES / "rl_run"], out, selection=Selection(roles=frozenset({"actor"})))
    assert {p["role"] for p in report.phases["processes"]} == {"actor"}
    rb = read_pftrace(out)
    assert {proc for proc, _ in rb.derived} == {"actor · rank 0", "actor · rank 1", "Pipeline"}
    # Phases of different ranks that cross go to further rows of their role, never an overlap lane.
    assert {track for proc, track in rb.derived if proc == "Pipeline"} == {
        "Critical path",
        "Steps",
        "actor",
        "actor · 2",
        "actor · 3",
        "actor · 4",
    }
