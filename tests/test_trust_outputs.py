"""Every file a run writes is protected as -o is: `--report` and split parts never replace an
input, the output, a link, a device or a FIFO, and are written whole or not at all."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import main as cli

runner = CliRunner()


def run(*args: str):
    return runner.invoke(cli.app, ["merge", *args])


def _one_error_line(result) -> str:
    [line] = result.output.splitlines()
    assert line.startswith("tracemerge: error: ")
    return line


def test_a_report_pointed_at_the_output_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"the previous trace")
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(out), "--report", str(out))
    assert result.exit_code == 1
    assert (
        _one_error_line(result) == f"tracemerge: error: {out}: is also the output (-o); not writing the report over it"
    )
    assert out.read_bytes() == b"the previous trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace"]


@pytest.mark.parametrize("force", [False, True])
def test_a_report_pointed_at_an_input_is_refused_even_with_force(tmp_path: Path, force: bool) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    victim = run_dir / "rank0.pt.trace.json"
    before = victim.read_bytes()
    result = run(str(run_dir), "-o", str(tmp_path / "o.pftrace"), "--report", str(victim), *(["--force"] * force))
    assert result.exit_code == 1
    assert _one_error_line(result).endswith(f"{victim}: is one of the inputs; not writing the report over it")
    assert victim.read_bytes() == before
    assert not (tmp_path / "o.pftrace").exists()


def test_a_report_that_is_a_link_or_a_device_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_bytes(b"keep")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "o.pftrace"), "--report", str(link))
    assert result.exit_code == 1
    assert "is a symbolic link" in _one_error_line(result)
    assert link.is_symlink() and target.read_bytes() == b"keep"
    assert not (tmp_path / "o.pftrace").exists()
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(tmp_path / "o.pftrace"), "--report", "/dev/null")
    assert result.exit_code == 1
    assert "/dev/null: is not a regular file" in _one_error_line(result)


def test_a_report_that_is_a_fifo_is_refused_not_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    out = tmp_path / "o.pftrace"
    done = subprocess.run(  # opened, a FIFO would block this run forever
        [sys.executable, "-m", "tracemerge", str(FIXTURES / "kineto_gpu"), "-o", str(out), "--report", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"tracemerge: error: {fifo}: is not a regular file; not replacing it"
    assert not out.exists()


def test_a_split_part_never_replaces_the_report(tmp_path: Path) -> None:
    out = tmp_path / "merged.pftrace"
    report = tmp_path / "merged.rank_0.pftrace"  # the name of a part of --split-by role
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(out), "--split-by", "role", "--report", str(report), "-q")
    assert result.exit_code == 1, result.output
    assert _one_error_line(result).endswith(
        f"{report}: is another output of this run (the --report); not writing both to it"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _small_disk() -> None:
    """Files of this process may not grow past 64 KiB (as if the disk were full there)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


def test_a_report_that_cannot_be_written_whole_leaves_nothing_and_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    for n in range(1500):  # files that are not traces: the report lists them all (about 100 kB)
        (run_dir / f"notes-{n:04d}-{'x' * 40}.txt").write_text("x")
    out, report = tmp_path / "out.pftrace", tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "tracemerge", str(run_dir), "-o", str(out), "--report", str(report), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_disk,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == f"tracemerge: error: cannot write report {report}: File too large"
    assert out.stat().st_size > 0  # the trace is written whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace", "run"]  # no cut report, no temporary


@pytest.mark.parametrize("cut", [False, True])
def test_the_report_says_the_exit_status_of_the_run(tmp_path: Path, cut: bool) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    if cut:
        victim = run_dir / "rank0.pt.trace.json"
        victim.write_bytes(victim.read_bytes()[:5_000])
    report = tmp_path / "r.json"
    result = run(str(run_dir), "-o", str(tmp_path / "o.pftrace"), "--report", str(report), "-q")
    assert result.exit_code == (3 if cut else 0)
    assert json.loads(report.read_text())["exit_code"] == result.exit_code
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.pftrace", "r.json", "run"]
