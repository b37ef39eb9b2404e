"""The layouts the RL frameworks write at the end of 2026, merged with no flags
(fixtures/frameworks/{verl_ray,slime,verl_ascend}, laid out by fixtures/make_layouts.py): each file
in its role/rank process, no process named after a folder that is no role, the Ascend runs'
metadata used, copies merged once."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from conftest import FIXTURES, ROOT
from readback import read_pftrace

from tracemerge.pipeline import merge

FRAMEWORKS = FIXTURES / "frameworks"
RAY = FRAMEWORKS / "verl_ray" / "save_path"
SLIME = FRAMEWORKS / "slime" / "tensorboard"
MSTX = FRAMEWORKS / "verl_ascend" / "mstx_profile"
NSYS = FIXTURES / "nsys" / "verl"
CORPUS_TEXT = ROOT.parent / "shared" / "corpus" / "ascend" / "msinsight" / "test" / "data" / "pytorch" / "text"


def _files(report) -> dict[str, list[str]]:
    return {p.label: sorted(f"{f.parent.name}/{f.name}" for f in p.files) for p in report.processes}


def _phases(out: Path) -> dict[str, list[tuple[str, int, int]]]:
    rb = read_pftrace(out).set_derived_apart()
    return {
        label: sorted((s.name, s.ts, s.dur) for s in slices if s.name != "idle")
        for (label, track), slices in rb.derived.items()
        if track == "Phases"
    }


RAY_PROCESSES = {
    "rollout · replica 0 · tp 0": [
        "vllm_server_0_0_k7q2m/k7q2m-rank-0.1795010599873412655.pt.trace.json.gz",
        "vllm_server_0_0_k7q2m/node1_48733.async_llm.1795010599912377410.pt.trace.json.gz",
    ],
    "rollout · replica 0 · tp 1": ["vllm_server_0_0_k7q2m/k7q2m-rank-1.1795010599874020931.pt.trace.json.gz"],
    "rollout · replica 1 · tp 0": [
        "sglang_server_1_0_s5m2/1795010599.512834-TP-0-DP-0-DECODE.trace.json.gz",
        "sglang_server_1_0_s5m2/1795010599.512834-TP-0-DP-0-EXTEND.trace.json.gz",
    ],
    "rollout · replica 1 · tp 1": ["sglang_server_1_0_s5m2/1795010599.512834-TP-1-DP-0-EXTEND.trace.json.gz"],
    # a decode server whose folder holds its frontend only
    "rollout · replica 2 · decode · node 1 · frontend": [
        "vllm_server_decode_2_1/node1_49012.async_llm.1795010599920561873.pt.trace.json.gz"
    ],
    "rollout · replica 2 · prefill · tp 1": [
        "vllm_server_prefill_2_0/w2d8x-rank-1.1795010599881946380.pt.trace.json.gz"
    ],
    "reward · replica 0 · tp 0": ["vllm_server_reward_0_0_r8k1/w2d8x-rank-0.1795010599881504117.pt.trace.json.gz"],
    # older vLLM workers: the local rank is the file's distributedInfo.rank
    "teacher · replica 0 · tp 0": ["vllm_server_teacher_0_0_t3x9p/node1_48861.1795010599866095227.pt.trace.json.gz"],
    "teacher · replica 0 · tp 1": ["vllm_server_teacher_0_0_t3x9p/node1_48862.1795010599866731804.pt.trace.json.gz"],
}


def test_ray_actor_named_rollout_folders_merge_into_role_and_replica_processes(tmp_path: Path) -> None:
    out = tmp_path / "m.pftrace"
    report = merge([RAY], out)
    assert [p.label for p in report.processes] == list(RAY_PROCESSES)
    assert _files(report) == RAY_PROCESSES
    assert {p.label: p.coords for p in report.processes}["rollout · replica 2 · prefill · tp 1"] == {
        "tp": 1,
        "replica": 2,
        "node": 0,
    }
    assert report.exit_code == 0 and not report.ignored and not report.skipped
    # every engine capture is its replica's generation, over the file's whole extent
    phases = _phases(out)
    assert {label: {name for name, _, _ in found} for label, found in phases.items()} == {
        label: {"generate"} for label in RAY_PROCESSES
    }


def test_slime_targets_are_the_actor_ranks(tmp_path: Path) -> None:
    report = merge([SLIME], tmp_path / "m.pftrace")
    assert _files(report) == {
        f"actor · rank {r}": sorted(
            f"tensorboard/{name}"
            for name in (
                f"train_overall_rank_{r}.{1795076571204 + 3 * r}.pt.trace.json.gz",
                f"train_log_probs_rank_{r}.{1768873267332 + 4 * r}.pt.trace.json.gz",
                f"train_actor_rank_{r}.{1768873269815 + 4 * r}.pt.trace.json.gz",
            )
        )
        for r in (0, 1)
    }
    assert report.exit_code == 0


ASCEND_RUNS = {
    "rollout · replica 0 · tp 0": ["node1_61001_20261201120000100_ascend_pt"],
    "rollout · replica 0 · tp 1": ["node1_61002_20261201120000101_ascend_pt"],
    "ref · rank 0": ["node1_60001_20261201120003100_ascend_pt"],
    "ref · rank 1": ["node1_60002_20261201120003103_ascend_pt"],
    "actor · rank 0": ["node1_60001_20261201120002100_ascend_pt", "node1_60001_20261201120004100_ascend_pt"],
    "actor · rank 1": ["node1_60002_20261201120002102_ascend_pt", "node1_60002_20261201120004104_ascend_pt"],
}


def _run_of(path: Path) -> str:
    return next(p.name for p in path.parents if p.name.endswith("_ascend_pt"))


def _extent(trace_view: Path) -> tuple[int, int]:
    """A trace_view.json's first start and last end in ns, read by the test itself."""
    events = [e for e in orjson.loads(trace_view.read_bytes()) if "ts" in e]
    starts = [int(Decimal(e["ts"]) * 1000) for e in events]
    ends = [int(Decimal(e["ts"]) * 1000 + Decimal(str(e.get("dur", 0))) * 1000) for e in events]
    return min(starts), max(ends)


