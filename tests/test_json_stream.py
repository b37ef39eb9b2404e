"""The batched JSON reader: every event exactly once whatever the batch size, the keys around the
array, gzip streams, and files that end early."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from tracemerge.pipeline import merge
from tracemerge.sources import json_stream
from tracemerge.sources.json_stream import EventStream


class Ev(msgspec.Struct):
    ph: str = ""
    name: str = ""


EVENTS = [
    # Names holding what a batch boundary looks like, and the array's end.
    {"ph": "X", "name": "a},{b" if n % 7 == 0 else ("c}]d" if n % 11 == 0 else f"n{n}"), "args": {"l": [{"x": n}]}}
    for n in range(3000)
]


def names(path: Path) -> tuple[list[str], EventStream]:
    stream = EventStream(path, Ev)
    return [e.name for batch in stream.batches() for e in batch], stream


@pytest.mark.parametrize("block", [64, 1000, 1 << 22])
@pytest.mark.parametrize("shape", ["kineto", "bare", "gzip"])
def test_every_event_once_in_order_with_the_keys_around_the_array(
    tmp_path: Path, monkeypatch, block: int, shape: str
) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", block)
    doc = {"schemaVersion": 1, "traceEvents": EVENTS, "deviceProperties": [{"id": 0}], "baseTimeNanoseconds": 7}
    if shape == "kineto":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(doc, indent=2))
    elif shape == "bare":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(EVENTS))
    else:
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS]
    assert stream.damage is None
    if shape != "bare":
        assert stream.meta == {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "baseTimeNanoseconds": 7}


def test_a_cut_file_yields_every_complete_event_and_says_where_it_stops(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    text = json.dumps({"traceEvents": EVENTS}, indent=1)
    cut = text.index('"n100"') + 3  # inside the name of event 100
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:100]]
    assert stream.damage is not None and stream.damage.reason == "invalid JSON (unexpected end of data)"
    line = text[:cut].count("\n") + 1
    assert stream.damage.where == f"{line}:{cut - text[:cut].rfind(chr(10))}"


def test_a_cut_gzip_stream_yields_the_events_before_the_cut(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    data = gzip.compress(json.dumps({"traceEvents": EVENTS}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    got, stream = names(path)
    assert 0 < len(got) < len(EVENTS)
    assert got == [e["name"] for e in EVENTS[: len(got)]]
    assert stream.damage is not None


def test_numeric_string_tids_are_the_same_thread_as_their_numbers(tmp_path: Path) -> None:
    """Some Kineto versions write tid as "25738" on slices and 25738 on flow events."""
    base = 1_790_000_000_000_000
    events = [
        {"ph": "X", "name": "launch", "pid": "77", "tid": "25738", "ts": base, "dur": 10},
        {"ph": "s", "name": "ac2g", "cat": "ac2g", "id": 5, "pid": 77, "tid": 25738, "ts": base + 1},
        {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": base + 20, "dur": 5},
        {"ph": "f", "name": "ac2g", "cat": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": base + 20, "bp": "e"},
        {"ph": "i", "name": "mark", "pid": 77, "tid": 25738, "ts": base + 2, "s": "t"},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    report = merge([path], tmp_path / "out.pftrace")
    assert report.exit_code == 0, report.dropped
    assert report.written.flows == 1
    [proc] = report.processes
    assert proc.written.slices == 2 and proc.written.instants == 1
