"""Write a synthetic multi-rank Kineto workload for the benchmark (not committed: it is large).

    python bench/make_workload.py OUT_DIR --ranks 8 --steps 400

Each rank's trace looks like torch.profiler output of a GPU job: per step a ProfilerStep with
nested cpu_ops, cudaLaunchKernel runtime calls with ac2g flows to kernels on two GPU streams,
and a fwdbwd flow pair. Ranks r and r+8 reuse host pid and device index, as two nodes would.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BASE_NS = 1_790_000_000_000_000_000


def rank_trace(rank: int, steps: int) -> dict:
    pid, dev = 10_000 + rank % 8, rank % 8
    main, bwd = pid, pid + 1
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": main, "args": {"name": f"thread {main} (python)"}},
        {"ph": "M", "name": "thread_name", "pid": dev, "tid": 7, "args": {"name": "stream 7 "}},
    ]
    t = 1_000_000_000 + rank * 37_000  # ns after BASE_NS
    corr = 0
    for s in range(steps):
        step_start = t
        ev.append(_x(f"ProfilerStep#{s}", "user_annotation", pid, main, t, 4_000_000))
        for layer in range(25):
            a = t + 10_000 + layer * 150_000
            ev.append(_x("aten::linear", "cpu_op", pid, main, a, 120_000, {"External id": corr, "Sequence number": s}))
            ev.append(_x("aten::addmm", "cpu_op", pid, main, a + 5_000, 100_000, {"External id": corr + 1}))
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", pid, main, a + 10_000, 8_000, {"correlation": corr}))
            ev.append(
                {"ph": "s", "id": corr, "pid": pid, "tid": main, "ts": _us(a + 10_000), "cat": "ac2g", "name": "ac2g"}
            )
            k = a + 40_000
            ev.append(
                _x("sm90_xmma_gemm_bf16", "kernel", dev, 7 + layer % 2, k, 90_000, {"correlation": corr, "device": dev})
            )
            ev.append(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": dev,
                    "tid": 7 + layer % 2,
                    "ts": _us(k),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
            ev.append(_x("aten::relu", "cpu_op", pid, main, a + 125_000, 10_000))
            corr += 2
        ev.append(_x("autograd::engine::evaluate_function", "cpu_op", pid, bwd, step_start + 3_900_000, 90_000))
        t += 4_100_000
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 16},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": ev,
    }


def _x(name, cat, pid, tid, ts, dur, args=None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": _us(ts), "dur": _us(dur)}
    if args:
        e["args"] = args
    return e


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for rank in range(args.ranks):
        path = args.out / "trainer" / f"rank{rank}.pt.trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rank_trace(rank, args.steps)))


if __name__ == "__main__":
    main()
