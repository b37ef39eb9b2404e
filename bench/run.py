"""Benchmark tracemerge against baselines measured in the same run.

    python bench/run.py [--ranks 8] [--steps 400] [--repeat 3] [--jobs 2]

Writes a synthetic Kineto workload (bench/make_workload.py) to a temporary directory, then runs
each command --repeat times, interleaved, as child processes, and reports the median wall time and
the median peak RSS (from wait4) of each, and ratios against the naive-concatenation baseline.
The machine may be shared and noisy: compare ratios from one run, not absolute seconds across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        raise SystemExit(f"{cmd[0]} failed ({code}): {err.strip()}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the workload and outputs")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tracemerge-bench-"))
    try:
        subprocess.run(
            [
                sys.executable,
                str(HERE / "make_workload.py"),
                str(work / "run"),
                "--ranks",
                str(args.ranks),
                "--steps",
                str(args.steps),
            ],
            check=True,
        )
        files = sorted(str(p) for p in (work / "run").rglob("*.json"))
        size = sum(Path(f).stat().st_size for f in files) / 1e6
        tm = [sys.executable, "-m", "tracemerge", str(work / "run"), "-q"]
        commands = {
            "naive concat (json.load + dump)": [
                sys.executable,
                str(HERE / "naive_concat.py"),
                str(work / "naive.json"),
                *files,
            ],
            "tracemerge -o .pftrace": [*tm, "-o", str(work / "out.pftrace"), "--jobs", "1"],
            "tracemerge -o .json": [*tm, "-o", str(work / "out.json"), "--jobs", "1"],
            f"tracemerge -o .pftrace --jobs {args.jobs}": [
                *tm,
                "-o",
                str(work / "outj.pftrace"),
                "--jobs",
                str(args.jobs),
            ],
        }
        if shutil.which("viztracer"):
            commands["viztracer --combine"] = ["viztracer", "--combine", *files, "-o", str(work / "viz.json")]
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                results[name].append(measure(cmd))

        events = _count_events(files)
        base_wall = statistics.median(w for w, _ in results["naive concat (json.load + dump)"])
        base_rss = statistics.median(r for _, r in results["naive concat (json.load + dump)"])
        print(
            f"workload: {args.ranks} ranks, {len(files)} files, {size:.1f} MB, {events:,} events; "
            f"median of {args.repeat} interleaved runs; {os.cpu_count()} cores"
        )
        print("| command | wall s (median) | peak RSS MB (median) | events/s | wall vs baseline | RSS vs baseline |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, runs in results.items():
            wall = statistics.median(w for w, _ in runs)
            rss = statistics.median(r for _, r in runs)
            print(
                f"| {name} | {wall:.2f} | {rss:.0f} | {events / wall:,.0f} | {wall / base_wall:.2f}x | "
                f"{rss / base_rss:.2f}x |"
            )
        for out in ("out.pftrace", "out.json", "naive.json"):
            path = work / out
            if path.exists():
                print(f"output {out}: {path.stat().st_size / 1e6:.1f} MB")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _count_events(files: list[str]) -> int:
    import orjson

    return sum(sum(1 for e in orjson.loads(Path(f).read_bytes())["traceEvents"] if e.get("ph") != "M") for f in files)


if __name__ == "__main__":
    main()
