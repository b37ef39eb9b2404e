"""Per-kernel columns past a bound live in the run's work folder (tracemerge.evidence.column_file):
a span union or a stream's kernel columns of more than SPILL_AT spans or kernels is on disk, read
back a chunk at a time, and every figure made of it is the one made in memory, to the
nanosecond; merges and summaries give the same bytes and numbers, and leave nothing behind. A
thread's runs apart in time are found a block at a time, as they are of the whole thread."""

from __future__ import annotations

import itertools
import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from builders import kineto_device
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.model import Identity
from tracemerge.evidence import column_file, span_union
from tracemerge.evidence.kernel_tally import KernelTally, KernelTimes
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.phases.device_time import Coverage, intersection, merged, whole_breakdowns
from tracemerge.phases.kernels import busiest, window_sums
from tracemerge.store import entries, run_cuts
from tracemerge.store.entries import ThreadEntries, entry_block
from tracemerge.store.spill import RunStore

runner = CliRunner()


def _spans(rng: random.Random, count: int, reach: int = 100_000) -> list[tuple[int, int]]:
    return [(a, a + rng.randrange(0, 40)) for a in (rng.randrange(reach) for _ in range(count))]


def _noted(spans: list[tuple[int, int]], folder: Path | None) -> SpanUnion:
    """The spans noted as a read notes them: one at a time, and a batch of columns at a time."""
    found = SpanUnion(folder=folder)
    for a, b in spans[: len(spans) // 2]:
        found.add(a, b)
    rest = spans[len(spans) // 2 :]
    found.add_columns(np.array([a for a, _ in rest], np.int64), np.array([b for _, b in rest], np.int64))
    return found


def test_a_union_past_the_bound_is_on_disk_and_measures_as_in_memory(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(column_file, "SPILL_AT", 50)
    monkeypatch.setattr(span_union, "BLOCK", 16)
    rng = random.Random(43)
    for trial in range(40):
        spans, others = _spans(rng, rng.randrange(200, 900)), _spans(rng, rng.randrange(0, 900))
        if trial % 2:
            spans.sort()  # in time order: appended run after run
        x, y = _noted(spans, tmp_path), _noted(others, tmp_path)
        in_memory_x, in_memory_y = _noted(spans, None), _noted(others, None)
        assert x.on_disk and not in_memory_x.on_disk
        assert list(x) == list(in_memory_x) == merged([(a, b) for a, b in spans if b > a])
        assert len(x) == len(in_memory_x)
        assert all(len(starts) <= 50 for starts, _ in x.chunks())  # read a chunk at a time
        lo = [rng.randrange(-100, 100_100) for _ in range(50)]
        hi = [a + rng.randrange(-10, 5_000) for a in lo]
        assert [x.covered(a, b) for a, b in zip(lo, hi, strict=True)] == [
            in_memory_x.covered(a, b) for a, b in zip(lo, hi, strict=True)
        ]
        both, in_memory_both = intersection(x, y), intersection(in_memory_x, in_memory_y)
        assert list(both) == list(in_memory_both)
        for disk, memory in ((x, in_memory_x), (both, in_memory_both)):
            assert Coverage(disk).within_all(lo, hi) == Coverage(memory).within_all(lo, hi)
            assert Coverage(disk).bounds_all(lo, hi) == Coverage(memory).bounds_all(lo, hi)
        ident = Identity("trainer", 0)
        assert busiest({ident: {"k": (1, 1)}}, {ident: (x, y)}) == busiest(
            {ident: {"k": (1, 1)}}, {ident: (in_memory_x, in_memory_y)}
        )
        assert whole_breakdowns({ident: (x, y)}, [], {}) == whole_breakdowns(
            {ident: (in_memory_x, in_memory_y)}, [], {}
        )
        # moved to another clock, it points at the same columns; it travels as where they lie
        moved = SpanUnion()
        moved.absorb(x, 10**15)
        assert list(moved) == [(a + 10**15, b + 10**15) for a, b in in_memory_x]
        travelled = pickle.loads(pickle.dumps(moved))
        assert travelled.on_disk and list(travelled) == list(moved)


def test_the_union_of_many_unions_on_disk_is_merged_a_chunk_at_a_time(monkeypatch, tmp_path: Path) -> None:
    """A process's streams (unions that overlap in time), each on disk, joined: their runs are
    merged as a stream into the union the spans make all at once, touching spans joined."""
    monkeypatch.setattr(column_file, "SPILL_AT", 8)
    monkeypatch.setattr(span_union, "MAX_RUNS", 2)
    rng = random.Random(5)
    streams = [_spans(rng, 300, 5_000) + [(5_000 + 10 * n, 5_010 + 10 * n) for n in range(20)] for _ in range(5)]
    process = SpanUnion()
    for n, spans in enumerate(streams):
        process.absorb(_noted(spans, tmp_path), n)
    expected = merged([(a + n, b + n) for n, spans in enumerate(streams) for a, b in spans if b > a])
    assert process.on_disk and process.folder == tmp_path
    assert list(process) == expected
    assert process.outer() == [expected[0], expected[-1]]


def test_a_stream_s_kernels_past_the_bound_are_on_disk_and_count_as_in_memory(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(column_file, "SPILL_AT", 16)
    rng = random.Random(11)
    on_disk, in_memory = KernelTally(tmp_path), KernelTally()
    part_on_disk, part_in_memory = KernelTally(tmp_path), KernelTally()
    for _ in range(2_000):
        stream, name = rng.randrange(3), rng.choice("abcdef")
        start, dur = rng.randrange(50_000), rng.choice([0, 1, 5, 50, 400, 3_000])
        for tally in (on_disk, in_memory) if rng.random() < 0.7 else (part_on_disk, part_in_memory):
            if rng.random() < 0.5:
                tally.add(1, (0, stream), name, start, dur)
            else:
                tally.add_rows(1, (0, stream), [name], np.array([start]), np.array([dur]))
    # a part read apart, its columns travelling as where they lie, then the streams re-keyed
    on_disk.absorb(part_on_disk.by_stream, pickle.loads(pickle.dumps(part_on_disk.times)))
    in_memory.absorb(part_in_memory.by_stream, part_in_memory.times)
    on_disk.regroup(lambda origin, thread: 2 if thread[1] else 1)
    in_memory.regroup(lambda origin, thread: 2 if thread[1] else 1)
    assert on_disk.by_stream == in_memory.by_stream
    windows = [(w, w + 4_000) for w in range(0, 50_000, 5_000)]
    for key, memory in in_memory.times.items():
        disk = on_disk.times[key]
        assert disk.spilled and not memory.spilled and len(disk) == len(memory)
        assert _window_sums(disk, windows) == _window_sums(memory, windows)
        assert sum(n for _, n in _window_sums(memory, windows).values()) > 100  # the windows hold kernels


def _window_sums(times: KernelTimes, windows: list[tuple[int, int]]) -> dict[tuple[int, str], tuple[int, int]]:
    """Per (window, name): the kernels' time in the window and their count."""
    keys, inside, counts = window_sums(times, windows, np.arange(len(times.names)), len(times.names))
    return {
        (key // len(times.names), times.names[key % len(times.names)]): (t, n)
        for key, t, n in zip(keys.tolist(), inside.tolist(), counts.tolist(), strict=True)
    }


def _summary(path: Path) -> dict:
    result = runner.invoke(cli.app, ["summary", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _two_streams(folder: Path) -> Path:
    """Four steps of kernels on two streams that overlap, some crossing a step's edge."""
    rng = random.Random(3)
    kernels_run = []
    for n in range(400):
        start = rng.randrange(0, 4_000)
        kernels_run.append(("gemm" if n % 3 else "Memcpy HtoD", 7 + n % 2, start, start + rng.randrange(1, 30)))
    return kineto_device(
        folder / "rank0.pt.trace.json", 0, [(0, 1000), (1000, 2000), (2000, 3000), (3000, 4100)], kernels_run
    )


def test_merge_and_summary_with_the_columns_on_disk_are_those_in_memory(monkeypatch, tmp_path: Path) -> None:
    trace = _two_streams(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    expected_numbers = _summary(trace.parent)
    assert runner.invoke(cli.app, [str(trace.parent), "-q", "-o", str(out / "memory.pftrace")]).exit_code == 0
    written: list[Path] = []
    write = column_file.write_column

    def spy(folder: Path, column: np.ndarray) -> column_file.Piece:
        written.append(folder)
        return write(folder, column)

    monkeypatch.setattr(column_file, "SPILL_AT", 10)
    for module in ("tracemerge.evidence.span_runs", "tracemerge.evidence.kernel_tally"):
        monkeypatch.setattr(f"{module}.write_column", spy)
    assert _summary(trace.parent) == expected_numbers
    assert written and all(f.name.startswith("tracemerge-summary-") for f in written)
    written.clear()
    assert runner.invoke(cli.app, [str(trace.parent), "-q", "-o", str(out / "disk.pftrace")]).exit_code == 0
    assert (out / "disk.pftrace").read_bytes() == (out / "memory.pftrace").read_bytes()
    # spilled in the run's work folder, which is gone with it
    assert written and {f.parent for f in written} == {out} and all(f.name.startswith(".tracemerge-") for f in written)
    assert sorted(p.name for p in out.iterdir()) == ["disk.pftrace", "memory.pftrace"]
    assert not any(f.exists() for f in written)


def test_a_ray_node_keeps_the_columns_in_memory(monkeypatch, tmp_path: Path) -> None:
    """A Ray node's folder is its own: the summary travels with its columns in it."""
    pytest.importorskip("ray")
    from tracemerge.discovery.discover import discover
    from tracemerge.run.filework import FileJob
    from tracemerge.run.ray_executor import process_on_node, remove_folder

    monkeypatch.setattr(column_file, "SPILL_AT", 10)
    trace = _two_streams(tmp_path / "in")
    (candidate,) = discover([trace]).candidates
    node_folder = f"tracemerge-test-node-{tmp_path.name}"
    try:
        outcome, _ = process_on_node(FileJob(candidate, 2, "perfetto", tmp_path / "000000.chunk"), node_folder)
    finally:
        remove_folder(node_folder)
    assert outcome.scan is not None
    unions = [u for tags in outcome.scan.marks.values() for u in tags.values() if isinstance(u, SpanUnion)]
    assert unions and not any(u.on_disk for u in unions)
    assert all(not t.spilled for streams in outcome.scan.kernel_times.values() for t in streams)


def _assert_sound(
    starts: list[int], ends: list[int], slices: list[bool], ordinals: list[int], thread: ThreadEntries, store: RunStore
) -> tuple[int, int]:
    """Each cut T of the thread's runs, checked over all its rows at once: after its earliest
    start; the rows starting before T that do not stay open across it end by T, and if one ends
    at T a slice starts at T; at most SPINE stay open, each outlasting every row that starts from
    T while it is open, and they are the spine the thread gives for T, in the walk's order.
    Returns the cuts and the cuts with a spine."""
    runs = thread.chunks(store)
    assert runs[0][0] == run_cuts.BOTTOM and runs[-1][1] == run_cuts.TOP
    assert all(a[1] == b[0] == b[2] for a, b in itertools.pairwise(runs))
    rows = list(zip(starts, ends, slices, ordinals, strict=True))
    with_spine = 0
    for _, _, t in runs[1:]:
        assert t > min(starts)
        before = [r for r in rows if r[0] < t]
        spine = sorted((r for r in before if r[1] > t), key=lambda r: (r[0], r[0] - r[1], r[3]))
        closed = [r for r in before if r[1] <= t]
        if any(r[1] == t for r in closed):
            assert any(r[0] == t and r[2] for r in rows)
        assert len(spine) <= run_cuts.SPINE
        for o in spine:
            assert all(r[1] <= o[1] for r in rows if t <= r[0] < o[1])
        found = thread.spine(store, t)
        if spine:
            with_spine += 1
            assert found is not None
            assert [x.tolist() for x in found] == [
                [r[0] for r in spine],
                [r[0] - r[1] for r in spine],
                [r[3] for r in spine],
            ]
        else:
            assert found is None
    return len(runs) - 1, with_spine


def test_a_thread_s_runs_are_found_a_block_at_a_time(monkeypatch, tmp_path: Path) -> None:
    rng = random.Random(17)
    store = RunStore(tmp_path)
    cuts = with_spine = 0
    for _ in range(300):
        chunk = rng.choice([1, 2, 5, 20])
        monkeypatch.setattr(entries, "CHUNK", chunk)
        thread, starts, ends, slices, t = ThreadEntries(), [], [], [], 0
        for _ in range(rng.randrange(1, 6)):
            rows = []
            for _ in range(rng.randrange(1, 25)):
                # Often where the slice before ends: runs that touch.
                if rng.random() < 0.3 and ends:
                    t = ends[-1]
                else:
                    t = t + rng.randrange(0, 30) if rng.random() < 0.7 else rng.randrange(0, 400)
                instant = rng.random() < 0.2
                dur = 0 if instant else rng.choice([0, 1, 4, 50, 900])
                rows.append((t, -dur, int(instant), len(starts), b"."))
                starts.append(t)
                ends.append(t + dur)
                slices.append(not instant)
            thread.add_block(entry_block(rows))
            if rng.random() < 0.4:
                thread.spill(store)
        cut, spined = _assert_sound(starts, ends, slices, list(range(len(starts))), thread, store)
        cuts += cut
        with_spine += spined
        # The same rows in one block in memory: the same runs and spines.
        whole = ThreadEntries()
        whole.add_block(
            entry_block(
                [
                    (t, t - e, int(not sl), n, b".")
                    for n, (t, e, sl) in enumerate(zip(starts, ends, slices, strict=True))
                ]
            )
        )
        assert whole.chunks(store) == thread.chunks(store)
        for _, _, t in thread.chunks(store)[1:]:
            mine, theirs = thread.spine(store, t), whole.spine(store, t)
            assert (mine is None) == (theirs is None)
            assert mine is None or all(np.array_equal(x, y) for x, y in zip(mine, theirs, strict=True))
    assert cuts > 300 and with_spine > 30
    store.close()
