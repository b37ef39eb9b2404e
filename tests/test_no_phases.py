"""An answer without phases: an Nsight Systems export of a torchrun job (two GPU ranks, kernels,
copies and NCCL all-reduces, no phase preset matching and no step marker) still gets its device
time per process, the numbers worked out here from the export's own tables; and ``diff`` gates on
them."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from conftest import FIXTURES
from expected import union
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.exit_status import EXIT_REGRESSION

RUN = FIXTURES / "nsys" / "torchrun"
runner = CliRunner()
Spans = list[tuple[int, int]]


def run(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def device_work(db: Path) -> dict[int, tuple[Spans, Spans]]:
    """Per process id: its compute (kernels but NCCL's, copies, sets) and NCCL kernels (ns)."""
    out: dict[int, tuple[Spans, Spans]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        names = dict(con.execute("select id, value from StringIds"))
        kernels = con.execute(
            "select globalPid >> 24 & 16777215, start, end, demangledName from CUPTI_ACTIVITY_KIND_KERNEL"
        )
        for pid, a, b, name in kernels:
            compute, comm = out.setdefault(pid, ([], []))
            (comm if names[name].startswith("nccl") else compute).append((a, b))
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            for pid, a, b in con.execute(f"select globalPid >> 24 & 16777215, start, end from {table}"):
                out.setdefault(pid, ([], []))[0].append((a, b))
    return out


def length(spans: Spans) -> int:
    return sum(b - a for a, b in spans)


def test_an_nsys_export_without_phases_gets_its_device_time() -> None:
    (db,) = RUN.glob("*.sqlite")
    result = run("summary", RUN, "--json")
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output)
    assert numbers["roles"] == {} and numbers["steps"] == []
    rows = {r["rank"]: r for r in numbers["breakdown"]}
    work = device_work(db)
    assert len(rows) == len(work) == 2
    for rank, pid in enumerate(sorted(work)):
        compute, comm = (union(spans) for spans in work[pid])
        both = union([(max(a, c), min(b, d)) for a, b in compute for c, d in comm if min(b, d) > max(a, c)])
        busy = union(compute + comm)
        row = rows[rank]
        assert row["step"] is None
        assert (row["compute_ns"], row["overlapped_ns"]) == (length(compute), length(both))
        assert row["communication_ns"] == length(comm) - length(both)
        assert row["free_ns"] == (busy[-1][1] - busy[0][0]) - length(busy)  # gaps between the first and last work
        assert (
            row["compute_ns"] + row["communication_ns"] + row["free_ns"] + row["preparing_ns"] + row["closing_ns"]
            == row["wall_ns"]
        )
    text = run("summary", RUN).output.splitlines()
    assert text[0] == "phases: none found (name a preset or a rules file with --phases)"
    assert any(line.split()[:4] == ["-", "2", "mean", "per"] for line in text)


def slowed_kernels(dst: Path) -> Path:
    """A copy of the export whose compute kernels take twice as long (NCCL's unchanged)."""
    shutil.copytree(RUN, dst)
    (db,) = dst.glob("*.sqlite")
    with sqlite3.connect(db) as con:
        con.execute(
            "update CUPTI_ACTIVITY_KIND_KERNEL set end = start + 2 * (end - start) where demangledName in"
            " (select id from StringIds where value not like 'nccl%')"
        )
    return dst


def test_diff_without_phases_gates_on_compute(tmp_path: Path) -> None:
    slow = slowed_kernels(tmp_path / "slow")
    result = run("diff", RUN, slow, "--fail-over", "10%", "--json")
    assert result.exit_code == EXIT_REGRESSION, result.output
    found = json.loads(result.output)
    failed = {(r["role"], r["name"]) for r in found["gate"]["regressions"]}
    assert ("", "compute") in failed
    assert all(r["kind"] == "device" for r in found["gate"]["regressions"])
    same = run("diff", RUN, RUN, "--fail-over", "10%")
    assert same.exit_code == 0, same.output
    assert same.output.splitlines()[-1] == "gate passed: nothing of 2 compared grew over 10% and the noise"
