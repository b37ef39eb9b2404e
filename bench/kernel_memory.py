"""Peak memory against the number of GPU kernels, and wall time against the number of tracks.

    python bench/kernel_memory.py [--kernels 1000000 2000000 4000000 10000000] [--kinds kineto nsys]
                                  [--tids 150000 200000 250000] [--timeout 600] [--against DIR] [--keep DIR]

Writes each input into a temporary folder (``--keep DIR``: into DIR, and reuses what is there)
and merges it once in a child process (``tracemerge FILE -q -o out.pftrace``), printing its wall
time, CPU time and peak RSS (from ``wait4``); ``--against DIR`` runs another copy of the package
(a folder holding ``tracemerge/``) on each input too, right after this one:

* ``kineto N``: one rank's Kineto trace of N kernels on two streams of one GPU (5 µs each, 1 µs
  apart, so no two overlap: each is a span of the device's union), one in ten an NCCL all-reduce,
  and a ProfilerStep on the host every 1,000 kernels;
* ``kineto-flows N``: the same, each kernel launched by a ``cudaLaunchKernel`` on the host thread
  2 µs long, 3 µs before it, and tied to it by an ``ac2g`` flow (a start on the launch, an end on
  the kernel), as torch.profiler writes them;
* ``nsys N``: an Nsight Systems SQLite export of N kernels of one process on two streams, the
  same times and names, and an NVTX ``ProfilerStep#k`` range every 1,000 kernels;
* ``tids N``: N threads of one complete event each, in one process (``bench/hard_inputs.py``'s
  shape): N tracks, each with its own track id.

``--summary-of-json``: each kernel input is also merged into Chrome JSON (by this copy), and
``tracemerge summary`` of that merged file is measured with each copy (the stored summary read
back from a trace of N kernels).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from hard_inputs import _one_event_each
from run import package_copies, waited

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_nsys", ROOT / "fixtures" / "make_nsys.py")
make_nsys = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(make_nsys)  # type: ignore[union-attr]

BASE_NS = 1_790_000_000_000_000_000
COMPUTE = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
COMM = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
PER_STEP = 1_000
BATCH = 50_000


def _kernel_times(n: int) -> tuple[int, int, str]:
    """Kernel ``n``'s start and end (ns from the first) and name."""
    start = n * 6_000
    return start, start + 5_000, COMM if n % 10 == 9 else COMPUTE


def write_kineto_flows(path: Path, kernels: int) -> None:
    """:func:`write_kineto`, each kernel with its launch and the flow between them."""
    write_kineto(path, kernels, flows=True)


def _launch(pid: int, dev: int, n: int) -> list[str]:
    """Kernel ``n``'s launch on the host thread, and its flow's start there and end on the kernel."""
    start, _, _ = _kernel_times(n)
    at, c = f"{(start - 3_000) / 1000:.3f}", n + 1
    return [
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {pid}, '
        f'"ts": {at}, "dur": 2.000, "args": {{"cbid": 211, "correlation": {c}}}}}',
        f'{{"ph": "s", "id": {c}, "pid": {pid}, "tid": {pid}, "ts": {at}, "cat": "ac2g", "name": "ac2g"}}',
        f'{{"ph": "f", "id": {c}, "pid": {dev}, "tid": {7 + n % 2}, "ts": {start / 1000:.3f}, "cat": "ac2g", '
        f'"name": "ac2g", "bp": "e"}}',
    ]


def write_kineto(path: Path, kernels: int, flows: bool = False) -> None:
    """One rank's torch.profiler trace of ``kernels`` kernels (see the module's doc)."""
    pid, dev = 4242, 0
    head = [
        f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "python3"}}}}',
        f'{{"ph": "M", "name": "process_labels", "pid": {dev}, "tid": 0, "args": {{"labels": "GPU {dev}"}}}}',
    ]
    with open(path, "w") as f:
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "H100"}],\n')
        f.write('  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n  "traceEvents": [\n')
        f.write(",\n".join(head))
        lines: list[str] = []
        for n in range(kernels):
            start, end, name = _kernel_times(n)
            if n % PER_STEP == 0:
                lines.append(
                    f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n // PER_STEP}", "pid": {pid}, '
                    f'"tid": {pid}, "ts": {start / 1000:.3f}, "dur": {PER_STEP * 6:.3f}, "args": {{}}}}'
                )
            lines.append(
                f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": {dev}, "tid": {7 + n % 2}, '
                f'"ts": {start / 1000:.3f}, "dur": {(end - start) / 1000:.3f}, '
                f'"args": {{"device": {dev}, "stream": {7 + n % 2}, "correlation": {n + 1}}}}}'
            )
            if flows:
                lines += _launch(pid, dev, n)
            if len(lines) >= BATCH:
                f.write(",\n" + ",\n".join(lines))
                lines = []
        if lines:
            f.write(",\n" + ",\n".join(lines))
        f.write(f'\n  ],\n  "traceName": "{path.name}",\n  "baseTimeNanoseconds": {BASE_NS}\n}}\n')


