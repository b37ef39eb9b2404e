"""What one tracemerge run costs before it reads anything: interpreter start, imports, option parsing.

    python bench/startup.py [--repeat 15] [--against DIR]

Times ``tracemerge --version``, ``--help``, ``merge MISSING -o OUT`` (which parses every
option, then stops at the missing input with exit code 1) and the merge of the 7 kB Kineto trace
of ``fixtures/kineto_gpu`` (every module a Kineto merge loads) as child processes, beside a bare
``python -c pass``, and prints median and minimum wall times and the modules whose import takes
longest (``-X importtime``, cumulative). ``--against DIR`` times another copy of the package
(a folder holding ``tracemerge/``) alternately with this one. Bytecode is compiled first, as an
installed copy has it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from run import package_copies

SMALL = Path(__file__).resolve().parent.parent / "fixtures" / "kineto_gpu" / "rank0.pt.trace.json"


def _median_walls(cmd: list[str], env: dict[str, str], repeat: int) -> list[float]:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, cwd=tempfile.gettempdir())
        walls.append(time.perf_counter() - start)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--against", type=Path, help="a folder holding another tracemerge package, timed alternately")
    args = parser.parse_args()
    copies = package_copies(args.against)
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "--version": [sys.executable, "-m", "tracemerge", "--version"],
            "--help": [sys.executable, "-m", "tracemerge", "--help"],
            "merge MISSING": [
                sys.executable,
                "-m",
                "tracemerge",
                "merge",
                f"{tmp}/missing",
                "-o",
                f"{tmp}/out.pftrace",
            ],
            "merge small Kineto": [sys.executable, "-m", "tracemerge", str(SMALL), "-o", f"{tmp}/small.pftrace", "-q"],
        }
        bare = [sys.executable, "-c", "pass"]
        walls: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):  # alternated: the machine may be shared
            walls.setdefault(("python -c pass", ""), []).extend(_median_walls(bare, copies["this"], 1))
            for label, cmd in commands.items():
                for copy, env in copies.items():
                    walls.setdefault((label, copy), []).extend(_median_walls(cmd, env, 1))
        done = subprocess.run(commands["merge MISSING"], capture_output=True, env=copies["this"], cwd=tmp)
        assert done.returncode == 1 and b"no such file" in done.stderr, done.stderr
        imports = subprocess.run(
            [sys.executable, "-X", "importtime", *commands["--version"][1:]],
            capture_output=True,
            text=True,
            env=copies["this"],
            cwd=tmp,
        )
    print(f"typer {version('typer')}, {args.repeat} runs each, alternated")
    print("| command | copy | median s | min s |\n|---|---|---:|---:|")
    for (label, copy), times in walls.items():
        print(f"| {label} | {copy} | {statistics.median(times):.3f} | {min(times):.3f} |")
    cumulative = []
    for line in imports.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = line.removeprefix("import time:").split("|")
            if cum.strip().isdigit():
                cumulative.append((int(cum) / 1000, name.rstrip()))
    print("imports of --version:")
    for ms, name in sorted(cumulative, reverse=True)[: args.top]:
        print(f"  {ms:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
