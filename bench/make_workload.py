"""Write a synthetic multi-rank workload for the benchmark (not committed: it is large).

    python bench/make_workload.py OUT_DIR --ranks 8 --mb 23 [--kind kineto|epoch|areal|ascend] [--gzip]

Kineto: each rank's trace looks like torch.profiler output of a GPU job, formatted the way Kineto
writes it (one event per line, ``baseTimeNanoseconds`` after the event array): per step a
ProfilerStep with nested cpu_ops, cudaLaunchKernel runtime calls with ac2g flows to kernels on two
GPU streams, and a backward op on a second thread; args on every event. Ranks r and r+8 reuse host
pid and device index, as two nodes would. ``--mb`` sets the size of one rank's file.

Epoch: the same events as older Kineto wrote them (and HolisticTraceAnalysis's test traces, and
most hand-written Chrome traces): integer µs since the epoch in ``ts`` and ``dur``, no
``baseTimeNanoseconds``, host pids shared by every other rank and device pid 0 in every file.

AReaL: perf-tracer JSONL per rank (``perf_tracer/{role}/traces-r{rank}.jsonl``). Ascend: a
torch_npu text export per rank (``{role}/host_{pid}_..._ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json``)
with decimal-string µs timestamps.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

BASE_NS = 1_790_000_000_000_000_000
EPOCH_US = 1_790_000_000_000_000  # the epoch-µs shape's time of its first step, less a second
LAYERS = 25


def kineto_step(rank: int, step: int, t: int, corr: int, pid: int, dev: int) -> tuple[list[dict], int, int]:
    """One profiler step: (events, next start ns, next correlation id)."""
    main, bwd = pid, pid + 1
    ev = [_x(f"ProfilerStep#{step}", "user_annotation", pid, main, t, 4_000_000, {"External id": corr, "Ev Idx": 0})]
    for layer in range(LAYERS):
        a = t + 10_000 + layer * 150_000
        ev.append(
            _x(
                "aten::linear",
                "cpu_op",
                pid,
                main,
                a,
                120_000,
                {"External id": corr, "Ev Idx": 1, "Sequence number": step},
            )
        )
        ev.append(_x("aten::addmm", "cpu_op", pid, main, a + 5_000, 100_000, {"External id": corr + 1, "Ev Idx": 2}))
        ev.append(
            _x("cudaLaunchKernel", "cuda_runtime", pid, main, a + 10_000, 8_000, {"correlation": corr, "cbid": 211})
        )
        ev.append(
            {"ph": "s", "id": corr, "pid": pid, "tid": main, "ts": _us(a + 10_000), "cat": "ac2g", "name": "ac2g"}
        )
        k = a + 40_000
        stream = 7 + layer % 2
        kargs = {"correlation": corr, "device": dev, "stream": stream, "grid": [64, 1, 1], "block": [256, 1, 1]}
        ev.append(_x("sm90_xmma_gemm_bf16", "kernel", dev, stream, k, 90_000, kargs))
        ev.append(
            {"ph": "f", "id": corr, "pid": dev, "tid": stream, "ts": _us(k), "cat": "ac2g", "name": "ac2g", "bp": "e"}
        )
        ev.append(_x("aten::relu", "cpu_op", pid, main, a + 125_000, 10_000, {"External id": corr + 2, "Ev Idx": 3}))
        corr += 3
    ev.append(_x("autograd::engine::evaluate_function", "cpu_op", pid, bwd, t + 3_900_000, 90_000, {"Ev Idx": 4}))
    return ev, t + 4_100_000, corr


def write_kineto(path: Path, rank: int, mb: float, compress: bool, epoch: bool = False) -> int:
    """Recent torch.profiler: float µs relative to ``baseTimeNanoseconds``; ``epoch``: older
    Kineto (and HolisticTraceAnalysis's traces): integer µs since the epoch, no base, and the host
    pid of every other rank alike (ranks on different nodes), device pid 0 in every file."""
    pid, dev = (4242 + rank % 2, 0) if epoch else (10_000 + rank % 8, rank % 8)
    head = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": f"thread {pid} (python)"}},
        {"ph": "M", "name": "thread_name", "pid": dev, "tid": 7, "args": {"name": "stream 7 "}},
    ]
    opener = gzip.open if compress else open
    target = int(mb * 1e6)
    events = 0
    with opener(path, "wt") as f:
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "H100"}],\n')
        f.write(f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 16}},\n')
        f.write('  "traceEvents": [\n')
        lines = [_line(e) for e in head]
        written = sum(len(line) for line in lines)
        t, corr, step = 1_000_000_000 + rank * 37_000, 0, 0
        while written < target:
            step_events, t, corr = kineto_step(rank, step, t, corr, pid, dev)
            step += 1
            if epoch:  # every time here is a whole µs
                for e in step_events:
                    e["ts"] = EPOCH_US + round(e["ts"])
                    if "dur" in e:
                        e["dur"] = round(e["dur"])
            new = [_line(e) for e in step_events]
            written += sum(len(line) + 2 for line in new)
            lines.extend(new)
            if len(lines) > 50_000:
                f.write(",\n".join(lines) + ",\n")
                events += len(lines)
                lines = []
        f.write(",\n".join(lines))
        events += len(lines)
        f.write(f'\n  ],\n  "traceName": "{path.name}",\n  "displayTimeUnit": "ms"')
        f.write("\n}\n" if epoch else f',\n  "baseTimeNanoseconds": {BASE_NS}\n}}\n')
    return events


def write_areal(path: Path, rank: int, mb: float) -> int:
    target, written, events = int(mb * 1e6), 0, 0
    t = 1_000_000 + rank * 500
    with open(path, "w") as f:
        while written < target:
            for name, dur in (("rollout", 800_000), ("compute_logp", 200_000), ("train_step", 500_000)):
                line = (
                    json.dumps(
                        {
                            "name": name,
                            "ph": "X",
                            "ts": t,
                            "dur": dur,
                            "pid": rank,
                            "tid": 1,
                            "args": {"rank": rank, "role": "actor", "step": events},
                        }
                    )
                    + "\n"
                )
                f.write(line)
                written += len(line)
                events += 1
                t += dur + 1_000
    return events


def write_ascend(path: Path, rank: int, mb: float) -> int:
    target, written = int(mb * 1e6), 0
    meta = [
        {"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 200, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "thread_name", "pid": 200, "tid": 2, "args": {"name": "Stream 2"}},
    ]
    lines = [json.dumps(e) for e in meta]
    t = (BASE_NS + rank * 37_000) // 1000
    n = 0
    while written < target:
        for name, pid, tid, dur in (("aten::mm", 100, 4101, "55.161"), ("MatMul_1", 200, 2, "40.020")):
            e = {
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": f"{t}.{n % 1000:03d}",
                "dur": dur,
                "ph": "X",
                "args": {"Sequence number": n},
            }
            line = json.dumps(e)
            lines.append(line)
            written += len(line) + 2
            n += 1
        t += 100
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    return len(lines) - len(meta)


def _line(e: dict) -> str:
    return "  " + json.dumps(e, separators=(", ", ": "))


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
    parser.add_argument("--mb", type=float, default=23.0, help="size of one rank's file")
    parser.add_argument("--kind", choices=("kineto", "epoch", "areal", "ascend"), default="kineto")
    parser.add_argument("--gzip", action="store_true", help="write .json.gz (Kineto)")
    args = parser.parse_args()
    total = 0
    for rank in range(args.ranks):
        if args.kind in ("kineto", "epoch"):
            path = args.out / "trainer" / f"rank{rank}.pt.trace.json{'.gz' if args.gzip else ''}"
            path.parent.mkdir(parents=True, exist_ok=True)
            total += write_kineto(path, rank, args.mb, args.gzip, epoch=args.kind == "epoch")
        elif args.kind == "areal":
            path = args.out / "perf_tracer" / "actor" / f"traces-r{rank}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            total += write_areal(path, rank, args.mb)
        else:
            run = args.out / "actor" / f"host_{rank}_2026010100000000{rank}_ascend_pt"
            (run).mkdir(parents=True, exist_ok=True)
            (run / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
            total += write_ascend(run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", rank, args.mb)
    print(f"{total} events")


if __name__ == "__main__":
    main()
