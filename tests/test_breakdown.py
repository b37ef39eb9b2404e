"""Device time per rank and step (tracemerge.phases.device_time): compute, exposed communication, overlap,
free time and wait, on traces whose device work is known to the nanosecond, and on the GPU
fixtures with the numbers computed here from the input files."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from builders import kineto_device
from conftest import FIXTURES
from expected import union
from typer.testing import CliRunner

from tracemerge.analysis import steps as step_summary
from tracemerge.cli import main as cli
from tracemerge.evidence.span_union import BLOCK, SpanUnion
from tracemerge.phases.device_time import Coverage, covered, intersection, merged

runner = CliRunner()
US = 1_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "volta_sgemm_128x64_tn"
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"  # no clock evidence, still comm
KINETO_US = 5_184_000_000_000  # a CUDA clock's µs (as the GPU fixture's): below 2**43

# Rank 0 starts step 1 first and enters each all-reduce first; rank 1 starts step 1 200 µs late.
# Streams 7 and 8 compute, stream 13 communicates; a kernel crosses rank 0's step boundary.
RANK0 = [
    (GEMM, 7, 100, 400),
    (GEMM, 8, 350, 500),
    ("Memcpy HtoD (Pageable -> Device)", 7, 600, 650),
    (NCCL, 13, 450, 800),
    (GEMM, 7, 950, 1100),
    (GEMM, 7, 1200, 1300),
    (NCCL, 13, 1300, 1500),
]
RANK1 = [
    (GEMM, 7, 250, 700),
    (NCCL, 13, 700, 800),
    (GEMM, 7, 1050, 1400),
    (NCCL, 13, 1400, 1500),
    (GEMM, 8, 1450, 1480),
]
# (rank, step): wall, compute, communication, overlapped, free, wait, preparing, closing (µs),
# worked out by hand: rank 0 step 1: C = [100,500) ∪ [600,650) ∪ [950,1000) = 500, M = [450,800)
# = 350, C ∩ M = [450,500) ∪ [600,650) = 100, exposed 250; device work from 100 to 1000: preparing
# 100, closing 0, free (1000 − 100) − 750 = 150; wait 700 − 450. Rank 1 step 1 ([200, 1000)):
# work from 250 to 800, preparing 50, closing 200, no gap. Rank 0 step 2: work from 1000 (a
# kernel crossing in) to 1500: compute [1000,1100) ∪ [1200,1300), communication [1300,1500),
# free [1100,1200) = 100, closing 500.
EXPECTED = {
    (0, 1): (1000, 500, 250, 100, 150, 250, 100, 0),
    (1, 1): (800, 450, 100, 0, 0, 0, 50, 200),
    (0, 2): (1000, 200, 200, 0, 100, 100, 0, 500),
    (1, 2): (1000, 380, 70, 30, 0, 0, 50, 500),
}
# the parts compared with the truth computed here (all but the wait)
PARTS = ("wall_ns", "compute_ns", "communication_ns", "overlapped_ns", "free_ns", "preparing_ns", "closing_ns")


def _run(tmp_path: Path) -> Path:
    kineto_device(tmp_path / "run" / "rank0.pt.trace.json", 0, [(0, 1000), (1000, 2000)], RANK0)
    kineto_device(tmp_path / "run" / "rank1.pt.trace.json", 1, [(200, 1000), (1000, 2000)], RANK1)
    return tmp_path / "run"


def _numbers(*args: str) -> dict:
    result = runner.invoke(cli.app, ["summary", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _by_rank_step(rows: list[dict]) -> dict[tuple, tuple]:
    parts = ("wall_ns", "compute_ns", "communication_ns", "overlapped_ns", "free_ns", "wait_ns")
    return {(r["rank"], r["step"]): tuple(r[p] for p in (*parts, "preparing_ns", "closing_ns")) for r in rows}


def test_breakdown_of_known_device_work(tmp_path: Path) -> None:
    rows = _numbers(str(_run(tmp_path)))["breakdown"]
    assert _by_rank_step(rows) == {k: tuple(v * US for v in found) for k, found in EXPECTED.items()}
    for r in rows:
        assert sum(r[p] for p in PARTS[1:] if p != "overlapped_ns") == r["wall_ns"]
        assert set(r) == {"role", "rank", "step", "wall_ns", "compute_ns", "communication_ns"} | {
            "overlapped_ns",
            "free_ns",
            "wait_ns",
            "preparing_ns",
            "closing_ns",
        }


def test_breakdown_table(tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["summary", str(_run(tmp_path))])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "device time per rank and step" in text
    # mean over the two ranks' step 2 (step 1 is the warm-up, left out of the means); the worst rank
    # has the most exposed and free time (rank 0)
    mean = re.search(r"mean per step\s+(.*)", text).group(1).split()
    assert mean[:6] == ["1.000", "ms", "290.0", "µs", "135.0", "µs"]
    worst = re.search(r"worst: rank (\d)\s+(.*)", text)
    assert worst.group(1) == "0"
    assert worst.group(2).split()[:6] == ["1.000", "ms", "200.0", "µs", "200.0", "µs"]
    kept = runner.invoke(cli.app, ["summary", str(tmp_path / "run"), "--keep-warmup"]).output
    assert re.search(r"mean per step\s+(.*)", kept).group(1).split()[:6] == [
        "950.0",
        "µs",
        "382.5",
        "µs",
        "155.0",
        "µs",
    ]


def _spans_of(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """Steps, compute and collective spans (ns) of a Kineto file, read here on their own."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    events = json.loads(raw)["traceEvents"]
    steps, compute, comm = [], [], []

    def ns(e: dict) -> tuple[int, int]:
        a = round(Decimal(str(e["ts"])) * 1000)  # exact: µs since 1970 exceed a float's 53 bits in ns
        return a, a + round(Decimal(str(e["dur"])) * 1000)

    for e in events:
        if e.get("ph") != "X":
            continue
        if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            steps.append(ns(e))
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            (comm if e["name"].startswith(("ncclDevKernel", "ncclKernel")) else compute).append(ns(e))
    return sorted(steps), compute, comm


