"""Benchmark tracemerge against its peers and baselines, measured in the same run.

    python bench/run.py [--suite main|one|scaling|big|all] [--repeat 3] [--ranks 8] [--mb 23] [--keep]
                        [--against DIR]

Writes synthetic workloads (bench/make_workload.py) to a temporary directory and times every
command as a child process, the commands interleaved (each repeat starting one command later),
``--repeat`` times each; it reports the median wall time, CPU time (user + system, children
included) and peak RSS (largest process, from wait4), the output size, and ratios against
``viztracer --combine`` (the baseline; run where viztracer is installed). The machine may be
shared: compare ratios from one run, not seconds across runs. ``--against DIR`` (a folder
holding another copy of the ``tracemerge/`` package, e.g. a ``git worktree`` of an earlier
commit) times that copy's ``-o .pftrace`` merge too, interleaved with the others: a
before-and-after from one run.

Suites:
  main     8 ranks × 23 MB of each workload shape (make_workload.py --kind): Kineto (GPU streams,
           ac2g flows, args on every event, pids shared by ranks r and r+8): tracemerge to
           .pftrace and to .json, viztracer --combine, HolisticTraceAnalysis's loader (where
           installed), a msgspec decode floor and a naive json.load/json.dump concatenation;
           epoch-µs Kineto: tracemerge and viztracer; Ascend text and AReaL JSONL (which
           viztracer does not read): tracemerge. Where viztracer reads the shape, one rank too.
           Last, tracemerge's CPU per event on each shape against Kineto's.
  one      one rank of each shape viztracer reads (Kineto, epoch-µs Kineto): tracemerge and
           viztracer, the single-file case alone (worth a --repeat of 9 or more: it is short).
  scaling  1, 8, 32 and 64 ranks of the same per-rank size: tracemerge and viztracer.
  big      one Kineto file of 0.2, 0.5 and 1 GB: tracemerge and viztracer.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


@dataclass
class Runs:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    out_mb: float = 0.0


def measure(cmd: list[str], output: Path | None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one run of ``cmd``."""
    if output is not None and output.exists():
        output.unlink()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({code}): {err.strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def waited(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float, preexec_fn=None, stderr: int | None = None
) -> tuple[int, float, resource.struct_rusage, str] | None:
    """One run of ``command``: its exit code, wall seconds, resource usage (its own peak RSS,
    from ``wait4``) and standard error (with ``stderr=subprocess.PIPE``); None past the timeout
    (the run is stopped). ``cwd``: not this folder, whose tracemerge/ ``python -m`` would import."""
    start = time.perf_counter()
    child = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr or subprocess.DEVNULL, preexec_fn=preexec_fn
    )
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout:
            child.kill()
            os.wait4(child.pid, 0)
            return None
        time.sleep(0.005)
    err = child.stderr.read().decode().strip() if child.stderr else ""
    return os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage, err


def make(out: Path, *args: str) -> tuple[list[str], float]:
    files, size, _ = make_counted(out, *args)
    return files, size


def make_counted(out: Path, *args: str) -> tuple[list[str], float, int]:
    """The workload's files, their MB, and how many events the generator wrote."""
    done = subprocess.run(
        [PY, str(HERE / "make_workload.py"), str(out), *args], check=True, capture_output=True, text=True
    )
    files = sorted(str(p) for p in out.rglob("*") if p.is_file() and not p.name.startswith("profiler_info"))
    return files, sum(Path(f).stat().st_size for f in files) / 1e6, int(done.stdout.split()[0])


def _tracemerge(copy: Path) -> list[str]:
    """The command running the package in ``copy`` (commands run from the temporary directory:
    no other copy comes first on the path)."""
    return ["env", f"PYTHONPATH={copy}", PY, "-m", "tracemerge"]


