"""Device time per rank and step (tracemerge.phases.device_time) on genuine profiles from ../shared/corpus
(each part skipped when absent): GPU traces with NCCL kernels (HolisticTraceAnalysis's two sampled
ranks of a 128-rank job, integer µs; its rank 0 of a two-rank job, all-reduces and broadcasts,
float µs relative to baseTimeNanoseconds) and MindStudio Insight's two-rank Ascend exports, as text
(trace_view.json) and as databases.

The expected numbers come from plain interval unions written here over each file's own kernel,
copy, set and task events, sharing no code with tracemerge.
"""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from conftest import ROOT
from expected import union
from typer.testing import CliRunner

from tracemerge.cli import main as cli

CORPUS = ROOT.parent / "shared" / "corpus"
HTA_DATA = CORPUS / "torch" / "HolisticTraceAnalysis" / "tests" / "data"
ASCEND = CORPUS / "ascend" / "msinsight" / "test" / "data" / "pytorch"
gpu_corpus = pytest.mark.skipif(not HTA_DATA.is_dir(), reason=f"no corpus at {HTA_DATA}")
ascend_corpus = pytest.mark.skipif(not ASCEND.is_dir(), reason=f"no corpus at {ASCEND}")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
NCCL_PREFIXES = ("ncclKernel", "ncclDevKernel")
PARTS = ("wall_ns", "compute_ns", "communication_ns", "overlapped_ns", "free_ns", "preparing_ns", "closing_ns")
runner = CliRunner()

Spans = list[tuple[int, int]]


def clip(spans: Spans, lo: int, hi: int) -> Spans:
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]


def both(x: Spans, y: Spans) -> Spans:
    """What two disjoint span lists both cover (every pair compared: the files are small)."""
    return union([(max(a, c), min(b, d)) for a, b in x for c, d in y if min(b, d) > max(a, c)])


def length(spans: Spans) -> int:
    return sum(b - a for a, b in spans)


def to_ns(us: object) -> int:
    """Exact ns of a µs time as its text reads (a float's shortest repr, or an int)."""
    return int(Decimal(str(us)) * 1000)


def expected(path: Path) -> tuple[int, dict[int, tuple[int, ...]]]:
    """The file's rank and, per ProfilerStep#N, its wall, compute, exposed communication,
    overlap and free time (ns)."""
    trace = json.loads(gzip.decompress(path.read_bytes()))
    steps, compute, comm = {}, [], []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        a = to_ns(e["ts"])
        span = (a, a + to_ns(e["dur"]))
        if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            steps[int(e["name"].removeprefix("ProfilerStep#"))] = span
        elif e.get("cat") in DEVICE_WORK:
            (comm if e["name"].startswith(NCCL_PREFIXES) else compute).append(span)
    assert comm, "a trace with NCCL kernels"
    return trace["distributedInfo"]["rank"], {step: parts_of(window, compute, comm) for step, window in steps.items()}


