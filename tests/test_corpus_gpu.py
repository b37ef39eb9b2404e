"""Device time per rank and step (tracemerge.breakdown) on genuine GPU traces with NCCL kernels
from ../shared/corpus/torch (skipped when absent): HolisticTraceAnalysis's two sampled ranks of a
128-rank job (integer µs) and its rank 0 of a two-rank job (all-reduces and broadcasts; float µs
relative to baseTimeNanoseconds).

The expected numbers come from plain interval unions written here over each file's own kernel,
copy and set events, sharing no code with tracemerge.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from tracemerge import cli

HTA_DATA = ROOT.parent / "shared" / "corpus" / "torch" / "HolisticTraceAnalysis" / "tests" / "data"
pytestmark = pytest.mark.skipif(not HTA_DATA.is_dir(), reason=f"no corpus at {HTA_DATA}")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
NCCL_PREFIXES = ("ncclKernel", "ncclDevKernel")
PARTS = ("wall_ns", "compute_ns", "communication_ns", "overlapped_ns", "free_ns")
runner = CliRunner()

Spans = list[tuple[int, int]]


def union(spans: Spans) -> Spans:
    """Sorted, disjoint spans covering exactly what ``spans`` cover."""
    out: Spans = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


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
    out = {}
    for step, (lo, hi) in steps.items():
        c, m = union(clip(compute, lo, hi)), union(clip(comm, lo, hi))
        overlapped = length(both(c, m))
        exposed = length(m) - overlapped
        free = (hi - lo) - length(union(c + m))
        out[step] = (hi - lo, length(c), exposed, overlapped, free)
    return trace["distributedInfo"]["rank"], out


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
        assert r["compute_ns"] + r["communication_ns"] + r["free_ns"] == r["wall_ns"]
        assert r["communication_ns"] + r["overlapped_ns"] > 0
