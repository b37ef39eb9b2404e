"""What one tracemerge run costs before it reads anything: interpreter start, imports, option parsing.

    python bench/startup.py [--repeat 15]

Times ``python -m tracemerge merge MISSING -o OUT`` (which parses every option, then stops at
the missing input with exit code 1) as a child process, and prints the median wall time, the
typer version, and the modules whose import takes longest (``-X importtime``, cumulative).
Bytecode is compiled first, as an installed copy has it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version

from run import compile_package


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tracemerge", "merge", f"{tmp}/missing", "-o", f"{tmp}/out.pftrace"]
        subprocess.run(cmd, capture_output=True)  # warm the page cache
        walls = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True)
            walls.append(time.perf_counter() - start)
            assert done.returncode == 1 and b"no such file" in done.stderr, done.stderr
        imports = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True)
    cumulative = []
    for line in imports.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = line.removeprefix("import time:").split("|")
            if cum.strip().isdigit():
                cumulative.append((int(cum) / 1000, name.rstrip()))
    print(f"typer {version('typer')}: start-up median {statistics.median(walls):.3f} s, min {min(walls):.3f} s")
    for ms, name in sorted(cumulative, reverse=True)[: args.top]:
        print(f"  {ms:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
