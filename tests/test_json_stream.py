"""The batched JSON reader: every event exactly once whatever the batch size, the keys around the
array, gzip streams, and files that end early."""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path

import msgspec
import pytest
from readback import read_pftrace

from tracemerge.core.stats import Losses, Stat
from tracemerge.pipeline import merge
from tracemerge.sources.chrome.schema import LenientEvent, TraceEvent
from tracemerge.sources.json import stream as json_stream
from tracemerge.sources.json.stream import EventStream


class Ev(msgspec.Struct):
    ph: str = ""
    name: str = ""


EVENTS = [
    # Names holding what a batch boundary looks like, and the array's end.
    {"ph": "X", "name": "a},{b" if n % 7 == 0 else ("c}]d" if n % 11 == 0 else f"n{n}"), "args": {"l": [{"x": n}]}}
    for n in range(3000)
]


def names(path: Path, struct: type = Ev, lenient: type | None = None) -> tuple[list[str], EventStream]:
    stream = EventStream(path, struct, lenient)
    return [e.name for batch in stream.batches() for e in batch], stream


def where(text: str, offset: int) -> str:
    """line:col of ``text[offset]``."""
    return f"{text.count(chr(10), 0, offset) + 1}:{offset - text.rfind(chr(10), 0, offset)}"


def statistics(report) -> dict[str, tuple[str, int]]:
    return {name: (s["severity"], s["count"]) for name, s in report.stats.tally().items()}


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


def test_events_before_damage_inside_a_batch_are_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    text = json.dumps({"traceEvents": EVENTS}, indent=1)
    bad = text.index('"n100"')
    path = tmp_path / "damaged.json"
    path.write_text(text[:bad] + "@" + text[bad + 1 :])
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:100]]
    assert stream.damage is not None and stream.damage.reason == "invalid JSON (invalid character)"
    assert stream.damage.where == where(text, bad)


def serialized_config_events(objects: int) -> list[dict]:
    """Events around one whose arg is serialized JSON: a string holding ``objects`` times what
    an event boundary looks like (``}, {``)."""
    config = json.dumps([{"k": n} for n in range(objects)])
    events: list[dict] = [{"ph": "X", "name": f"n{n}"} for n in range(400)]
    events.insert(200, {"ph": "i", "name": "config", "args": {"config": config}})
    return events


@pytest.mark.parametrize("block", [1000, 1 << 16])
def test_boundaries_inside_strings_cost_one_more_decode_each_batch_not_one_each(
    tmp_path: Path, monkeypatch, block: int
) -> None:
    """A string holding thousands of ``}, {`` (longer than a block, too) is stepped over at once:
    the decodes grow with the batches, not with the boundaries the string holds."""
    monkeypatch.setattr(json_stream, "BLOCK", block)
    events = serialized_config_events(20_000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"traceEvents": events}))
    decodes = 0
    decode = EventStream._decode

    def counted(self: EventStream, doc: bytes) -> list:
        nonlocal decodes
        decodes += 1
        if decodes > 2000:  # stepping back over each ``}, {`` would take 20,000 and more
            raise AssertionError("decoded once per boundary inside a string")
        return decode(self, doc)

    monkeypatch.setattr(EventStream, "_decode", counted)
    got, stream = names(path)
    assert got == [e["name"] for e in events]
    assert stream.damage is None
    batches = path.stat().st_size // block + 1
    assert decodes <= 3 * batches


def test_an_event_of_many_blocks_is_read_on_in_doublings(tmp_path: Path, monkeypatch) -> None:
    """One event of 300 blocks (a long arg holding ``}, {``): the buffer doubles until it holds
    the event, so that it is looked through about log2(300) times, not 300."""
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    config = json.dumps([{"k": n} for n in range(30_000)])
    events = [{"ph": "X", "name": "a"}, {"ph": "i", "name": "config", "args": {"config": config}}, {"name": "b"}]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert path.stat().st_size > 300 * 1000
    decodes = 0
    decode = EventStream._decode

    def counted(self: EventStream, doc: bytes) -> list:
        nonlocal decodes
        decodes += 1
        return decode(self, doc)

    monkeypatch.setattr(EventStream, "_decode", counted)
    got, stream = names(path)
    assert got == ["a", "config", "b"] and stream.damage is None
    assert decodes <= 2 * 10  # each doubling: its failed cut and the jump past it


