"""AReaL runs aligned without flags: the spans every role records at a weight update are sync
evidence under the AReaL preset (fixtures/frameworks/areal, written by fixtures/make_areal_run.py
with each process's true perf_counter origin)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.clock import AlignOptions
from tracemerge.evidence.anchors import Watch
from tracemerge.phases.rules import AREAL, PRESETS, PhaseOptions, PhaseRules, resolve
from tracemerge.pipeline import merge

RUN = FIXTURES / "frameworks" / "areal"
READERS = {".pftrace": read_pftrace, ".json": read_chrome_json}
runner = CliRunner()


def _generator():
    spec = importlib.util.spec_from_file_location("make_areal_run", FIXTURES / "make_areal_run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
TRUTH = GEN.truth()
PERF_NAMES = ("weight_sync", "fsdp_engine.update_weights_from_distributed", "train.update_weights")


def who(a: dict) -> str:
    """``role/rank`` of a perf-tracer file's alignment entry."""
    path = Path(a["file"])
    return f"{path.parent.name}/{int(path.stem.rpartition('-r')[2])}"


def perf(report) -> dict[str, dict]:
    return {who(a): a for a in report.alignment if "perf_tracer" in a["file"]}


def test_the_fixture_is_what_its_generator_writes(tmp_path: Path) -> None:
    GEN.write(tmp_path / "areal")
    made = sorted(p.relative_to(tmp_path / "areal") for p in (tmp_path / "areal").rglob("*") if p.is_file())
    kept = sorted(p.relative_to(RUN) for p in RUN.rglob("*") if p.is_file())
    assert made == kept
    for rel in kept:
        assert (tmp_path / "areal" / rel).read_bytes() == (RUN / rel).read_bytes(), rel


@pytest.mark.parametrize(
    "name",
    [
        "weight_sync",
        "update_weights",
        "train.update_weights",
        "fsdp_engine.update_weights_from_distributed",
        "megatron_engine.update_weights_from_disk",
    ],
)
def test_weight_update_spans_are_the_areal_presets_sync_evidence(name: str) -> None:
    assert f"sync areal\t{name}" in PhaseRules([AREAL])(name)
    # Asked for with --sync as well: evidence once, under the name asked for.
    tags = Watch([name], PhaseRules(PRESETS.values()))(name)
    assert [t for t in tags if t.startswith("sync ")] == [f"sync {name}"]


@pytest.mark.parametrize("name", ["weight_sync_wait", "update_weights_meta", "update_weights_from_disk", "sync"])
def test_other_names_are_not(name: str) -> None:
    assert not [t for t in PhaseRules(PRESETS.values())(name) if t.startswith("sync ")]


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_every_process_is_placed_at_its_true_offset_without_flags(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    report = merge([RUN], out)
    placed = perf(report)
    assert sorted(placed) == sorted(TRUTH)
    for key, a in placed.items():
        assert a["method"] == ("session" if key.startswith("rollout") else "sync"), a
        error = a["offset_ns"] - TRUTH[key]
        assert abs(error) <= a["uncertainty_ns"] <= 20_000, (key, error, a)
    sessions = [a for a in report.alignment if "session_tracer" in a["file"]]
    assert [a["offset_ns"] for a in sessions] == [0, 0]  # wall clock: the reference and one kept as written
    # On the merged timeline every role's weight_sync starts at the step's true instant.
    rb = READERS[ext](out)
    worst = max(a["uncertainty_ns"] for a in placed.values())
    starts = {}
    for s in rb.slices:
        if s.name == "weight_sync":
            step = s.args.get("args", s.args)["global_step"]
            starts.setdefault(step, []).append(s.ts - (rb.realtime_base or 0))
    assert sorted(starts) == list(range(GEN.STEPS))
    base = report.time_base_unix_ns
    for step, found in starts.items():
        true = GEN.RUN_START_NS + step * GEN.STEP_NS + GEN.WEIGHT_SYNC_AT_NS - base
        assert len(found) == len(TRUTH)
        assert all(abs(ts - true) <= GEN.JITTER_US * 1000 + worst for ts in found), (step, found, true)


def test_the_clock_table_says_the_method_and_the_evidence(tmp_path: Path) -> None:
    out, saved = tmp_path / "out.pftrace", tmp_path / "report.json"
    result = runner.invoke(cli.app, ["merge", str(RUN), "-o", str(out), "--report", str(saved)])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "traces-r" in line]
    for label in ("master · rank 0", "actor · rank 0", "actor · rank 1"):
        [row] = [r for r in rows if r.startswith(label)]
        assert " sync " in row and "weight_sync (AReaL preset) starts in rollout/traces-r0.jsonl" in row, row
    assert "share no clock evidence" not in result.output
    entries = {who(a): a for a in json.loads(saved.read_text())["alignment"] if "perf_tracer" in a["file"]}
    assert entries["actor/1"]["against"].startswith(
        "fsdp_engine.update_weights_from_distributed, weight_sync (AReaL preset) starts in "
    )
    assert entries["master/0"]["confidence"] == "high"


