"""The regression gate on the runs it must judge: the genuine torch run of fixtures/rl_run (two
CPU ranks under gloo) against an identical copy and against a copy with every event 1.3 times
slower; a re-run of the AReaL schedule (the same spans, other jitter); summaries whose steps do
not pair; and the inputs it must refuse in one line."""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.analysis.summarize import summarize
from tracemerge.cli import main as cli
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_REGRESSION

TORCH_RUN = FIXTURES / "rl_run" / "actor"  # rank0.pt.trace.json, rank1.pt.trace.json.gz
runner = CliRunner()


def run(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def scaled(src: Path, dst: Path, num: int = 13, den: int = 10) -> Path:
    """A copy of the torch traces under ``src`` with every event's time from the file's first
    event, and every duration, scaled by num/den (µs as the files write them)."""
    shutil.copytree(src, dst)
    for path in dst.rglob("*.pt.trace.json*"):
        packed = path.suffix == ".gz"
        trace = json.loads(gzip.decompress(path.read_bytes()) if packed else path.read_bytes())
        timed = [e for e in trace["traceEvents"] if e.get("ph") != "M" and "ts" in e]
        t0 = min(e["ts"] for e in timed)
        for e in timed:
            e["ts"] = t0 + (e["ts"] - t0) * num / den
            if "dur" in e:
                e["dur"] = e["dur"] * num / den
        data = json.dumps(trace).encode()
        path.write_bytes(gzip.compress(data) if packed else data)
    return dst


def test_a_torch_run_1_3_times_slower_fails_the_gate_naming_update_actor(tmp_path: Path) -> None:
    slow = scaled(TORCH_RUN, tmp_path / "slow")
    result = run("diff", TORCH_RUN, slow, "--fail-over", "10%", "--json")
    assert result.exit_code == EXIT_REGRESSION, result.output
    found = json.loads(result.output)
    assert found["mode"] == "paired" and found["steps_base"] == [1]  # step 0 is the warm-up
    failed = {r["name"]: r for r in found["gate"]["regressions"]}
    assert set(failed) == {"step wall", "update_actor", "generate", "old_log_prob"}
    # update_actor per step: the mean of the two ranks' times in it; base and new: the median over steps
    medians = []
    for folder in (TORCH_RUN, slow):
        procs = summarize([folder]).as_dict()["processes"]
        assert len(procs) == 2
        per_step = [[s["phases_ns"].get("update_actor", 0) for s in p["steps"]] for p in procs]
        means = [sum(pair) / 2 for pair in zip(*per_step, strict=True)]
        medians.append(round(means[1]))  # the one counted step (step 0 is the warm-up)
    update = failed["update_actor"]
    assert (update["base_ns"], update["new_ns"]) == tuple(medians)
    assert update["delta_pct"] == pytest.approx(30.0, abs=0.01)
    assert update["noise_ns"] < update["delta_ns"] / 100  # the steps differ; their change does not
    text = run("diff", TORCH_RUN, slow, "--fail-over", "10%").output.splitlines()
    assert text[-1] == (
        "gate failed: 4 over 10%: step wall, (no role) · update_actor, (no role) · generate, (no role) · old_log_prob"
    )


def test_an_identical_copy_passes(tmp_path: Path) -> None:
    same = scaled(TORCH_RUN, tmp_path / "same", 1, 1)
    result = run("diff", TORCH_RUN, same, "--fail-over", "10%")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "gate passed: nothing of 4 compared grew over 10% and the noise"


def test_a_rerun_of_the_areal_schedule_passes(tmp_path: Path) -> None:
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_areal_run
    finally:
        sys.path.remove(str(FIXTURES))
    make_areal_run.write(tmp_path / "again", seed=7)
    result = run("diff", FIXTURES / "frameworks" / "areal", tmp_path / "again", "--fail-over", "10%", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["gate"]["passed"] and found["gate"]["compared"] == 9
    wall = found["rows"][0]
    assert wall["name"] == "step wall" and abs(wall["delta_ns"]) < 20_000  # jitter of µs in a 3.2 s step
    # every phase's spans are the same 345 ms, 180 ms... in both: only the jitter of µs moves the walls
    phases = [r for r in found["rows"] if r["kind"] == "phase"]
    assert phases and all(r["delta_ns"] == 0 for r in phases)


@pytest.fixture(scope="module")
def phases() -> dict:
    return summarize([FIXTURES / "phases"]).as_dict()


def test_renumbered_steps_compare_as_medians_and_fail(phases: dict, tmp_path: Path) -> None:
    """Steps renumbered (+100) with walls 5 times as long pair with nothing: each run's median of
    its steps is compared, and the gate fails (it once passed with "steps compared: none")."""
    new = copy.deepcopy(phases)
    for s in new["steps"]:
        s["step"] += 100
        s["wall_ns"] *= 5
    for p in new["processes"]:
        for s in p["steps"]:
            s["step"] += 100
    paths = _write(tmp_path, base=phases, new=new)
    result = run("diff", paths["base"], paths["new"], "--fail-over", "10%", "--json")
    assert result.exit_code == EXIT_REGRESSION, result.output
    found = json.loads(result.output)
    assert found["mode"] == "steady state"
    assert (found["steps_base"], found["steps_new"]) == ([1, 2], [101, 102])  # step 0 and 100: warm-ups
    wall = found["rows"][0]
    walls = [s["wall_ns"] for s in phases["steps"] if s.get("counted", True)]
    assert len(walls) == 2
    assert (wall["base_ns"], wall["new_ns"]) == (round(statistics.median(walls)), round(statistics.median(walls) * 5))
    assert [r["name"] for r in found["gate"]["regressions"]] == ["step wall"]


def test_the_gate_never_passes_with_nothing_compared(phases: dict, tmp_path: Path) -> None:
    empty = {"steps": [], "roles": {}}
    paths = _write(tmp_path, base=phases, new=empty)
    result = run("diff", paths["base"], paths["new"], "--fail-over", "10%")
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert result.output.splitlines()[-1] == (
        "gate failed: nothing compared (no step wall, phase, compute or communication on both sides)"
    )
    assert run("diff", paths["base"], paths["new"]).exit_code == 0  # without a gate: the table only


def test_warmup_steps_are_left_out_unless_kept(phases: dict, tmp_path: Path) -> None:
    base = copy.deepcopy(phases)
    base["steps"][0] |= {"warmup": True, "counted": False}
    new = copy.deepcopy(base)
    new["steps"][0]["wall_ns"] *= 3  # a slower warm-up alone
    paths = _write(tmp_path, base=base, new=new)
    passed = run("diff", paths["base"], paths["new"], "--fail-over", "10%")
    assert passed.exit_code == 0, passed.output
    assert "steps compared pair by pair: 1, 2" in passed.output.splitlines()
    assert "steps not counted (warm-up or partial): base 0; new 0" in passed.output.splitlines()
    rows = json.loads(run("diff", *paths.values(), "--json").output)["rows"]
    assert not any(r["name"] == "step 0 wall" for r in rows)
    kept = run("diff", paths["base"], paths["new"], "--fail-over", "10%", "--keep-warmup", "--json")
    found = json.loads(kept.output)
    assert found["steps_base"] == [0, 1, 2]
    step0 = next(r for r in found["rows"] if r["name"] == "step 0 wall")
    assert step0["delta_ns"] == 2 * base["steps"][0]["wall_ns"]
    assert kept.exit_code == 0  # one slow step of three moves no median


def test_an_extra_partial_step_still_pairs(phases: dict, tmp_path: Path) -> None:
    new = copy.deepcopy(phases)
    extra = dict(new["steps"][-1], step=3, wall_ns=1_000, partial=True, counted=False)
    new["steps"].append(extra)
    paths = _write(tmp_path, base=phases, new=new)
    found = json.loads(run("diff", paths["base"], paths["new"], "--json").output)
    assert (found["mode"], found["steps_base"], found["steps_only_new"]) == ("paired", [1, 2], [3])
    assert found["steps_not_counted"] == [[0], [0, 3]]  # the warm-up on both sides, the partial step


def test_steps_roles_and_min_delta(phases: dict, tmp_path: Path) -> None:
    new = copy.deepcopy(phases)
    for p in new["processes"]:
        if p["role"] == "trainer":
            for s in p["steps"]:
                s["phases_ns"]["generate"] += 600_000  # +12% of its 5 ms
    paths = _write(tmp_path, base=phases, new=new)
    failed = run("diff", paths["base"], paths["new"], "--fail-over", "10%")
    assert failed.exit_code == EXIT_REGRESSION
    assert failed.output.splitlines()[-1] == "gate failed: 1 over 10%: trainer · generate"
    least = run("diff", paths["base"], paths["new"], "--fail-over", "10%", "--min-delta", "1ms")
    assert least.exit_code == 0, least.output
    verdict = "gate passed: nothing of 8 compared grew over 10% and 1.000 ms and the noise"
    assert least.output.splitlines()[-1] == verdict
    actor = run("diff", paths["base"], paths["new"], "--fail-over", "10%", "--roles", "actor", "--json")
    assert actor.exit_code == 0
    assert {r["role"] for r in json.loads(actor.output)["rows"]} == {None, "actor"}
    steps = run("diff", paths["base"], paths["new"], "--steps", "1-2", "--json")
    assert json.loads(steps.output)["steps_base"] == [1, 2]
    assert run("diff", paths["base"], paths["new"], "--min-delta", "1ms").exit_code == 2  # no --fail-over
    assert run("diff", paths["base"], paths["new"], "--fail-over", "1%", "--min-delta", "-1ms").exit_code == 2
    shown = run("summary", paths["new"], "--steps", "1", "--roles", "trainer", "--json")
    doc = json.loads(shown.output)
    assert [s["step"] for s in doc["steps"]] == [1] and list(doc["roles"]) == ["trainer"]
    assert {p["role"] for p in doc["processes"]} == {"trainer"}


MALFORMED = {
    "missing wall": '{"roles":{"a":{}},"steps":[{"step":0}]}',
    "steps not objects": '{"roles":{},"steps":[7]}',
    "roles not an object": '{"roles":[],"steps":[]}',
    "wall as text": '{"roles":{},"steps":[{"step":0,"wall_ns":"5"}]}',
    "wall too large": '{"roles":{},"steps":[{"step":0,"wall_ns":' + "1" + "0" * 400 + "}]}",
    "wall NaN": '{"roles":{},"steps":[{"step":0,"wall_ns":NaN}]}',
    "step as text": '{"roles":{},"steps":[{"step":"0","wall_ns":5}]}',
    "step as a float": '{"roles":{},"steps":[{"step":0.0,"wall_ns":5}]}',
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_summary_is_refused_in_one_line(name: str, phases: dict, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(MALFORMED[name])
    good = _write(tmp_path, base=phases)["base"]
    for args in (("diff", good, bad), ("diff", bad, good), ("summary", good, "--baseline", bad), ("summary", bad)):
        result = run(*args)
        assert result.exit_code == EXIT_FATAL, (args, result.output)
        lines = result.output.strip().splitlines()
        says = "an older tracemerge wrote its summary" if name == "steps not objects" else "not a phase summary"
        assert len(lines) == 1 and says in lines[0], lines
        assert "bad.json" in lines[0] and "internal error" not in lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for args in (("diff", fifo, FIXTURES / "phases"), ("summary", fifo)):
        result = run(*args)
        assert result.exit_code == EXIT_FATAL
        said = f"tracemerge: error: {fifo}: not a regular file (a FIFO, socket or device is not read)"
        assert result.output.strip() == said


def test_a_split_part_says_where_the_summary_is(tmp_path: Path) -> None:
    out = tmp_path / "m.pftrace"
    assert run(FIXTURES / "phases", "-o", out, "--split-by", "role", "-q").exit_code == 0
    part = tmp_path / "m.actor.pftrace"
    result = run("summary", part)
    assert result.exit_code == EXIT_FATAL
    assert result.output.strip() == (
        f"tracemerge: error: {part}: a part of a --split-by merge (index {tmp_path / 'm.index.json'}) keeping no"
        f" phase summary; the summary is in {tmp_path / 'm.pipeline.pftrace'}"
    )
    assert run("diff", part, tmp_path / "m.pipeline.pftrace").exit_code == EXIT_FATAL
    assert run("diff", tmp_path / "m.pipeline.pftrace", tmp_path / "m.pipeline.pftrace").exit_code == 0


def test_raw_trace_files_are_summarized(tmp_path: Path) -> None:
    """A torch trace as the profiler wrote it (opening with blanks) is read as a run of one file."""
    raw = TORCH_RUN / "rank0.pt.trace.json"
    result = run("summary", raw, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == summarize([raw]).as_dict()
    assert [s["step"] for s in json.loads(result.output)["steps"]] == [0, 1]
    assert run("diff", raw, raw, "--fail-over", "1%").exit_code == 0


def _write(folder: Path, **docs: dict) -> dict[str, Path]:
    out = {}
    for name, doc in docs.items():
        out[name] = folder / f"{name}.json"
        out[name].write_text(json.dumps(doc))
    return out


def test_a_merged_trace_without_a_summary_says_so(tmp_path: Path) -> None:
    """A merge that found no step nor phase stores no summary: said in one line, pointing at the
    run's own files (which summary reads)."""
    for name in ("np.pftrace", "np.json"):
        out = tmp_path / name
        assert run(FIXTURES / "nsys" / "torchrun", "-o", out, "-q").exit_code == 0
        result = run("summary", out)
        assert result.exit_code == EXIT_FATAL
        assert result.output.strip() == (
            f"tracemerge: error: {out}: a trace keeping no phase summary (tracemerge stores one when its merge finds"
            " steps or phases): summarize the run's own files"
        )
