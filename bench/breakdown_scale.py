"""Device time per rank and step at scale: 64 ranks × 1000 steps, each step with 40 compute kernels
on two streams and 4 all-reduces, as the marks a read notes (merged unions per process).

    python bench/breakdown_scale.py [RANKS] [STEPS]

Times the noting of the spans (tracemerge.analysis.device_time.add_span, as the layout does per device
thread), deriving the steps with their breakdown (tracemerge.phases.derive) and the summary's rows,
and checks compute + communication + free = wall on every row.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tracemerge.analysis.device_time import add_span, merged
from tracemerge.analysis.steps import summary
from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import DEVICE_COMM, DEVICE_COMPUTE, step_tag
from tracemerge.phases import derive
from tracemerge.phases.rules import TORCH_STEPS

STEP_NS = 10_000_000
KERNELS, COLLECTIVES = 40, 4


@dataclass
class Scan:
    path: Path
    marks: dict


def scan_of(rank: int, steps: int) -> Scan:
    sizes: dict = {}
    compute: dict[int, list] = {7: [], 8: []}
    comm: list = []
    collectives: list = []
    step_marks = []
    for n in range(steps):
        base = n * STEP_NS + rank * 1_000  # a rank starts 1 µs after the one before
        step_marks.append((base, base + STEP_NS - 1_000))
        for k in range(KERNELS):
            a = base + k * 200_000 + (k % 2) * 50_000
            add_span(compute[7 + k % 2], a, a + 150_000 + rank % 3 * 10_000, sizes, 7 + k % 2)
        for k in range(COLLECTIVES):
            a = base + 8_000_000 + k * 400_000 + (rank % 5) * 20_000
            end = base + 8_000_000 + k * 400_000 + 300_000
            add_span(comm, a, end, sizes, 13)
            collectives.append((a, end))
    tags = {
        DEVICE_COMPUTE: merged([*compute[7], *compute[8]]),
        DEVICE_COMM: merged(comm),
        "collective device allreduce": collectives,
    }
    for n, span in enumerate(step_marks, 1):
        tags.setdefault(step_tag(TORCH_STEPS, str(n)), []).append(span)
    return Scan(Path(f"rank{rank}"), {Identity("actor", rank): tags})


def main() -> None:
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    t0 = time.perf_counter()
    scans = [scan_of(r, steps) for r in range(ranks)]
    t1 = time.perf_counter()
    model = derive(scans, {}, ())
    t2 = time.perf_counter()
    rows = summary(model)["breakdown"]
    t3 = time.perf_counter()
    assert len(rows) == ranks * steps
    assert all(r["compute_ns"] + r["communication_ns"] + r["free_ns"] == r["wall_ns"] for r in rows)
    spans = ranks * steps * (KERNELS + COLLECTIVES)
    print(f"{ranks} ranks × {steps} steps, {spans:,} device spans")
    print(f"noting the spans (unions as they come): {t1 - t0:.2f} s")
    print(f"steps, phases and breakdown (derive):   {t2 - t1:.2f} s")
    print(f"summary rows:                           {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
