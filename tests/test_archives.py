"""A Perfetto archive (a .tar or .zip of traces with a perfetto_manifest) is read as the folder it
holds, safely; its manifest's machines name the files' hosts and its clock offsets place them,
reported as offsets given by hand.

fixtures/machines/two_hosts.tar (fixtures/make_machines.py) holds rl_run's two genuine actor
ranks named as torch names them on two hosts, and a manifest that puts node-b's clock 1.5 ms after
node-a's.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES
from expected import Expected, kineto_file
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.analysis.summarize import summarize
from tracemerge.cli import main as cli
from tracemerge.core.errors import FatalError
from tracemerge.discovery import archives
from tracemerge.pipeline import merge

ARCHIVE = FIXTURES / "machines" / "two_hosts.tar"
NODE_A = "node-a_2835.1790857026000000000.pt.trace.json"
NODE_B = "node-b_2836.1790857026000000000.pt.trace.json.gz"
OFFSET_NS = 1_500_000


def assert_same(rb, label: str, expected: Expected) -> None:
    got = rb.expected_view(label)
    assert sum(got.slices.values()) == sum(expected.slices.values()) > 0
    assert got.slices == expected.slices
    assert got.instants == expected.instants


def expected_of(tmp_path: Path, name: str, data: bytes) -> Expected:
    path = tmp_path / "inputs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return kineto_file(path)


def unused(report, archive: str) -> list[str]:
    """What the report says of the manifest's entries it could not use (an info statistic)."""
    reasons = report.as_dict()["stats"].get("manifest_entry_unused", {}).get("reasons", {})
    return [reason.split(f"{archive}:", 1)[1] for reason in reasons]


def members() -> dict[str, bytes]:
    with tarfile.open(ARCHIVE) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def manifest(**node_b: object) -> bytes:
    entry_b = {"path": NODE_B, "machine": {"name": "gpu-host-2"}, **node_b}
    body = {"version": 1, "files": [{"path": NODE_A, "machine": {"name": "gpu-host-1"}}, entry_b]}
    return json.dumps({"perfetto_manifest": body}).encode()


def write_tar(path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return path


def test_the_archive_merges_as_its_folder_with_the_manifest_offset(tmp_path: Path) -> None:
    out = tmp_path / "merged.pftrace"
    report = merge([ARCHIVE], out)
    placed = {Path(a["file"]).name: a for a in report.alignment}
    assert placed[NODE_A]["method"] == "reference"
    assert placed[NODE_B]["method"] == "manual"  # reported as an offset given by hand
    assert placed[NODE_B]["offset_ns"] == OFFSET_NS
    assert placed[NODE_B]["against"] == f"perfetto_manifest in two_hosts.tar: +{OFFSET_NS}ns against {NODE_A}"
    rb = read_pftrace(out)
    files = members()
    assert_same(rb, "rank 0", expected_of(tmp_path, NODE_A, files[NODE_A]))
    assert_same(rb, "rank 1", expected_of(tmp_path, NODE_B, files[NODE_B]).shifted(OFFSET_NS))
    assert [n for n in report.notes if "perfetto_manifest" in n] == [
        f"{ARCHIVE}: read as a folder; its perfetto_manifest (perfetto_manifest.json) used"
    ]
    assert report.skipped == []
    # The expanded folder is gone with the merge.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs", "merged.pftrace"]


def test_the_manifest_machines_name_the_hosts_in_a_zip(tmp_path: Path) -> None:
    """A zip, with machine names unlike the traces' own host_name: the manifest's win."""
    files = members()
    files["perfetto_manifest.json"] = manifest(clocks={"sync_to": {"file": NODE_A}, "offset_ns": -250})
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    out = tmp_path / "merged.pftrace"
    report = merge([archive], out)
    trace = official.Trace()
    trace.ParseFromString(out.read_bytes())
    names = {p.machine_id: p.system_info.machine_name for p in trace.packet if p.HasField("system_info")}
    assert names == {1: "gpu-host-1", 2: "gpu-host-2"}
    assert {Path(a["file"]).name: a["offset_ns"] for a in report.alignment} == {NODE_A: 0, NODE_B: -250}


def test_members_that_would_leave_the_folder_are_not_written(tmp_path: Path) -> None:
    files = members()
    bad = {"../escaped.json": b"{}", "/tmp/absolute.json": b"{}", "dir/../../up.json": b"{}"}
    link = tarfile.TarInfo("link.pt.trace.json")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("hard.pt.trace.json")
    hard.type, hard.linkname = tarfile.LNKTYPE, NODE_A
    fifo = tarfile.TarInfo("pipe.pt.trace.json")
    fifo.type = tarfile.FIFOTYPE
    archive = write_tar(tmp_path / "in" / "hostile.tar", {**files, **bad}, [link, hard, fifo])
    with tarfile.open(archive, "a") as tar:  # a second member of a name already written
        info = tarfile.TarInfo(NODE_A)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    out = tmp_path / "merged.pftrace"
    report = merge([archive], out)
    shown = [s.split("hostile.tar:", 1)[1] for s in report.skipped]
    assert sorted(shown) == sorted(
        [
            "../escaped.json: a member named outside the archive's folder: not read",
            "/tmp/absolute.json: a member named outside the archive's folder: not read",
            "dir/../../up.json: a member named outside the archive's folder: not read",
            "link.pt.trace.json: a link: not followed, not read",
            "hard.pt.trace.json: a link: not followed, not read",
            "pipe.pt.trace.json: not a regular file: not read",
            f"{NODE_A}: a second member of this name: not read",
        ]
    )
    assert report.written.slices == 970  # both ranks' traces, as in the fixture
    assert not (tmp_path / "escaped.json").exists() and not Path("/tmp/absolute.json").exists()
    assert not [p for p in tmp_path.rglob("*up.json")]


def test_a_member_over_the_size_limit_is_named_and_not_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(archives, "MAX_MEMBER", 20_000)  # node-a's trace is 131 kB, node-b's 11 kB
    report = merge([ARCHIVE], tmp_path / "merged.pftrace")
    assert [s.split("two_hosts.tar:", 1)[1] for s in report.skipped] == [
        f"{NODE_A}: larger than 20,000 bytes: not read"
    ]
    # What the manifest says of it, or against it, cannot be used either.
    assert unused(report, "two_hosts.tar") == [
        f"perfetto_manifest.json: files[0]: not used: {NODE_A}: no such file in the archive",
        f"perfetto_manifest.json: files[1]: not used: {NODE_A}: no such file in the archive",
    ]
    assert [Path(a["file"]).name for a in report.alignment] == [NODE_B]


def test_what_the_manifest_says_wrong_is_named_with_its_place(tmp_path: Path) -> None:
    files = members()
    files["perfetto_manifest.json"] = manifest(clocks={"sync_to": {"file": NODE_A}, "offset_ns": "1ms"})
    report = merge([write_tar(tmp_path / "run.tar", files)], tmp_path / "merged.pftrace")
    assert unused(report, "run.tar") == ["perfetto_manifest.json: files[1]: not used: clocks.offset_ns: not an integer"]
    assert report.skipped == [] and report.exit_code == 0  # every event is merged
    placed = {Path(a["file"]).name: a["method"] for a in report.alignment}
    assert placed[NODE_B] == "collectives"  # placed by its own evidence instead


def test_a_manifest_naming_a_missing_file(tmp_path: Path) -> None:
    files = members()
    files["perfetto_manifest.json"] = manifest(clocks={"sync_to": {"file": "gone.json"}, "offset_ns": 5})
    report = merge([write_tar(tmp_path / "run.tar", files)], tmp_path / "merged.pftrace")
    assert unused(report, "run.tar") == [
        "perfetto_manifest.json: files[1]: not used: gone.json: no such file in the archive"
    ]


def test_an_archive_that_is_not_one(tmp_path: Path) -> None:
    fake = tmp_path / "traces.zip"
    fake.write_bytes(b"not a zip")
    assert not archives.is_archive(fake)
    with pytest.raises(FatalError, match="not a trace format"):
        merge([fake], tmp_path / "merged.pftrace")


def test_a_damaged_archive_is_one_line(tmp_path: Path) -> None:
    data = ARCHIVE.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FatalError, match=r"cut\.tar: cannot read the archive"):
        merge([cut], tmp_path / "merged.pftrace")
    assert [p.name for p in tmp_path.iterdir()] == ["cut.tar"]


