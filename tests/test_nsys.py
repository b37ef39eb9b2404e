"""Nsight Systems SQLite exports and .nsys-rep reports: tracks, exact times, flows, ranks, clocks,
phases and every row written or counted (fixtures/make_nsys.py writes the fixtures; the corpus
exports in ../shared/corpus/nsys are checked when present).

Expectations are computed here from the exports with SQL and the standard library, not with
tracemerge's readers.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import sys
import time
import urllib.parse
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, assert_spilling_changes_nothing, unavailable
from readback import Readback, read_chrome_json, read_pftrace

from tracemerge.pipeline import merge
from tracemerge.viewer.check import check_trace
from tracemerge.viewer.trace_processor import TraceProcessorUnavailable

NSYS = FIXTURES / "nsys"
TORCHRUN = NSYS / "torchrun" / "train_2gpu.sqlite"
VERL = NSYS / "verl"
NODE1 = VERL / "actor_rollout_ref_node1_worker_process_4242.sqlite"
NODE2 = VERL / "actor_rollout_ref_node2_worker_process_5151.sqlite"
BAD = NSYS / "bad"
SKEW_NS = json.loads((NSYS / "truth.json").read_text())["skew_ns"]
CORPUS = ROOT.parent / "shared" / "corpus" / "nsys" / "nsys-ai" / "tests" / "fixtures"
LAUNCH_NOT_CAPTURED = (
    "nsys GPU work whose CUDA runtime call is not in the export (launched before the capture): no flow"
)


def rows(db: Path, sql: str, *params: object) -> list[tuple]:
    con = sqlite3.connect("file:" + urllib.parse.quote(str(db)) + "?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def utc(db: Path) -> int:
    return rows(db, "select utcEpochNs from TARGET_INFO_SESSION_START_TIME")[0][0]


def merged(tmp_path: Path, *inputs: Path, ext: str = ".pftrace", **kw: object) -> tuple[Readback, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"out{ext}"
    report = merge(list(inputs), out, **kw)
    rb = read_pftrace(out) if ext == ".pftrace" else read_chrome_json(out)
    return rb.set_derived_apart(), report


def per_track(rb: Readback, label: str, instants: bool = False) -> Counter:
    pid = rb.pid_of(label)
    events = rb.instants if instants else rb.slices
    return Counter(rb.threads[s.track][1] for s in events if rb.threads[s.track][0] == pid)


def stats(report) -> dict[str, int]:
    return {name: entry["count"] for name, entry in report.as_dict()["stats"].items()}


# -- one report, two ranks (torchrun under nsys) ---------------------------------------------------


def test_torchrun_report_is_one_process_per_gpu_with_its_tracks(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, TORCHRUN)
    assert list(rb.processes.values()) == ["rank 0", "rank 1"]  # no RANK captured: the GPU each used
    for rank, pid in enumerate((301, 302)):
        assert per_track(rb, f"rank {rank}") == {
            f"CPU thread {pid} (python3)": 3 * 13,  # per step: 4 NVTX ranges, 9 runtime calls
            f"CPU thread {pid + 10} (pt_autograd_0)": 3,  # aten::mm_backward
            "NVTX ranges across threads": 3,  # backward: opened on main, closed on autograd
            f"GPU {rank} stream 7 (null stream)": 3 * 5 + 1,  # gemm, 2 graph kernels, memcpy, memset; + one
            f"GPU {rank} stream 13": 3,  # the NCCL all-reduces
            f"GPU {rank} stream 7 sync": 3,
            f"GPU {rank} sync": 3,  # cudaDeviceSynchronize: the context
            f"Profiler overhead (thread {pid + 30})": 1,
            f"Profiler overhead (thread {pid})": 1,
        }
        assert per_track(rb, f"rank {rank}", instants=True) == {
            f"CPU thread {pid} (python3)": 3 + (rank == 0),  # marks; rank 0's unended optimizer.step
            f"GPU {rank} stream 7 (null stream)": 2,  # CUDA events (step 0's was not collected)
        }
    assert report.exit_code == 0
    assert stats(report) == {"nsys_rows_not_drawn": 7, "nsys_launch_not_captured": 2, "nsys_range_without_end": 1}


def test_kernels_and_every_gpu_row_are_at_their_exact_wall_clock_ns(tmp_path: Path) -> None:
    rb, _ = merged(tmp_path, TORCHRUN)
    base = utc(TORCHRUN)
    by_process = defaultdict(Counter)
    for s in rb.slices:
        pid, track = rb.threads[s.track]
        if track.startswith("GPU") and not track.endswith("sync"):
            by_process[rb.processes[pid]][(s.ts, s.dur)] += 1
    for rank, pid in enumerate((301, 302)):
        expected = Counter()
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            for start, end in rows(
                TORCHRUN, f"select start, end from {table} where (globalPid >> 24) & 16777215 = ?", pid
            ):
                expected[(base + start, end - start)] += 1
        assert by_process[f"rank {rank}"] == expected


def test_emit_nvtx_texts_are_named_as_the_op_with_its_ids_as_args(tmp_path: Path) -> None:
    rb, _ = merged(tmp_path, TORCHRUN)
    linear = sorted((s.ts, s.args["args"]) for s in rb.slices if s.name == "aten::linear")
    assert [a for _, a in linear[::2]] == [
        {"seq": 10, "op_id": 100},
        {"seq": 11, "op_id": 110},
        {"seq": 12, "op_id": 120},
    ]
    addmm = next(s for s in rb.slices if s.name == "aten::addmm")
    assert addmm.args["args"] == {"op_id": 101, "sizes": "[[16], [8, 32], [32, 16]]"}
    assert not [s.name for s in rb.slices if "op_id" in s.name]


def test_nvtx_domains_categories_payloads_marks_and_ranges_across_threads(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, TORCHRUN)
    nccl = [s for s in rb.slices if s.name == "ncclAllReduce"]  # a registered string (textId)
    assert len(nccl) == 6 and {s.cat for s in nccl} == {"NCCL"} and {s.args["args"]["payload"] for s in nccl} == {4096}
    loading = [s for s in rb.slices if s.name == "data_loading"]
    assert {json.dumps(s.args["args"], sort_keys=True) for s in loading} == {
        '{"category": "io", "json": "{\\"batch\\":8}"}'
    }
    backward = [s for s in rb.slices if s.name == "backward"]
    assert {
        (rb.threads[s.track][1], s.args["args"]["start thread"], s.args["args"]["end thread"]) for s in backward
    } == {
        ("NVTX ranges across threads", 301, 311),
        ("NVTX ranges across threads", 302, 312),
    }
    assert all(s.dur == 280_000 for s in backward)
    marks = sorted(s.name for s in rb.instants if s.name.startswith("step"))
    assert marks == ["step 0 done", "step 0 done", "step 1 done", "step 1 done", "step 2 done", "step 2 done"]
    [open_range] = [s for s in rb.instants if s.name == "optimizer.step"]
    assert open_range.ts == utc(TORCHRUN) + 5_100_000
    assert report.dropped["nsys NVTX range without an end (open when the capture stopped): drawn as an instant"] == 1


def test_flows_join_launches_and_gpu_work_within_each_process(tmp_path: Path) -> None:
    """Correlation ids repeat across the two processes of the report: each flow stays in its own."""
    out = tmp_path / "out.pftrace"
    merge([TORCHRUN], out)
    rb = read_pftrace(out)
    ends: dict[int, list] = defaultdict(list)
    for s in rb.slices:
        for fid in [*s.flow_ids, *s.terminating_flow_ids]:
            ends[fid].append(s)
    assert len(ends) == 48  # per rank and step 8 GPU rows launched in the capture (a graph launch's two)
    for fid, pair in ends.items():
        assert len(pair) == 2
        source, target = sorted(pair, key=lambda s: s.cat != "cuda_runtime")
        assert rb.threads[source.track][0] == rb.threads[target.track][0], fid
        assert source.args["args"]["correlation"] == target.args["args"]["correlation"]
        assert source.ts <= target.ts
    graph = [s for s in rb.slices if s.name == "cudaGraphLaunch_v10000"]
    assert sorted(len(s.flow_ids) for s in graph) == [2] * 6  # one launch, two kernels
    early = [s for s in rb.slices if s.ts == utc(TORCHRUN) + 1_500_000 or s.ts == utc(TORCHRUN) + 1_501_000]
    assert [s.flow_ids + s.terminating_flow_ids for s in early] == [[], []]  # launched before the capture


def test_synchronizations_take_their_contexts_gpu_and_cuda_events_are_instants(tmp_path: Path) -> None:
    """CUPTI records no device for a synchronization (nsys writes 0): rank 1's are on GPU 1."""
    assert {d for (d,) in rows(TORCHRUN, "select distinct deviceId from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")} == {0}
    rb, report = merged(tmp_path, TORCHRUN)
    syncs = {(rb.threads[s.track][1], s.name) for s in rb.slices if s.cat == "cuda_sync"}
    assert syncs == {
        ("GPU 0 stream 7 sync", "Stream sync"),
        ("GPU 0 sync", "Context sync"),
        ("GPU 1 stream 7 sync", "Stream sync"),
        ("GPU 1 sync", "Context sync"),
    }
    events = sorted((s.ts - utc(TORCHRUN), s.args["args"]["event"]) for s in rb.instants if s.name == "CUDA event")
    assert events == [(3_215_000, 41), (3_216_000, 41), (4_215_000, 42), (4_216_000, 42)]
    assert report.dropped["nsys CUPTI_ACTIVITY_KIND_CUDA_EVENT rows not drawn (no device timestamp collected)"] == 2