def write_nsys(path: Path, kernels: int) -> None:
    """An Nsight Systems export of ``kernels`` kernels (see the module's doc)."""
    pid, device = 4242, 0
    ex = make_nsys.Export("bench-host", BASE_NS, {"RANK": "0"})
    ex.process(pid, "python3", {pid: "python3"})
    for stream in (7, 8):
        ex.stream(pid, stream, flag=3)
    for name in (COMPUTE, COMM):
        ex.sid(name)
    ex.kernel(0, 1, pid, device, 7, 1, COMPUTE)  # one row, for the other columns' values
    shape = ex.rows["CUPTI_ACTIVITY_KIND_KERNEL"].pop()
    ex.write(path, without=("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"))
    con = sqlite3.connect(path)
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"):
        con.execute(f"create table {table} ({make_nsys.DDL[table]})")
    tid, gp = make_nsys.gtid(pid, pid), make_nsys.gpid(pid)
    rows, steps = [], []
    for n in range(kernels):
        start, end, name = _kernel_times(n)
        start, end = start + 1_000_000, end + 1_000_000
        if n % PER_STEP == 0:
            text = f"ProfilerStep#{n // PER_STEP}"
            steps.append((start, start + PER_STEP * 6_000, 59, None, None, None, text, tid, None, None, 0))
            steps[-1] += (None,) * 9
        sid = ex.strings[name]
        rows.append((start, end, device, 1, None, 7 + n % 2, n + 1, gp, sid, sid, *shape[10:]))
        if len(rows) >= BATCH or n == kernels - 1:
            con.executemany(f"insert into CUPTI_ACTIVITY_KIND_KERNEL values ({', '.join('?' * len(rows[0]))})", rows)
            if steps:
                con.executemany(f"insert into NVTX_EVENTS values ({', '.join('?' * len(steps[0]))})", steps)
            rows, steps = [], []
    con.commit()
    con.close()


def _run(env: dict[str, str], trace: Path, out: Path, timeout: float, summary: bool = False) -> str:
    """One merge of ``trace`` (with ``summary``: ``tracemerge summary`` of it): its wall, CPU and
    peak RSS, or why it has none."""
    command = [sys.executable, "-m", "tracemerge", str(trace), "-q", "-o", str(out)]
    if summary:
        command = [sys.executable, "-m", "tracemerge", "summary", str(trace)]
    done = waited(command, env, out.parent, timeout, stderr=subprocess.PIPE)
    if done is None:
        return f"> {timeout:g} s"
    code, wall, usage, err = done
    if code not in (0, 3):
        return f"exit {code} after {wall:.1f} s, peak RSS {usage.ru_maxrss // 1024} MB: {err[-200:]}"
    cpu = usage.ru_utime + usage.ru_stime
    return f"{wall:8.2f} s {cpu:8.2f} s {usage.ru_maxrss // 1024:6d} MB"


def _summaries_of_json(copies: dict[str, dict[str, str]], path: Path, merged: Path, label: str, timeout: float) -> None:
    """``tracemerge summary`` of ``path`` merged into Chrome JSON (by this copy), with each copy."""
    print(f"{label + ' → JSON':18s} {'this':8s} {'':7s} {_run(copies['this'], path, merged, timeout)}", flush=True)
    size = merged.stat().st_size / 1e6
    for copy, env in copies.items():
        found = _run(env, merged, merged, timeout, summary=True)
        print(f"{'  summary of it':18s} {copy:8s} {size:7.1f} {found}", flush=True)
    merged.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, nargs="*", default=[1_000_000, 2_000_000, 4_000_000, 10_000_000])
    parser.add_argument("--kinds", nargs="*", default=["kineto", "nsys"], choices=("kineto", "kineto-flows", "nsys"))
    parser.add_argument("--tids", type=int, nargs="*", default=[150_000, 200_000, 250_000])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--against", type=Path, help="a folder holding another tracemerge package")
    parser.add_argument("--keep", type=Path, help="write the inputs here and keep them (reused when there)")
    parser.add_argument("--summary-of-json", action="store_true", help="also `summary` of each merged into JSON")
    args = parser.parse_args()
    copies = package_copies(args.against)
    work = args.keep or Path(tempfile.mkdtemp(prefix="tracemerge-bench-kernels-"))
    work.mkdir(parents=True, exist_ok=True)
    writers = {
        "kineto": (write_kineto, "json"),
        "kineto-flows": (write_kineto_flows, "json"),
        "nsys": (write_nsys, "sqlite"),
    }
    inputs: list[tuple[str, Path, object]] = []
    for kind in args.kinds:
        write, ext = writers[kind]
        inputs += [(f"{kind} {n:,}", work / f"{kind}{n}.{ext}", (write, n)) for n in args.kernels]
    inputs += [(f"tids {n:,}", work / f"tids{n}.json", (None, n)) for n in args.tids]
    try:
        print(f"{'input':18s} {'copy':8s} {'MB in':>7s} {'wall':>10s} {'CPU':>10s} {'peak RSS':>9s}", flush=True)
        for label, path, (write, n) in inputs:
            if not path.exists():
                if write is None:
                    _one_event_each(path, n, "threads")
                else:
                    write(path, n)
            size = path.stat().st_size / 1e6
            out = work / "out" / "merged.pftrace"
            out.parent.mkdir(exist_ok=True)
            for copy, env in copies.items():
                found = _run(env, path, out, args.timeout)
                print(f"{label:18s} {copy:8s} {size:7.1f} {found}", flush=True)
            if args.summary_of_json and write is not None:
                _summaries_of_json(copies, path, out.with_name("merged.json"), label, args.timeout)
            if args.keep is None:
                path.unlink()
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
