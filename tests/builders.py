"""Small trace files written by tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

EPOCH_US = 1_790_000_000_000_000  # 2026-09, absolute µs


def kineto(path: Path, rank: int | None = None, t0_us: int = EPOCH_US, names=("a", "b"), gz: bool = False) -> Path:
    """A minimal torch<=2.3-style trace: one CPU thread with nested slices, absolute integer µs."""
    events = [{"ph": "M", "name": "thread_name", "pid": 10, "tid": 11, "args": {"name": "thread 11 (python)"}}]
    for n, name in enumerate(names):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 10, "tid": 11, "ts": t0_us + 100 * n, "dur": 50}
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
