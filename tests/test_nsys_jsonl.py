"""Nsight Systems JSON-lines exports (``nsys export --type jsonlines``): read as their SQLite twins.

The JSON-lines fixtures are made from the SQLite ones by ``fixtures/make_nsys_jsonl.py`` (nsys's
rules: one object per row, ``"table"``, NULL columns left out); the corpus exports are converted
here, into a temporary folder, by the same function.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from tracemerge.pipeline import merge
from tracemerge.report.run_report import RunReport
from tracemerge.sources.nsys import jsonl as nsys_jsonl
from tracemerge.sources.nsys.recognise import NSYS_JSONL
from tracemerge.sources.spans.recognise import JSONL_SPANS

sys.path.insert(0, str(FIXTURES))
from make_nsys_jsonl import SKIPPED, convert

SQLITE = FIXTURES / "nsys"
JSONL = FIXTURES / "nsys_jsonl"
PAIRS = [
    (db, JSONL / db.relative_to(SQLITE).with_suffix(".jsonl"))
    for db in sorted(SQLITE.rglob("*.sqlite"))
    if db.name not in SKIPPED
]
# the third-party corpus beside the repository (../shared/corpus); its tests skip without it
CORPUS = ROOT.parent / "shared" / "corpus" / "nsys"
CORPUS_DBS = sorted(CORPUS.rglob("*.sqlite")) if CORPUS.is_dir() else []
TORCHRUN = JSONL / "torchrun" / "train_2gpu.jsonl"
MTIME_NS = 1_790_000_000_000_000_000  # one modification time for both forms (a clock without anchor uses it)


def stats(report: RunReport) -> dict[str, int]:
    return {name: entry["count"] for name, entry in report.as_dict()["stats"].items()}


def merged_as(tmp_path: Path, source: Path, name: str) -> tuple[bytes, RunReport]:
    """``source`` copied to ``<tmp_path>/in/<name>`` and merged to Chrome JSON: its bytes and report."""
    folder = tmp_path / "in"
    folder.mkdir(parents=True)
    copy = folder / name
    shutil.copyfile(source, copy)
    os.utime(copy, ns=(MTIME_NS, MTIME_NS))
    out = tmp_path / "out.json"
    report = merge([folder], out, jobs=1)
    return out.read_bytes(), report


def assert_same_trace(tmp_path: Path, db: Path, lines: Path) -> RunReport:
    """Both forms, under one name but for the suffix: byte-identical traces, the same counts."""
    sqlite_trace, sqlite_report = merged_as(tmp_path / "sqlite", db, "export.sqlite")
    jsonl_trace, jsonl_report = merged_as(tmp_path / "jsonl", lines, "export.jsonl")
    assert b"export.jsonl" in jsonl_trace  # the file name shows: the only difference allowed
    assert jsonl_trace == sqlite_trace.replace(b"export.sqlite", b"export.jsonl")
    assert stats(jsonl_report) == stats(sqlite_report)
    assert dict(jsonl_report.dropped) == dict(sqlite_report.dropped)
    assert jsonl_report.exit_code == sqlite_report.exit_code
    return jsonl_report


def test_the_committed_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    assert len(PAIRS) == 10
    for db, lines in PAIRS:
        fresh = tmp_path / lines.name
        convert(db, fresh)
        assert fresh.read_bytes() == lines.read_bytes(), lines


@pytest.mark.parametrize(("db", "lines"), PAIRS, ids=[p[1].stem for p in PAIRS])
def test_each_json_lines_export_gives_the_trace_of_its_sqlite_twin(tmp_path: Path, db: Path, lines: Path) -> None:
    report = assert_same_trace(tmp_path, db, lines)
    assert {f.name for p in report.processes for f in p.files} == {"export.jsonl"}


@pytest.mark.skipif(not CORPUS_DBS, reason=f"no corpus at {CORPUS}")
@pytest.mark.parametrize("index", range(2))
def test_corpus_exports_give_the_same_trace_in_both_forms(tmp_path: Path, index: int) -> None:
    if index >= len(CORPUS_DBS):
        pytest.skip("fewer corpus exports")
    db = CORPUS_DBS[index]
    lines = tmp_path / "made" / db.with_suffix(".jsonl").name
    rows = convert(db, lines)
    assert rows == sum(1 for _ in lines.open("rb"))
    report = assert_same_trace(tmp_path, db, lines)
    assert report.written.slices > 0


def test_rows_of_tables_interleaved_give_the_same_trace(tmp_path: Path) -> None:
    """nsys may write a table's rows together or between other tables' rows: each table's own
    order is what counts."""
    by_table: dict[str, list[bytes]] = {}
    for line in TORCHRUN.read_bytes().splitlines(keepends=True):
        by_table.setdefault(json.loads(line)["table"], []).append(line)
    queues = list(by_table.values())
    rng, shuffled = random.Random(7), []
    while queues:
        queue = rng.choice(queues)
        shuffled.append(queue.pop(0))
        queues = [q for q in queues if q]
    assert shuffled != TORCHRUN.read_bytes().splitlines(keepends=True)
    interleaved = tmp_path / "interleaved.jsonl"
    interleaved.write_bytes(b"".join(shuffled))
    assert_same_trace(tmp_path, SQLITE / "torchrun" / "train_2gpu.sqlite", interleaved)


def test_a_gzipped_export_is_read_the_same(tmp_path: Path) -> None:
    packed = tmp_path / "train_2gpu.jsonl.gz"
    packed.write_bytes(gzip.compress(TORCHRUN.read_bytes()))
    plain = merge([TORCHRUN], tmp_path / "plain.json", jobs=1)
    zipped = merge([packed], tmp_path / "zipped.json", jobs=1)
    assert (zipped.written.slices, zipped.written.flows) == (plain.written.slices, plain.written.flows)
    assert plain.written.slices == 144 and zipped.exit_code == 0


def test_recognised_by_content_not_by_suffix(tmp_path: Path) -> None:
    """A span log and an nsys export share ``.jsonl``: each is read by its own format."""
    spans = tmp_path / "in" / "spans.jsonl"
    spans.parent.mkdir()
    spans.write_text('{"name": "generate", "start": 1790000000.0, "end": 1790000001.0, "role": "rollout"}\n')
    shutil.copyfile(TORCHRUN, tmp_path / "in" / "train_2gpu.jsonl")
    # the span log and the capture are years apart: two runs, both merged
    report = merge([tmp_path / "in"], tmp_path / "out.json", jobs=1, run="all")
    files = {p.label: [f.name for f in p.files] for p in report.processes}
    nsys_files = ["train_2gpu.jsonl"]
    assert files == {"rollout · spans.jsonl": ["spans.jsonl"], "rank 0": nsys_files, "rank 1": nsys_files}
    assert NSYS_JSONL.claims(spans, spans.read_bytes()) is False
    assert JSONL_SPANS.claims(TORCHRUN, TORCHRUN.read_bytes()) is False


def test_lines_that_are_not_rows_and_values_sqlite_cannot_hold_are_counted(tmp_path: Path) -> None:
    lines = TORCHRUN.read_bytes().splitlines(keepends=True)
    bad = [
        b"not json at all\n",
        b'{"no table": 1}\n',
        b'["table", "StringIds"]\n',
        b'{"table": "sqlite_master", "name": "x"}\n',
        b'{"table": "ANALYSIS_DETAILS", "startTime": [1, 2], "globalVid": 1}\n',
        b"\n",
        b'{"table": "\\ud800", "a": 1}\n',  # a table no SQLite name can hold
        b'{"table": "ANALYSIS_DETAILS", "\\udc00": 1, "globalVid": 2}\n',  # a key no column can
    ]
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join(lines[:3] + bad + lines[3:]))
    good = merge([TORCHRUN], tmp_path / "good.json", jobs=1)
    report = merge([damaged], tmp_path / "damaged.json", jobs=1)
    assert (report.written.slices, report.written.flows) == (good.written.slices, good.written.flows)
    assert stats(report) == stats(good) | {"line_unreadable": 5, "nsys_value_unreadable": 2}
    assert dict(report.dropped)["nsys JSON-lines line that is not a table row (first at line 4)"] == 5
    bad_key = "nsys JSON-lines value left out: key \\udc00 of ANALYSIS_DETAILS cannot be a column of its own"
    assert dict(report.dropped)[bad_key] == 1
    left_out = "nsys JSON-lines value left out: an array or object in a column of ANALYSIS_DETAILS"
    assert dict(report.dropped)[left_out] == 1


def test_a_line_longer_than_any_row_is_counted_and_the_rest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nsys_jsonl, "MAX_LINE", 4096)
    lines = TORCHRUN.read_bytes().splitlines(keepends=True)
    long = b'{"table":"StringIds","id":999999,"value":"' + b"x" * 20_000 + b'"}\n'
    damaged = tmp_path / "long.jsonl"
    damaged.write_bytes(b"".join([*lines[:5], long, *lines[5:]]))
    report = merge([damaged], tmp_path / "out.json", jobs=1)
    assert report.written.slices == 144
    assert dict(report.dropped)["nsys JSON-lines line that is not a table row (first at line 6)"] == 1


def test_nothing_is_left_in_the_work_folder_or_beside_the_input(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(TORCHRUN, folder / TORCHRUN.name)
    (tmp_path / "out").mkdir()
    merge([folder], tmp_path / "out" / "out.json", jobs=1)
    assert sorted(p.name for p in folder.iterdir()) == [TORCHRUN.name]
    assert not list((tmp_path / "out").rglob(".tracemerge-*"))


def test_a_report_beside_its_json_lines_export_is_read_through_it(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    lines = folder / "worker_process_4242.1.jsonl"
    shutil.copyfile(JSONL / "verl" / "actor_rollout_ref_node1_worker_process_4242.jsonl", lines)
    (folder / "worker_process_4242.1.nsys-rep").write_bytes(b"a report")
    report = merge([folder], tmp_path / "out.json", jobs=1)
    assert [p.files for p in report.processes] == [[lines]]
    assert report.ignored == [folder / "worker_process_4242.1.nsys-rep"]
    assert stats(report) == {"nsys_report_read_as_export": 1}
    assert report.exit_code == 0


def test_a_file_of_no_row_at_all_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "x.jsonl"
    junk.write_bytes(b'{"table": "StringIds"}\n{"table": "NVTX_EVENTS"}\n')
    report = merge([junk, TORCHRUN], tmp_path / "out.json", jobs=1)
    assert report.skipped == [f"{junk}: no line is an Nsight Systems table row"]
    assert report.exit_code == 3


@pytest.mark.parametrize(
    ("old", "new", "counted"),
    [
        (b'"gridX":128', b'"gridX":9e999', {"nsys_value_unreadable": 1}),  # Infinity, as Python's json reads it
        (b'"registersPerThread":32', b'"registersPerThread":1.5', {}),  # a REAL, written as it is
        (b'"deviceId":0', b'"deviceId":[0]', {"nsys_value_unreadable": 1}),  # no SQLite value: left out
        # past int64: a REAL, as SQLite keeps it, so no time; the kernel's launch was not captured
        (
            b'"start":1500000',
            b'"start":18446744073709551616',
            {"event_time_unreadable": 1, "nsys_launch_not_captured": 1},
        ),
    ],
    ids=["infinite", "real", "array", "past int64"],
)
def test_a_bad_value_in_a_row_costs_that_value_as_in_sqlite(
    tmp_path: Path, old: bytes, new: bytes, counted: dict[str, int]
) -> None:
    lines = TORCHRUN.read_bytes().splitlines(keepends=True)
    at = 165  # the first kernel row (pid 301, GPU 0, stream 7, 1.5 ms after the session start)
    assert lines[at].startswith(b'{"blockX":256') and lines[at].count(old) == 1
    lines[at] = lines[at].replace(old, new)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join(lines))
    good = merge([TORCHRUN], tmp_path / "good.json", jobs=1)
    report = merge([damaged], tmp_path / "damaged.json", jobs=1)
    assert report.skipped == []
    assert report.written.slices == good.written.slices - counted.get("event_time_unreadable", 0)
    assert stats(report) == stats(good) | counted
    events = json.loads((tmp_path / "damaged.json").read_bytes())["traceEvents"]
    kernels = [  # rank 1's kernel of the same correlation id is on GPU 1
        e["args"]
        for e in events
        if e.get("cat") == "kernel" and e["args"].get("correlation") == 999 and e["args"].get("device") != 1
    ]
    if "event_time_unreadable" in counted:
        assert kernels == []
    elif new == b'"gridX":9e999':
        assert len(kernels) == 1 and "grid" not in kernels[0] and kernels[0]["block"] == [256, 1, 1]
    elif new == b'"deviceId":[0]':
        assert len(kernels) == 1 and "device" not in kernels[0]
    else:
        assert len(kernels) == 1 and kernels[0]["registers per thread"] == 1.5


def test_the_lines_are_streamed_in_memory_that_does_not_grow_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 12 MB export (the torchrun one, its kernels repeated) is staged holding at most a batch of
    rows and a line: far less memory than the file."""
    import tracemalloc

    monkeypatch.setattr(nsys_jsonl, "BATCH_ROWS", 2_000)
    lines = TORCHRUN.read_bytes().splitlines(keepends=True)
    kernel = next(line for line in lines if b'"CUPTI_ACTIVITY_KIND_KERNEL"' in line)
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:
        out.writelines(lines)
        for n in range(30_000):
            out.write(kernel.replace(b'"correlationId":999', b'"correlationId":%d' % (10**6 + n)))
    assert big.stat().st_size > 12 << 20
    stage = nsys_jsonl.Staging(tmp_path / "staged.sqlite")
    tracemalloc.start()
    try:
        with nsys_jsonl._lines(big) as stream:
            for line in stream:
                stage.add_line(line)
        stage.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        stage.close()
    assert stage.rows == len(lines) + 30_000 and stage.bad_lines == 0
    assert peak < 3 << 20, f"{peak / 1e6:.1f} MB"


def test_a_cut_gzipped_export_is_read_up_to_the_cut(tmp_path: Path) -> None:
    lines = TORCHRUN.read_bytes().splitlines(keepends=True)
    packed = gzip.compress(b"".join(lines))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) * 3 // 4])
    report = merge([cut], tmp_path / "out.json", jobs=1)
    assert report.skipped == [] and 0 < report.written.slices < 144
    assert report.as_dict()["stats"]["file_damaged"]["count"] == 1
    [message] = [m for m in dict(report.dropped) if m.startswith("nsys JSON lines cut or damaged after line ")]
    read_lines = int(message.split("after line ")[1].split(":")[0])
    assert 0 < read_lines < len(lines)
