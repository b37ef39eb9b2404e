"""Discovery: formats recognised by content, role and rank inferred from layout, names and content."""

from __future__ import annotations

import json
import re
from pathlib import Path

from builders import EPOCH_US, areal_jsonl, kineto

from tracemerge.discovery.discover import discover, path_hints
from tracemerge.pipeline import merge
from tracemerge.report.run_report import format_found


def found(root: Path) -> dict[str, tuple]:
    report = merge([root], root.parent / "out.pftrace")
    return {p.label: (p.role, p.rank, sorted(f.name for f in p.files)) for p in report.processes}


def test_role_from_directory_and_rank_from_distributed_info(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "actor" / "node-a.json", rank=5)
    kineto(tmp_path / "runs" / "critic" / "rank3.pt.trace.json.gz", rank=None, gz=True)
    assert found(tmp_path / "runs") == {
        "critic · rank 3": ("critic", 3, ["rank3.pt.trace.json.gz"]),
        "actor · rank 5": ("actor", 5, ["node-a.json"]),
    }


def test_content_rank_wins_over_file_name(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "actor" / "rank1.json", rank=6)
    assert list(found(tmp_path / "runs")) == ["actor · rank 6"]


def test_areal_perf_tracer_layout(tmp_path: Path) -> None:
    root = tmp_path / "trial"
    areal_jsonl(root / "perf_tracer" / "critic" / "traces-r2.jsonl")  # no rank/role in args
    areal_jsonl(root / "perf_tracer" / "master" / "traces-r0.jsonl", rank=0, role="master")
    areal_jsonl(root / "perf_tracer" / "traces-r1.jsonl", rank=1)  # pre-2025-12 layout, no role dir
    # perf_counter logs with no session records: placed by their files' modification times, no
    # evidence of their clocks, and titled so.
    assert found(root) == {
        "master · rank 0 (unaligned)": ("master", 0, ["traces-r0.jsonl"]),
        "critic · rank 2 (unaligned)": ("critic", 2, ["traces-r2.jsonl"]),
        "rank 1 (unaligned)": ("", 1, ["traces-r1.jsonl"]),
    }


def test_rank_patterns_in_file_and_directory_names() -> None:
    root = Path("/runs")
    assert path_hints(root / "x_rank4.json", root) == (None, 4)
    assert path_hints(root / "prof_rank-12.json.gz", root) == (None, 12)
    assert path_hints(root / "rank7" / "trace.json", root) == (None, 7)
    assert path_hints(root / "rollout" / "rank_2" / "trace.json", root) == ("rollout", 2)
    assert path_hints(root / "actor-rollout-ref_actor-update_step2_rank1-of-8_pid123_20260101.json.gz", root) == (
        "actor-rollout-ref",
        1,
    )
    assert path_hints(root / "perf_tracer" / "ref" / "traces-r3.jsonl", root) == ("ref", 3)
    assert path_hints(root / "resnet_r50.json", root) == (None, None)


def test_format_is_recognised_by_content_not_name(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "actor" / "dump.txt", rank=0)
    (tmp_path / "runs" / "config.json").write_text(json.dumps({"lr": 0.1}))
    (tmp_path / "runs" / "notes.md").write_text("# not a trace")
    (tmp_path / "runs" / ".hidden").mkdir()
    kineto(tmp_path / "runs" / ".hidden" / "rank9.json", rank=9)
    d = discover([tmp_path / "runs"])
    assert [c.path.name for c in d.candidates] == ["dump.txt"]
    assert sorted(p.name for p in d.ignored) == ["config.json", "notes.md"]
    assert d.skipped == []