def test_gpu_metrics_are_counters_of_the_rank_that_used_the_gpu(tmp_path: Path) -> None:
    rb, _ = merged(tmp_path, TORCHRUN)
    base = utc(TORCHRUN)
    for rank in (0, 1):
        t = base + 2_000_000 + rank * 1_000
        assert rb.counters_of(f"rank {rank}") == {
            f"GPU {rank}: SMs Active [Throughput %]": [(t + n * 500_000, float(10 * n + rank)) for n in range(4)],
            f"GPU {rank}: DRAM Read Bandwidth [Throughput %]": [(t + n * 500_000, float(5 * n)) for n in range(4)],
        }


def test_every_row_is_written_or_counted(tmp_path: Path) -> None:
    """Each table's rows: drawn (slices, instants, counter values) or counted under a statistic."""
    _, report = merged(tmp_path, TORCHRUN)
    count = {t: rows(TORCHRUN, f"select count(*) from {t}")[0][0] for t in (
        "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        "PROFILER_OVERHEAD", "CUPTI_ACTIVITY_KIND_OVERHEAD", "GPU_METRICS", "DIAGNOSTIC_EVENT")}  # fmt: skip
    written = report.written
    counted = sum(stats(report)[s] for s in ("nsys_rows_not_drawn",))
    assert written.slices + written.instants + written.counters + counted == sum(count.values())
    assert written.counters == count["GPU_METRICS"] == 16
    # the flows: one per launch whose GPU work is in the export, from the runtime call
    assert report.written.flows == 48


def test_spilling_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, in_memory = merged(tmp_path / "a", TORCHRUN, jobs=1)
    assert_spilling_changes_nothing(in_memory, [TORCHRUN], tmp_path / "b.pftrace", 40, monkeypatch)


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_perfetto_imports_the_nsys_merge_without_errors(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    merge([TORCHRUN, VERL], out)
    try:
        result = check_trace(out)
    except TraceProcessorUnavailable as exc:
        unavailable(f"no trace_processor: {exc}", "TRACEMERGE_REQUIRE_VIEWER")
    assert result.problems == []
    counts = {p.name: (p.slices, p.counters, p.flows) for p in result.processes}
    # slices include instants and the clock alignment note; Chrome JSON also the Phases track's
    assert counts["rank 0"][1:] == (8, 24) and counts["rank 1"][1:] == (8, 24)


# -- verl workers: ranks from the environment, roles from the names, clocks from NCCL ------------------


def test_verl_workers_rank_from_environment_role_from_name(tmp_path: Path) -> None:
    rb, _ = merged(tmp_path, VERL)
    assert list(rb.processes.values()) == ["actor_rollout_ref · rank 0", "actor_rollout_ref · rank 1"]
    assert [rows(db, "select value from META_DATA_CAPTURE where value like 'RANK=%'") for db in (NODE1, NODE2)] == [
        [('RANK="0"',)],
        [('RANK="1"',)],
    ]
    assert per_track(rb, "actor_rollout_ref · rank 1") == {
        "CPU thread 5151 (ray::WorkerDict)": 2 * 3 + 8,  # per step 3 stage ranges, 4 launches
        "GPU 0 stream 7 (null stream)": 8,
    }


def test_nccl_kernels_align_the_two_hosts_clocks(tmp_path: Path) -> None:
    """node2's clock runs SKEW_NS ahead; its NCCL all-reduces end at the same true instants as node1's."""
    rb, report = merged(tmp_path, VERL)
    placed = {Path(a["file"]).name: a for a in report.alignment}
    assert placed[NODE1.name]["method"] == "reference"
    assert placed[NODE2.name]["method"] == "collectives"
    assert placed[NODE2.name]["offset_ns"] == -SKEW_NS
    assert placed[NODE2.name]["anchors"] == 8
    ends = defaultdict(list)
    for s in rb.slices:
        if s.name.startswith("ncclDevKernel_AllReduce"):
            ends[rb.processes[rb.threads[s.track][0]]].append(s.ts + s.dur)
    assert sorted(ends["actor_rollout_ref · rank 0"]) == sorted(ends["actor_rollout_ref · rank 1"])


def test_verl_stage_ranges_are_phases(tmp_path: Path) -> None:
    rb, _ = merged(tmp_path, VERL)
    base = utc(NODE1)
    for rank, label in enumerate(("actor_rollout_ref · rank 0", "actor_rollout_ref · rank 1")):
        phases = sorted((s.name, s.ts - base, s.dur) for s in rb.derived[(label, "Phases")] if s.name != "idle")
        expected = []
        for step in range(2):
            t = 1_000_000 + step * 10_000_000 + rank * 2_000
            expected += [("generate", t, 3_000_000), ("old_log_prob", t + 3_500_000, 1_500_000)]
            expected += [("update_actor", t + 5_500_000, 4_000_000)]
        assert phases == sorted(expected), label


# -- a folder mixing nsys, Kineto and AReaL --------------------------------------------------------------


def test_a_folder_of_nsys_kineto_and_areal_files_merges_into_one_aligned_trace(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for part in ("actor", "perf_tracer", "session_tracer"):
        shutil.copytree(FIXTURES / "rl_run" / part, run / part)
    shutil.copytree(NSYS / "mixed", run / "ref")
    rb, report = merged(tmp_path / "out", run)
    assert sorted(rb.processes.values()) == [
        "actor · rank 0",
        "actor · rank 1",
        "ref · rank 0",
        "rollout · rank 0",
        "rollout · rank 1",
    ]
    placed = {Path(a["file"]).name: a for a in report.alignment}
    nsys = placed["ref_vm_worker_process_4400.sqlite"]
    # the nsys report was taken on the Kineto ranks' host: one clock, placed together
    assert (nsys["method"], nsys["offset_ns"]) == (placed["rank0.pt.trace.json"]["method"], 0)
    assert {placed[f"traces-r{r}.jsonl"]["method"] for r in (0, 1)} == {"session"}
    # every input event at its wall-clock time: the nsys kernels at the session start + their start
    db = run / "ref" / "ref_vm_worker_process_4400.sqlite"
    kernels = sorted((utc(db) + a, b - a) for a, b in rows(db, "select start, end from CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted((s.ts, s.dur) for s in rb.slices if s.cat == "kernel") == kernels
    alone, _ = merged(tmp_path / "rl", FIXTURES / "rl_run")
    for label in ("actor · rank 0", "rollout · rank 1"):
        assert rb.expected_view(label).slices == alone.expected_view(label).slices
    assert report.exit_code == 0


# -- .nsys-rep reports ------------------------------------------------------------------------------------


def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, export: Path | None, fail: str = "") -> Path:
    """An ``nsys`` on PATH that exports by copying ``export`` to ``--output`` (or fails saying ``fail``),
    and logs its arguments and working directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nsys.log"
    script = bin_dir / "nsys"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, shutil, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], os.getcwd()]) + '\\n')\n"
        f"if {fail!r}:\n    print({fail!r}, file=sys.stderr); sys.exit(1)\n"
        "args = sys.argv[1:]\n"
        f"shutil.copyfile({str(export)!r}, args[args.index('--output') + 1])\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_report_is_exported_by_nsys_into_a_private_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_nsys(tmp_path, monkeypatch, NODE1)
    inputs = tmp_path / "in"
    inputs.mkdir()
    report_file = inputs / "actor_rollout_ref_node1_worker_process_4242.nsys-rep"
    report_file.write_bytes(b"a report")
    before = _listing(inputs)
    rb, report = merged(tmp_path / "out", inputs)
    assert _listing(inputs) == before  # nothing written beside the input
    assert not [p for p in (tmp_path / "out").rglob(".tracemerge-*")]  # the export is gone too
    [(args, cwd)] = [json.loads(line) for line in log.read_text().splitlines()]
    assert args[:3] == ["export", "--type", "sqlite"] and args[-1] == str(report_file.resolve())
    assert Path(cwd).name.startswith(".tracemerge-nsys-") and Path(args[4]).parent == Path(cwd)
    alone, _ = merged(tmp_path / "alone", NODE1)
    assert list(rb.processes.values()) == ["actor_rollout_ref · rank 0"]
    assert (
        rb.expected_view("actor_rollout_ref · rank 0").slices
        == alone.expected_view("actor_rollout_ref · rank 0").slices
    )
    assert [p.files for p in report.processes] == [[report_file]]
    assert report.exit_code == 0


def test_a_failed_export_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nsys(tmp_path, monkeypatch, NODE1, fail="Error: the file is not a valid report\n")
    rep = tmp_path / "in" / "x.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"junk")
    report = merge([rep.parent, TORCHRUN], tmp_path / "out.pftrace")
    assert report.skipped == [f"{rep}: nsys export failed (exit status 1): Error: the file is not a valid report"]
    # the rest is merged; the report found in another folder might have been another job's rank
    # 0, so the ranks are told apart by the host the torchrun report states
    assert [p.label for p in report.processes] == ["rank 0 · gpu-node-a", "rank 1 · gpu-node-a"]
    assert report.exit_code == 3


def test_without_nsys_a_report_is_named_with_the_export_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rep = tmp_path / "in" / "worker_process_77.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"a report")
    report = merge([rep.parent, TORCHRUN], tmp_path / "out.pftrace")
    assert report.skipped == [
        f"{rep}: an Nsight Systems report: export it first with nsys export --type sqlite "
        "-o worker_process_77.sqlite worker_process_77.nsys-rep"
    ]
    assert report.exit_code == 3


def test_a_report_beside_its_export_is_read_once_through_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_nsys(tmp_path, monkeypatch, NODE1)
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(NODE1, inputs / NODE1.name)
    (inputs / NODE1.name).with_suffix(".nsys-rep").write_bytes(b"a report")
    _, report = merged(tmp_path / "out", inputs)
    assert not log.exists()  # not exported again
    assert [p.files for p in report.processes] == [[inputs / NODE1.name]]
    assert report.ignored == [(inputs / NODE1.name).with_suffix(".nsys-rep")]
    assert stats(report) == {"nsys_report_read_as_export": 1}
    assert report.exit_code == 0


# -- damaged and unusual exports: one line each, nothing else lost ------------------------------------------


def test_an_export_without_its_session_start_keeps_a_clock_of_its_own(tmp_path: Path) -> None:
    _, report = merged(tmp_path, BAD / "no_session_start.sqlite")
    assert report.written.slices == 3
    [placed] = report.alignment
    assert placed["clock"] == "ns since the nsys capture started, no session start time"
    assert stats(report) == {"nsys_session_start_missing": 1}
    assert report.exit_code == 0


def test_an_export_without_string_ids_names_rows_by_their_ids(tmp_path: Path) -> None:
    db = BAD / "no_string_ids.sqlite"
    rb, report = merged(tmp_path, db)
    assert report.written.slices == 3
    [(runtime,)] = rows(db, "select nameId from CUPTI_ACTIVITY_KIND_RUNTIME")
    [(kernel,)] = rows(db, "select demangledName from CUPTI_ACTIVITY_KIND_KERNEL")
    assert sorted(s.name for s in rb.slices) == ["forward", f"string {runtime}", f"string {kernel}"]
    assert dict(report.dropped) == {
        "nsys CUPTI_ACTIVITY_KIND_RUNTIME row whose nameId points nowhere in StringIds (named by the id)": 1,
        "nsys CUPTI_ACTIVITY_KIND_KERNEL row whose demangledName points nowhere in StringIds (named by the id)": 1,
    }
    assert report.exit_code == 3


def test_nvtx_rows_without_text_are_drawn_unnamed_and_counted(tmp_path: Path) -> None:
    _, report = merged(tmp_path, BAD / "null_text.sqlite")
    assert (report.written.slices, report.written.instants) == (4, 1)
    assert stats(report) == {"nsys_text_missing": 2}
    assert report.exit_code == 0


def test_ids_that_point_nowhere_are_named_by_the_id_and_the_rows_kept(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, BAD / "dangling_ids.sqlite")
    assert (report.written.slices, report.written.counters) == (7, 1)
    assert {s.name for s in rb.slices} >= {"string 99999", "string 88888", "string 77777", "orphan thread"}
    assert per_track(rb, "rank 0")["CPU thread 601 · pid 600"] == 1  # a process no table names
    assert rb.counters_of("rank 0") == {"GPU 0: metric 42": [(utc(BAD / "dangling_ids.sqlite") + 5_000, 7.0)]}
    assert stats(report) == {"nsys_id_unresolved": 4}


def test_a_table_without_a_column_it_needs_is_counted_and_the_rest_read(tmp_path: Path) -> None:
    _, report = merged(tmp_path, BAD / "missing_column.sqlite")
    assert report.written.slices == 4  # forward, two runtime calls, the kernel
    assert dict(report.dropped) == {"nsys CUPTI_ACTIVITY_KIND_MEMSET rows not read: the table has no end column": 2}
    assert report.exit_code == 3


def test_rows_of_unknown_kinds_are_counted_by_table(tmp_path: Path) -> None:
    _, report = merged(tmp_path, BAD / "unknown_rows.sqlite")
    assert report.written.slices == 3
    assert dict(report.dropped) == {
        "nsys NVTX_EVENTS rows of event type KhrDebugPushPopRange not read": 1,
        "nsys CUDA_GPU_MEMORY_USAGE_EVENTS rows not read (tracemerge does not draw this table)": 2,
        "nsys table FUTURE_EVENTS not read (unknown to tracemerge; its rows are not counted)": 1,
    }
    assert stats(report) == {"nsys_rows_not_read": 4}


def test_an_sqlite_file_without_nsys_tables_is_not_a_trace(tmp_path: Path) -> None:
    report = merge([BAD / "not_nsys.sqlite", TORCHRUN], tmp_path / "out.pftrace")
    assert report.skipped == [f"{BAD / 'not_nsys.sqlite'}: SQLite database without Nsight Systems tables"]
    walked = merge([BAD], tmp_path / "walked.pftrace")
    assert BAD / "not_nsys.sqlite" in walked.ignored


def test_no_sql_is_made_of_names_found_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table named like an injection is named in its line, escaped, and never put in a query."""
    db = tmp_path / "in" / "evil.sqlite"
    db.parent.mkdir()
    shutil.copy(BAD / "unknown_rows.sqlite", db)
    evil = 'X"; drop table StringIds; --\n'
    con = sqlite3.connect(db)
    con.execute(f'create table "{evil.replace(chr(34), chr(34) * 2)}" (start INTEGER)')
    con.commit()
    con.close()
    seen: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kw):
        found = connect(*args, **kw)
        found.set_trace_callback(seen.append)
        return found

    monkeypatch.setattr(sqlite3, "connect", traced)
    _, report = merged(tmp_path / "out", db)
    # (SQLite traces what it runs for pragma_table_info(m.name) as a comment: the name bound there)
    made = [sql for sql in seen if not sql.startswith("-- ")]
    assert made and not [sql for sql in made if "drop table" in sql]
    assert (
        report.dropped[
            'nsys table X"; drop table StringIds; --\\n not read (unknown to tracemerge; its rows are not counted)'
        ]
        == 1
    )
    assert report.written.slices == 3


# -- the corpus: real exports ---------------------------------------------------------------------------------

corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def corpus_expectations(db: Path) -> dict[int, Counter]:
    """Per pid, rows per table (the host tables by globalTid, the device tables by globalPid)."""
    out: dict[int, Counter] = defaultdict(Counter)
    for table, column in (
        ("NVTX_EVENTS", "globalTid"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
        ("PROFILER_OVERHEAD", "globalTid"),
        ("CUPTI_ACTIVITY_KIND_OVERHEAD", "globalTid"),
        *((t, "globalPid") for t in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")),
    ):
        if rows(db, "select count(*) from sqlite_master where name = ?", table)[0][0]:
            for pid, n in rows(db, f"select ({column} >> 24) & 16777215, count(*) from {table} group by 1"):
                out[pid][table] = n
    return out


@corpus
def test_corpus_two_gpu_export_counts_per_process_and_table(tmp_path: Path) -> None:
    db = CORPUS / "mfu_2gpu_before.sqlite"
    expected = corpus_expectations(db)
    assert {pid: dict(c) for pid, c in expected.items()} == {
        144: {
            "NVTX_EVENTS": 9443,
            "CUPTI_ACTIVITY_KIND_RUNTIME": 3688,
            "PROFILER_OVERHEAD": 3,
            "CUPTI_ACTIVITY_KIND_KERNEL": 1993,
            "CUPTI_ACTIVITY_KIND_MEMCPY": 510,
            "CUPTI_ACTIVITY_KIND_MEMSET": 133,
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": 178,
        },
        145: {
            "NVTX_EVENTS": 9675,
            "CUPTI_ACTIVITY_KIND_RUNTIME": 3778,
            "PROFILER_OVERHEAD": 3,
            "CUPTI_ACTIVITY_KIND_KERNEL": 2017,
            "CUPTI_ACTIVITY_KIND_MEMCPY": 510,
            "CUPTI_ACTIVITY_KIND_MEMSET": 136,
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": 188,
        },
    }
    rb, report = merged(tmp_path, db)
    assert list(rb.processes.values()) == ["rank 0", "rank 1"]  # pid 144 used GPU 0, pid 145 GPU 1
    cats = {"nvtx": "NVTX_EVENTS", "nvtx domain 1": "NVTX_EVENTS", "cuda_runtime": "CUPTI_ACTIVITY_KIND_RUNTIME"}
    cats |= {"overhead": "PROFILER_OVERHEAD", "kernel": GPU_TABLES[0], "gpu_memcpy": GPU_TABLES[1]}
    cats |= {"gpu_memset": GPU_TABLES[2], "cuda_sync": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"}
    for rank, pid in ((0, 144), (1, 145)):
        got = Counter(cats[s.cat] for s in rb.slices if rb.processes[rb.threads[s.track][0]] == f"rank {rank}")
        assert got == expected[pid], rank
    # kernels: exact to the ns, on their process
    base = utc(db)
    for rank, pid in ((0, 144), (1, 145)):
        want = Counter(
            (base + a, b - a)
            for a, b in rows(db, f"select start, end from {GPU_TABLES[0]} where (globalPid >> 24) & 16777215 = ?", pid)
        )
        got = Counter(
            (s.ts, s.dur)
            for s in rb.slices
            if s.cat == "kernel" and rb.threads[s.track][0] == rb.pid_of(f"rank {rank}")
        )
        assert got == want
    # flows: every GPU row whose launch is in the export (same process and correlation id)
    launched = 0
    for table in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        launched += rows(
            db,
            f"select count(*) from {table} g where exists (select 1 from CUPTI_ACTIVITY_KIND_RUNTIME r "
            "where r.correlationId = g.correlationId and r.globalTid >> 24 = g.globalPid >> 24)",
        )[0][0]
    assert launched == 5634 and report.written.flows == launched
    assert dict(report.dropped) == {LAUNCH_NOT_CAPTURED: 24 + 5 + 2}  # kernels, memcpy, memset
    assert report.exit_code == 0


@corpus
@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_corpus_exports_load_in_trace_processor_without_problems(tmp_path: Path, ext: str) -> None:
    for db in sorted(CORPUS.glob("*.sqlite")):
        out = tmp_path / f"{db.stem}{ext}"
        merge([db], out)
        try:
            result = check_trace(out)
        except TraceProcessorUnavailable as exc:
            unavailable(f"no trace_processor: {exc}", "TRACEMERGE_REQUIRE_VIEWER")
        assert result.problems == [], db.name


@corpus
def test_corpus_single_gpu_export(tmp_path: Path) -> None:
    db = CORPUS / "mock.sqlite"
    overhead = Counter()
    for table in ("PROFILER_OVERHEAD", "CUPTI_ACTIVITY_KIND_OVERHEAD"):
        for tid, n in rows(db, f"select globalTid & 16777215, count(*) from {table} group by 1"):
            overhead[tid] += n
    assert sum(overhead.values()) == 25 + 6
    rb, report = merged(tmp_path, db)
    assert list(rb.processes.values()) == ["rank 0"]
    assert per_track(rb, "rank 0") == {
        "CPU thread 91186 (python)": 9,
        "GPU 0 stream 7 (null stream)": 3,
        "GPU 0 stream 7 sync": 1,
        **{f"Profiler overhead (thread {tid})": n for tid, n in overhead.items()},
    }
    assert report.written.flows == 4
    assert dict(report.dropped) == {"nsys DIAGNOSTIC_EVENT rows not drawn (nsys's own messages)": 15}


# -- one bad value costs that value, never the export -----------------------------------------------------


def changed(tmp_path: Path, source: Path, *sql: str) -> Path:
    """A copy of ``source`` with ``sql`` run on it: a minimal input with one bad value."""
    db = tmp_path / "in" / source.name
    db.parent.mkdir(parents=True)
    shutil.copyfile(source, db)
    con = sqlite3.connect(db)
    for statement in sql:
        assert con.execute(statement).rowcount in (-1, 1), statement
    con.commit()
    con.close()
    return db


def kernel_args(rb: Readback, ts: int) -> dict:
    [kernel] = [s for s in rb.slices if s.cat == "kernel" and s.ts == ts]
    return kernel.args["args"]


FIRST_KERNEL_NS = 1_500_000  # CUPTI_ACTIVITY_KIND_KERNEL rowid 1 of TORCHRUN: pid 301, GPU 0, stream 7
FIRST_KERNEL_ARGS = {
    "device": 0,
    "context": 1,
    "stream": 7,
    "correlation": 999,
    "registers per thread": 32,
    "shared memory": 3072,
    "grid": [128, 2, 1],
    "block": [256, 1, 1],
}


@pytest.mark.parametrize("rank", ["²", "7" * 5000, "٣", "-1"])
def test_a_rank_that_is_no_number_costs_the_rank_not_the_export(tmp_path: Path, rank: str) -> None:
    """verl's worker ranks from RANK: one that int() refuses (or that is no rank) leaves the rank to
    the path, counted."""
    db = changed(tmp_path, NODE1, f"""update META_DATA_CAPTURE set value = 'RANK="{rank}"' where value like 'RANK=%'""")
    rb, report = merged(tmp_path / "out", db)
    _, whole = merged(tmp_path / "whole", NODE1)
    assert report.skipped == []
    assert report.written == whole.written
    assert list(rb.processes.values()) == ["actor_rollout_ref · rank 0"]  # its GPU: the report's only one
    assert stats(report) == {"nsys_value_unreadable": 1}


def test_ranks_are_ascii_digits_of_at_most_40() -> None:
    from tracemerge.core.model import as_rank

    assert [as_rank(v) for v in ("3", " 12 ", "007", "9" * 40, 5)] == [3, 12, 7, 10**40 - 1, 5]
    assert [as_rank(v) for v in ("²", "٣", "9" * 41, "7" * 5000, "-1", "", "1.0", -1, 1.0, None)] == [None] * 10


def test_an_infinite_kernel_value_costs_that_value(tmp_path: Path) -> None:
    db = changed(tmp_path, TORCHRUN, "update CUPTI_ACTIVITY_KIND_KERNEL set gridX = 9e999 where rowid = 1")
    rb, report = merged(tmp_path / "out", db)
    assert report.written.slices == 144
    assert kernel_args(rb, utc(TORCHRUN) + FIRST_KERNEL_NS) == {
        k: v for k, v in FIRST_KERNEL_ARGS.items() if k != "grid"
    }
    assert stats(report)["nsys_value_unreadable"] == 1
    assert (
        dict(report.dropped)["nsys grid value that is a BLOB or an infinite or NaN number: left out of its event"] == 1
    )


BLOBS = [
    ("NVTX_EVENTS", "category", "rowid = 4", "category"),
    ("NVTX_EVENTS", "jsonText", "rowid = 4", "json"),
    ("NVTX_EVENTS", "int64Value", "rowid = 4", "payload"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "returnValue", "rowid = 1", "return value"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", "rowid = 1", "bytes"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "rowid = 1", "device"),
]


@pytest.mark.parametrize(("table", "column", "where", "arg"), BLOBS, ids=[f"{t}.{c}" for t, c, _, _ in BLOBS])
def test_a_blob_in_a_value_costs_that_value(tmp_path: Path, table: str, column: str, where: str, arg: str) -> None:
    db = changed(tmp_path, TORCHRUN, f"update {table} set {column} = X'00' where {where}")
    rb, report = merged(tmp_path / "out", db)
    _, whole = merged(tmp_path / "whole", TORCHRUN)
    assert report.skipped == [] and report.written == whole.written
    left_out = f"nsys {arg} value that is a BLOB or an infinite or NaN number: left out of its event"
    assert dict(report.dropped) == dict(whole.dropped) | {left_out: 1}
    assert stats(report) == stats(whole) | {"nsys_value_unreadable": 1}
    [(start,)] = rows(db, f"select start from {table} where {where}")
    at_start = [
        s for s in rb.slices if s.ts == utc(TORCHRUN) + start and rb.processes[rb.threads[s.track][0]] == "rank 0"
    ]
    assert at_start and not [s for s in at_start if arg in s.args.get("args", {})]  # the value is left out
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        args = FIRST_KERNEL_ARGS.copy()
        del args["device"]
        assert kernel_args(rb, utc(TORCHRUN) + FIRST_KERNEL_NS) == args
        assert per_track(rb, "rank 0")["GPU ? stream 7 (null stream)"] == 1  # the device a BLOB named: unknown


@pytest.mark.parametrize(
    ("sql", "name", "named"),
    [
        ("update NVTX_EVENTS set text = cast(X'61ff62' as text) where rowid = 4", "a\ufffdb", 1),
        ("update StringIds set value = cast(X'6bff' as text) where id = 105", "k\ufffd", 14),  # 14 kernels' name
    ],
    ids=["nvtx text", "StringIds"],
)
def test_text_that_is_not_utf8_is_read_with_a_replacement_character(
    tmp_path: Path, sql: str, name: str, named: int
) -> None:
    db = changed(tmp_path, TORCHRUN, sql)
    rb, report = merged(tmp_path / "out", db)
    assert report.skipped == [] and report.written.slices == 144
    assert [s.name for s in rb.slices].count(name) == named
    assert stats(report)["db_text_not_utf8"] == 1


def test_a_hostname_that_is_not_utf8_is_read_with_a_replacement_character(tmp_path: Path) -> None:
    db = changed(
        tmp_path, NODE1, "update TARGET_INFO_SYSTEM_ENV set value = cast(X'6eff' as text) where name = 'Hostname'"
    )
    _, report = merged(tmp_path / "out", db)
    assert report.skipped == [] and report.written.slices == 22
    assert stats(report) == {"db_text_not_utf8": 1}


def test_a_real_in_an_integer_arg_is_written_as_it_is(tmp_path: Path) -> None:
    db = changed(
        tmp_path,
        TORCHRUN,
        "update CUPTI_ACTIVITY_KIND_KERNEL set registersPerThread = 1.5, deviceId = 2.5 where rowid = 1",
    )
    rb, report = merged(tmp_path / "out", db)
    assert kernel_args(rb, utc(TORCHRUN) + FIRST_KERNEL_NS) == FIRST_KERNEL_ARGS | {
        "registers per thread": 1.5,
        "device": 2.5,
    }
    assert per_track(rb, "rank 0")["GPU 2.5 stream 7 (null stream)"] == 1  # its track names the same device
    assert report.exit_code == 0 and stats(report) == {
        "nsys_rows_not_drawn": 7,
        "nsys_launch_not_captured": 2,
        "nsys_range_without_end": 1,
    }


def test_the_emit_nvtx_name_parser_is_linear_in_the_text() -> None:
    """A text the old expression took 52 s on (n = 20k) is parsed in milliseconds, as a name."""
    from tracemerge.sources.nsys.nvtx import torch_op

    for n in (2_000, 20_000):
        text = ", op_id = 1, sizes = [ ]" * n + "X"
        started = time.process_time()
        assert torch_op(text) is None
        assert time.process_time() - started < 0.5
    assert torch_op("aten::mm, seq = 3, op_id = 4, sizes = [[2], [3]], input_op_ids = [1]") == (
        "aten::mm",
        "3",
        "4",
        "[[2], [3]]",
        "[1]",
    )


def test_a_range_with_no_start_thread_costs_nothing_but_that_thread(tmp_path: Path) -> None:
    """An NVTX start/end range (eventType 60) whose globalTid is NULL: read on a thread of its own,
    never the cross-thread path that needs both threads (it once raised a TypeError and lost the
    export)."""
    first = "select min(rowid) from NVTX_EVENTS where eventType = 60"
    sql = f"update NVTX_EVENTS set globalTid = NULL where rowid = ({first})"
    db = changed(tmp_path, TORCHRUN, sql)
    _, report = merged(tmp_path / "out", db)
    _, whole = merged(tmp_path / "whole", TORCHRUN)
    assert report.skipped == []
    assert report.written.slices == whole.written.slices


TIMES_NO_TRACE_HOLDS = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", -(1 << 63)),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end", (1 << 63) - 1),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "start", -(1 << 63)),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "end", (1 << 63) - 1),
    ("GPU_METRICS", "timestamp", -(1 << 63)),
    ("GPU_METRICS", "timestamp", -(1 << 63) + 1),
]


@pytest.mark.parametrize(
    ("table", "column", "value"), TIMES_NO_TRACE_HOLDS, ids=[f"{t}.{c}={v}" for t, c, v in TIMES_NO_TRACE_HOLDS]
)
@pytest.mark.parametrize("out", ["out.pftrace", "out.json"])
def test_a_time_no_trace_can_hold_costs_its_row(tmp_path: Path, table: str, column: str, value: int, out: str) -> None:
    """A timestamp at the ends of int64 (beyond what a trace holds once placed on the wall clock)
    drops its row, counted, never the file or the run (it was an internal OverflowError)."""
    db = changed(
        tmp_path, TORCHRUN, f"update {table} set {column} = {value} where rowid = (select min(rowid) from {table})"
    )
    report = merge([db], tmp_path / out, jobs=1)
    _, whole = merged(tmp_path / "whole", TORCHRUN)
    assert report.skipped == []
    assert stats(report)["event_time_unreadable"] == 1 and "event_time_unreadable" not in stats(whole)
    assert dict(report.dropped)[f"nsys {table} row with a time no trace can hold"] == 1
    written, full = report.written, whole.written
    assert written.slices + written.instants + written.counters == full.slices + full.instants + full.counters - 1