def test_verl_on_ascend_stage_and_replica_folders(tmp_path: Path) -> None:
    out = tmp_path / "m.pftrace"
    report = merge([MSTX], out)
    assert [p.label for p in report.processes] == list(ASCEND_RUNS)
    assert {p.label: sorted(_run_of(f) for f in p.files) for p in report.processes} == ASCEND_RUNS
    assert {p.label: p.coords for p in report.processes}["rollout · replica 0 · tp 1"] == {"replica": 0}
    phases = _phases(out)
    for stage, run, phase, label in (
        ("actor_compute_log_prob", "node1_60001_20261201120002100_ascend_pt", "old_log_prob", "actor · rank 0"),
        ("actor_update", "node1_60001_20261201120004100_ascend_pt", "update_actor", "actor · rank 0"),
        ("ref_compute_log_prob", "node1_60002_20261201120003103_ascend_pt", "ref", "ref · rank 1"),
        (
            "agent_loop_rollout_replica_0",
            "node1_61002_20261201120000101_ascend_pt",
            "generate",
            "rollout · replica 0 · tp 1",
        ),
    ):
        start, end = _extent(MSTX / stage / run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
        assert [(n, ts, dur) for n, ts, dur in phases[label] if n == phase] == [(phase, start, end - start)], stage


def test_ascend_run_metadata_is_listed_as_used_not_ignored(tmp_path: Path) -> None:
    report = merge([MSTX], tmp_path / "m.pftrace")
    assert report.ignored == []
    assert len(report.used) == 16  # profiler_info_<rank>.json and profiler_metadata.json of 8 runs
    run = MSTX / "actor_update" / "node1_60002_20261201120004104_ascend_pt"
    assert (
        f"{run / 'profiler_info_1.json'}: Ascend run metadata: rank 1, collected 2026-01-01T00:00:00.003500Z to "
        "2026-01-01T00:00:00.005000Z" in report.used
    )
    assert f"{run / 'profiler_metadata.json'}: Ascend run metadata: no role (ENV_VARIABLES)" in report.used
    assert report.as_dict()["used_files"] == report.used


def test_anything_else_beside_an_ascend_trace_is_ignored_once(tmp_path: Path) -> None:
    root = tmp_path / "mstx_profile"
    shutil.copytree(MSTX / "actor_update", root / "actor_update")
    run = root / "actor_update" / "node1_60001_20261201120004100_ascend_pt"
    (run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Step Id,Name\n1,MatMulV2\n")
    report = merge([root], tmp_path / "m.pftrace")
    assert report.ignored == [run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"]
    assert len(report.used) == 4


def test_a_copied_ascend_run_is_merged_once_and_named(tmp_path: Path) -> None:
    root = tmp_path / "mstx_profile"
    shutil.copytree(MSTX / "actor_update", root / "actor_update")
    alone = merge([root], tmp_path / "a.pftrace")
    run = "node1_60001_20261201120004100_ascend_pt"
    shutil.copytree(root / "actor_update" / run, root / "copied" / run)
    report = merge([root], tmp_path / "m.pftrace")
    kept = root / "actor_update" / run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    copy = root / "copied" / run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    assert report.notes == [f"{copy}: the same bytes as {kept}, read once"]
    assert [p.label for p in report.processes] == ["actor · rank 0", "actor · rank 1"]
    assert report.written.as_dict() == alone.written.as_dict()
    assert report.stats.tally()["file_same_content"]["count"] == 1


def test_verl_nsys_exports_keep_role_host_and_action_in_their_names(tmp_path: Path) -> None:
    shutil.copy(NSYS / "actor_rollout_ref_node1_worker_process_4242.sqlite", tmp_path / "worker_process_4242.3.sqlite")
    shutil.copy(
        NSYS / "actor_rollout_ref_node2_worker_process_5151.sqlite",
        tmp_path / "actor_rollout_ref_node2_worker_process_5151.7.sqlite",
    )
    report = merge([tmp_path], tmp_path / "m.pftrace")
    assert _files(report) == {
        "actor_rollout_ref · rank 1": [f"{tmp_path.name}/actor_rollout_ref_node2_worker_process_5151.7.sqlite"],
        "rank 0": [f"{tmp_path.name}/worker_process_4242.3.sqlite"],  # Ray's own name gives no role
    }


@pytest.mark.skipif(not CORPUS_TEXT.is_dir(), reason=f"no corpus at {CORPUS_TEXT}")
def test_real_ascend_runs_laid_out_as_verl_on_ascend(tmp_path: Path) -> None:
    root = tmp_path / "mstx_profile"
    for level, stage in (("level0", "actor_update"), ("level1", "agent_loop_rollout_replica_0")):
        for rank in (0, 1):
            shutil.copytree(
                CORPUS_TEXT / level / f"rank{rank}_ascend_pt",
                root / stage / f"node1_{700 + rank}_20250109120000000_ascend_pt",
            )
    report = merge([root], tmp_path / "m.pftrace")
    assert [p.label for p in report.processes] == [
        "rollout · replica 0 · tp 0",
        "rollout · replica 0 · tp 1",
        "actor · rank 0",
        "actor · rank 1",
    ]
    assert not any(p.name.startswith("profiler_") for p in report.ignored)
    assert sum(u.split(": ")[0].endswith(".json") for u in report.used) == len(report.used) >= 4


@pytest.mark.parametrize(
    ("run", "export"),
    [
        ("db/actor_update/host_101_20260101000000000_ascend_pt", "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"),
        (
            "prof/PROF_000001_20260101000000000_ABCDEFGHIJKLMNOP",
            "mindstudio_profiler_output/msprof_20260101000000.json",
        ),
    ],
)
def test_a_copied_db_run_or_msprof_text_export_is_merged_once(tmp_path: Path, run: str, export: str) -> None:
    src = FIXTURES / "ascend" / run
    first, second = tmp_path / "in" / "a" / src.name, tmp_path / "in" / "b" / src.name
    shutil.copytree(src, first)
    alone = merge([first], tmp_path / "a.pftrace")
    shutil.copytree(src, second)
    report = merge([tmp_path / "in"], tmp_path / "m.pftrace")
    assert report.notes == [f"{second / export}: the same bytes as {first / export}, read once"]
    assert [p.files for p in report.processes] == [[first / export]]
    assert report.written.as_dict() == alone.written.as_dict()