def test_several_files_for_one_rank_are_all_kept_in_time_order(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    kineto(root / "actor" / "rank0_step2.json", rank=0, t0_us=EPOCH_US + 5_000_000, names=("late",))
    kineto(root / "actor" / "rank0_step1.json", rank=0, t0_us=EPOCH_US, names=("early",))
    report = merge([root], tmp_path / "out.pftrace")
    [proc] = report.processes
    assert [f.name for f in proc.files] == ["rank0_step1.json", "rank0_step2.json"]
    assert proc.read.slices == proc.written.slices == 2


def test_overlapping_files_of_one_rank_keep_separate_threads(tmp_path: Path) -> None:
    from readback import read_pftrace

    root = tmp_path / "runs"
    kineto(root / "actor" / "rank0_a.json", rank=0, names=("x", "y"))
    kineto(root / "actor" / "rank0_b.json", rank=0, t0_us=EPOCH_US + 25, names=("z",))
    out = tmp_path / "out.pftrace"
    merge([root], out)
    rb = read_pftrace(out)
    assert rb.thread_names("actor · rank 0") == {
        "CPU thread 11 (python)",
        "CPU thread 11 (python) (rank0_b.json)",
    }


def test_file_without_any_rank_gets_a_process_of_its_own(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "misc" / "trace.json")
    kineto(tmp_path / "runs" / "misc" / "other.json", names=("c", "d"))
    # "misc" reads as no role: each process is named by its file alone
    assert sorted(found(tmp_path / "runs")) == ["other.json", "trace.json"]


# A folder names a role only when it reads as one: a folder of no known layout names nothing, and
# the process is named by what the file says (distributedInfo.rank, else a rank word in its name).
def test_folders_of_no_known_layout_name_no_process(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "misc" / "trace.json", rank=0)
    assert found(tmp_path / "runs") == {"rank 0": ("", 0, ["trace.json"])}
    kineto(tmp_path / "experiments" / "2026-11-30" / "rank0.json")
    assert found(tmp_path / "experiments") == {"rank 0": ("", 0, ["rank0.json"])}
    kineto(tmp_path / "my_job" / "profile" / "worker3.pt.trace.json", rank=3)
    assert found(tmp_path / "my_job") == {"rank 3": ("", 3, ["worker3.pt.trace.json"])}
    kineto(tmp_path / "my_job2" / "profile" / "worker3.pt.trace.json")  # nothing says a rank
    assert found(tmp_path / "my_job2") == {"worker3.pt.trace.json": ("", None, ["worker3.pt.trace.json"])}


def test_rank_zero_of_two_folders_is_told_apart_by_its_os_process(tmp_path: Path) -> None:
    # Two folders of files of no layout may be two jobs: a role-less rank is then named with the
    # OS process its trace states, so two jobs' rank 0 stay apart ...
    kineto(tmp_path / "runs" / "baseline" / "trace.json", rank=0, pid=4242)
    kineto(tmp_path / "runs" / "tuned" / "trace.json", rank=0, pid=5151, names=("c",))
    report = merge([tmp_path / "runs"], tmp_path / "runs.pftrace")
    assert [(p.label, p.role, p.rank, p.files) for p in report.processes] == [
        ("rank 0 · pid 4242", "", 0, [tmp_path / "runs" / "baseline" / "trace.json"]),
        ("rank 0 · pid 5151", "", 0, [tmp_path / "runs" / "tuned" / "trace.json"]),
    ]
    table = format_found(report).splitlines()[2:]  # the run table: the rank column says which
    assert [re.split(r"\s{2,}", row)[:2] for row in table] == [["-", "0 · pid 4242"], ["-", "0 · pid 5151"]]
    # ... and two captures of one process (one per step) stay one process.
    kineto(tmp_path / "steps" / "step1" / "rank0.json", pid=4242)
    kineto(tmp_path / "steps" / "step2" / "rank0.json", pid=4242, t0_us=EPOCH_US + 5_000_000)
    report = merge([tmp_path / "steps"], tmp_path / "steps.pftrace")
    assert [(p.label, [f.parent.name for f in p.files]) for p in report.processes] == [
        ("rank 0 · pid 4242", ["step1", "step2"])
    ]
    assert report.processes[0].written.slices == 4


def test_files_without_a_rank_in_two_folders_are_named_by_as_much_path_as_tells_them_apart(
    tmp_path: Path,
) -> None:
    kineto(tmp_path / "runs" / "a" / "trace.json")
    kineto(tmp_path / "runs" / "b" / "trace.json", names=("c",))
    kineto(tmp_path / "runs" / "b" / "other.json", names=("d",))
    assert sorted(found(tmp_path / "runs")) == ["a/trace.json", "b/trace.json", "other.json"]


def test_a_role_folder_still_names_its_role_beside_folders_of_no_layout(tmp_path: Path) -> None:
    kineto(tmp_path / "runs" / "actor" / "trace.json", rank=0, pid=4242)
    kineto(tmp_path / "runs" / "misc" / "trace.json", rank=0, pid=5151)
    kineto(tmp_path / "runs" / "old" / "trace.json", rank=0, pid=6161)
    assert sorted(found(tmp_path / "runs")) == ["actor · rank 0", "rank 0 · pid 5151", "rank 0 · pid 6161"]


def test_a_told_apart_rank_shows_the_host_its_torch_worker_name_gives(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    kineto(runs / "a" / "node-7_4242.1764590400123.pt.trace.json", rank=0, pid=4242)
    # HTA's renamed sample: shaped like {host}_{pid}.<time>, but 41 is not the trace's pid
    kineto(runs / "b" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json", rank=34, pid=1074)
    assert sorted(found(runs)) == ["rank 0 · node-7 · pid 4242", "rank 34 · pid 1074"]