def test_a_failed_decode_leaves_no_cycle_for_the_paused_collector(tmp_path: Path, monkeypatch) -> None:
    """The read runs with the cyclic collector off: a decode error must not stay alive (with the
    batch's text) in a cycle through the frame that raised it again."""
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"traceEvents": serialized_config_events(3_000)}))
    gc.collect()
    gc.disable()
    try:
        got, _ = names(path)
        alive = [o for o in gc.get_objects() if isinstance(o, msgspec.DecodeError)]
    finally:
        gc.enable()
    assert len(got) == 401
    assert alive == []


KINETO_TAIL = '"traceName": "/tmp/t.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000'


def kineto_text(tail: str = KINETO_TAIL) -> str:
    """Kineto's layout: one event per line, the keys after the array."""
    events = [{**e, "pid": 1, "tid": 1, "ts": 100 + n, "dur": 1} for n, e in enumerate(EVENTS[:50])]
    lines = ",\n".join(json.dumps(e) for e in events)
    return f'{{"schemaVersion": 1, "traceEvents": [\n{lines}\n], {tail}}}\n'


@pytest.mark.parametrize("junk", ["\0" * 4096, "garbage here\n"], ids=["nul", "garbage"])
@pytest.mark.parametrize("block", [700, 1 << 22])
def test_bytes_after_the_json_lose_nothing_and_are_noted_where_they_start(
    tmp_path: Path, monkeypatch, junk: str, block: int
) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", block)
    text = kineto_text()
    path = tmp_path / "padded.json"
    path.write_text(text + junk)
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:50]]
    assert stream.damage is None
    assert stream.meta["baseTimeNanoseconds"] == 1700000000000000000
    what = "NUL padding" if junk[0] == "\0" else "12 bytes"
    place = where(text + junk, len(text))
    note = f"{path}:{place}: trailing data after the end of the JSON ({what}), ignored"
    assert stream.notes == Losses.one(Stat.FILE_TRAILING_DATA, note)


def test_trailing_nul_padding_is_an_info_statistic_and_the_trace_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(kineto_text() + "\0" * 100)
    report = merge([path], tmp_path / "out.pftrace")
    assert report.exit_code == 0
    assert statistics(report) == {"file_trailing_data": ("info", 1)}
    assert report.written.slices == 50
    assert report.time_base_unix_ns is not None  # baseTimeNanoseconds was read


def test_a_second_document_after_the_json_is_data_loss(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(kineto_text().encode()) * 2)  # two gzip members, two traces
    report = merge([path], tmp_path / "out.pftrace")
    assert report.exit_code == 3
    assert statistics(report) == {"file_trailing_events": ("data_loss", 1)}
    assert report.written.slices == 50


