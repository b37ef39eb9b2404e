"""Rows per second of the Nsight Systems export reader, against the Ascend DB reader in the same run.

    python bench/nsys_db.py [--rows 1500000] [--repeat 5] [--keep]

Writes two SQLite exports of about ``--rows`` timeline rows each, shaped like a training step
profiled op by op, and times ``tracemerge FILE -o out.pftrace -q`` on each as a child process,
the two interleaved, ``--repeat`` times (median of wall and CPU time, peak RSS):

- nsys (``fixtures/make_nsys.py``'s schema): per op a torch ``emit_nvtx`` range
  (``aten::<op>, seq = N, op_id = N``, nested ten to a module range), the ``cudaLaunchKernel`` that
  launches it and its kernel (50 names), so a third of the rows each, plus a memcpy every 20 ops;
  flows from each launch to its kernel;
- Ascend (the torch_npu DB export's tables, as ``fixtures/make_ascend.py`` writes them): per op a
  ``PYTORCH_API`` row linked through ``CONNECTION_IDS`` to its ``CANN_API`` launch and the
  ``TASK`` it runs (named by ``COMPUTE_TASK_INFO``), flows from both to the task.

The rate is timeline rows (events drawn) per second of wall time, start-up included.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from run import PY, compile_package, measure

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_nsys", ROOT / "fixtures" / "make_nsys.py")
make_nsys = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(make_nsys)  # type: ignore[union-attr]

OPS = [f"aten::op{n}" for n in range(50)]
KERNELS = [f"void at::native::kernel_{n}<float, (int)4>(at::TensorIteratorBase &, const T1 &)" for n in range(50)]
BATCH = 20_000


def nsys_export(path: Path, rows: int) -> int:
    """An export of about ``rows`` timeline rows; returns how many it holds."""
    pid, device, stream = 4242, 0, 7
    ex = make_nsys.Export("bench-host", 1_800_000_000_000_000_000, {"RANK": "0"})
    ex.process(pid, "python3", {pid: "python3"})
    ex.stream(pid, stream, flag=3)
    for name in ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", *KERNELS]:
        ex.sid(name)
    ex.kernel(0, 1, pid, device, stream, 1, KERNELS[0])  # one row, for the name ids
    short = ex.rows["CUPTI_ACTIVITY_KIND_KERNEL"].pop()
    ex.write(path, without=("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"))
    con = sqlite3.connect(path)
    ddl = make_nsys.DDL
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
        con.execute(f"create table {table} ({ddl[table]})")
    launch, copy = ex.strings["cudaLaunchKernel_v7000"], ex.strings["cudaMemcpyAsync_v3020"]
    tid = make_nsys.gtid(pid, pid)
    gp = make_nsys.gpid(pid)
    ops = rows // 3
    written = 0
    nvtx, runtime, kernels, copies = [], [], [], []
    for n in range(ops):
        t = 1_000_000 + n * 10_000
        if n % 10 == 0:
            nvtx.append((t - 100, t + 99_000, 59, None, None, None, f"Linear_{n // 10}, op_id = {n}", tid, None))
            nvtx[-1] += (None, 0) + (None,) * 9
        nvtx.append((t, t + 8_000, 59, None, None, None, f"{OPS[n % 50]}, seq = {n}, op_id = {n}", tid, None))
        nvtx[-1] += (None, 0) + (None,) * 9
        runtime.append((t + 1_000, t + 3_000, 1, tid, n + 1, launch, 0, None))
        name = ex.strings[KERNELS[n % 50]]
        kernels.append((t + 4_000, t + 9_000, device, 1, None, stream, n + 1, gp, name, name, *short[10:]))
        if n % 20 == 0:
            runtime.append((t + 5_000, t + 6_000, 1, tid, ops + n + 1, copy, 0, None))
            copies.append(
                (t + 7_000, t + 7_500, device, 1, None, stream, ops + n + 1, gp, 4096, 1, None, 0, 2, None, None)
            )
            copies[-1] += (device, 1, None, None, None, 1)
        if len(nvtx) >= BATCH or n == ops - 1:
            for table, batch in (
                ("NVTX_EVENTS", nvtx),
                ("CUPTI_ACTIVITY_KIND_RUNTIME", runtime),
                ("CUPTI_ACTIVITY_KIND_KERNEL", kernels),
                ("CUPTI_ACTIVITY_KIND_MEMCPY", copies),
            ):
                if batch:
                    con.executemany(f"insert into {table} values ({', '.join('?' * len(batch[0]))})", batch)
                    written += len(batch)
                    batch.clear()
    con.commit()
    con.close()
    return written


def ascend_export(run: Path, rows: int) -> tuple[Path, int]:
    """A torch_npu run folder whose DB holds about ``rows`` timeline rows."""
    output = run / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    (run / "profiler_info_0.json").write_text("{}")
    path = output / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
        CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER,
            globalTaskId INTEGER PRIMARY KEY, globalPid INTEGER, taskType INTEGER, contextId INTEGER,
            streamId INTEGER, taskId INTEGER, modelId INTEGER);
        CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER,
            taskType INTEGER, opType INTEGER);
        CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,
            connectionId INTEGER PRIMARY KEY, name INTEGER);
        CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER,
            name INTEGER, sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER,
            callchainId INTEGER, type INTEGER);
        CREATE TABLE CONNECTION_IDS (id INTEGER, connectionId INTEGER);
    """)
    strings = {s: i for i, s in enumerate(["AI_CORE", "aclnnLaunch", *OPS, *KERNELS], start=1)}
    con.executemany("insert into STRING_IDS values (?, ?)", [(i, s) for s, i in strings.items()])
    con.execute("insert into RANK_DEVICE_MAP values (0, 0)")
    con.execute("insert into ENUM_API_TYPE values (20000, 'acl')")
    base, gtid = 1_767_225_600_000_000_000, (4100 << 32) | 4101
    tables = {"TASK": [], "COMPUTE_TASK_INFO": [], "CANN_API": [], "PYTORCH_API": [], "CONNECTION_IDS": []}
    ops = rows // 3
    for n in range(ops):
        t = base + n * 10_000
        tables["PYTORCH_API"].append(
            (str(t), str(t + 8_000), gtid, n, strings[OPS[n % 50]], n, 0, None, None, None, None)
        )
        tables["CONNECTION_IDS"].append((n, n))
        tables["CANN_API"].append((t + 1_000, t + 3_000, 20000, gtid + 1, n, strings["aclnnLaunch"]))
        tables["TASK"].append((t + 4_000, t + 9_000, 0, n, n, 4100, strings["AI_CORE"], 0, 2, n, 4294967295))
        tables["COMPUTE_TASK_INFO"].append((strings[KERNELS[n % 50]], n, 8, strings["AI_CORE"], strings[OPS[n % 50]]))
        if len(tables["TASK"]) >= BATCH or n == ops - 1:
            for table, batch in tables.items():
                con.executemany(f"insert into {table} values ({', '.join('?' * len(batch[0]))})", batch)
                batch.clear()
    con.commit()
    con.close()
    return run, 3 * ops