def _truth(path: Path) -> list[tuple[int, ...]]:
    """Per step: wall, compute, communication, overlapped, free, preparing, closing, by sets of
    nanoseconds' spans."""
    steps, compute, comm = _spans_of(path)
    return [_parts(lo, hi, compute, comm) for lo, hi in steps]


def _parts(lo: int, hi: int, compute: list[tuple[int, int]], comm: list[tuple[int, int]]) -> tuple:
    """Wall, compute, communication, overlapped, free, preparing and closing of [lo, hi), by a
    sweep over every boundary; free is the time between the first and the last device work."""
    c = {(max(a, lo), min(b, hi)) for a, b in compute if min(b, hi) > max(a, lo)}
    m = {(max(a, lo), min(b, hi)) for a, b in comm if min(b, hi) > max(a, lo)}
    # a plain sweep over every boundary: which of C and M cover each piece
    points = sorted({lo, hi, *(x for s in c | m for x in s)})
    parts = [0, 0, 0]
    for a, b in itertools.pairwise(points):
        in_c = any(x <= a and b <= y for x, y in c)
        in_m = any(x <= a and b <= y for x, y in m)
        if in_c:
            parts[0] += b - a
        if in_m and not in_c:
            parts[1] += b - a
        if in_m and in_c:
            parts[2] += b - a
    if not c | m:
        return (hi - lo, *parts, hi - lo, 0, 0)
    first, last = min(a for a, _ in c | m), max(b for _, b in c | m)
    return (hi - lo, *parts, (last - first) - parts[0] - parts[1], first - lo, hi - last)


def test_breakdown_of_kineto_gpu_fixture() -> None:
    rows = _numbers(str(FIXTURES / "kineto_gpu"))["breakdown"]
    files = {0: FIXTURES / "kineto_gpu" / "rank0.pt.trace.json", 1: FIXTURES / "kineto_gpu" / "rank1.pt.trace.json.gz"}
    for rank, path in files.items():
        found = [tuple(r[p] for p in PARTS) for r in rows if r["rank"] == rank]
        assert found == _truth(path)
        assert all(r["wait_ns"] == 0 for r in rows)  # no collective in these traces


ASCEND_DB = FIXTURES / "ascend" / "db"