def test_summarize_reads_an_archive_too() -> None:
    numbers = summarize([ARCHIVE]).as_dict()
    assert numbers["processes"]
    assert numbers["processes"] == summarize([FIXTURES / "machines" / "two_hosts" / "actor"]).as_dict()["processes"]


def test_no_folder_is_left_when_nothing_is_merged(tmp_path: Path) -> None:
    only_manifest = write_tar(tmp_path / "empty.tar", {"perfetto_manifest.json": manifest()})
    with pytest.raises(FatalError):
        merge([only_manifest], tmp_path / "merged.pftrace")
    assert sorted(os.listdir(tmp_path)) == ["empty.tar"]


def test_summary_and_diff_take_an_archive_as_a_run(tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli.app, ["summary", str(ARCHIVE), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["processes"] == summarize([ARCHIVE]).as_dict()["processes"]
    out = tmp_path / "merged.pftrace"
    merge([ARCHIVE], out)
    compared = runner.invoke(cli.app, ["diff", str(ARCHIVE), str(out)])
    assert compared.exit_code == 0, compared.output


def test_two_archives_of_one_name_and_one_named_twice(tmp_path: Path) -> None:
    other = write_tar(tmp_path / "b" / "two_hosts.tar", {NODE_B: members()[NODE_B]})
    report = merge([ARCHIVE, other, ARCHIVE], tmp_path / "merged.pftrace")
    # node-b's trace in both archives: the same bytes, read once (and said so).
    assert report.written.slices == 970
    assert any("same" in note and NODE_B in note for note in report.notes), report.notes


def test_a_member_that_cannot_be_written_costs_that_member(tmp_path: Path) -> None:
    """``a`` is a file, so ``a/b.json`` has no folder to go in: that member alone is lost."""
    files = {**members(), "a": b"text", "a/b.json": b"{}"}
    report = merge([write_tar(tmp_path / "run.tar", files)], tmp_path / "merged.pftrace")
    assert [s.split("run.tar:", 1)[1] for s in report.skipped] == ["a/b.json: cannot be written: File exists"]
    assert report.written.slices == 970


def test_a_ring_of_pins(tmp_path: Path) -> None:
    """Each file pinned to the other: the first by name is placed as if it were not, the other by
    its pin against it."""
    files = members()
    body = {
        "version": 1,
        "files": [
            {"path": NODE_A, "clocks": {"sync_to": {"file": NODE_B}, "offset_ns": 7}},
            {"path": NODE_B, "clocks": {"sync_to": {"file": NODE_A}, "offset_ns": 5}},
        ],
    }
    files["perfetto_manifest.json"] = json.dumps({"perfetto_manifest": body}).encode()
    report = merge([write_tar(tmp_path / "run.tar", files)], tmp_path / "merged.pftrace")
    placed = {Path(a["file"]).name: (a["method"], a["offset_ns"]) for a in report.alignment}
    assert placed == {NODE_A: ("reference", 0), NODE_B: ("manual", 5)}
