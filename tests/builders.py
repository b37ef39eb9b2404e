"""Small trace files written by tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

EPOCH_US = 1_790_000_000_000_000  # 2026-09, absolute µs


def kineto(
    path: Path, rank: int | None = None, t0_us: int = EPOCH_US, names=("a", "b"), gz: bool = False, pid: int = 10
) -> Path:
    """A minimal torch<=2.3-style trace: one CPU thread (of OS process ``pid``) with nested
    slices, absolute integer µs."""
    events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": 11, "args": {"name": "thread 11 (python)"}}]
    for n, name in enumerate(names):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": 11, "ts": t0_us + 100 * n, "dur": 50}
        )
    top: dict = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 8}
    data = json.dumps(top).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def areal_jsonl(path: Path, rank: int | None = None, role: str | None = None, spans: int = 2) -> Path:
    lines = []
    for n in range(spans):
        args: dict = {"global_step": n}
        if rank is not None:
            args["rank"] = rank
        if role is not None:
            args["role"] = role
        lines.append(
            {
                "name": f"train.step{n}",
                "ph": "X",
                "ts": 10 + 1000 * n,
                "dur": 500,
                "pid": 5,
                "tid": 5,
                "cat": "compute",
                "args": args,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def kineto_device(
    path: Path,
    rank: int,
    steps: list[tuple[int, int]],
    kernels: list[tuple[str, int, int, int]],
    t0_us: int = EPOCH_US,
    cat: str = "kernel",
) -> Path:
    """A Kineto trace of one rank: ProfilerStep#1.. (start, end µs after ``t0_us``) on its CPU
    thread, and device work on GPU 0's streams: (name, stream, start, end µs after ``t0_us``),
    a name starting ``Memcpy`` taken as a copy."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    for n, (a, b) in enumerate(steps, 1):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 10,
                "tid": 11,
                "ts": t0_us + a,
                "dur": b - a,
            }
        )
    for name, stream, a, b in kernels:
        kind = "gpu_memcpy" if name.startswith("Memcpy") else cat
        events.append({"ph": "X", "cat": kind, "name": name, "pid": 0, "tid": stream, "ts": t0_us + a, "dur": b - a})
    top = {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(top))
    return path