def test_breakdown_of_ascend_db_fixture() -> None:
    """Tasks of COMMUNICATION_TASK_INFO are communication, every other task compute (the fixture
    has no synchronisation task, nor a communication op's own task); the step is the
    ProfilerStep#1 row of PYTORCH_API, all read here from the database itself."""
    (db,) = ASCEND_DB.rglob("*.db")
    with sqlite3.connect(db) as con:
        comm_ids = {n for (n,) in con.execute("select globalTaskId from COMMUNICATION_TASK_INFO")}
        tasks = [
            (int(a), int(b), n)
            for a, b, n, kind in con.execute(
                "select startNs, endNs, globalTaskId, s.value from TASK join STRING_IDS s on s.id = TASK.taskType"
            )
            if not kind.startswith(ASCEND_COPY)  # a copy is no compute (torch_npu's Computing)
        ]
        (window,) = con.execute(
            "select p.startNs, p.endNs from PYTORCH_API p join STRING_IDS s on s.id = p.name"
            " where s.value = 'ProfilerStep#1'"
        )
    compute = [(a, b) for a, b, n in tasks if n not in comm_ids]
    comm = [(a, b) for a, b, n in tasks if n in comm_ids]
    assert comm and compute
    (row,) = _numbers(str(ASCEND_DB))["breakdown"]
    assert tuple(row[p] for p in PARTS) == _parts(int(window[0]), int(window[1]), compute, comm)
    assert (row["role"], row["rank"], row["step"], row["wait_ns"]) == ("actor", 0, 1, 0)


# An Ascend text export's device tasks (Ascend Hardware streams), as msprof types them: HCCL's
# communication, synchronisation and memory copies no device work, every other task compute.
ASCEND_HCCL = {"Notify Wait", "Notify Record", "Write Value", "SDMA", "RDMA", "Reduce Inline"}
ASCEND_SYNC = ("EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET", "PLACE_HOLDER", "PROFILING_")
ASCEND_COPY = ("PCIE_DMA", "SDMA_SQE", "MEMCPY")


def ascend_text_truth(path: Path, window: tuple[int, int]) -> tuple:
    """Wall, compute, communication, overlapped, free of ``window`` (ns), from the tasks of an
    Ascend trace_view.json or msprof_*.json read here on its own."""
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    compute, comm = [], []
    for e in events:
        if e.get("ph") != "X" or names.get(e["pid"]) != "Ascend Hardware":
            continue
        kind = e["args"]["Task Type"]
        a = int(Decimal(str(e["ts"])) * 1000)
        span = (a, a + int(Decimal(str(e["dur"])) * 1000))
        if kind in ASCEND_HCCL:
            comm.append(span)
        elif not kind.startswith(ASCEND_SYNC + ASCEND_COPY):
            compute.append(span)
    assert compute and comm
    return _parts(*window, compute, comm)


def test_breakdown_of_ascend_text_exports() -> None:
    """trace_view.json (a torch_npu export, its Level0 prune) and msprof_*.json: HCCL tasks are
    communication, AI Core and AI Vector Core tasks compute (copies are not); the text export of
    the DB fixture's run gives the DB's numbers."""
    parts = PARTS
    (db_row,) = _numbers(str(ASCEND_DB))["breakdown"]
    for folder, window_name in (("text", "ProfilerStep#1"), ("level0", "ProfilerStep#1"), ("prof", "rollout_generate")):
        (path,) = [
            p for p in (FIXTURES / "ascend" / folder).rglob("*.json") if p.name.startswith(("trace_view", "msprof"))
        ]
        events = json.loads(path.read_text())
        (step,) = [e for e in events if e.get("name") == window_name and e.get("ph") == "X"]
        lo = int(Decimal(str(step["ts"])) * 1000)
        (row,) = _numbers(str(FIXTURES / "ascend" / folder))["breakdown"]
        truth = ascend_text_truth(path, (lo, lo + int(Decimal(str(step["dur"])) * 1000)))
        assert tuple(row[p] for p in parts) == truth
        assert (row["compute_ns"], row["communication_ns"]) == (db_row["compute_ns"], db_row["communication_ns"])
    text_row = _numbers(str(FIXTURES / "ascend" / "text"))["breakdown"][0]
    assert text_row == db_row  # one run, exported as text and as a database


