"""The hot path's column-wise shortcuts (flow binding by columns, the laminar walk) against the
point-wise path they stand in for: a spilled file binds its flows point by point and walks its
threads in stretches (or, for a thread that fits the budget on its own, reads it back and takes
the shortcuts), and a walk refused the shortcut goes point by point, so the same random trace
merged each way must give the same bytes."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from conftest import assert_spilling_changes_nothing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracemerge import flows, layout
from tracemerge.pipeline import merge


def _nested(rng: random.Random, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Slices [start, end] nested inside [lo, hi]: touching, equal and zero-length ones included."""
    t = lo
    while t < hi and len(out) < 400:
        start = t + rng.choice((0, 0, 1, 3))
        end = min(hi, start + rng.choice((0, 1, 2, 5, 20, 60)))
        if start > hi:
            break
        out.append((start, end))
        if depth and end - start > 2 and rng.random() < 0.6:
            _nested(rng, start, end, depth - 1, out)
        t = end + rng.choice((0, 0, 1, 4))


def _trace(seed: int) -> dict:
    rng = random.Random(seed)
    events: list[dict] = []
    cpu: list[tuple[int, int]] = []
    _nested(rng, 0, 2000, 4, cpu)
    rng.shuffle(cpu)  # the reader sorts; the file's order only decides ties
    for n, (start, end) in enumerate(cpu):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": f"op{n % 7}", "pid": 1, "tid": 1, "ts": start, "dur": end - start}
        )
    if rng.random() < 0.5:  # slices that cross and instants: overlap lanes, between stretches that nest
        for n in range(rng.choice((3, 12))):
            start = rng.randrange(2050, 2400)
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": f"cross{n}",
                    "pid": 1,
                    "tid": 1,
                    "ts": start,
                    "dur": rng.randrange(40),
                }
            )
        for n in range(3):
            events.append(
                {"ph": "i", "s": "t", "name": f"mark{n}", "pid": 1, "tid": 1, "ts": rng.randrange(2050, 2400)}
            )
        _nested(rng, 2500, 3000, 2, cpu)
        events.extend(
            {"ph": "X", "cat": "cpu_op", "name": "after", "pid": 1, "tid": 1, "ts": start, "dur": end - start}
            for start, end in cpu
            if start >= 2500
        )
    kernels: list[tuple[int, int]] = []
    _nested(rng, 0, 2200, 1, kernels)
    for n, (start, end) in enumerate(kernels):
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"k{n % 3}", "pid": 0, "tid": 7, "ts": start, "dur": end - start}
        )
    # Half the traces have only simple pairs (bound and numbered column-wise, per thread); the
    # others also reuse ids and put starts outside any slice (numbered point by point).
    messy = rng.random() < 0.5
    ids: list = list(range(1, 60)) + ([5, 5, 9] if messy else [])
    if rng.random() < 0.25:  # ids as strings, as some tools write them: bound point by point
        ids = [f"0x{fid:x}" for fid in ids]
    for fid in ids:
        src, dst = rng.choice(cpu), rng.choice(kernels)
        s_ts = rng.choice((src[0], (src[0] + src[1]) // 2, src[1] + rng.choice((0, 3)) if messy else src[1]))
        events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 1, "tid": 1, "ts": s_ts})
        f = {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 0, "tid": 7, "ts": dst[0]}
        if rng.random() < 0.8:
            f["bp"] = "e"
        events.append(f)
    return {"traceEvents": events}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_column_wise_paths_write_what_the_point_wise_ones_write(tmp_path: Path, monkeypatch, seed: int) -> None:
    run = tmp_path / str(seed)
    run.mkdir(exist_ok=True)  # hypothesis may run a seed again
    trace = _trace(seed)
    (run / "rank0.pt.trace.json").write_text(json.dumps(trace))
    taken = _count_shortcuts(monkeypatch)
    in_memory = merge([run], run / "memory.pftrace", jobs=1)
    # The shortcuts ran: every thread is well nested; flow ids as ints are bound by columns.
    int_ids = all(type(e["id"]) is int for e in trace["traceEvents"] if "id" in e)
    assert (taken["laminar"] > 0, taken["columns"]) == (True, int(int_ids)), taken
    per_thread = Counter((e["pid"], e["tid"]) for e in trace["traceEvents"])
    # 5 and 64: every thread spills and is walked in stretches that end where everything before
    # has ended (by the shortcut where one nests, see the test below); the largest thread: the
    # file spills, each thread fits on its own and is walked whole. A spilled file's flows are
    # bound point by point.
    for budget in (5, 64, max(per_thread.values())):
        taken.clear()
        spilled = run / "spilled.pftrace"
        assert_spilling_changes_nothing(in_memory, [run / "rank0.pt.trace.json"], spilled, budget, monkeypatch)
        assert taken["columns"] == 0, (budget, taken)
    assert taken["laminar"] > 0, taken
    # And with the laminar walk refused everywhere: the point-wise walk writes the same bytes.
    with monkeypatch.context() as patched:
        patched.setattr(layout, "walk_laminar", lambda *args: None)
        point_wise = merge([run / "rank0.pt.trace.json"], run / "point_wise.pftrace", jobs=1)
    assert point_wise.output is not None
    assert point_wise.output.read_bytes() == in_memory.output.read_bytes()