def trailing_longer_than_a_block(text: str, block: int, second_document: bool) -> str:
    """At least two blocks of bytes for after ``text``, holding what an event boundary looks like."""
    unit = text if second_document else "x},{y\n"
    return unit * (2 * block // len(unit) + 1)


@pytest.mark.parametrize("second_document", [False, True], ids=["junk", "document"])
@pytest.mark.parametrize("block", [700, 1 << 22])
def test_trailing_bytes_longer_than_a_block_lose_nothing_and_are_noted_where_they_start(
    tmp_path: Path, monkeypatch, block: int, second_document: bool
) -> None:
    """The batches are cut at the last event boundary of a block: here one lies after the array."""
    monkeypatch.setattr(json_stream, "BLOCK", block)
    text = kineto_text()
    junk = trailing_longer_than_a_block(text, block, second_document)
    path = tmp_path / "long_tail.json"
    path.write_text(text + junk)
    got, stream = names(path, TraceEvent, LenientEvent)
    assert got == [e["name"] for e in EVENTS[:50]]
    assert stream.damage is None
    assert stream.meta == {
        "schemaVersion": 1,
        "traceName": "/tmp/t.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
    }
    place = f"{path}:{where(text + junk, len(text))}"
    size = len(junk.rstrip())
    note = (
        f"{place}: events after the end of the JSON ({size} bytes), not read"
        if second_document
        else f"{place}: trailing data after the end of the JSON ({size} bytes), ignored"
    )
    stat = Stat.FILE_TRAILING_EVENTS if second_document else Stat.FILE_TRAILING_DATA
    assert stream.notes == Losses.one(stat, note)


def test_keys_after_the_array_holding_event_boundaries_are_read_and_the_bytes_after_them_placed(
    tmp_path: Path, monkeypatch
) -> None:
    """A samples list after the array looks like events to the batch cutter. Here the object ends
    on the last byte of a block, and the garbage after it starts two blocks of white space later."""
    block = 700
    monkeypatch.setattr(json_stream, "BLOCK", block)
    tail = '"samples": [{"sf": 1, "ts": 100}, {"sf": 2, "ts": 101}], "baseTimeNanoseconds": 1700000000000000000'
    unpadded = kineto_text(tail)
    padding = " " * (-(len(unpadded) - 1) % block)  # after the last event: the array closes in the object's last block
    text = unpadded.replace("\n], ", f"\n{padding}], ")
    assert len(text.rstrip()) % block == 0
    body = text + "\n" * (2 * block) + "garbage\n"
    path = tmp_path / "samples.json"
    path.write_text(body)
    got, stream = names(path, TraceEvent, LenientEvent)
    assert got == [e["name"] for e in EVENTS[:50]]
    assert stream.damage is None
    assert stream.meta == {
        "schemaVersion": 1,
        "samples": [{"sf": 1, "ts": 100}, {"sf": 2, "ts": 101}],
        "baseTimeNanoseconds": 1700000000000000000,
    }
    place = where(body, body.index("garbage"))
    note = f"{path}:{place}: trailing data after the end of the JSON (7 bytes), ignored"
    assert stream.notes == Losses.one(Stat.FILE_TRAILING_DATA, note)


@pytest.mark.parametrize("second_document", [False, True], ids=["junk", "document"])
def test_trailing_bytes_longer_than_a_block_are_the_statistic_short_ones_are(
    tmp_path: Path, second_document: bool
) -> None:
    text = kineto_text()
    path = tmp_path / "rank0.json"
    path.write_text(text + trailing_longer_than_a_block(text, json_stream.BLOCK, second_document))
    report = merge([path], tmp_path / "out.pftrace")
    expected = {"file_trailing_events": ("data_loss", 1)} if second_document else {"file_trailing_data": ("info", 1)}
    assert (report.exit_code, statistics(report)) == (3 if second_document else 0, expected)
    slices = sorted(s.ts for s in read_pftrace(tmp_path / "out.pftrace").slices)
    assert slices == [1700000000000100000 + 1000 * n for n in range(50)]  # baseTimeNanoseconds applied


def test_a_cut_in_the_keys_after_the_array_keeps_every_event_and_the_keys_before_it(tmp_path: Path) -> None:
    text = kineto_text()
    cut = text.index('"displayTimeUnit"') + 8
    path = tmp_path / "rank0.json"
    path.write_text(text[:cut])
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:50]]
    assert stream.damage is None
    assert stream.meta == {"schemaVersion": 1, "traceName": "/tmp/t.json"}
    lost = "the keys from there on are lost (every event is kept)"
    place = where(text, cut)
    note = f"{path}:{place}: invalid JSON (unexpected end of data) after the event array: {lost}"
    assert stream.notes == Losses.one(Stat.FILE_TAIL_DAMAGED, note)
    report = merge([path], tmp_path / "out.pftrace")
    assert (report.exit_code, report.written.slices) == (3, 50)
    assert statistics(report) == {"file_tail_damaged": ("data_loss", 1)}