def main() -> None:
    compile_package()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tracemerge-bench-nsys-"))
    try:
        nsys = work / "nsys" / "train.sqlite"
        nsys.parent.mkdir()
        nsys_rows = nsys_export(nsys, args.rows)
        ascend, ascend_rows = ascend_export(work / "ascend" / "host_1_20260101000000000_ascend_pt", args.rows)
        inputs = {"nsys export": (nsys, nsys_rows), "Ascend DB": (ascend, ascend_rows)}
        sizes = {
            name: sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*.db")))
            for name, (path, _) in inputs.items()
        }
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in inputs}
        for _ in range(args.repeat):
            for name, (path, _) in inputs.items():
                out = work / f"{name.split()[0]}.pftrace"
                results[name].append(measure([PY, "-m", "tracemerge", str(path), "-q", "-o", str(out)], out))
        print(f"\n### SQLite readers: median of {args.repeat}\n")
        print("| input | MB | timeline rows | wall s | CPU s | peak RSS MB | rows/s (wall) | rows/s (CPU) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        rates = {}
        for name, runs in results.items():
            wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
            rows = inputs[name][1]
            rates[name] = rows / wall
            print(
                f"| {name} | {sizes[name] / 1e6:,.1f} | {rows:,} | {wall:.2f} | {cpu:.2f} | {rss:.0f} "
                f"| {rows / wall:,.0f} | {rows / cpu:,.0f} |"
            )
        print(f"\nnsys rows/s against the Ascend DB reader's: {rates['nsys export'] / rates['Ascend DB']:.2f}x")
        sys.stdout.flush()
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
