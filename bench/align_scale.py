"""Time the clock stage alone on many synthetic files (no I/O): is alignment ever the slow part?

    python bench/align_scale.py

Each rank has ``collectives`` all_reduce marks (ends within 30 µs of the true instant, starts up to
150 µs before it); with hosts, 8 ranks per host share a clock and hosts are 1 ms apart, without,
every rank has a clock of its own.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from tracemerge.clock import AlignOptions, align
from tracemerge.core.model import UNIX_EPOCH, ClockDomain, Identity
from tracemerge.plan.types import identity_sort_key

BASE_NS = 1_780_000_000_000_000_000


@dataclass
class Scan:
    path: Path
    clock: ClockDomain
    ts_min: int
    ts_max: int
    host: str | None
    mtime_ns: int | None
    marks: dict
    identities: dict


def scans(ranks: int, collectives: int, hosts: bool) -> list[Scan]:
    rng = random.Random(1)
    out = []
    for r in range(ranks):
        skew = (r // 8) * 1_000_000 if hosts else r * 1_000
        ident = Identity("trainer", r)
        ends = [
            (
                BASE_NS + k * 5_000_000 + skew - 100_000 - rng.randrange(50_000),
                BASE_NS + k * 5_000_000 + skew + rng.randrange(30_000),
            )
            for k in range(collectives)
        ]
        marks = {ident: {"collective device allreduce": ends}} if collectives else {}
        host = f"h{r // 8}" if hosts else None
        out.append(
            Scan(
                Path(f"r{r}.json"),
                UNIX_EPOCH,
                BASE_NS + skew,
                BASE_NS + skew + 10**10,
                host,
                None,
                marks,
                {(None, r): ident},
            )
        )
    return out


def main() -> None:
    print("| ranks | collectives per rank | clocks | align s (median of 3) | worst residual µs |")
    print("|---:|---:|---|---:|---:|")
    for ranks, collectives, hosts in [
        (64, 1000, True),
        (64, 1000, False),
        (1024, 0, False),
        (1024, 1000, True),
        (1024, 1000, False),
    ]:
        times, worst = [], 0.0
        for _ in range(3):
            files = scans(ranks, collectives, hosts)
            t = time.perf_counter()
            result = align(files, AlignOptions(), identity_sort_key)
            times.append(time.perf_counter() - t)
            truth = {f.path: -(f.ts_min - BASE_NS) for f in files}
            worst = max(abs(result.offsets[p] - truth[p]) / 1e3 for p in truth)
        clocks = "8 ranks per host" if hosts else "one per rank"
        residual = f"{worst:.1f}" if collectives else "- (nothing to align by: each clock kept)"
        print(f"| {ranks} | {collectives} | {clocks} | {statistics.median(times):.2f} | {residual} |")


if __name__ == "__main__":
    main()
