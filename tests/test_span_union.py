"""Device activity held as int64 columns (tracemerge.evidence.span_union): the same union as
joining the spans one by one, in any order, and 16 bytes per span of the union from the read's
notes to the breakdown, whatever the number of kernels."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from expected import union
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import DEVICE_COMM, DEVICE_COMPUTE
from tracemerge.evidence.notes import EvidenceNotes
from tracemerge.evidence.scan_marks import process_marks
from tracemerge.evidence.span_union import BLOCK, SpanUnion
from tracemerge.phases.device_time import Breakdown, Coverage, covered, intersection, merged, whole_breakdowns
from tracemerge.phases.kernels import busiest


def _columns_bytes(found: SpanUnion) -> int:
    starts, ends = found.columns()
    return starts.nbytes + ends.nbytes


def test_a_union_is_the_spans_joined_whatever_their_order_and_how_they_come() -> None:
    rng = random.Random(43)
    for _ in range(200):
        spans = [(a, a + rng.randrange(0, 30)) for a in (rng.randrange(2_000) for _ in range(rng.randrange(0, 80)))]
        one_by_one, in_columns, in_blocks = SpanUnion(), SpanUnion(), SpanUnion()
        for a, b in spans:
            one_by_one.add(a, b)
        in_columns.add_columns(np.array([a for a, _ in spans], np.int64), np.array([b for _, b in spans], np.int64))
        for k in range(0, len(spans), 7):
            in_blocks.absorb(SpanUnion.of(spans[k : k + 7]))
        # the spans that cover something, joined where they touch or overlap
        expected = merged([(a, b) for a, b in spans if b > a])
        assert one_by_one == in_columns == in_blocks == expected == union([(a, b) for a, b in spans if b > a])


def test_blocks_out_of_order_are_merged_into_one_union() -> None:
    """More than a block of spans, noted from the last to the first (each block starts before
    the union so far ends): the union is merged, its figures exact."""
    found = SpanUnion()
    count = 3 * BLOCK + 5
    for n in reversed(range(count)):
        found.add(10 * n, 10 * n + 4)
    starts, ends = found.columns()
    assert len(found) == count
    assert starts.tolist() == list(range(0, 10 * count, 10)) and (ends - starts == 4).all()
    assert found.covered(3, 23) == 1 + 4 + 3
    assert covered(found, 3, 23) == covered(list(found), 3, 23) == 8


def test_the_breakdown_s_figures_of_a_union_are_those_of_its_list() -> None:
    rng = random.Random(7)
    for _ in range(100):
        x = merged([(a, a + rng.randrange(1, 50)) for a in rng.sample(range(3_000), rng.randrange(0, 40))])
        y = merged([(a, a + rng.randrange(1, 50)) for a in rng.sample(range(3_000), rng.randrange(0, 40))])
        ux, uy = SpanUnion.of(x), SpanUnion.of(y)
        assert intersection(ux, uy) == intersection(x, y)
        lo = sorted(rng.randrange(3_100) for _ in range(20))
        hi = [a + rng.randrange(0, 400) for a in lo]
        assert Coverage(ux).within_all(lo, hi) == Coverage(x).within_all(lo, hi)
        assert Coverage(intersection(ux, uy)).within_all(lo, hi) == Coverage(intersection(x, y)).within_all(lo, hi)


def test_device_activity_costs_sixteen_bytes_a_span_from_the_notes_to_the_scan() -> None:
    """The structure that bounds the memory: 200,000 kernels that never overlap (each a span of
    the union, the worst case) on two streams are held as two int64 columns per thread and per
    process, 16 bytes a span, and spans noted one at a time wait at most a block before they are."""
    notes = EvidenceNotes()
    kernels = 200_000
    for n in range(kernels):
        notes.mark(DEVICE_COMPUTE if n % 10 else DEVICE_COMM, "gpu", 7 + n % 2, n * 6_000, n * 6_000 + 5_000)
        if n % 50_000 == 0:
            assert all(len(u._tail_starts) < BLOCK for u in notes.marks.values())  # type: ignore[union-attr]
    assert all(type(u) is SpanUnion for u in notes.marks.values())
    assert sum(_columns_bytes(u) for u in notes.marks.values()) == 16 * kernels  # type: ignore[arg-type]
    ident = Identity("actor", 0)
    marks = process_marks(notes.marks, lambda origin: ident, 1_000_000)
    compute, comm = marks[ident][DEVICE_COMPUTE], marks[ident][DEVICE_COMM]
    assert type(compute) is SpanUnion and len(compute) == kernels - kernels // 10 and len(comm) == kernels // 10
    assert _columns_bytes(compute) + _columns_bytes(comm) == 16 * kernels
    assert list(comm)[:2] == [(1_000_000, 1_005_000), (1_060_000, 1_065_000)]
    # what a file's scan sends to the merging process: the columns, not a tuple per span
    assert len(pickle.dumps(marks)) < 16 * kernels + 4_096


def test_a_kineto_rank_s_kernels_reach_the_breakdown_as_columns(tmp_path: Path) -> None:
    """A trace of 3,000 kernels, 5 µs each, 1 µs apart on two streams, one in ten an all-reduce,
    and a ProfilerStep every 1,000: each step's compute and communication to the nanosecond, its
    first kernel at its start (nothing preparing) and its last ending 1 µs before its end (closing)."""
    step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "dur": 6000}
    events = [step | {"name": f"ProfilerStep#{s}", "ts": s * 6000} for s in range(3)]
    for n in range(3_000):
        name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if n % 10 == 9 else "sm90_gemm"
        stream = 7 + n % 2
        kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": stream, "ts": n * 6, "dur": 5}
        events.append(kernel | {"name": name, "args": {"device": 0, "stream": stream}})
    (tmp_path / "rank0.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(cli.app, ["summary", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["breakdown"]
    numbers = ("step", "wall_ns", "compute_ns", "communication_ns", "free_ns", "preparing_ns", "closing_ns")
    assert [tuple(r[k] for k in numbers) for r in rows] == [
        (s, 6_000_000, 900 * 5_000, 100 * 5_000, 999 * 1_000, 0, 1_000) for s in range(3)
    ]


def test_the_whole_time_breakdown_and_the_busy_time_of_unions() -> None:
    """A process without steps measured over its file's time (0 to 1,000 ns, moved 50 ns by the
    clock), and its busy time beside its busiest kernels, from its unions as from their lists."""
    ident = Identity("actor", 0)
    compute, comm = [(100, 200), (300, 400)], [(150, 250), (500, 600)]
    scan = SimpleNamespace(path="rank0", ts_min=0, ts_max=1_000, counts={ident: 1}, threads={})
    for units in ({ident: (compute, comm)}, {ident: (SpanUnion.of(compute), SpanUnion.of(comm))}):
        # device work from 100 to 600 in the window [50, 1050): 350 ns busy, 150 free between
        assert whole_breakdowns(units, [scan], {"rank0": 50}) == {
            ident: Breakdown(1_000, 200, 150, 50, 150, 0, 50, 450)
        }
        assert busiest({ident: {"gemm": (300, 2), "nccl": (200, 2)}}, units)[ident].busy_ns == 350


def test_whole_breakdowns_and_busy_times_of_unions_are_those_of_their_lists() -> None:
    rng = random.Random(11)
    ident = Identity("rollout", 1)
    for _ in range(100):
        x = merged([(a, a + rng.randrange(1, 50)) for a in rng.sample(range(3_000), rng.randrange(0, 40))])
        y = merged([(a, a + rng.randrange(1, 50)) for a in rng.sample(range(3_000), rng.randrange(0, 40))])
        scan = SimpleNamespace(path="f", ts_min=rng.randrange(500), ts_max=rng.randrange(500, 3_500), counts={ident: 1})
        lists, unions = {ident: (x, y)}, {ident: (SpanUnion.of(x), SpanUnion.of(y))}
        assert whole_breakdowns(unions, [scan], {}) == whole_breakdowns(lists, [scan], {})
        tally = {ident: {"k": (1, 1)}}
        assert busiest(tally, unions) == busiest(tally, lists)
