"""Folders as the frameworks write them (fixtures/frameworks, genuine torch.profiler recordings laid
out under verl's, its rollout engines' and SkyRL's exact names), merged with no flags: each file in
its (role, rank) process, steps and stages from the names, parallel coordinates kept."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import orjson
from conftest import FIXTURES
from expected import kineto_file
from readback import read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge

FRAMEWORKS = FIXTURES / "frameworks"
VERL = FRAMEWORKS / "verl" / "save_path"
ENGINE_GLOBAL6 = "rollout-replica3-globalrank6_w2d8x-rank-0.1795010599881504117.pt.trace.json.gz"

# The processes of the verl save_path, in the trace's order (rollout first, ranks before labels,
# replicas in numeric order), each with its files.
VERL_PROCESSES = {
    "rollout · rank 6": [ENGINE_GLOBAL6, "rollout-replica3_node1_49012.async_llm.1795010599920561873.pt.trace.json.gz"],
    "rollout · rank 7": ["rollout-replica3-globalrank7_w2d8x-rank-1.1795010599881946380.pt.trace.json.gz"],
    "rollout · replica 0 · tp 0": [
        "k7q2m-rank-0.1795010599873412655.pt.trace.json.gz",
        "node1_48733.async_llm.1795010599912377410.pt.trace.json.gz",
    ],
    "rollout · replica 0 · tp 1": ["k7q2m-rank-1.1795010599874020931.pt.trace.json.gz"],
    "rollout · replica 1 · tp 0": ["node1_48861.1795010599866095227.pt.trace.json.gz"],
    "rollout · replica 1 · tp 1": ["node1_48862.1795010599866731804.pt.trace.json.gz"],
    "rollout · replica 2 · tp 0": [
        "1795010599.512834-TP-0-DP-0-EXTEND.trace.json.gz",
        "1795010599.512834-TP-0-DP-0-DECODE.trace.json.gz",
    ],
    "rollout · replica 2 · tp 1": ["1795010599.512834-TP-1-DP-0-EXTEND.trace.json.gz"],
    "actor-rollout-ref · rank 0": [
        "actor-rollout-ref_train_step1_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140321457.json.gz",
        "actor-rollout-ref_train_step2_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140409118.json.gz",
    ],
    "actor-rollout-ref · rank 1": [
        "actor-rollout-ref_train_step1_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140321463.json.gz",
        "actor-rollout-ref_train_step2_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140409121.json.gz",
    ],
    "ref · rank 0": [
        "ref_ref-compute-log-prob_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140453017_part0.json.gz",
        "ref_ref-compute-log-prob_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140453017_part1.json.gz",
    ],
    "ref · rank 1": [
        "ref_ref-compute-log-prob_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140453021_part0.json.gz",
        "ref_ref-compute-log-prob_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140453021_part1.json.gz",
    ],
    "actor · rank 0": [
        "actor_actor-compute-log-prob_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140452306_mb0-3.json.gz",
        "actor_actor-update_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140453774.json.gz",
        "actor_forward-backward_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140454611_mb0.json.gz",
        "actor_forward-backward_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid48211_20261118140454611_mb1.json.gz",
    ],
    "actor · rank 1": [
        "actor_actor-compute-log-prob_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140452309_mb0-3.json.gz",
        "actor_actor-update_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140453779.json.gz",
        "actor_forward-backward_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140454615_mb0.json.gz",
        "actor_forward-backward_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid48305_20261118140454615_mb1.json.gz",
    ],
    "rank 0": ["train-batch_step3_rank0-of-2_pid48211_20261118140454290.json.gz"],
    "rank 1": ["train-batch_step3_rank1-of-2_pid48305_20261118140454296.json.gz"],
}


def _files(report) -> dict[str, list[str]]:
    return {p.label: sorted(f.name for f in p.files) for p in report.processes}


def _extent(path: Path) -> tuple[int, int]:
    """A Kineto file's first start and last end, in ns, read by the test's own oracle."""
    found = kineto_file(path)
    starts = [ts for _, ts, _ in found.slices] + [ts for _, ts in found.instants]
    ends = [ts + dur for _, ts, dur in found.slices] + [ts for _, ts in found.instants]
    return min(starts), max(ends)


def test_verl_save_path_merges_into_rollout_and_training_processes(tmp_path: Path) -> None:
    report = merge([VERL], tmp_path / "m.pftrace")
    assert [p.label for p in report.processes] == list(VERL_PROCESSES)
    assert _files(report) == {label: sorted(files) for label, files in VERL_PROCESSES.items()}
    # The nsys reports are named with the command that makes them readable (not passed over).
    assert sorted(report.skipped) == [
        f"{VERL / name}: an Nsight Systems report: export it first with nsys export --type sqlite "
        f"-o {stem}.sqlite {name}"
        for stem in ("actor_rollout_ref_node1_worker_process_48211", "actor_rollout_ref_node1_worker_process_48305.1")
        for name in [f"{stem}.nsys-rep"]
    ]
    assert sorted(p.name for p in report.ignored) == ["profiler_out_0.txt", "step1_rank0-memory-snapshot.pickle"]
    assert report.exit_code == 3


def test_an_engine_traces_local_rank_gives_way_to_the_global_rank_in_its_name(tmp_path: Path) -> None:
    top = json.loads(gzip.decompress((VERL / ENGINE_GLOBAL6).read_bytes()))
    assert top["distributedInfo"]["rank"] == 0  # engine-local
    report = merge([VERL / ENGINE_GLOBAL6], tmp_path / "m.pftrace")
    assert [p.label for p in report.processes] == ["rollout · rank 6"]


def test_steps_and_stages_come_from_the_names(tmp_path: Path) -> None:
    rb = read_pftrace(_merged(tmp_path)).set_derived_apart()
    phases = {
        label: sorted(
            (s.name, s.args["args"]["step"], s.ts, s.dur) for s in rb.derived[(label, "Phases")] if s.name != "idle"
        )
        for label in ("actor · rank 0", "actor-rollout-ref · rank 1")
    }
    # A discrete-mode stage file is its phase over its whole extent (the actor_update span inside
    # it is that phase too, and does not nest in itself); every file of it is step 3.
    update = VERL / VERL_PROCESSES["actor · rank 0"][1]
    start, end = _extent(update)
    assert ("update_actor", 3, start, end - start) in phases["actor · rank 0"]
    assert [p for p in phases["actor · rank 0"] if p[0] == "update_actor"] == [("update_actor", 3, start, end - start)]
    assert {p[1] for p in phases["actor · rank 0"]} == {3}
    log_prob = VERL / VERL_PROCESSES["actor · rank 0"][0]
    start, end = _extent(log_prob)
    assert ("old_log_prob", 3, start, end - start) in phases["actor · rank 0"]
    # train scope: the file is step S; its phases are the spans inside it (generate_sequences is generate)
    assert {p[1] for p in phases["actor-rollout-ref · rank 1"]} == {1, 2}
    assert {p[0] for p in phases["actor-rollout-ref · rank 1"]} >= {"generate", "update_actor"}
    steps = rb.derived[("Pipeline", "Steps")]
    assert sorted(s.name for s in steps) == ["step 1", "step 2", "step 3"]
    # An engine replica's capture is its generation.
    engine = rb.derived[("rollout · replica 0 · tp 1", "Phases")]
    start, end = _extent(VERL / "agent_loop_rollout_replica_0" / VERL_PROCESSES["rollout · replica 0 · tp 1"][0])
    assert [(s.name, s.ts, s.dur) for s in engine if s.name != "idle"] == [("generate", start, end - start)]


def test_tracker_step_n_lands_on_the_step_the_names_call_n(tmp_path: Path) -> None:
    run = tmp_path / "save_path"
    shutil.copytree(VERL, run)
    lines = [{"step": n, "data": {"timing_s/step": 10.0 * n}} for n in (1, 2, 3)]  # verl's global_steps: from 1
    (run / "tracker.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    rb = read_pftrace(_merged(tmp_path, run)).set_derived_apart()
    steps = {s.name: s.args["args"] for s in rb.derived[("Pipeline", "Steps")]}
    assert {name: args["timing_s/step"] for name, args in steps.items()} == {
        "step 1": 10.0,
        "step 2": 20.0,
        "step 3": 30.0,
    }


def test_parallel_coordinates_are_process_labels_and_report_columns(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    report = merge([VERL], out)
    coords = {p.label: p.coords for p in report.processes}
    assert coords["actor · rank 1"] == {"tp": 0, "pp": 0, "dp": 1, "cp": 0, "world": 2}
    assert coords["rollout · rank 7"] == {"replica": 3, "tp": 1}
    assert coords["rollout · replica 2 · tp 0"] == {"replica": 2, "tp": 0, "dp": 0}
    assert coords["rank 0"] == {"world": 2}
    labels = {
        e["pid"]: e["args"]["labels"]
        for e in orjson.loads(out.read_bytes())["traceEvents"]
        if e.get("name") == "process_labels"
    }
    names = read_chrome_json(out).processes
    assert labels[next(pid for pid, name in names.items() if name == "actor · rank 1")] == "tp 0,pp 0,dp 1,cp 0,world 2"


def test_where_keeps_the_processes_whose_names_give_those_coordinates(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, [str(VERL), "-o", str(tmp_path / "m.pftrace"), "--where", "dp=1", "-q"])
    assert result.exit_code == 3  # the nsys reports
    rb = read_pftrace(tmp_path / "m.pftrace").set_derived_apart()
    assert sorted(rb.processes.values()) == ["actor · rank 1", "actor-rollout-ref · rank 1", "ref · rank 1"]
    bad = CliRunner().invoke(cli.app, [str(VERL), "-o", str(tmp_path / "x.pftrace"), "--where", "zz=1"])
    assert bad.exit_code == 2
    assert "--where: 'zz=1' is not KEY=VALUES" in bad.output


def test_split_by_dp_writes_a_part_per_value(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, [str(VERL), "-o", str(tmp_path / "m.pftrace"), "--split-by", "dp", "-q"])
    assert result.exit_code == 3, result.output
    index = orjson.loads((tmp_path / "m.index.json").read_bytes())
    groups = {part["group"]: sorted(part["processes"]) for part in index["traces"]}
    assert groups["dp0"] == [
        "actor · rank 0",
        "actor-rollout-ref · rank 0",
        "ref · rank 0",
        "rollout · replica 2 · tp 0",
        "rollout · replica 2 · tp 1",
    ]
    assert groups["dp1"] == ["actor · rank 1", "actor-rollout-ref · rank 1", "ref · rank 1"]
    assert "rollout · rank 6" in groups["dp-none"] and "rank 0" in groups["dp-none"]


def test_older_verl_stage_folders(tmp_path: Path) -> None:
    root = FRAMEWORKS / "verl_old" / "save_path"
    report = merge([root], tmp_path / "m.pftrace")
    assert _files(report) == {
        "actor · rank 0": [
            "actor_prof_rank-0_31544_20260120094107332.json.gz",
            "actor_prof_rank-0_31544_20260120094109815.json.gz",
        ],
        "actor · rank 1": ["actor_prof_rank-1.json.gz", "actor_prof_rank-1_31602_20260120094107336.json.gz"],
    }
    rb = read_pftrace(tmp_path / "m.pftrace").set_derived_apart()
    update = root / "actor_update" / "actor_prof_rank-1.json.gz"
    start, end = _extent(update)
    phases = [(s.name, s.ts, s.dur) for s in rb.derived[("actor · rank 1", "Phases")] if s.name == "update_actor"]
    assert phases == [("update_actor", start, end - start)]


def test_skyrl_policy_ranks(tmp_path: Path) -> None:
    report = merge([FRAMEWORKS / "skyrl" / "save_path"], tmp_path / "m.pftrace")
    assert _files(report) == {
        "policy · rank 0": ["rank0.1795076571204518733.pt.trace.json"],
        "policy · rank 1": ["rank1.1795076571207390264.pt.trace.json"],
    }
    assert report.exit_code == 0


def _merged(tmp_path: Path, run: Path = VERL) -> Path:
    out = tmp_path / "m.pftrace"
    merge([run], out)
    return out


def test_trace_processor_reads_the_coordinates_as_process_args(tmp_path: Path) -> None:
    from test_perfetto_conformance import open_trace_processor

    # Perfetto's JSON importer ignores process_labels (the .json carries them for Chrome's viewer,
    # checked above); the .pftrace's ProcessDescriptor.process_labels are process args.
    for suffix in (".pftrace",):
        out = tmp_path / f"m{suffix}"
        merge([VERL], out)
        with open_trace_processor() as tp:
            tp.load(out)
            rows = tp.query(
                "select a.key, a.display_value from process p join args a using(arg_set_id) "
                "where p.name = 'rollout · replica 2 · tp 0' and a.key like 'chrome.process_label%' order by a.key"
            )
            problems = tp.query("select name from stats where severity in ('error', 'data_loss') and value > 0")
        assert [r["display_value"] for r in rows] == ["tp 0", "dp 0", "replica 2"], suffix
        assert problems == [], suffix