def test_breakdown_of_many_kernels(tmp_path: Path) -> None:
    """Enough events per batch, at times a float holds, for the columnar read; spans out of order
    on several streams; sends and receives (names cached, not watched) are communication."""
    kernels = []
    for k in range(600):
        a = (k * 7919) % 20_000
        name = SEND_RECV if k % 7 == 3 else GEMM if k % 5 else NCCL
        kernels.append((name, 7 + k % 3, a, a + 5 + (k * 31) % 90))
    path = kineto_device(
        tmp_path / "big" / "rank0.pt.trace.json", 0, [(0, 7000), (7000, 15_000), (15_000, 20_100)], kernels, KINETO_US
    )
    rows = _numbers(str(path.parent))["breakdown"]
    assert [tuple(r[p] for p in PARTS) for r in rows] == _truth(path)


def test_unions_stay_merged() -> None:
    found = SpanUnion()
    for k in range(3 * BLOCK):  # every span twice, far apart, out of order
        a = (k * 37) % (3 * BLOCK) * 10
        found.add(a, a + 10)
        found.add(a, a + 5)
    assert found == [(0, 3 * BLOCK * 10)]
    assert covered(found, 5, 25) == 20
    assert covered([(0, 10), (20, 30)], 5, 25) == 10
    assert intersection([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]


def test_merged_joins_what_touches_or_overlaps_whether_merged_already_or_not() -> None:
    """merged of a list a scan left merged is that list (checked without the loop); of any other
    list, the spans sorted and joined: reversed spans, touching ones, duplicates."""
    rng = random.Random(3)
    for _ in range(5_000):
        spans = [(rng.randrange(0, 30), rng.randrange(0, 30)) for _ in range(rng.randrange(0, 8))]
        assert merged(spans) == union(spans), spans
        joined = union(spans)
        assert merged(joined) == joined and merged(joined) is not joined
    assert merged([(0, 5), (5, 9), (12, 14)]) == [(0, 9), (12, 14)]
    assert merged([(3, 1), (4, 6)]) == [(3, 1), (4, 6)]


def test_intersection_is_what_both_lists_cover() -> None:
    """The intersection of two unions (disjoint, sorted) is the union of the points both cover:
    spans inside others, straddling several, sharing an edge, far apart; and each list empty."""
    rng = random.Random(11)

    def points(spans: list[tuple[int, int]]) -> set[int]:
        return {p for a, b in spans for p in range(a, b)}

    for _ in range(2_000):
        x, y = (
            union([(a, a + rng.randrange(1, 12)) for a in rng.sample(range(0, 120), rng.randrange(0, 12))])
            for _ in range(2)
        )
        both = sorted(points(x) & points(y))
        assert intersection(x, y) == union([(p, p + 1) for p in both]), (x, y)
    assert intersection([(0, 10), (20, 30)], [(10, 20)]) == []  # edges touch: nothing shared
    assert intersection([(0, 10)], [(5, 5)]) == []  # an empty span covers nothing
    assert intersection([(7, 8)], [(0, 10), (11, 5), (12, 20)]) == [(7, 8)]  # nor does a reversed one
    assert intersection([(0, 2**62)], [(2**61, 2**62 + 5)]) == [(2**61, 2**62)]
    with pytest.raises(OverflowError):  # beyond int64 (no trace's times are): taken as a union, which cannot hold it
        intersection([(0, 2**70)], [(5, 9)])


def test_coverage_of_a_window_is_covered_of_it() -> None:
    """Coverage (two binary searches and a running total) gives covered's sum over the spans of
    every window: windows inside a span, between spans, on their edges, around them all, empty."""
    rng = random.Random(7)
    for _ in range(200):
        spans = merged([(a, a + rng.randrange(1, 40)) for a in rng.sample(range(0, 2_000), rng.randrange(0, 30))])
        spans += [(5_000, 5_000)] if rng.random() < 0.3 else []  # an empty span covers nothing
        edges = sorted({x for span in spans for x in span} | {-5, 0, 2_100, 6_000})
        whole = Coverage(spans)
        windows = [(lo, hi) for lo in edges for hi in edges] + [
            (rng.randrange(-50, 2_100), rng.randrange(-50, 2_100)) for _ in range(50)
        ]
        assert whole.within_all([lo for lo, _ in windows], [hi for _, hi in windows]) == [
            covered(spans, lo, hi) for lo, hi in windows
        ], spans
    assert Coverage([(0, 10), (20, 30)]).within_all([5], [25]) == [10]
    assert Coverage([]).within_all([0, 5], [100, 2]) == [0, 0]
    with pytest.raises(OverflowError):  # a span beyond int64: taken as a union, which cannot hold it
        Coverage([(0, 2**70)])
    assert Coverage([(0, 10), (20, 30)]).within_all([5, -(2**70)], [25, 2**70]) == [10, 20]


def _nsys_export(path: Path) -> Path:
    """Two ranks under one nsys, ProfilerStep#N ranges (emit_nvtx) and kernels on two streams
    each (ns since the session start); rank 1 enters each all-reduce 40 µs after rank 0."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from make_nsys import ELEMENTWISE, GEMM, NCCL_KERNEL, Export
    finally:
        sys.path.remove(str(FIXTURES))
    ex = Export("gpu-node-a", 1_800_000_000_000_000_000)
    for rank, pid in enumerate((401, 402)):
        ex.process(pid, "/usr/bin/python3", {pid: "python3"})
        ex.stream(pid, 7)
        ex.stream(pid, 13)
        for step in range(2):
            base = 1_000_000 + step * 1_000_000
            ex.nvtx(base, base + 900_000, f"ProfilerStep#{step + 1}", pid, pid)
            ex.kernel(base + 100_000, base + 400_000, pid, rank, 7, None, GEMM)
            ex.kernel(base + 380_000, base + 420_000, pid, rank, 7, None, ELEMENTWISE)
            ex.kernel(base + 300_000 + rank * 40_000, base + 600_000, pid, rank, 13, None, NCCL_KERNEL)
    return ex.write(path)


def test_breakdown_of_nsys_export(tmp_path: Path) -> None:
    db = _nsys_export(tmp_path / "run" / "train.sqlite")
    with sqlite3.connect(db) as con:
        names = dict(con.execute("select id, value from StringIds"))
        rows = list(
            con.execute("select globalPid >> 24 & 16777215, start, end, demangledName from CUPTI_ACTIVITY_KIND_KERNEL")
        )
        steps = list(
            con.execute(
                "select globalTid >> 24 & 16777215, start, end, text from NVTX_EVENTS where text like 'ProfilerStep#%'"
            )
        )
    found = {(r["rank"], r["step"]): r for r in _numbers(str(db.parent))["breakdown"]}
    assert len(found) == len(steps) == 4
    parts = PARTS
    for rank, pid in enumerate((401, 402)):
        compute = [(a, b) for p, a, b, n in rows if p == pid and not names[n].startswith("nccl")]
        comm = [(a, b) for p, a, b, n in rows if p == pid and names[n].startswith("nccl")]
        for p, a, b, text in steps:
            if p == pid:
                row = found[(rank, int(text.partition("#")[2]))]
                assert tuple(row[k] for k in parts) == _parts(a, b, compute, comm)
                assert row["wait_ns"] == (40_000 if rank == 0 else 0)


def test_a_step_number_captured_twice_keeps_both_rows(tmp_path: Path) -> None:
    """Two captures of one rank both hold ProfilerStep#1: a row each, in time order."""
    run = tmp_path / "run"
    kineto_device(run / "a" / "rank0.pt.trace.json", 0, [(0, 1000)], [(GEMM, 7, 100, 300)])
    kineto_device(run / "b" / "rank0.pt.trace.json", 0, [(5000, 6000)], [(GEMM, 7, 5100, 5600), (NCCL, 13, 5500, 5800)])
    rows = _numbers(str(run))["breakdown"]
    assert [(r["rank"], r["step"]) for r in rows] == [(0, 1), (0, 1)]
    # a: work [100, 300) of [0, 1000); b: [5100, 5800) of [5000, 6000), no gap in either
    assert [tuple(r[p] for p in PARTS[1:]) for r in rows] == [
        (200 * US, 0, 0, 0, 100 * US, 700 * US),
        (500 * US, 200 * US, 100 * US, 0, 100 * US, 200 * US),
    ]


def test_worst_rank_device_time_on_the_pipeline(tmp_path: Path) -> None:
    """The worst rank (most exposed communication and free time: rank 0) has a slice per step in
    the Pipeline group, over the step, named by its shares, with the numbers as args."""
    out = tmp_path / "merged.json"
    result = runner.invoke(cli.app, ["merge", str(_run(tmp_path)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    events = json.loads(out.read_text())["traceEvents"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    found = sorted((e for e in events if e.get("cat") == "tracemerge.device"), key=lambda e: e["ts"])
    assert {names[(e["pid"], e["tid"])] for e in found} == {"(no role) device time · worst: rank 0"}
    assert [(e["name"], e["ts"], e["dur"]) for e in found] == [
        ("compute 50% · communication 25% · free 15% · preparing 10%", 0.0, 1000.0),
        ("compute 20% · communication 20% · free 10% · closing 50%", 1000.0, 1000.0),
    ]
    parts = ("wall_ns", "compute_ns", "communication_ns", "overlapped_ns", "free_ns", "wait_ns")
    parts += ("preparing_ns", "closing_ns")
    assert [tuple(e["args"][p] for p in parts) for e in found] == [
        tuple(v * US for v in EXPECTED[(0, step)]) for step in (1, 2)
    ]
    assert [(e["args"]["step"], e["args"]["rank"]) for e in found] == [(1, 0), (2, 0)]


@pytest.mark.parametrize("limit", [1, 3])
def test_stored_summary_keeps_whole_steps_up_to_its_limit(tmp_path: Path, monkeypatch, limit: int) -> None:
    """With room for ``limit`` rows, the trace's own summary keeps the breakdown rows and the
    busiest kernels per step (two ranks a step) and the critical-path segments (one a step) of the
    first steps that fit whole, and says how many rows and steps it left out; the summary of the
    run itself keeps all."""
    run = _run(tmp_path)
    full = _numbers(str(run))
    monkeypatch.setattr(step_summary, "STORED_ROWS", limit)
    out = tmp_path / "merged.pftrace"
    result = runner.invoke(cli.app, ["merge", str(run), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    stored = _numbers(str(out))
    # limit 1: no step's two breakdown rows fit, step 1's segment does; limit 3: step 1's rows, all segments
    kept_rows, kept_segments = {1: ([], [1]), 3: ([1], [1, 2])}[limit]
    assert stored["breakdown"] == [r for r in full["breakdown"] if r["step"] in kept_rows]
    assert stored["critical_path"] == [seg for seg in full["critical_path"] if seg["step"] in kept_segments]
    assert [seg["step"] for seg in full["critical_path"]] == [1, 2]
    left = {"breakdown": {"rows": 4 - 2 * len(kept_rows), "steps": 2 - len(kept_rows), "limit": limit}}
    if limit == 1:
        left["critical_path"] = {"rows": 1, "steps": 1, "limit": 1}
    # each step's busiest kernels: a row per rank and step, kept and counted as the breakdown's
    assert stored["step_kernels"] == [r for r in full["step_kernels"] if r["step"] in kept_rows]
    assert len(full["step_kernels"]) == 4
    left["step_kernels"] = left["breakdown"]
    assert stored["left_out"] == left
    assert "left_out" not in full
    table = runner.invoke(cli.app, ["summary", str(out)])
    n = left["breakdown"]
    said = f"breakdown: {n['rows']} rows of {n['steps']} step(s) left out (at most {limit} kept, whole steps in"
    assert said + " step order)" in table.output


def test_stored_summary_is_bounded_at_scale() -> None:
    """64 ranks × 1500 steps of breakdown rows and 80 segments per step: the stored numbers keep
    64 × 1000 of each, whole steps in step order, and count the rest."""
    steps = 1500
    numbers = {
        "steps": [{"step": s, "start_ns": s, "end_ns": s + 1, "wall_ns": 1} for s in range(steps)],
        "roles": {},
        "breakdown": [{"role": "actor", "rank": r, "step": s, "wall_ns": 1} for r in range(64) for s in range(steps)],
        "critical_path": [{"step": s, "start_ns": s, "end_ns": s + 1} for s in range(steps) for _ in range(80)],
    }
    kept = json.loads(step_summary.stored(numbers)["numbers"])
    assert len(kept["breakdown"]) == 64_000 == step_summary.STORED_ROWS
    assert {r["step"] for r in kept["breakdown"]} == set(range(1000))
    assert len(kept["critical_path"]) == 800 * 80
    assert {seg["step"] for seg in kept["critical_path"]} == set(range(800))
    assert kept["left_out"] == {
        "breakdown": {"rows": 500 * 64, "steps": 500, "limit": 64_000},
        "critical_path": {"rows": 700 * 80, "steps": 700, "limit": 64_000},
    }
    assert len(numbers["breakdown"]) == 64 * steps  # the summary given is left as it was
