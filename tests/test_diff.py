"""`tracemerge diff` and the regression gate (`--fail-over`, `summary --baseline`), on known truth:
fixtures/phases against itself (every delta 0) and against a copy whose trainer rank runs 30%
slower (its span times scaled by 1.3 from its first start, so every delta is known exactly)."""

from __future__ import annotations

import copy
import json
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.compare.diff import compare, format_diff, parse_threshold, regressions
from tracemerge.core.exit_status import EXIT_REGRESSION
from tracemerge.pipeline import merge
from tracemerge.report.run_report import format_duration

PHASES = FIXTURES / "phases"
SLOWER = 13, 10  # the trainer rank's times, scaled by 13/10
TRAINER = {"generate": 5_000_000, "update_actor": 4_000_000, "old_log_prob": 1_500_000, "update_weights": 1_000_000}
runner = CliRunner()


def run(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def slowed(run_dir: Path) -> Path:
    """A copy of fixtures/phases whose trainer rank takes 1.3 times as long for everything."""
    shutil.copytree(PHASES, run_dir)
    spans = run_dir / "trainer" / "spans.jsonl"
    rows = [json.loads(line) for line in spans.read_text().splitlines()]
    t0 = min(r["start_ns"] for r in rows)
    for r in rows:
        for key in ("start_ns", "end_ns"):
            r[key] = t0 + (r[key] - t0) * SLOWER[0] // SLOWER[1]
    spans.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The base and the slowed run as folders, and their summaries as JSON files."""
    root = tmp_path_factory.mktemp("diff")
    slow = slowed(root / "slow")
    out = {"base": PHASES, "slow": slow}
    for name, folder in list(out.items()):
        numbers = merge([folder], root / f"{name}.pftrace").phases
        out[f"{name}.json"] = root / f"{name}.json"
        out[f"{name}.json"].write_text(json.dumps(numbers))
        out[f"{name}.pftrace"] = root / f"{name}.pftrace"
    return out


def numbers(path: Path) -> dict:
    return json.loads(path.read_text())


def rows_by_label(result: dict) -> dict[tuple[str | None, str], dict]:
    return {(r["role"], r["name"]): r for r in result["rows"]}


def test_a_run_against_itself_changes_nothing(runs) -> None:
    result = run("diff", runs["base"], runs["base"], "--json", "--fail-over", "0%")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["steps_matched"] == [0, 1, 2]
    assert found["steps_only_base"] == found["steps_only_new"] == []
    assert found["appeared"] == found["vanished"] == []
    # step wall, the 2 counted steps (step 0 is the warm-up), actor 3 phases + idle, trainer 4 + idle
    assert len(found["rows"]) == 1 + 2 + 4 + 5
    assert all(r["delta_ns"] == 0 and r["delta_pct"] == 0 and not r["beyond_noise"] for r in found["rows"])
    assert found["mode"] == "paired"
    # gated: the step wall, actor's 3 phases and trainer's 4 (idle is shown, never gated)
    assert [r["name"] for r in found["rows"] if r["gated"]] == [
        "step wall",
        "update_actor",
        "update_weights",
        "old_log_prob",
        "generate",
        "update_actor",
        "old_log_prob",
        "update_weights",
    ]
    assert found["gate"] == {"fail_over": 0.0, "min_delta_ns": 0, "passed": True, "compared": 8, "regressions": []}


def test_one_rank_30_percent_slower_has_the_deltas_known(runs) -> None:
    result = compare(numbers(runs["base.json"]), numbers(runs["slow.json"]))
    rows = rows_by_label(result)
    for name, base in TRAINER.items():
        r = rows[("trainer", name)]
        assert (r["base_ns"], r["new_ns"], r["delta_ns"]) == (base, base * 13 // 10, base * 3 // 10)
        assert r["delta_pct"] == pytest.approx(30.0)
        assert r["noise_ns"] == 0  # the same every step: no spread
        assert r["beyond_noise"]
    # trainer idle per step 1.5, 2.5, 3.5 ms; step 0 is the warm-up, left out: 3.0 ms median of
    # steps 1 and 2, 0.9 ms more. The steps are paired (both runs have steps 1 and 2 counted) and
    # each step's idle grew by the same 1.3 times: no noise in the change, where the base's own
    # spread once hid it. Idle is shown, not gated.
    idle = rows[("trainer", "idle")]
    assert (idle["base_ns"], idle["delta_ns"], idle["noise_ns"]) == (3_000_000, 900_000, 0)
    assert idle["beyond_noise"] and not idle["gated"]
    # the actor ranks are untouched
    assert all(r["delta_ns"] == 0 for (role, _), r in rows.items() if role == "actor")
    # Steps 1 and 2 start when the trainer starts them, now 1.3 times as far from its first
    # start (13 ms and 27 ms in): 3.9 ms and 8.1 ms later; each ends with the actor, as before.
    # (step 0, the warm-up, is not compared)
    assert (None, "step 0 wall") not in rows
    walls = [rows[(None, f"step {s} wall")]["delta_ns"] for s in (1, 2)]
    assert walls == [-3_900_000, -8_100_000]
    # the median wall of the counted steps (the mean of steps 1 and 2) is 6.0 ms shorter
    assert rows[(None, "step wall")]["delta_ns"] == -6_000_000


def test_gate_fails_at_10_percent_and_passes_at_50(runs) -> None:
    failed = run("diff", runs["base"], runs["slow"], "--fail-over", "10%")
    assert failed.exit_code == EXIT_REGRESSION == 4, failed.output
    lines = failed.output.splitlines()
    assert [line for line in lines if line.startswith("regression: ")] == [
        "regression: trainer · generate: 5.000 ms -> 6.500 ms (+30.0%, over 10% and the noise 0 ns)",
        "regression: trainer · update_actor: 4.000 ms -> 5.200 ms (+30.0%, over 10% and the noise 0 ns)",
        "regression: trainer · old_log_prob: 1.500 ms -> 1.950 ms (+30.0%, over 10% and the noise 0 ns)",
        "regression: trainer · update_weights: 1.000 ms -> 1.300 ms (+30.0%, over 10% and the noise 0 ns)",
    ]
    assert lines[-1] == (
        "gate failed: 4 over 10%: trainer · generate, trainer · update_actor, trainer · old_log_prob,"
        " trainer · update_weights"
    )
    row = "trainer · generate           5.000 ms   6.500 ms  +1.500 ms   +30.0%      0 ns           yes    yes"
    assert row in lines
    passed = run("diff", runs["base"], runs["slow"], "--fail-over", "50")
    assert passed.exit_code == 0, passed.output
    assert passed.output.splitlines()[-1] == "gate passed: nothing of 8 compared grew over 50% and the noise"
    # without a threshold the table only
    assert run("diff", runs["base"], runs["slow"]).exit_code == 0
    # Backwards, the phases that got faster never trip the gate; the step wall does: the median of
    # the counted steps (1 and 2; step 0 is the warm-up) grows 6.0 ms (the mean of 3.9 and 8.1 ms),
    # over the noise of the paired change (the slowed run's median wall times the spread of the
    # ratios of the counted steps' walls).
    back = run("diff", runs["slow"], runs["base"], "--fail-over", "0%")
    assert back.exit_code == EXIT_REGRESSION
    slow_walls, base_walls = [[s["wall_ns"] for s in numbers(runs[k])["steps"]] for k in ("slow.json", "base.json")]
    assert [b - a for a, b in zip(slow_walls, base_walls, strict=True)] == [0, 3_900_000, 8_100_000]
    slow_walls, base_walls = slow_walls[1:], base_walls[1:]  # the counted steps
    ratios = [b / a for a, b in zip(slow_walls, base_walls, strict=True)]
    noise = round(statistics.median(slow_walls) * statistics.pstdev(ratios))
    assert format_duration(noise) == "2.299 ms"
    assert back.output.splitlines()[-2:] == [
        f"regression: step wall: 69.675 ms -> 75.675 ms (+8.6%, over 0% and the noise {format_duration(noise)})",
        "gate failed: 1 over 0%: step wall",
    ]
    assert format_duration(round(statistics.median(slow_walls))) == "69.675 ms"
    assert format_duration(round(statistics.median(base_walls))) == "75.675 ms"
    assert run("diff", runs["slow"], runs["base"], "--fail-over", "9%").exit_code == 0


def test_traces_and_summary_files_compare_as_the_runs(runs) -> None:
    from_runs = run("diff", runs["base"], runs["slow"], "--json")
    from_files = run("diff", runs["base.pftrace"], runs["slow.json"], "--json")
    assert from_files.exit_code == 0, from_files.output
    assert json.loads(from_files.output) == json.loads(from_runs.output)


def test_summary_baseline_gates_the_same(runs) -> None:
    result = run("summary", runs["slow.pftrace"], "--baseline", runs["base.json"], "--fail-over", "10%")
    assert result.exit_code == EXIT_REGRESSION, result.output
    lines = result.output.splitlines()
    assert lines[0] == "phases (verl), 3 step(s), 2 counted (the warm-up left out of the means)"
    assert lines[-1].startswith("gate failed: 4 over 10%: trainer · generate")
    doc = run("summary", runs["slow"], "--baseline", runs["base"], "--fail-over", "50%", "--json")
    assert doc.exit_code == 0, doc.output
    found = json.loads(doc.output)
    assert found["summary"] == numbers(runs["slow.json"])
    assert found["diff"]["gate"]["passed"] is True


def test_bad_thresholds_and_inputs(runs, tmp_path: Path) -> None:
    assert run("diff", runs["base"], runs["slow"], "--fail-over", "ten").exit_code == 2
    assert run("diff", runs["base"], runs["slow"], "--fail-over", "-5%").exit_code == 2
    assert run("summary", runs["slow"], "--fail-over", "10%").exit_code == 2  # no --baseline
    missing = run("diff", tmp_path / "nosuch", runs["slow"])
    assert missing.exit_code == 1
    plain = tmp_path / "plain.json"
    plain.write_text('{"traceEvents": []}')
    assert run("diff", plain, runs["slow"]).exit_code == 1
    assert parse_threshold("12.5%") == 0.125


def test_roles_and_phases_that_appear_or_vanish(runs) -> None:
    base = numbers(runs["base.json"])
    new = copy.deepcopy(base)
    del new["roles"]["actor"]
    new["processes"] = [p for p in new["processes"] if p["role"] != "actor"]
    trainer = new["roles"]["trainer"]["phases"]
    trainer["rollout"] = trainer.pop("generate")
    for p in new["processes"]:
        for st in p["steps"]:
            st["phases_ns"]["rollout"] = st["phases_ns"].pop("generate")
    result = compare(base, new)
    assert result["vanished"] == ["actor", "trainer · generate"]
    assert result["appeared"] == ["trainer · rollout"]
    rows = rows_by_label(result)
    assert rows[("actor", "update_actor")]["new_ns"] is None
    assert rows[("trainer", "rollout")]["base_ns"] is None
    assert rows[("trainer", "rollout")]["new_ns"] == 5_000_000
    assert regressions(result, 0.0) == []  # what has no base never trips the gate
    text = format_diff(result)
    assert "vanished: actor, trainer · generate" in text.splitlines()
    assert "appeared: trainer · rollout" in text.splitlines()


def test_breakdown_columns_are_compared_when_both_carry_them(runs) -> None:
    base = numbers(runs["base.json"])
    new = copy.deepcopy(base)
    for side, scale in ((base, 1), (new, 2)):
        side["breakdown"] = [
            {
                "process": "actor · rank 0",
                "role": "actor",
                "rank": 0,
                "step": s,
                "compute_ns": 1000 * scale,
                "free_ns": 10,
            }
            for s in (0, 1, 2, 7)  # step 7 is in neither step list: left out
        ]
    result = compare(base, new)
    assert result["breakdown"] == "compared"
    rows = rows_by_label(result)
    assert (rows[("actor", "compute")]["base_ns"], rows[("actor", "compute")]["delta_ns"]) == (1000, 1000)
    assert rows[("actor", "free")]["delta_ns"] == 0
    # compute is gated (a device quantity that matters), free is shown only
    assert [(r["role"], r["name"]) for r in regressions(result, 0.1)] == [("actor", "compute")]
    assert rows[("actor", "free")]["gated"] is False
    del new["breakdown"]
    result = compare(base, new)
    assert result["breakdown"] == "only in base"
    assert not any(r["kind"] == "breakdown" for r in result["rows"])
    assert "breakdown only in base: not compared" in format_diff(result)


def test_breakdown_of_a_capped_stored_summary_compares_the_steps_both_kept(runs) -> None:
    """A stored summary that kept step 1's breakdown rows only (``left_out``): the columns are
    compared on step 1 alone (step 0 is the warm-up), not on step 1 against steps 1 and 2."""
    base = numbers(runs["base.json"])
    new = copy.deepcopy(base)
    for side, steps in ((base, (1,)), (new, (0, 1, 2))):
        side["breakdown"] = [{"role": "actor", "rank": 0, "step": s, "compute_ns": 1000 * (s + 1)} for s in steps]
    base["left_out"] = {"breakdown": {"rows": 2, "steps": 2, "limit": 1}}
    result = compare(base, new)
    assert result["breakdown_steps"] == [1]  # step 0, the warm-up, is not counted
    row = rows_by_label(result)[("actor", "compute")]
    assert (row["base_ns"], row["new_ns"], row["delta_ns"]) == (2000, 2000, 0)
    assert "breakdown compared on the steps both summaries kept rows of: 1" in format_diff(result)
    del base["left_out"]
    # uncapped, the base's rows of step 1 alone pair with the new run's step 1 only (steps are
    # compared pair by pair since both runs have steps 0 to 2, step 0 the warm-up)
    assert rows_by_label(compare(base, new))[("actor", "compute")]["new_ns"] == 2000
