"""The same trace given twice (a copied folder, a file and its relocated copy) is merged once, and
two copies that differ, however little, are both merged: never an error for the whole run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from expected import Expected, kineto_file
from readback import Readback, read_chrome_json, read_pftrace
from test_cli import run

from tracemerge.discovery import same_content
from tracemerge.discovery.same_content import same_content as copies
from tracemerge.pipeline import merge
from tracemerge.report.run_report import RunReport

READ = {".pftrace": read_pftrace, ".json": read_chrome_json}
RUN = FIXTURES / "kineto_gpu"
RANK0, RANK1 = "rank0.pt.trace.json", "rank1.pt.trace.json.gz"
MAIN_LANE = "CPU thread 4242 (pt_main_thread) (overlap 1)"


def copy_run(to: Path) -> Path:
    to.mkdir(parents=True)
    for name in (RANK0, RANK1):
        shutil.copyfile(RUN / name, to / name)
    return to


def merged(out: Path, *inputs: Path, **options: object) -> tuple[Readback, RunReport]:
    report = merge(list(inputs), out, jobs=1, **options)
    return READ[out.suffix](out).set_derived_apart(), report  # the input's events, the derived apart


def doubled(e: Expected, other: Expected) -> Expected:
    both = Expected(e.slices.copy(), e.instants.copy(), e.counters, e.flows)
    both.merge(other)
    return both


def view(rb: Readback, label: str) -> Expected:
    return rb.expected_view(label)


@pytest.mark.parametrize("ext", list(READ))
def test_a_copied_folder_is_merged_once(tmp_path: Path, ext: str) -> None:
    alone, alone_report = merged(tmp_path / f"alone{ext}", copy_run(tmp_path / "alone"))
    runs = copy_run(tmp_path / "runs")
    copy_run(runs / "copy")
    rb, report = merged(tmp_path / f"merged{ext}", runs, strict=True)  # a copy is no loss: --strict writes

    assert sorted(rb.processes.values()) == sorted(alone.processes.values()) == ["rank 0", "rank 1"]
    for label in ("rank 0", "rank 1"):
        assert view(rb, label) == view(alone, label)
    assert len(rb.slices) == len(alone.slices) == 56
    assert len(rb.instants) == len(alone.instants) == 8
    assert report.written == alone_report.written
    assert report.moved_to_lanes == alone_report.moved_to_lanes == 2
    assert [p.files for p in report.processes] == [[runs / RANK0], [runs / RANK1]]
    assert report.notes == [
        f"{runs / 'copy' / RANK0}: the same bytes as {runs / RANK0}, read once",
        f"{runs / 'copy' / RANK1}: the same bytes as {runs / RANK1}, read once",
    ]
    stats = report.as_dict()["stats"]
    assert stats == {
        "file_same_content": {
            "severity": "info",
            "description": "input files with the same bytes as another input (a copy): merged once, "
            "as the first one found",
            "count": 2,
            "reasons": {
                f"file with the same bytes as another input, read once: {runs / 'copy' / RANK0}": 1,
                f"file with the same bytes as another input, read once: {runs / 'copy' / RANK1}": 1,
            },
            "more": 0,
        }
    }
    assert report.incomplete is None and report.exit_code == 0
    # Nothing of the copy reaches the output: the same bytes as the run merged alone.
    assert (tmp_path / f"merged{ext}").read_bytes() == (tmp_path / f"alone{ext}").read_bytes()


def test_the_first_copy_given_is_the_one_merged(tmp_path: Path) -> None:
    original = shutil.copyfile(RUN / RANK0, tmp_path / RANK0)
    (tmp_path / "moved").mkdir()
    moved = shutil.copyfile(RUN / RANK0, tmp_path / "moved" / RANK0)
    _, report = merged(tmp_path / "merged.pftrace", moved, original)
    assert [p.files for p in report.processes] == [[moved]]
    assert report.notes == [f"{original}: the same bytes as {moved}, read once"]


@pytest.mark.parametrize("ext", list(READ))
def test_copies_differing_by_a_trailing_space_are_both_merged(tmp_path: Path, ext: str) -> None:
    """Regression: the copy overlaps the original in time, so the plan gives its threads copies of
    their own, but its overlap lanes were checked beside the original's threads, where its first
    read had opened them: the same uuid twice, narrow and wide, and the run stopped."""
    a, b = copy_run(tmp_path / "a"), copy_run(tmp_path / "b")
    with (b / RANK0).open("ab") as f:
        f.write(b" \n")
    rb, report = merged(tmp_path / f"merged{ext}", a, b)

    assert report.exit_code == 0
    # Files of no known layout in two folders (two jobs maybe) are told apart by the OS process
    # they state: both copies say pid 4242, so each rank is still one process.
    assert sorted(rb.processes.values()) == ["rank 0 · pid 4242", "rank 1 · pid 4242"]
    rank0, rank1 = kineto_file(RUN / RANK0), kineto_file(RUN / RANK1)
    assert view(rb, "rank 0 · pid 4242") == doubled(rank0, kineto_file(b / RANK0))
    assert view(rb, "rank 1 · pid 4242") == rank1  # b's copy of rank 1 is the same bytes: read once
    assert len(rb.slices) == 2 * 28 + 28
    assert report.moved_to_lanes == 4  # each copy of rank 0 moves its two "detach" slices
    lanes = sorted(name for _, name in rb.threads.values() if name.endswith("(overlap 1)"))
    assert lanes == [
        f"CPU thread 4242 (pt_main_thread) ({Path('b') / RANK0}) (overlap 1)",
        MAIN_LANE,
    ]
    assert report.notes == [f"{b / RANK1}: the same bytes as {a / RANK1}, read once"]
    assert report.as_dict()["stats"]["file_same_content"]["count"] == 1


def test_copies_of_one_size_differing_in_one_byte_are_both_merged(tmp_path: Path) -> None:
    a, b = copy_run(tmp_path / "a"), copy_run(tmp_path / "b")
    text = (b / RANK0).read_bytes()
    (b / RANK0).write_bytes(text.replace(b'"ProfilerStep#2"', b'"ProfilerStep#3"'))
    assert (b / RANK0).stat().st_size == (a / RANK0).stat().st_size
    rb, report = merged(tmp_path / "merged.pftrace", a, b)

    assert report.exit_code == 0  # two folders: each rank told by its pid, which both copies state
    assert view(rb, "rank 0 · pid 4242") == doubled(kineto_file(a / RANK0), kineto_file(b / RANK0))
    assert sum(view(rb, "rank 0 · pid 4242").slices.values()) == 2 * 28
    assert [s.name for s in rb.slices if s.name.startswith("ProfilerStep#")].count("ProfilerStep#3") == 1
    assert report.notes == [f"{b / RANK1}: the same bytes as {a / RANK1}, read once"]


@pytest.mark.parametrize("ext", list(READ))
def test_files_of_one_process_apart_in_time_share_their_overlap_lane(tmp_path: Path, ext: str) -> None:
    """Regression: two files of one process (one per profiled step) that both open lane 1 of the
    thread they share open one track, not two tracks with one uuid (which stopped the run)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copyfile(RUN / RANK0, runs / RANK0)
    text = (RUN / RANK0).read_bytes()
    base, later = b'"baseTimeNanoseconds":1727740800000000000', b'"baseTimeNanoseconds":1727740900000000000'
    assert base in text
    (runs / "rank0_later.pt.trace.json").write_bytes(text.replace(base, later))  # 100 s after the first
    rb, report = merged(tmp_path / f"merged{ext}", runs)

    assert report.exit_code == 0 and report.notes == []
    assert sorted(rb.processes.values()) == ["rank 0"]
    first = kineto_file(RUN / RANK0)
    assert view(rb, "rank 0") == doubled(first, first.shifted(100 * 10**9))
    assert len(rb.slices) == 2 * 28
    assert report.moved_to_lanes == 4
    assert [name for _, name in rb.threads.values() if name.endswith("(overlap 1)")] == [MAIN_LANE]
    lane = next(t for t, (_, name) in rb.threads.items() if name == MAIN_LANE)
    assert sorted(s.name for s in rb.slices if s.track == lane) == ["detach"] * 4