def commands(
    work: Path, run: Path, files: list[str], *, full: bool, viz: bool = True
) -> dict[str, tuple[list[str], Path | None]]:
    tm = [*_tracemerge(HERE.parent), str(run), "-q"]
    cmds: dict[str, tuple[list[str], Path | None]] = {
        "tracemerge -o .pftrace": ([*tm, "-o", str(work / "out.pftrace")], work / "out.pftrace"),
    }
    if AGAINST is not None:
        before = work / "before.pftrace"
        cmds["tracemerge before (--against) -o .pftrace"] = (
            [*_tracemerge(AGAINST), str(run), "-q", "-o", str(before)],
            before,
        )
    if full:
        cmds["tracemerge -o .json"] = ([*tm, "-o", str(work / "out.json")], work / "out.json")
    if viz and shutil.which("viztracer"):
        viz = work / "viz.json"
        cmds["viztracer --combine"] = (["viztracer", "--combine", *files, "-o", str(viz)], viz)
    if full:
        try:
            import hta  # noqa: F401

            cmds["HolisticTraceAnalysis loader"] = ([PY, str(HERE / "hta_load.py"), str(run / "trainer")], None)
        except ImportError:
            pass
        cmds["msgspec decode floor"] = ([PY, str(HERE / "decode_floor.py"), *files], None)
        naive = work / "naive.json"
        cmds["naive json.load + dump"] = ([PY, str(HERE / "naive_concat.py"), str(naive), *files], naive)
    return cmds


# Baselines slow enough to be timed once, not --repeat times.
ONCE = frozenset({"HolisticTraceAnalysis loader"})


SKIP: set[str] = set()
AGAINST: Path | None = None  # --against: another copy of the package, timed beside this one


