"""Local merge against ``--ray`` on two simulated nodes, measured in the same run.

    python bench/ray_nodes.py [--ranks 8] [--mb 23] [--repeat 3]

Writes the Kineto workload (bench/make_workload.py), gives ranks 0..n/2-1 to node A and the rest
to node B (each node's Ray workers run in a folder of their own, so the relative path ``traces``
is a different folder on each, as a node-local disk would be), and starts a Ray cluster on this
machine (ray.cluster_utils): a head without CPUs and two nodes with one CPU each. Then it runs,
alternating, ``tracemerge traces -o out.pftrace`` in a folder holding every rank (local worker
processes, one per core) and ``tracemerge --ray ADDRESS traces -o out.pftrace`` (the driver),
each as a child process; it reports median wall time and the driver's peak RSS (from wait4), the
bytes each run moved to the driver, and checks that both outputs are byte-identical. One
in-process run (``--jobs 1``) gives the per-file throughput of one core for the paper estimate.
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

from run import compile_package

HERE = Path(__file__).resolve().parent
PY = sys.executable


def measure(cmd: list[str], cwd: Path, output: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of ``cmd`` (the largest of it and its children)."""
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-800:]}")
    return wall, usage.ru_maxrss / 1024


def spread(run: Path, root: Path, ranks: int) -> tuple[Path, Path, Path]:
    """The workload as node A's, node B's and the whole job's ``traces`` folders (hard links)."""
    node_a, node_b, whole = root / "node_a", root / "node_b", root / "all"
    for path in sorted(run.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(run)
        rank = int(path.name.split("rank")[1].split(".")[0]) if "rank" in path.name else 0
        for side in (node_a if rank < ranks // 2 else node_b, whole):
            target = side / "traces" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)
    return node_a, node_b, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=23.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    compile_package()

    import ray
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="tracemerge-ray-bench-"))
    cluster = None
    try:
        run = work / "kineto"
        subprocess.run(
            [PY, str(HERE / "make_workload.py"), str(run), "--ranks", str(args.ranks), "--mb", str(args.mb)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        node_a, node_b, whole = spread(run, work, args.ranks)
        files = [p for p in (whole / "traces").rglob("*") if p.is_file()]
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        (work / "head").mkdir()
        here = os.getcwd()
        cluster = Cluster()
        for name, cwd, cpus in (("head", work / "head", 0), ("node_a", node_a, 1), ("node_b", node_b, 1)):
            os.chdir(cwd)  # a raylet's workers start where it was started
            # The nodes' workers import this checkout's tracemerge, as the driver does.
            cluster.add_node(num_cpus=cpus, resources={name: 1}, env_vars={"PYTHONPATH": str(HERE.parent)})
        os.chdir(here)
        cluster.wait_for_nodes()

        local_out, ray_out = work / "local.pftrace", work / "ray.pftrace"
        tm = [PY, "-m", "tracemerge", "traces", "-q"]
        os.environ["PYTHONPATH"] = str(HERE.parent)
        runs = {
            "local, 2 worker processes": ([*tm, "-o", str(local_out)], whole, local_out),
            "--ray, 2 nodes × 1 CPU": ([*tm, "--ray", cluster.address, "-o", str(ray_out)], work / "head", ray_out),
        }
        walls: dict[str, list[float]] = {name: [] for name in runs}
        rss: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeat):
            for name, (cmd, cwd, out) in runs.items():
                wall, peak = measure(cmd, cwd, out)
                walls[name].append(wall)
                rss[name].append(peak)
        if local_out.read_bytes() != ray_out.read_bytes():
            raise SystemExit("the --ray output differs from the local one")
        serial_out = work / "serial.pftrace"
        serial_wall, _ = measure([*tm, "--jobs", "1", "-o", str(serial_out)], whole, serial_out)
        out_mb = ray_out.stat().st_size / 1e6

        print(f"\n### {len(files)} files, {size_mb:,.1f} MB, two simulated nodes; median of {args.repeat}\n")
        print("| command | wall s | driver peak RSS MB | output MB | bytes to the driver MB |")
        print("|---|---:|---:|---:|---:|")
        for name in runs:
            moved = "0 (reads its own disk)" if name.startswith("local") else f"{out_mb:,.1f} (the chunks)"
            print(
                f"| {name} | {statistics.median(walls[name]):.2f} | {statistics.median(rss[name]):.0f} "
                f"| {out_mb:,.1f} | {moved} |"
            )
        print(
            f"\nin-process (--jobs 1): {serial_wall:.2f} s for {size_mb:,.1f} MB: "
            f"{size_mb / serial_wall:.1f} MB/s of input per core; output/input {out_mb / size_mb:.3f}"
        )
        print(f"runs: {walls}")
    finally:
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
