"""Hash every output tracemerge writes for the fixtures and the bench workloads.

    python bench/output_hashes.py [--save hashes.json] [--compare hashes.json] [--mb 2]

A restructuring must keep every output byte-identical: run this before (``--save``) and after
(``--compare``); it prints a table of sha256 prefixes and exits 1 when any output differs. Each
case is one merge (or summary) of a fixture folder or a generated workload, in .pftrace and in
Chrome JSON, with the options that take other paths through the code (windows, splitting,
parallel reads, role filters).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# (name, input relative to fixtures/ or a workload kind, extra options)
FIXTURE_CASES: list[tuple[str, str, list[str]]] = [
    ("ascend", "ascend", []),
    ("clock-areal", "clock/areal", []),
    ("clock-gloo", "clock/gloo", []),
    ("edge_cases", "edge_cases", []),
    ("verl", "frameworks/verl", []),
    ("verl_old", "frameworks/verl_old", []),
    ("skyrl", "frameworks/skyrl", []),
    ("areal", "frameworks/areal", []),
    ("kineto_gpu", "kineto_gpu", []),
    ("metrics_run", "metrics_run", []),
    ("metrics_scrapes", "metrics_scrapes", []),
    ("nsys-torchrun", "nsys/torchrun", []),
    ("nsys-verl", "nsys/verl", []),
    ("nsys-mixed", "nsys/mixed", []),
    ("phases", "phases", []),
    ("phases-window", "phases", ["--window", "0.5s:2s"]),
    ("phases-min-dur", "phases", ["--min-dur", "1ms"]),
    ("precision", "precision", []),
    ("rl_run", "rl_run", []),
    ("rl_run-jobs2", "rl_run", ["--jobs", "2"]),
    ("rl_run-roles", "rl_run", ["--roles", "actor"]),
    ("rl_run-no-align", "rl_run", ["--no-align"]),
]
WORKLOADS = ("kineto", "epoch", "areal", "ascend")
FORMATS = ("perfetto", "json")


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _merge(src: Path, out: Path, fmt: str, extra: list[str]) -> str:
    cmd = [sys.executable, "-m", "tracemerge", "merge", str(src), "-o", str(out), "-f", fmt, "-q", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 3):
        return f"exit {done.returncode}: {done.stderr.strip()[:80]}"
    return _sha(out)


def _summary(src: Path) -> str:
    cmd = [sys.executable, "-m", "tracemerge", "summary", str(src), "--json"]
    done = subprocess.run(cmd, capture_output=True)
    return hashlib.sha256(done.stdout).hexdigest() + (f" (exit {done.returncode})" if done.returncode else "")


def _fix_mtimes(folder: Path) -> None:
    """Give every file a modification time set by its path: files without a wall clock are placed
    by it, and a checkout or a generated workload would otherwise hash differently each time."""
    for index, path in enumerate(sorted(p for p in folder.rglob("*") if p.is_file())):
        stamp = 1_790_000_000 + 10 * index
        os.utime(path, (stamp, stamp))


def collect(mb: float) -> dict[str, str]:
    hashes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tm-hashes-") as tmp:
        work = Path(tmp)
        fixtures = work / "fixtures"
        shutil.copytree(FIXTURES, fixtures)
        _fix_mtimes(fixtures)
        cases = [(name, fixtures / rel, extra) for name, rel, extra in FIXTURE_CASES]
        for kind in WORKLOADS:
            folder = work / f"workload-{kind}"
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "bench" / "make_workload.py"),
                    str(folder),
                    "--ranks",
                    "4",
                    "--mb",
                    str(mb),
                    "--kind",
                    kind,
                ],
                check=True,
                capture_output=True,
            )
            _fix_mtimes(folder)
            cases.append((f"workload-{kind}", folder, []))
        for name, src, extra in cases:
            for fmt in FORMATS:
                out = work / f"{name}.{'pftrace' if fmt == 'perfetto' else 'json'}"
                hashes[f"{name} {fmt}"] = _merge(src, out, fmt, extra)
                out.unlink(missing_ok=True)
            if not extra:
                hashes[f"{name} summary"] = _summary(src)
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--mb", type=float, default=2.0, help="size of one workload rank's file")
    args = parser.parse_args()
    hashes = collect(args.mb)
    before = json.loads(args.compare.read_text()) if args.compare else {}
    differ = 0
    for case, digest in hashes.items():
        mark = ""
        if before:
            same = before.get(case) == digest
            differ += not same
            mark = "  same" if same else f"  DIFFERS (was {before.get(case, 'absent')[:12]})"
        print(f"{case:<32} {digest[:12]}{mark}")
    if args.save:
        args.save.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if before:
        print(f"{len(hashes) - differ} of {len(hashes)} outputs identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