def test_it_is_the_estimate_sync_gives_and_combines_with_sync(tmp_path: Path) -> None:
    auto = perf(merge([RUN], tmp_path / "a.pftrace"))
    asked = perf(merge([RUN], tmp_path / "b.pftrace", clocks=AlignOptions(sync=PERF_NAMES), phase_rules=_verl()))
    both = perf(merge([RUN], tmp_path / "c.pftrace", clocks=AlignOptions(sync=("weight_sync",))))
    numbers = ("method", "offset_ns", "uncertainty_ns", "anchors")
    for key in TRUTH:
        assert [auto[key][n] for n in numbers] == [asked[key][n] for n in numbers] == [both[key][n] for n in numbers]
    assert asked["actor/0"]["against"].startswith("fsdp_engine.update_weights_from_distributed, weight_sync (--sync)")
    assert both["actor/0"]["against"].startswith(
        "fsdp_engine.update_weights_from_distributed (AReaL preset); weight_sync (--sync) starts in"
    )


def _verl() -> PhaseOptions:
    return PhaseOptions(resolve("verl"))


def test_no_align_still_keeps_every_clock(tmp_path: Path) -> None:
    report = merge([RUN], tmp_path / "out.pftrace", clocks=AlignOptions(enabled=False))
    assert {(a["method"], a["offset_ns"]) for a in report.alignment} == {("raw", 0)}


def _without(tmp_path: Path, role: str, name: str) -> Path:
    """A copy of the run whose ``role`` files have no span ``name``."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    for path in run.rglob(f"perf_tracer/{role}/*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if json.loads(line)["name"] != name))
    return run


def test_a_role_without_weight_sync_is_said_unaligned(tmp_path: Path) -> None:
    run = _without(tmp_path, "actor", "weight_sync")  # the actors still share their engine spans
    saved = tmp_path / "report.json"
    result = runner.invoke(cli.app, ["merge", str(run), "-o", str(tmp_path / "out.pftrace"), "--report", str(saved)])
    assert result.exit_code == 0, result.output
    for label in ("actor · rank 0", "actor · rank 1"):
        [row] = [r for r in result.output.splitlines() if r.startswith(label)]
        assert " unrelated " in row and "no AReaL weight-update span in common with an aligned file" in row, row
    assert "2 file(s) share no clock evidence with the rest" in result.output
    entries = {who(a): a for a in json.loads(saved.read_text())["alignment"] if "perf_tracer" in a["file"]}
    assert [entries[k]["method"] for k in ("actor/0", "actor/1")] == ["unrelated", "unrelated"]
    assert {entries[k]["confidence"] for k in ("actor/0", "actor/1")} == {"none"}
    master = entries["master/0"]
    assert master["method"] == "sync" and abs(master["offset_ns"] - TRUTH["master/0"]) <= master["uncertainty_ns"]


def test_the_preset_applies_to_areal_runs_only(tmp_path: Path) -> None:
    # Other phase rules: the weight updates are no evidence, as before.
    other = perf(merge([RUN], tmp_path / "a.pftrace", phase_rules=_verl()))
    assert {k: a["method"] for k, a in other.items() if not k.startswith("rollout")} == dict.fromkeys(
        ("master/0", "actor/0", "actor/1"), "unrelated"
    )
    # Spans named weight_sync in a run without AReaL phases: the preset is not found, unless named.
    run = tmp_path / "plain"
    for rank in range(2):
        folder = run / "perf_tracer" / "actor"
        folder.mkdir(parents=True, exist_ok=True)
        spans = [
            {"name": "weight_sync", "ph": "X", "ts": 1_000 + rank * 800_000 + k * 2_000_000, "dur": 500, "pid": 7}
            for k in range(3)
        ]
        (folder / f"traces-r{rank}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    auto = merge([run], tmp_path / "b.pftrace")
    assert "sync" not in {a["method"] for a in auto.alignment}
    named = merge([run], tmp_path / "c.pftrace", phase_rules=PhaseOptions(resolve("areal")))
    [placed] = [a for a in named.alignment if a["method"] == "sync"]
    assert placed["anchors"] == 3 and placed["uncertainty_ns"] == 0
