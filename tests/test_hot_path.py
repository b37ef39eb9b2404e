"""The hot path's column-wise shortcuts (flow binding by columns, the laminar walk) against the
point-wise path they stand in for: a spilled file takes the point-wise one (or, for a thread that
fits the budget on its own, reads it back and takes the shortcuts), so the same random trace
merged in memory and spilled must give the same bytes."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracemerge import spill
from tracemerge.pipeline import merge
from tracemerge.sources import json_stream


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
        if not cpu or not kernels:
            break
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
    run.mkdir()
    trace = _trace(seed)
    (run / "rank0.pt.trace.json").write_text(json.dumps(trace))
    in_memory = merge([run], run / "memory.pftrace", jobs=1)
    per_thread = Counter((e["pid"], e["tid"]) for e in trace["traceEvents"])
    # 5: every thread spills; the largest thread: the file spills, each thread fits on its own.
    budgets = {5, max(per_thread.values())} if max(per_thread.values()) < len(trace["traceEvents"]) else {5}
    for budget in sorted(budgets):
        with monkeypatch.context() as patched:
            patched.setattr(json_stream, "BLOCK", 700)
            patched.setattr(spill, "BLOCK_ITEMS", 3)
            spilled = merge([run / "rank0.pt.trace.json"], run / "spilled.pftrace", jobs=1, memory_budget=budget)
        assert (run / "memory.pftrace").read_bytes() == (run / "spilled.pftrace").read_bytes(), budget
        assert in_memory.as_dict()["written"] == spilled.as_dict()["written"]
        assert in_memory.as_dict()["dropped"] == spilled.as_dict()["dropped"]
        assert in_memory.moved_to_lanes == spilled.moved_to_lanes