def _count_shortcuts(monkeypatch) -> Counter:
    """Counts the threads the laminar walk laid out (``laminar``) and the files bound by
    columns (``columns``)."""
    taken: Counter = Counter()
    walk, bind = layout.walk_laminar, flows._bind_columns

    def counted_walk(*args: Any) -> Any:
        found = walk(*args)
        taken["laminar"] += found is not None
        return found

    def counted_bind(*args: Any) -> None:
        taken["columns"] += 1
        bind(*args)

    monkeypatch.setattr(layout, "walk_laminar", counted_walk)
    monkeypatch.setattr(flows, "_bind_columns", counted_bind)
    return taken


def test_a_spilled_thread_is_walked_in_stretches_each_by_the_shortcut_where_it_nests(
    tmp_path: Path, monkeypatch
) -> None:
    """30 steps of 19 nested slices with flows to kernels; in steps 10 and 11 a slice crosses into
    the next step (an overlap lane), in step 20 an instant. Spilled at a budget that holds a step
    but not the thread, the thread is cut between steps, and the same bytes are written."""
    events: list[dict] = []
    for step in range(30):
        base = step * 1000
        events.append({"ph": "X", "name": "ProfilerStep", "pid": 1, "tid": 1, "ts": base, "dur": 900})
        for child in range(6):
            at = base + 10 + child * 140
            events.append({"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": at, "dur": 120})
            events.extend(
                {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": at + 5 + g * 50, "dur": 40} for g in range(2)
            )
            fid = step * 10 + child
            events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 1, "tid": 1, "ts": at + 1})
            events.append({"ph": "X", "cat": "kernel", "name": "kernel", "pid": 0, "tid": 7, "ts": at + 60, "dur": 30})
            events.append(
                {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 0, "tid": 7, "ts": at + 60}
            )
        if step in (10, 11):
            events.append({"ph": "X", "name": "crossing", "pid": 1, "tid": 1, "ts": base + 850, "dur": 300})
        if step == 20:
            events.append({"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": base + 950})
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    in_memory = merge([run], tmp_path / "memory.pftrace", jobs=1)
    assert in_memory.moved_to_lanes == 2
    walks: Counter = Counter()
    walk = layout.walk_laminar

    def counted_walk(enc: Any, items: Any, *args: Any) -> Any:
        found = walk(enc, items, *args)
        walks[(len(items) if isinstance(items, list) else None, found is not None)] += 1
        return found

    monkeypatch.setattr(layout, "walk_laminar", counted_walk)
    # A budget of 96 events: entries are read 6 at a time until a cut, at most 24 held at once.
    assert_spilling_changes_nothing(in_memory, [run], tmp_path / "spilled.pftrace", 96, monkeypatch)
    # Per thread, first the whole (spilled: not a list, refused). The CPU thread: a stretch per step
    # (19 entries) up to step 9; steps 10 to 12 make one stretch of 59 entries (the crossing slices)
    # whose cut is not met within 24 entries, so from step 10 on it is walked point by point. The
    # 180 kernels, each after the last has ended: stretches of 5 (the first read, cut before its
    # last entry), 6, ..., and the last one.
    assert walks == {(None, False): 2, (19, True): 10, (5, True): 1, (6, True): 29, (1, True): 1}, walks