def test_a_number_cut_in_the_keys_after_the_array_is_not_taken(tmp_path: Path) -> None:
    text = kineto_text()
    path = tmp_path / "rank0.json"
    path.write_text(text[: text.index("00000000000000}")])  # baseTimeNanoseconds cut to 17000
    got, stream = names(path)
    assert len(got) == 50
    assert "baseTimeNanoseconds" not in stream.meta and stream.meta["displayTimeUnit"] == "ms"


@pytest.mark.parametrize("ending", [",\n", ""])
def test_a_cut_object_form_keeps_its_last_event_and_is_damage(tmp_path: Path, ending: str) -> None:
    """Kineto's object cut right after an event: the keys after the array are lost."""
    events = ",\n".join(json.dumps(e) for e in EVENTS[:20])
    text = '{"traceEvents": [\n' + events + ending
    path = tmp_path / "cut.json"
    path.write_text(text)
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:20]]
    assert stream.damage is not None and stream.damage.reason == "invalid JSON (unexpected end of data)"
    assert stream.damage.where == where(text + " ", len(text))


@pytest.mark.parametrize("ending", ["", ",", ",\n", ",]", " , ]\n"])
def test_a_bare_array_may_end_without_its_bracket_or_with_a_comma(tmp_path: Path, ending: str) -> None:
    """The trace-event format lets a bare array end without ``]``: a writer killed between events."""
    text = "[" + ",".join(json.dumps(e) for e in EVENTS[:20]) + ending
    path = tmp_path / "bare.json"
    path.write_text(text)
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:20]]
    assert (stream.damage, stream.notes.by_message()) == (None, {})


def test_a_bare_array_cut_inside_an_event_is_damage(tmp_path: Path) -> None:
    text = "[" + ",".join(json.dumps(e) for e in EVENTS[:20])
    path = tmp_path / "bare.json"
    path.write_text(text[:-5])
    got, stream = names(path)
    assert got == [e["name"] for e in EVENTS[:19]]
    assert stream.damage is not None and stream.damage.reason == "invalid JSON (unexpected end of data)"


@pytest.mark.parametrize("block", [64, 1 << 22])
def test_elements_that_are_not_objects_are_counted_and_the_events_kept(tmp_path: Path, monkeypatch, block) -> None:
    monkeypatch.setattr(json_stream, "BLOCK", block)
    items: list = [{"ph": "X", "name": f"a{n}", "pid": 1, "tid": 1, "ts": 100 + n, "dur": 0.5} for n in range(10)]
    items[5:5] = [None, 7, "x", [{"ph": "X"}], None]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": items, "baseTimeNanoseconds": 1700000000000000000}, indent=1))
    got, stream = names(path, TraceEvent, LenientEvent)
    assert got == [f"a{n}" for n in range(10)]
    assert stream.damage is None
    kinds = {"null": 2, "number": 1, "string": 1, "array": 1}
    notes = {f"event array element that is not an object ({k})": n for k, n in kinds.items()}
    assert stream.notes.by_message() == notes and stream.notes.counts == {Stat.EVENT_NOT_OBJECT: 5}
    assert stream.meta == {"baseTimeNanoseconds": 1700000000000000000}


def test_a_null_element_loses_only_itself(tmp_path: Path) -> None:
    items: list = [{"ph": "X", "name": f"a{n}", "pid": 1, "tid": 1, "ts": 100 + n, "dur": 0.5} for n in range(10)]
    items.insert(5, None)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": items, "baseTimeNanoseconds": 1700000000000000000}))
    report = merge([path], tmp_path / "out.pftrace")
    assert report.written.slices == 10
    assert statistics(report) == {"event_not_object": ("data_loss", 1)}


