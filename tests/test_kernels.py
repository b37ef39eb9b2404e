"""The busiest kernels and ops per process: each name's total device time and count, worked out
here from the fixtures' own files (Kineto JSON, an nsys SQLite export, an Ascend export in both
its text and DB forms); shown by ``summary`` and ``diff``, never gated."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, ROOT
from expected import exact_ns, load_json, union
from typer.testing import CliRunner

from tracemerge.analysis.summarize import summarize
from tracemerge.cli import main as cli
from tracemerge.compare.api import diff
from tracemerge.evidence.kernel_tally import KernelTally
from tracemerge.pipeline import merge

NSYS = FIXTURES / "nsys" / "torchrun"
KINETO = FIXTURES / "kineto_gpu"
ASCEND_TEXT = FIXTURES / "ascend" / "text"
ASCEND_DB = FIXTURES / "ascend" / "db"
runner = CliRunner()
Totals = dict[str, list[int]]  # name -> [total ns, count]


def run(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def summary_json(*args: object) -> dict:
    result = run("summary", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def add(totals: Totals, name: str, ns: int) -> None:
    found = totals.setdefault(name, [0, 0])
    found[0] += ns
    found[1] += 1


def top_of(totals: Totals) -> list[tuple[str, int, int]]:
    """The ten longest in total, then by name, as (name, total, count)."""
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:10]
    return [(name, total, count) for name, (total, count) in ranked]


def shown(row: dict) -> list[tuple[str, int, int]]:
    return [(k["name"], k["total_ns"], k["count"]) for k in row["top"]]


def check_shares(row: dict, busy: list[tuple[int, int]]) -> None:
    assert row["busy_ns"] == sum(b - a for a, b in busy)
    assert all(k["share"] == k["total_ns"] / row["busy_ns"] for k in row["top"])


def nsys_work(db: Path) -> dict[int, tuple[Totals, list[tuple[int, int]]]]:
    """Per process id: its kernels' totals by demangled name, copies and sets by table, and all
    their spans."""
    out: dict[int, tuple[Totals, list[tuple[int, int]]]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        names = dict(con.execute("select id, value from StringIds"))
        for table in ("KERNEL", "MEMCPY", "MEMSET"):
            cols = "demangledName" if table == "KERNEL" else f"'{table}'"
            query = f"select globalPid >> 24 & 16777215, start, end, {cols} from CUPTI_ACTIVITY_KIND_{table}"
            for pid, a, b, name in con.execute(query):
                totals, spans = out.setdefault(pid, ({}, []))
                add(totals, names[name] if table == "KERNEL" else table, b - a)
                spans.append((a, b))
    return out


def test_an_nsys_export_s_busiest_kernels() -> None:
    (db,) = NSYS.glob("*.sqlite")
    rows = {r["rank"]: r for r in summary_json(NSYS)["kernels"]}
    work = nsys_work(db)
    assert len(rows) == len(work) == 2
    for rank, pid in enumerate(sorted(work)):
        totals, spans = work[pid]
        row = rows[rank]
        found = {name: [total, count] for name, total, count in shown(row)}
        assert row["names"] == len(found) == 5  # three kernels, a copy kind and a set kind: all shown
        for kind, prefix in (("MEMCPY", "Memcpy "), ("MEMSET", "Memset")):
            (named,) = [name for name in found if name.startswith(prefix)]
            found[kind] = found.pop(named)
        assert found == totals
        assert [total for _, total, _ in shown(row)] == sorted((t for t, _ in totals.values()), reverse=True)
        check_shares(row, union(spans))
    cutlass = [k for k in rows[0]["top"] if k["name"].startswith("void cutlass::Kernel2")]
    assert [(k["count"], k["total_ns"]) for k in cutlass] == [(3, 150_000)]


def kineto_work(path: Path) -> tuple[Totals, list[tuple[int, int]]]:
    totals: Totals = {}
    spans = []
    for e in load_json(path)["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a, length = exact_ns(e["ts"]), exact_ns(e["dur"])
            add(totals, e["name"], length)
            spans.append((a, a + length))
    return totals, spans


def test_kineto_traces_busiest_kernels() -> None:
    rows = {r["rank"]: r for r in summary_json(KINETO)["kernels"]}
    assert sorted(rows) == [0, 1]
    for rank, path in ((0, KINETO / "rank0.pt.trace.json"), (1, KINETO / "rank1.pt.trace.json.gz")):
        totals, spans = kineto_work(path)
        assert shown(rows[rank]) == top_of(totals)
        assert rows[rank]["names"] == len(totals)
        check_shares(rows[rank], union(spans))
    assert shown(rows[0])[0] == ("volta_sgemm_128x64_tn", 240_666, 2)


# Ascend tasks that are no device work (synchronisation, profiler markers, copies outside a collective)
NOT_WORK = re.compile(r"^(EVENT_RECORD|EVENT_WAIT|EVENT_RESET|PLACE_HOLDER|PROFILING_|PCIE_DMA|SDMA_SQE|MEMCPY)")


def ascend_text_work() -> tuple[Totals, list[tuple[int, int]]]:
    """The tasks on the Ascend Hardware process of the msprof text export."""
    (path,) = ASCEND_TEXT.rglob("trace_view.json")
    events = load_json(path)
    hardware = {e["pid"] for e in events if e.get("name") == "process_name" and e["args"]["name"] == "Ascend Hardware"}
    totals: Totals = {}
    spans = []
    for e in events:
        task = (e.get("args") or {}).get("Task Type")
        if e.get("ph") == "X" and e["pid"] in hardware and task is not None and not NOT_WORK.match(task):
            a, length = exact_ns(e["ts"]), exact_ns(e["dur"])
            add(totals, e["name"], length)
            spans.append((a, a + length))
    return totals, spans


def test_ascend_exports_busiest_tasks() -> None:
    totals, spans = ascend_text_work()
    (text,) = summary_json(ASCEND_TEXT)["kernels"]
    assert (text["role"], text["rank"], text["names"]) == ("actor", 0, len(totals))
    assert shown(text) == top_of(totals)
    check_shares(text, union(spans))
    # "Memcpy": the collective's SDMA tasks (communication); the MEMCPY_ASYNC copy is no device work
    assert shown(text)[0] == ("Memcpy", 60_000, 2) and "MEMCPY_ASYNC" not in {k["name"] for k in text["top"]}
    # The DB export of the same run: the same tasks, named from its task-info tables.
    (db,) = summary_json(ASCEND_DB)["kernels"]
    assert db == text
    (path,) = ASCEND_DB.rglob("ascend_pytorch_profiler_0.db")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        query = "select t.endNs - t.startNs from TASK t join COMPUTE_TASK_INFO c on c.globalTaskId = t.globalTaskId"
        longest = max(d for (d,) in con.execute(query))
    matmul = [k for k in db["top"] if k["name"] == "MatMulV2"]
    assert [(k["count"], k["total_ns"]) for k in matmul] == [(1, longest)] == [(1, 55_161)]


def test_the_stored_summary_and_the_library_carry_them(tmp_path: Path) -> None:
    numbers = summary_json(KINETO)
    merge([KINETO], tmp_path / "out.pftrace")
    assert summary_json(tmp_path / "out.pftrace")["kernels"] == numbers["kernels"]
    typed = summarize([KINETO])
    assert typed.as_dict()["kernels"] == numbers["kernels"]
    assert "busiest kernels and ops per process" in typed.format()
    text = run("summary", KINETO).output
    assert "volta_sgemm_128x64_tn                 2  240.7 µs  80.0%" in text


def renamed_kernel(dst: Path) -> Path:
    """A copy of the nsys export whose GEMM kernel has another name (and takes twice as long)."""
    shutil.copytree(NSYS, dst)
    (db,) = dst.glob("*.sqlite")
    with sqlite3.connect(db) as con:
        con.execute(
            "update CUPTI_ACTIVITY_KIND_KERNEL set end = start + 2 * (end - start) where demangledName in"
            " (select id from StringIds where value like 'void cutlass::Kernel2%')"
        )
        con.execute("update StringIds set value = 'gemm_renamed' where value like 'void cutlass::Kernel2%'")
    return dst


def test_diff_shows_the_kernels_without_gating_on_them(tmp_path: Path) -> None:
    new = renamed_kernel(tmp_path / "new")
    base_numbers, new_numbers = summary_json(NSYS), summary_json(new)
    found = diff(base_numbers, new_numbers).kernels
    assert found is not None and not found.gated and found.only_base == found.only_new == []
    rank0 = {r.name: r for r in found.rows if r.rank == 0}
    (old_name,) = [n for n in rank0 if n.startswith("void cutlass::Kernel2")]
    gone, came = rank0[old_name], rank0["gemm_renamed"]
    assert (gone.base_ns, gone.new_ns, gone.delta_ns, gone.base_count, gone.new_count) == (150_000, None, None, 3, None)
    assert (came.base_ns, came.new_ns, came.delta_ns, came.base_count, came.new_count) == (None, 300_000, None, None, 3)
    memset = rank0["Memset (Device)"]
    assert (memset.base_ns, memset.new_ns, memset.delta_ns) == (3_000, 3_000, 0)
    # the gate looks at compute, communication and the walls only: the renamed kernel fails nothing
    # of its own (its doubled time fails compute, which is gated)
    gated = diff(base_numbers, new_numbers, fail_over=0.10)
    assert gated.gate is not None and {r.name for r in gated.gate.regressions} == {"compute"}
    same_names = diff(base_numbers, base_numbers, fail_over=0.10)
    assert same_names.passed and same_names.kernels is not None
    text = run("diff", NSYS, new).output.splitlines()
    at = text.index("busiest kernels and ops per process, whole profiled time (shown, not gated)")
    assert text[at + 1].split() == [
        "process",
        "kernel",
        "/",
        "op",
        "base",
        "new",
        "delta",
        "delta",
        "%",
        "count",
        "base",
        "->",
        "new",
    ]
    assert any(
        line.split()[:3] == ["rank", "0", "gemm_renamed"] and line.split()[-3:] == ["-", "->", "3"] for line in text
    )


def test_a_renamed_kernel_alone_passes_the_gate(tmp_path: Path) -> None:
    new = tmp_path / "new"
    shutil.copytree(NSYS, new)
    (db,) = new.glob("*.sqlite")
    with sqlite3.connect(db) as con:
        con.execute("update StringIds set value = 'gemm_renamed' where value like 'void cutlass::Kernel2%'")
    result = run("diff", NSYS, new, "--fail-over", "1%", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["gate"]["passed"] and found["kernels"]["gated"] is False
    renamed = [r for r in found["kernels"]["rows"] if r["name"] == "gemm_renamed"]
    assert [(r["rank"], r["new_ns"], r["base_ns"]) for r in renamed] == [(0, 150_000, None), (1, 150_000, None)]


def test_a_tally_by_rows_is_the_tally_one_by_one() -> None:
    names = ["a", "b", "a", "c", "a", "b"]
    starts = np.array([0, 10, 20, 30, 2**41, 2**42], np.int64)
    durs = np.array([5, 7, 11, 2**40, 1, 3], np.int64)
    by_rows, one_by_one = KernelTally(), KernelTally()
    by_rows.add_rows((None, None), ("gpu", 7), names, starts, durs)
    by_rows.add_rows((None, None), ("gpu", 7), ["c"], np.array([50], np.int64), np.array([1], np.int64))
    for name, start, dur in zip([*names, "c"], [*starts.tolist(), 50], [*durs.tolist(), 1], strict=True):
        one_by_one.add((None, None), ("gpu", 7), name, start, dur)
    expected = {((None, None), ("gpu", 7)): {"a": [17, 3], "b": [10, 2], "c": [2**40 + 1, 2]}}
    assert by_rows.by_stream == one_by_one.by_stream == expected
    # each kernel's start, length and name kept, row by row as one by one
    for tally in (by_rows, one_by_one):
        times = tally.times[((None, None), ("gpu", 7))]
        assert list(times.starts) == [0, 10, 20, 30, 2**41, 2**42, 50]
        assert list(times.durs) == [5, 7, 11, 2**40, 1, 3, 1]
        assert [times.names[c] for c in times.codes] == [*names, "c"]
    parts = KernelTally()
    parts.absorb(expected, {((None, None), ("gpu", 7)): by_rows.times[((None, None), ("gpu", 7))]})
    parts.absorb({((None, None), ("gpu", 8)): {"a": [1, 1]}})
    parts.regroup(lambda origin, thread: ("actor", 0))  # both streams one process's once read whole
    by_process = defaultdict(int)
    for (origin, _), found in parts.by_stream.items():
        by_process[origin] += found["a"][0]
    assert dict(by_process) == {("actor", 0): 18}
    regrouped = parts.times[(("actor", 0), ("gpu", 7))]
    assert [regrouped.names[c] for c in regrouped.codes] == [*names, "c"] and len(parts.times) == 1


HTA_DATA = ROOT.parent / "shared" / "corpus" / "torch" / "HolisticTraceAnalysis" / "tests" / "data"


@pytest.mark.skipif(not HTA_DATA.is_dir(), reason=f"no corpus at {HTA_DATA}")
def test_genuine_gpu_traces_busiest_kernels() -> None:
    """Two ranks of a genuine Kineto profile (NCCL and compute kernels, copies, sets)."""
    folder = HTA_DATA / "trace_filter"
    rows = {r["rank"]: r for r in summary_json(folder)["kernels"]}
    for path in sorted(folder.glob("sampled_rank-*.json.gz")):
        trace = load_json(path)
        totals, spans = kineto_work(path)
        row = rows[trace["distributedInfo"]["rank"]]
        assert shown(row) == top_of(totals) and row["names"] == len(totals) > 10
        check_shares(row, union(spans))
    assert len(rows) == 2