def bench(
    title: str, work: Path, run: Path, files: list[str], size: float, repeat: int, full: bool, viz: bool = True
) -> dict[str, Runs]:
    cmds = {name: cmd for name, cmd in commands(work, run, files, full=full, viz=viz).items() if name not in SKIP}
    results = {name: Runs() for name in cmds}
    names = list(cmds)
    for n in range(repeat):
        # Each repeat starts one command later: the first of a round ran about 5% faster than
        # the others in one state of the development machine.
        for name in names[n % len(names) :] + names[: n % len(names)]:
            cmd, output = cmds[name]
            if n and name in ONCE:
                continue
            wall, cpu, rss = measure(cmd, output)
            r = results[name]
            r.wall.append(wall)
            r.cpu.append(cpu)
            r.rss.append(rss)
            if output is not None and output.exists():
                r.out_mb = output.stat().st_size / 1e6
    base = results.get("viztracer --combine")
    print(f"\n### {title}: {len(files)} files, {size:,.1f} MB; median of {repeat}; {os.cpu_count()} cores\n")
    if any(name in ONCE for name in results):
        print(f"({', '.join(sorted(ONCE & set(results)))}: one run)\n")
    print("| command | wall s | CPU s | peak RSS MB | output MB | wall vs viztracer | RSS vs viztracer |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        wall, cpu, rss = statistics.median(r.wall), statistics.median(r.cpu), statistics.median(r.rss)
        ratios = ("", "")
        if base is not None:
            ratios = (
                f"{wall / statistics.median(base.wall):.2f}x",
                f"{rss / statistics.median(base.rss):.2f}x",
            )
        out = f"{r.out_mb:,.1f}" if r.out_mb else "-"
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {out} | {ratios[0]} | {ratios[1]} |")
    sys.stdout.flush()
    return results


def compile_package() -> None:
    """Compiles tracemerge's bytecode, as installing it does (pip compiles at install time): run
    from a source checkout under PYTHONDONTWRITEBYTECODE, each start would compile every module
    again (0.3 s) and time what no installed copy does."""
    import tracemerge

    compileall.compile_dir(Path(tracemerge.__file__).parent, quiet=1)


def package_copies(against: Path | None) -> dict[str, dict[str, str]]:
    """The environments that run this package ("this") and, given ``against`` (a folder holding
    another copy of ``tracemerge/``), that copy ("against"); each copy compiled first."""
    compile_package()
    copies = {"this": dict(os.environ, PYTHONPATH=str(HERE.parent))}
    if against is not None:
        copies["against"] = dict(os.environ, PYTHONPATH=str(against.resolve()))
        compileall.compile_dir(against.resolve() / "tracemerge", quiet=1)
    return copies


# The workloads of the main suite, and whether viztracer --combine reads them.
KINDS = {"kineto": True, "epoch": True, "ascend": False, "areal": False}


def main_suite(work: Path, args: argparse.Namespace) -> None:
    """Every workload shape at 8 ranks (and, where viztracer reads it, one rank): the tables, then
    tracemerge's CPU per event on each against the Kineto workload's."""
    per_event: dict[str, tuple[int, float]] = {}
    for kind, viz in KINDS.items():
        run = work / kind
        files, size, events = make_counted(run, "--ranks", str(args.ranks), "--mb", str(args.mb), "--kind", kind)
        title = f"{kind}, {args.ranks} ranks × {args.mb:g} MB, {events:,} events"
        results = bench(title, work, run, files, size, args.repeat, kind == "kineto", viz)
        per_event[kind] = (events, statistics.median(results["tracemerge -o .pftrace"].cpu))
        shutil.rmtree(run)
        if viz:
            one_rank(work, kind, args)
    kineto_events, kineto_cpu = per_event["kineto"]
    print("\n### CPU per event: tracemerge -o .pftrace\n")
    print("| workload | events | CPU s | CPU per event | vs Kineto |\n|---|---:|---:|---:|---:|")
    for kind, (events, cpu) in per_event.items():
        ratio = (cpu / events) / (kineto_cpu / kineto_events)
        print(f"| {kind} | {events:,} | {cpu:.2f} | {cpu / events * 1e6:.2f} µs | {ratio:.2f}x |")


def one_rank(work: Path, kind: str, args: argparse.Namespace) -> None:
    """One rank of the ``kind`` workload: tracemerge (and the --against copy) beside viztracer."""
    one = work / f"{kind}-one"
    files, size = make(one, "--ranks", "1", "--mb", str(args.mb), "--kind", kind)
    bench(f"{kind}, one rank of {args.mb:g} MB", work, one, files, size, args.repeat, False)
    shutil.rmtree(one)


def main() -> None:
    compile_package()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("main", "one", "scaling", "big", "all"), default="main")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=23.0, help="size of one rank's file")
    parser.add_argument("--keep", action="store_true", help="keep the workloads and outputs")
    parser.add_argument("--skip", action="append", default=[], help="a command not to run (repeatable)")
    parser.add_argument("--against", type=Path, help="a folder holding another tracemerge package, timed alongside")
    args = parser.parse_args()
    SKIP.update(args.skip)
    if args.against is not None:
        global AGAINST
        AGAINST = args.against.resolve()
        if not (AGAINST / "tracemerge" / "__init__.py").is_file():
            raise SystemExit(f"--against {args.against}: no tracemerge/ package there")
        compileall.compile_dir(AGAINST / "tracemerge", quiet=1)

    work = Path(tempfile.mkdtemp(prefix="tracemerge-bench-"))
    try:
        if args.suite in ("main", "all"):
            main_suite(work, args)
        if args.suite == "one":
            for kind, viz in KINDS.items():
                if viz:
                    one_rank(work, kind, args)
        if args.suite in ("scaling", "all"):
            for ranks in (1, 8, 32, 64):
                run = work / f"scale{ranks}"
                files, size = make(run, "--ranks", str(ranks), "--mb", str(args.mb))
                bench(f"Scaling: {ranks} ranks × {args.mb:g} MB", work, run, files, size, args.repeat, False)
                shutil.rmtree(run)
        if args.suite in ("big", "all"):
            for mb in (200, 500, 1000):
                run = work / f"big{mb}"
                files, size = make(run, "--ranks", "1", "--mb", str(mb))
                bench(f"One file of {mb} MB", work, run, files, size, args.repeat, False)
                shutil.rmtree(run)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