ABSOLUTE = (
    '{"ph":"X","name":"a","pid":1,"tid":1,"ts":1712345678901234.567,"dur":1.234,"args":{"v":NaN}},'
    '{"ph":"X","name":"b\xff","pid":1,"tid":1,"ts":1712345678901236.001,"dur":0.5}'
)


@pytest.mark.parametrize("shape", ["kineto", "bare"])
def test_absolute_float_times_are_exact_beside_nan_and_a_bad_byte(tmp_path: Path, shape: str) -> None:
    """Times too large for a float's ns are read from their text, also where Python's json reads the batch."""
    path = tmp_path / "rank0.json"
    body = f'{{"traceEvents":[{ABSOLUTE}]}}' if shape == "kineto" else f"[{ABSOLUTE}]"
    path.write_bytes(body.encode("latin-1"))
    report = merge([path], tmp_path / "out.pftrace")
    assert (report.exit_code, report.dropped) == (0, {})
    slices = sorted((s.name, s.ts, s.dur, s.args) for s in read_pftrace(tmp_path / "out.pftrace").slices)
    assert slices == [
        ("a", 1712345678901234567, 1234, {"args": {"v": "null"}}),
        ("b\ufffd", 1712345678901236001, 500, {}),
    ]


def test_lone_surrogate_escapes_become_replacement_characters(tmp_path: Path) -> None:
    """Python's json.dumps writes a lone surrogate as an escape; msgspec does not read one."""
    events = [
        {"ph": "X", "name": "a\udcff", "pid": 1, "tid": 1, "ts": 100.5, "dur": 1.0, "args": {"k": "x\ud800y"}},
        {"ph": "X", "name": "ok \U0001f600", "pid": 1, "tid": 1, "ts": 110.5, "dur": 1.0, "args": {"k": "\\ud800"}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1700000000000000000}))
    report = merge([path], tmp_path / "out.pftrace")
    assert (report.exit_code, report.dropped) == (0, {})
    slices = sorted((s.name, s.args["args"]["k"]) for s in read_pftrace(tmp_path / "out.pftrace").slices)
    assert slices == [("a\ufffd", "x\ufffdy"), ("ok \U0001f600", "\\ud800")]


def test_a_quoted_base_time_anchors_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    event = {"ph": "X", "name": "op", "pid": 10, "tid": 11, "ts": 100.0, "dur": 10.0}
    path.write_text(json.dumps({"traceEvents": [event], "baseTimeNanoseconds": "1700000000000000000"}))
    report = merge([path], tmp_path / "out.pftrace")
    [s] = read_pftrace(tmp_path / "out.pftrace").slices
    assert (report.exit_code, s.ts) == (0, 1700000000000100000)


def test_every_counter_value_is_drawn_or_counted(tmp_path: Path) -> None:
    events = [
        {"ph": "C", "name": "mem", "pid": 1, "ts": 100, "args": {"alloc": 5, "free": "7", "cached": None, "on": True}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 101, "args": {"alloc": 6, "free": "7.5", "cached": "high"}},
        {"ph": "C", "name": "empty", "pid": 1, "ts": 102, "args": {}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1700000000000000000}))
    report = merge([path], tmp_path / "out.pftrace")
    assert report.dropped == {
        "C event value that is not a number (null)": 1,
        "C event value that is not a number (boolean)": 1,
        "C event value that is not a number (text)": 1,
        "C event without a numeric value": 1,
    }
    assert statistics(report) == {
        "counter_value_not_number": ("data_loss", 3),
        "counter_without_value": ("data_loss", 1),
    }
    rb = read_pftrace(tmp_path / "out.pftrace")
    drawn = {rb.counter_tracks[track][1]: values for track, values in rb.counters.items()}
    t0 = 1700000000000100000
    assert drawn == {"mem alloc": [(t0, 5), (t0 + 1000, 6)], "mem free": [(t0, 7), (t0 + 1000, 7.5)]}