def test_only_files_that_share_a_size_are_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = bytes(range(256)) * (5 << 12)  # 5 MiB: hashed in blocks of 1 MiB
    files = {
        "a": b"0123456789",
        "b": b"0123456789",
        "c": b"9876543210",
        "d": b"other",
        "e": big,
        "f": big[:-1] + b"x",  # the same size, the last byte differs
        "g": big,
    }
    paths = []
    for name, data in files.items():
        paths.append(tmp_path / name)
        paths[-1].write_bytes(data)
    hashed = []
    digest = same_content._digest
    monkeypatch.setattr(same_content, "_digest", lambda path: hashed.append(path.name) or digest(path))
    assert copies(paths) == {1: 0, 6: 4}
    assert sorted(hashed) == ["a", "b", "c", "e", "f", "g"]  # not "d", alone at its size


def test_copy_named_on_screen_and_in_the_report(tmp_path: Path) -> None:
    runs = copy_run(tmp_path / "runs")
    shutil.copytree(runs, tmp_path / "runs" / "copy")
    report = tmp_path / "report.json"
    result = run(str(runs), "-o", str(tmp_path / "m.pftrace"), "--report", str(report))
    assert result.exit_code == 0, result.output
    note = f"{runs / 'copy' / RANK1}: the same bytes as {runs / RANK1}, read once"
    assert f"note: {note}" in result.output.splitlines()
    assert "statistics: file_same_content 2 (info)" in result.output.splitlines()
    data = json.loads(report.read_text())
    assert data["exit_code"] == 0
    assert data["notes"] == [f"{runs / 'copy' / RANK0}: the same bytes as {runs / RANK0}, read once", note]
    assert data["stats"]["file_same_content"]["count"] == 2
    assert data["stats"]["file_same_content"]["severity"] == "info"
    assert data["skipped_files"] == [] and data["dropped"] == data["stats"]["file_same_content"]["reasons"]
    assert data["read"] == data["written"] == {"slices": 56, "instants": 8, "counters": 12, "flows": 12}
