"""Flows numbered a range of ids at a time (files with more flow points than are held at once)
come out byte for byte as flows numbered all at once: the bound is made tiny so that every file
with flows takes the run file's path."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES

import tracemerge.layout.flows.attachments as attachments
import tracemerge.layout.flows.binding as binding
import tracemerge.layout.flows.numbering as numbering
import tracemerge.layout.flows.point_chunks as point_chunks
import tracemerge.store.entries as entries
from tracemerge.layout.flows.point_runs import PointRuns
from tracemerge.pipeline import merge
from tracemerge.select import Selection

T0 = 1_700_000_000_000_000  # µs


def _slice(name: str, at: int, dur: int, pid: int, tid: int) -> dict:
    return {"ph": "X", "name": name, "cat": "cpu_op", "ts": T0 + at, "dur": dur, "pid": pid, "tid": tid}


def _point(ph: str, fid: object, at: int, pid: int, tid: int, cat: str = "ac2g", **extra: object) -> dict:
    return {"ph": ph, "id": fid, "name": cat, "cat": cat, "ts": T0 + at, "pid": pid, "tid": tid, **extra}


def many_flows(path: Path, rank: int, odd_ids: bool) -> Path:
    """Launches and kernels tied by ac2g flows, with ids shared by a start and several ends,
    ids reused for flows one after another, ends bound to the next slice, steps, ids that are
    text, flows whose ends lie on no slice, and with ``odd_ids`` ids no int64 key holds."""
    cpu, gpu, other = (rank, 1), (rank, 7), (rank, 2)
    events: list[dict] = []
    for n in range(60):
        at = 100 * n
        events += [_slice(f"cudaLaunchKernel {n}", at, 20, *cpu), _slice(f"kernel {n}", at + 30, 40, *gpu)]
        fid = n % 45  # ids 0..14 serve two flows, one after the other
        events += [_point("s", fid, at + 5, *cpu), _point("f", fid, at + 35, *gpu, bp="e")]
        if n % 7 == 0:  # one launch, two more kernels: fan-out from one start
            events += [_point("s", 1000 + n, at + 6, *cpu)]
            events += [_point("f", 1000 + n, at + 40 + k, *gpu, bp="e") for k in (0, 1)]
        if n % 5 == 0:  # an end that binds to the next slice, with a step between
            events += [_slice(f"step {n}", at + 50, 10, *other)]
            events += [_point("s", f"text-{n}", at + 7, *cpu, cat="fwdbwd")]
            events += [_point("t", f"text-{n}", at + 45, *gpu, cat="fwdbwd")]
            events += [_point("f", f"text-{n}", at + 50, *other, cat="fwdbwd")]
            # an end after its thread's slice, bound to the next one (often in a later run)
            events += [_point("s", f"late-{n}", at + 8, *cpu, cat="fwdbwd")]
            events += [_point("f", f"late-{n}", at + 62, *other, cat="fwdbwd")]
        if n % 11 == 0:  # an end on no slice
            events += [_point("s", 2000 + n, at + 8, *cpu), _point("f", 2000 + n, at + 90, *gpu, bp="e")]
        if n % 13 == 0:  # an end with no start, a start with no end
            events += [_point("f", 3000 + n, at + 36, *gpu, bp="e"), _point("s", 4000 + n, at + 9, *cpu)]
        if odd_ids and n % 9 == 0:
            events += [_point("s", -5 - n, at + 10, *cpu), _point("f", -5 - n, at + 37, *gpu, bp="e")]
            events += [_point("s", 1 << 60, at + 11, *cpu), _point("f", 1 << 60, at + 38, *gpu, bp="e")]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _merged(
    inputs: list[Path], out: Path, bound: int, selection: Selection, at_once: int | None = None, chunk: int = 3
) -> bytes:
    """The merge with flows numbered at once below ``bound`` points; with ``at_once``, each
    thread's points bound a group of about that many at a time, its entries cut into runs of
    ``chunk`` rows at least (which changes the output: compare with a merge of the same chunk)."""
    saved = numbering.FLOW_POINTS_IN_MEMORY, point_chunks.POINTS_AT_ONCE, entries.CHUNK
    numbering.FLOW_POINTS_IN_MEMORY = bound
    if at_once is not None:
        point_chunks.POINTS_AT_ONCE, entries.CHUNK = at_once, chunk
    try:
        merge(inputs, out, jobs=1, selection=selection)
    finally:
        numbering.FLOW_POINTS_IN_MEMORY, point_chunks.POINTS_AT_ONCE, entries.CHUNK = saved
    return out.read_bytes()


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
@pytest.mark.parametrize(
    "inputs", ["kineto_gpu", "nsys/torchrun", "generated", "generated-odd-ids", "generated-window"]
)
def test_flows_numbered_by_ranges_match_flows_numbered_at_once(tmp_path: Path, inputs: str, ext: str) -> None:
    selection = Selection()
    if inputs.startswith("generated"):
        folder = tmp_path / "in"
        folder.mkdir()
        odd = inputs == "generated-odd-ids"
        paths = [many_flows(folder / f"rank{rank}.pt.trace.json", rank, odd) for rank in (0, 1)]
        if inputs == "generated-window":
            selection = Selection(window=(1_500_000, 4_200_000))  # ns after the run start
    else:
        paths = [FIXTURES / inputs]
    at_once = _merged(paths, tmp_path / f"once{ext}", 1 << 20, selection)
    for bound in (1, 5):
        assert _merged(paths, tmp_path / f"ranges{bound}{ext}", bound, selection) == at_once
    # Each thread's attachments read back a bucket of a few slices at a time.
    saved = attachments.BUCKET, attachments.SAMPLE_EVERY, attachments.AttachmentBuckets._bucket
    read: list[int] = []

    def bucket(self: attachments.AttachmentBuckets, b: int) -> attachments.Attachments:
        read.append(b)
        return saved[2](self, b)

    attachments.BUCKET, attachments.SAMPLE_EVERY, attachments.AttachmentBuckets._bucket = 4, 2, bucket
    try:
        assert _merged(paths, tmp_path / f"buckets{ext}", 5, selection) == at_once
    finally:
        attachments.BUCKET, attachments.SAMPLE_EVERY, attachments.AttachmentBuckets._bucket = saved
    if inputs == "generated-odd-ids":  # ids no int64 key holds: the whole-file path, in memory
        assert not read
    else:
        assert len(set(read)) > (3 if inputs.startswith("generated") else 1)
    # Each thread's points bound a part apart in time at a time (its entries cut into small runs), or whole.
    whole = _merged(paths, tmp_path / f"whole{ext}", 1 << 20, selection, 1 << 30)
    for bound, points in ((5, 1), (5, 4), (1 << 20, 2), (1, 1 << 30)):
        assert _merged(paths, tmp_path / f"groups{bound}-{points}{ext}", bound, selection, points) == whole
    for bound, points in ((5, 1), (1 << 20, 3)):  # parts within one run of entries (runs cut as by default)
        assert _merged(paths, tmp_path / f"parts{bound}-{points}{ext}", bound, selection, points, 1 << 18) == at_once


@pytest.mark.parametrize("odd_ids", [False, True])
def test_the_generated_flows_go_through_the_run_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd_ids: bool
) -> None:
    """With the bound tiny, the generated file's flows are numbered over many ranges, or, with
    ids no int64 key holds, read back whole; and some of its ids are not simple pairs."""
    calls: Counter = Counter()
    for name in ("load", "load_all"):
        method = getattr(PointRuns, name)

        def counted(*args: object, _method=method, _name=name) -> object:
            calls[_name] += 1
            return _method(*args)

        monkeypatch.setattr(PointRuns, name, counted)
    grouped = numbering._Numbering.group

    def group(self: object, *args: object) -> None:
        calls["group"] += 1
        grouped(self, *args)

    monkeypatch.setattr(numbering._Numbering, "group", group)
    monkeypatch.setattr(numbering, "FLOW_POINTS_IN_MEMORY", 5)
    merge([many_flows(tmp_path / "rank0.pt.trace.json", 0, odd_ids)], tmp_path / "out.json", jobs=1)
    assert calls["group"] > 10
    if odd_ids:
        assert calls["load_all"] == 1 and not calls["load"]
    else:
        assert calls["load"] > 10 and not calls["load_all"]


def test_the_generated_threads_are_bound_a_part_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bounds tiny, the generated file's threads are bound in many parts apart in time."""
    groups: list[int] = []
    made = point_chunks.time_cuts

    def counted(*args: object) -> list[int]:
        found = made(*args)  # type: ignore[arg-type]
        groups.append(len(found) + 1)
        return found

    monkeypatch.setattr(binding, "time_cuts", counted)
    monkeypatch.setattr(point_chunks, "POINTS_AT_ONCE", 2)
    monkeypatch.setattr(entries, "CHUNK", 3)
    monkeypatch.setattr(numbering, "FLOW_POINTS_IN_MEMORY", 5)
    merge([many_flows(tmp_path / "rank0.pt.trace.json", 0, False)], tmp_path / "out.json", jobs=1)
    assert len(groups) == 3 and max(groups) > 10
