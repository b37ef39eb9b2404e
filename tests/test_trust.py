"""Nothing is destroyed, nothing vanishes silently: output safety, unusable inputs, hostile names."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge import cli

runner = CliRunner()


def run(*args: str):
    return runner.invoke(cli.app, ["merge", *args])


def test_output_naming_an_input_is_refused_unless_forced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "kineto_gpu", run_dir)
    victim = run_dir / "rank0.pt.trace.json"
    before = victim.read_bytes()
    result = run(str(run_dir), "-o", str(victim))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"tracemerge: error: {victim}: is one of the inputs; not overwriting it (use --force to replace it)"
    )
    assert victim.read_bytes() == before
    forced = run(str(run_dir), "-o", str(victim), "--force", "-q")
    assert forced.exit_code == 0, forced.output
    merged = json.loads(victim.read_text())  # now the merged trace (Chrome JSON, by its name)
    assert merged["metadata"]["producer"] == "tracemerge"
    assert {e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"} == {"rank 1"}


def test_output_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "out.pftrace"
    os.mkfifo(fifo)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(fifo))
    assert result.exit_code == 1
    assert "is not a regular file; not replacing it" in result.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)

    target = tmp_path / "elsewhere.pftrace"
    target.write_bytes(b"keep")
    link = tmp_path / "link.pftrace"
    link.symlink_to(target)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(link))
    assert result.exit_code == 1
    assert "is a symbolic link" in result.output
    assert link.is_symlink() and target.read_bytes() == b"keep"

    result = run(str(FIXTURES / "kineto_gpu"), "-o", "/dev/null")
    assert result.exit_code == 1
    assert "/dev/null: is not a regular file" in result.output


def test_read_only_output_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"old")
    out.chmod(0o444)
    result = run(str(FIXTURES / "kineto_gpu"), "-o", str(out))
    assert result.exit_code == 1
    assert f"{out}: is read-only" in result.output
    assert out.read_bytes() == b"old" and stat.S_IMODE(out.stat().st_mode) == 0o444


def test_an_existing_output_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"old")
    assert run(str(FIXTURES / "kineto_gpu"), "-o", str(out), "-q").exit_code == 0
    assert out.read_bytes() != b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace"]
