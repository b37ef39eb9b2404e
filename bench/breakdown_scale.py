"""Device time per rank and step at scale: 64 ranks × 1000 steps, each step with 40 compute kernels
on two streams and 4 all-reduces, as the marks a read notes (merged unions per process).

    python bench/breakdown_scale.py [RANKS] [STEPS]

Times the noting of the spans (tracemerge.evidence.span_union.SpanUnion.add, as the layout does per
device thread, and each kernel's time for the busiest kernels per step), deriving the steps with
their breakdown (tracemerge.phases.derive) and the summary's rows,
and checks compute + communication + free (+ preparing + closing) = wall on every row. Then what
``tracemerge summary`` and ``tracemerge diff`` do with those numbers beyond ``derive``: the tables,
the comparison of the run with a copy 1.3 times slower gated at 10%, and the typed records the
library's ``summarize()`` returns. Each part in wall and CPU seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tracemerge.analysis.steps import format_summary, summary
from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import DEVICE_COMM, DEVICE_COMPUTE, step_tag
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.phases import derive
from tracemerge.phases.rules import TORCH_STEPS

STEP_NS = 10_000_000
KERNELS, COLLECTIVES = 40, 4


try:  # each kernel's time, for each step's busiest kernels (absent from the code before them)
    from tracemerge.evidence.kernel_tally import KernelTally, process_kernel_times
except ImportError:
    KernelTally = None  # type: ignore[assignment,misc]


@dataclass
class Scan:
    path: Path
    marks: dict
    kernel_times: dict


def scan_of(rank: int, steps: int) -> Scan:
    compute = {7: SpanUnion(), 8: SpanUnion()}
    comm = SpanUnion()
    collectives: list = []
    step_marks = []
    tally = KernelTally() if KernelTally is not None else None
    for n in range(steps):
        base = n * STEP_NS + rank * 1_000  # a rank starts 1 µs after the one before
        step_marks.append((base, base + STEP_NS - 1_000))
        for k in range(KERNELS):
            a = base + k * 200_000 + (k % 2) * 50_000
            compute[7 + k % 2].add(a, a + 150_000 + rank % 3 * 10_000)
            if tally is not None:
                tally.add(rank, 7 + k % 2, f"gemm_{k % 8}", a, 150_000 + rank % 3 * 10_000)
        for k in range(COLLECTIVES):
            a = base + 8_000_000 + k * 400_000 + (rank % 5) * 20_000
            end = base + 8_000_000 + k * 400_000 + 300_000
            comm.add(a, end)
            collectives.append((a, end))
            if tally is not None:
                tally.add(rank, 9, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", a, end - a)
    compute[7].absorb(compute[8])
    tags = {
        DEVICE_COMPUTE: compute[7],
        DEVICE_COMM: comm,
        "collective device allreduce": collectives,
    }
    for n, span in enumerate(step_marks, 1):
        tags.setdefault(step_tag(TORCH_STEPS, str(n)), []).append(span)
    ident = Identity("actor", rank)
    kernels = process_kernel_times(tally.times, lambda _origin: ident) if tally is not None else {}
    return Scan(Path(f"rank{rank}"), {ident: tags}, kernels)


def slowed(numbers: dict) -> dict:
    """The summary's numbers with every step, phase and device time 1.3 times as long."""

    def scaled(row: dict) -> dict:
        return {k: v * 13 // 10 if k.endswith("_ns") and isinstance(v, int) else v for k, v in row.items()}

    out = dict(numbers)
    out["steps"] = [scaled(s) for s in numbers["steps"]]
    out["breakdown"] = [scaled(r) for r in numbers["breakdown"]]
    out["processes"] = [
        {**p, "steps": [{**scaled(s), "phases_ns": scaled(s["phases_ns"])} for s in p["steps"]]}
        for p in numbers["processes"]
    ]
    return out


class Timer:
    """Wall and CPU seconds of each part (the CPU time is what another process's load leaves alone)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self, what: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        print(f"{what:<48} {wall - self.wall:6.2f} s wall {cpu - self.cpu:6.2f} s CPU")
        self.wall, self.cpu = wall, cpu


def main() -> None:
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    spans = ranks * steps * (KERNELS + COLLECTIVES)
    print(f"{ranks} ranks × {steps} steps, {spans:,} device spans")
    timer = Timer()
    scans = [scan_of(r, steps) for r in range(ranks)]
    timer.lap("noting the spans (unions as they come)")
    model = derive(scans, {}, ())
    timer.lap("steps, phases and breakdown (derive)")
    numbers = summary(model)
    timer.lap("summary rows")
    rows = numbers["breakdown"]
    assert len(rows) == ranks * steps
    parts = ("compute_ns", "communication_ns", "free_ns", "preparing_ns", "closing_ns")
    assert all(sum(r.get(p, 0) for p in parts) == r["wall_ns"] for r in rows)
    text = format_summary(numbers)
    timer.lap("summary tables (what `summary` prints)")
    slower = slowed(numbers)
    timer = Timer()
    try:
        from tracemerge.compare.diff import compare, gate
    except ImportError:  # the code before the gate paired steps
        from tracemerge.compare.diff import compare, regressions

        failed = regressions(compare(numbers, slower), 0.1)
    else:
        failed = gate(compare(numbers, slower), 0.1)["regressions"]
    timer.lap("diff with a copy 1.3x slower, gated at 10%")
    assert text and failed
    try:
        from tracemerge.analysis.summary_model import from_numbers
    except ImportError:
        return
    from_numbers(numbers)
    timer.lap("typed Summary records (library summarize())")


if __name__ == "__main__":
    main()
