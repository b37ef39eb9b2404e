"""Inputs whose cost is not in their size: wall time and peak memory of one merge of each.

    python bench/hard_inputs.py [--repeat 3] [--timeout 120] [--memory 4096] [--rank FILE] [--against DIR]
                                [--only NAME ...]

Writes each shape into a temporary folder and merges it in a child process (``-q``, default
options), printing the median wall time and the peak RSS of its runs:

* ``serialized-args N``: 20,000 complete events around one whose args hold a string of serialized
  JSON, N objects long (N times ``}, {``, which is how one event of the array ends and the next
  begins; about 14 bytes each);
* ``threads N``: N threads of one complete event each, in one process;
* ``processes N``: N processes of one complete event each;
* ``long-args N``: N complete events on four threads, each with a 3,000-byte arg (a call stack or
  shapes as text: memory held per event is in the bytes, not the count).

``--rank FILE`` adds a real rank's Kineto JSON as it is, and with such an arg (150,000 objects,
4 MB) put halfway through. Each run may take ``--memory`` MB of address space (one that runs out
exits 1: its file skipped as unreadable); a run past ``--timeout`` seconds is stopped. Both are
shown as such. ``--against DIR`` runs another copy of the package (a folder holding
``tracemerge/``) on each shape too, alternately; ``--only`` runs the shapes whose names start so.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from run import package_copies, waited


def _serialized_args(path: Path, objects: int) -> None:
    config = json.dumps([{"k": n} for n in range(objects)])
    events = [{"name": "a", "ph": "X", "ts": n, "dur": 1, "pid": 1, "tid": 1} for n in range(20_000)]
    events.insert(10_000, {"name": "cfg", "ph": "i", "ts": 5, "pid": 1, "tid": 1, "s": "t", "args": {"config": config}})
    path.write_text(json.dumps({"traceEvents": events}))


def _one_event_each(path: Path, count: int, by: str) -> None:
    key = "tid" if by == "threads" else "pid"
    events = [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": n, "dur": 1} | {key: n} for n in range(count)]
    path.write_text(json.dumps({"traceEvents": events}))


def _long_args(path: Path, count: int) -> None:
    pad = "x" * 3_000
    with path.open("w") as out:
        out.write('{"traceEvents":[\n')
        for n in range(count):
            event = {"ph": "X", "name": f"op{n % 50}", "cat": "cpu_op", "pid": 1, "tid": 1 + n % 4, "ts": n * 10}
            out.write((",\n" if n else "") + json.dumps(event | {"dur": 5, "args": {"Input Dims": pad, "n": n}}))
        out.write("\n]}\n")


def _injected(rank: Path, out: Path) -> None:
    text = rank.read_text()
    at = text.index('{"ph"', len(text) // 2)
    config = json.dumps([{"k": n, "v": "x"} for n in range(150_000)])
    event = {"ph": "i", "name": "config", "s": "t", "pid": 1, "tid": 1, "ts": 1.0, "args": {"config": config}}
    out.write_text(text[:at] + json.dumps(event) + ",\n" + text[at:])


def _run(env: dict[str, str], trace: Path, out: Path, timeout: float, memory: int) -> tuple[float, int, int] | None:
    """Wall seconds, peak RSS (MB) and exit code of one merge, its address space limited to
    ``memory`` bytes; None past the timeout (the run is stopped)."""
    command = [sys.executable, "-m", "tracemerge", str(trace), "-q", "-o", str(out)]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    done = waited(command, env, out.parent, timeout, preexec_fn=limited)
    return None if done is None else (done[1], done[2].ru_maxrss // 1024, done[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--memory", type=int, default=4096, help="MB of address space each run may take")
    parser.add_argument("--against", type=Path, help="a folder holding another tracemerge package, run alternately")
    parser.add_argument("--rank", type=Path, help="a real rank's Kineto JSON, to put a long serialized arg into")
    parser.add_argument("--only", nargs="*", default=[], help="the shapes whose names start so")
    args = parser.parse_args()
    copies = package_copies(args.against)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shapes: dict[str, Path] = {}
        for objects in (20_000, 80_000, 160_000):
            shapes[f"serialized-args {objects}"] = work / f"args{objects}.json"
            _serialized_args(shapes[f"serialized-args {objects}"], objects)
        for by in ("threads", "processes"):
            for count in (5_000, 20_000):
                shapes[f"{by} {count}"] = work / f"{by}{count}.json"
                _one_event_each(shapes[f"{by} {count}"], count, by)
        for count in (100_000, 200_000):
            shapes[f"long-args {count}"] = work / f"long{count}.json"
        shapes = {k: v for k, v in shapes.items() if not args.only or k.startswith(tuple(args.only))}
        for name, trace in shapes.items():
            if name.startswith("long-args") and not trace.exists():
                _long_args(trace, int(name.split()[1]))
        if args.rank is not None:
            shapes["rank as it is"] = args.rank
            shapes["rank with the arg"] = work / "injected" / args.rank.name
            shapes["rank with the arg"].parent.mkdir()
            _injected(args.rank, shapes["rank with the arg"])
        print(f"{'shape':28s} {'copy':8s} {'MB in':>6s} {'wall (median)':>14s} {'peak RSS':>9s}")
        for name, trace in shapes.items():
            runs: dict[str, list[tuple[float, int] | None]] = {copy: [] for copy in copies}
            for _ in range(args.repeat):
                for copy, env in copies.items():
                    runs[copy].append(_run(env, trace, work / "out.pftrace", args.timeout, args.memory << 20))
            size = trace.stat().st_size / 1e6
            for copy, found in runs.items():
                done = [r for r in found if r is not None]
                failed = sorted({code for _, _, code in done if code})
                if len(done) < len(found) or failed:
                    why = f"exit {failed[0]}" if failed else f"> {args.timeout:g} s"
                    print(f"{name:28s} {copy:8s} {size:6.1f} {why:>14s}")
                    continue
                wall = statistics.median(w for w, _, _ in done)
                print(f"{name:28s} {copy:8s} {size:6.1f} {wall:12.2f} s {max(m for _, m, _ in done):6d} MB")


if __name__ == "__main__":
    main()
