"""The hot path's column-wise shortcuts (flow binding by columns, the laminar walk) against the
point-wise path they stand in for: a spilled file takes the point-wise one (or, for a thread that
fits the budget on its own, reads it back and takes the shortcuts), so the same random trace
merged in memory and spilled must give the same bytes."""

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
    # 5: every thread spills; the largest thread: the file spills, each thread fits on its own
    # and is walked by the shortcut (a spilled file's flows are bound point by point).
    for budget, laminar in ((5, False), (max(per_thread.values()), True)):
        taken.clear()
        spilled = run / "spilled.pftrace"
        assert_spilling_changes_nothing(in_memory, [run / "rank0.pt.trace.json"], spilled, budget, monkeypatch)
        assert (taken["laminar"] > 0, taken["columns"]) == (laminar, 0), (budget, taken)


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