@gpu_corpus
@pytest.mark.parametrize(
    "files",
    [
        ["trace_filter/sampled_rank-0.json.gz", "trace_filter/sampled_rank-1.json.gz"],
        ["nccl_parser_config/nccl_data.json.gz"],
    ],
    ids=["hta-two-sampled-ranks", "hta-nccl-allreduce"],
)
def test_breakdown_of_a_genuine_gpu_trace(files: list[str]) -> None:
    paths = [HTA_DATA / f for f in files]
    result = runner.invoke(cli.app, ["summary", str(paths[0].parent), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["breakdown"]
    found = {(r["rank"], r["step"]): tuple(r[p] for p in PARTS) for r in rows}
    truth = {}
    for path in paths:
        rank, steps = expected(path)
        truth.update({(rank, step): parts for step, parts in steps.items()})
    assert found == truth
    for r in rows:
        assert sum(r[p] for p in PARTS[1:] if p != "overlapped_ns") == r["wall_ns"]
        assert r["communication_ns"] + r["overlapped_ns"] > 0


# Ascend tasks as msprof types them: HCCL's are communication, synchronisation no device work, and
# memory copies none of torch_npu's Computing.
HCCL_TASKS = {"Notify Wait", "Notify Record", "Write Value", "SDMA", "RDMA", "Reduce Inline"}
SYNC_TASKS = ("EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET", "PLACE_HOLDER", "PROFILING_")
COPY_TASKS = ("PCIE_DMA", "SDMA_SQE", "MEMCPY")


def text_ns(value: Decimal) -> int:
    """µs text to ns, rounded half up (as a decimal time is read)."""
    return int((value * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def parts_of(window: tuple[int, int], compute: Spans, comm: Spans) -> tuple[int, ...]:
    """Wall, compute, exposed communication, overlap, free (between the first and the last device
    work), preparing (before the first) and closing (after the last) of ``window``."""
    lo, hi = window
    c, m = union(clip(compute, lo, hi)), union(clip(comm, lo, hi))
    overlapped = length(both(c, m))
    busy = union(c + m)
    if not busy:
        return (hi - lo, 0, 0, 0, hi - lo, 0, 0)
    first, last = busy[0][0], busy[-1][1]
    free = (last - first) - length(busy)
    return (hi - lo, length(c), length(m) - overlapped, overlapped, free, first - lo, hi - last)


def ascend_text_truth(path: Path) -> dict[int, tuple[int, ...]]:
    """Per ProfilerStep#N of a trace_view.json: tasks on the Ascend Hardware streams, HCCL's
    communication, the others but synchronisation compute."""
    events = json.loads(path.read_text(), parse_float=Decimal)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    steps, compute, comm = {}, [], []
    for e in events:
        if e.get("ph") != "X":
            continue
        a = text_ns(Decimal(str(e["ts"])))
        span = (a, a + text_ns(Decimal(str(e["dur"]))))
        if e["name"].startswith("ProfilerStep#"):
            steps[int(e["name"].removeprefix("ProfilerStep#"))] = span
        elif names.get(e["pid"]) == "Ascend Hardware":
            kind = e["args"]["Task Type"]
            if kind in HCCL_TASKS:
                comm.append(span)
            elif not kind.startswith(SYNC_TASKS + COPY_TASKS):
                compute.append(span)
    assert steps and compute and comm
    return {step: parts_of(window, compute, comm) for step, window in steps.items()}


def ascend_db_truth(path: Path) -> dict[int, tuple[int, ...]]:
    """Per ProfilerStep#N of a profiler DB: TASK rows of COMMUNICATION_TASK_INFO, or of a
    communication op's connection (the op's own task), communication; the others but
    synchronisation compute."""
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as con:
        text = dict(con.execute("select id, value from STRING_IDS"))
        comm_tasks = {n for (n,) in con.execute("select globalTaskId from COMMUNICATION_TASK_INFO")}
        op_connections = {n for (n,) in con.execute("select connectionId from COMMUNICATION_OP")}
        tasks = list(con.execute("select startNs, endNs, globalTaskId, connectionId, taskType from TASK"))
        api = list(con.execute("select startNs, endNs, name from PYTORCH_API"))
    compute, comm = [], []
    for a, b, task, connection, kind in tasks:  # times may be stored as text
        if task in comm_tasks or connection in op_connections:
            comm.append((int(a), int(b)))
        elif not str(text.get(kind, kind)).startswith(SYNC_TASKS + COPY_TASKS):
            compute.append((int(a), int(b)))
    steps = {
        int(text[name].removeprefix("ProfilerStep#")): (int(a), int(b))
        for a, b, name in api
        if str(text.get(name)).startswith("ProfilerStep#")
    }
    assert steps and compute and comm
    return {step: parts_of(window, compute, comm) for step, window in steps.items()}


@ascend_corpus
@pytest.mark.parametrize("export", ["text/level0", "text/level1", "db/level0", "db/level1"])
def test_breakdown_of_genuine_ascend_exports(export: str) -> None:
    result = runner.invoke(cli.app, ["summary", str(ASCEND / export), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["breakdown"]
    found = {(r["rank"], r["step"]): tuple(r[p] for p in PARTS) for r in rows}
    truth = {}
    for rank in (0, 1):
        out = ASCEND / export / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        if export.startswith("text"):
            steps = ascend_text_truth(out / "trace_view.json")
        else:
            steps = ascend_db_truth(out / f"ascend_pytorch_profiler_{rank}.db")
        truth.update({(rank, step): parts for step, parts in steps.items()})
    assert found == truth
    for r in rows:
        assert sum(r[p] for p in PARTS[1:] if p != "overlapped_ns") == r["wall_ns"]


# torch_npu's own figures per step (µs): step_trace_time.csv beside a text export, the
# StepTraceTime table of analysis.db beside a database; the columns the breakdown gives alike.
VENDOR_COLUMNS = {
    "compute_ns": "Computing",
    "communication_ns": "Communication(Not Overlapped)",
    "overlapped_ns": "Overlapped",
    "free_ns": "Free",
    "preparing_ns": "Preparing",
}
DB_COLUMNS = (  # StepTraceTime's columns, in step_trace_time.csv's order
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
)


def vendor_figures(export: str, rank: int) -> dict[int, dict[str, float]]:
    out = ASCEND / export / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    if export.startswith("text"):
        with (out / "step_trace_time.csv").open() as f:
            rows = list(csv.DictReader(f))
    else:
        with sqlite3.connect(f"file:{out / 'analysis.db'}?mode=ro&immutable=1", uri=True) as con:
            rows = [dict(zip(DB_COLUMNS, r, strict=True)) for r in con.execute("select * from StepTraceTime")]
    return {int(r["Step"]): {k: float(v) for k, v in r.items() if k != "Step"} for r in rows}


@ascend_corpus
@pytest.mark.parametrize("export", ["text/level0", "text/level1", "db/level0", "db/level1"])
def test_ascend_breakdown_agrees_with_torch_npus_own_figures(export: str) -> None:
    """Column by column, as torch_npu computes them: Computing (the compute tasks' union, no copy),
    Communication(Not Overlapped), Overlapped, Free (idle within the Stage, from the step's first
    device task to its last) and Preparing (the step's start to its first device task). torch_npu
    bounds communication by HCCL's op spans where the breakdown takes HCCL's tasks, and its DB
    export times tasks apart from the text one: within 1% or 50 µs; Preparing to the µs."""
    result = runner.invoke(cli.app, ["summary", str(ASCEND / export), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["breakdown"]
    assert len(rows) == 2
    for r in rows:
        theirs = vendor_figures(export, r["rank"])[r["step"]]
        for ours, column in VENDOR_COLUMNS.items():
            vendor_ns = theirs[column] * 1000
            room = 1_000 if column == "Preparing" else max(50_000, 0.01 * vendor_ns)
            assert abs(r[ours] - vendor_ns) <= room, (export, r["rank"], column, r[ours], vendor_ns)
        stage = r["wall_ns"] - r["preparing_ns"] - r["closing_ns"]
        assert stage == r["compute_ns"] + r["communication_ns"] + r["free_ns"]
        assert abs(stage - theirs["Stage"] * 1000) <= max(50_000, 0.01 * theirs["Stage"] * 1000)
