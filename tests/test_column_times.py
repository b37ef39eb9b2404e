"""Integer µs of any size a trace holds go through the columns exactly; only odd rows go one by one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from expected import chrome_events
from hypothesis import given, settings
from hypothesis import strategies as st
from readback import read_pftrace

from tracemerge.core.units import us_to_ns
from tracemerge.pipeline import merge
from tracemerge.sources.chrome import events as chrome_reader
from tracemerge.sources.chrome.column_times import INEXACT, text_micros_to_ns
from tracemerge.sources.spans import jsonl

EPOCH_US = 1_790_000_000_000_000  # integer µs since the epoch, as older Kineto writes them


def _epoch_trace(path: Path, odd: list[dict]) -> list[dict]:
    """300 complete events on two threads with integer epoch-µs times, then ``odd`` rows."""
    events = [
        {
            "ph": "X",
            "name": f"op{n % 7}",
            "cat": "cpu_op",
            "pid": 7,
            "tid": 1 + n % 2,
            "ts": EPOCH_US + 10 * n,
            "dur": 9,
        }
        for n in range(300)
    ]
    events[150:150] = odd
    path.write_text(json.dumps({"traceEvents": events}))
    return events


def _per_event_rows(monkeypatch) -> list[int]:
    """Counts the events each call of the per-event path takes."""
    taken: list[int] = []
    add_each = chrome_reader.ChromeEvents.add_each

    def counting(self, batch, *args, **kwargs):
        taken.append(len(batch))
        return add_each(self, batch, *args, **kwargs)

    monkeypatch.setattr(chrome_reader.ChromeEvents, "add_each", counting)
    return taken


def test_integer_epoch_micros_are_read_as_columns_to_the_nanosecond(tmp_path: Path, monkeypatch) -> None:
    events = _epoch_trace(tmp_path / "rank0.json", [])
    taken = _per_event_rows(monkeypatch)
    merge([tmp_path / "rank0.json"], tmp_path / "out.pftrace", jobs=1)
    assert taken == [], "every row taken by the columns"
    back = read_pftrace(tmp_path / "out.pftrace")
    want = chrome_events(events)
    got = sorted((s.name, s.ts, s.dur) for s in back.slices if s.cat == "cpu_op")
    assert got == sorted(want.slices.elements())
    assert got[0] == ("op0", EPOCH_US * 1000, 9000)


def test_odd_times_go_one_by_one_in_their_place(tmp_path: Path, monkeypatch) -> None:
    """Beside integer times, a duration of four decimals and a time beyond what a trace holds
    go to the per-event path one at a time, number text that a float holds exactly goes with the
    columns; the trace holds what the per-event path gives for all (only the name of the event
    that is lost may stay in the interning table: the columns intern a batch's names first)."""
    odd = [
        {"ph": "X", "name": "decimals", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": EPOCH_US + 1500, "dur": 2.0005},
        {"ph": "X", "name": "beyond", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": 10**16, "dur": 1},
        {"ph": "X", "name": "text", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": EPOCH_US + 1501, "dur": "3.25"},
    ]
    _epoch_trace(tmp_path / "rank0.json", odd)
    taken = _per_event_rows(monkeypatch)
    columns = merge([tmp_path / "rank0.json"], tmp_path / "columns.pftrace", jobs=1)
    assert taken == [1, 1]
    monkeypatch.setattr(chrome_reader, "_COLUMNS_FROM", 1 << 40)
    each = merge([tmp_path / "rank0.json"], tmp_path / "each.pftrace", jobs=1)
    by_columns, one_by_one = read_pftrace(tmp_path / "columns.pftrace"), read_pftrace(tmp_path / "each.pftrace")
    assert by_columns.threads == one_by_one.threads
    assert [(s.track, s.name, s.ts, s.dur, s.depth) for s in by_columns.slices] == [
        (s.track, s.name, s.ts, s.dur, s.depth) for s in one_by_one.slices
    ]
    assert columns.dropped == each.dropped
    assert sum(columns.dropped.values()) == 1  # the time beyond 64 bits, with its reason
    back = {s.name: (s.ts, s.dur) for s in by_columns.slices}
    assert back["decimals"] == ((EPOCH_US + 1500) * 1000, 2001)  # 2.0005 µs, half up
    assert back["text"] == ((EPOCH_US + 1501) * 1000, 3250)
    assert "beyond" not in back


def test_decimal_text_times_are_read_as_columns_to_the_nanosecond(tmp_path: Path, monkeypatch) -> None:
    """Ascend's text times ("1736400000123.456", durations of more decimals) go through the
    columns, rounded half away from zero at the nanosecond as the per-event path rounds them."""
    events = [
        {"ph": "X", "name": "MatMul", "cat": "", "pid": 2, "tid": 1, "ts": f"{EPOCH_US + 5 * n}.{n % 1000:03d}"}
        | {"dur": ["1.5", "0.0005", "2.12345", "40.020"][n % 4]}
        for n in range(400)
    ]
    (tmp_path / "trace_view.json").write_text(json.dumps(events))
    taken = _per_event_rows(monkeypatch)
    merge([tmp_path / "trace_view.json"], tmp_path / "out.pftrace", jobs=1)
    assert taken == []
    got = sorted((s.ts, s.dur) for s in read_pftrace(tmp_path / "out.pftrace").slices if s.name == "MatMul")
    want = sorted(((EPOCH_US + 5 * n) * 1000 + n % 1000, [1500, 1, 2123, 40020][n % 4]) for n in range(400))
    assert got == want


TEXT_CHARS = "0123456789.-+e _\x00"


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.text(TEXT_CHARS, max_size=24) | st.decimals(allow_nan=False).map(str), min_size=1, max_size=40))
def test_text_the_columns_take_is_what_the_exact_parse_gives(texts: list[str]) -> None:
    found = text_micros_to_ns(texts, len(texts))
    for text, ns in zip(texts, found.tolist(), strict=True):
        if ns == INEXACT:
            continue  # left to the per-event path
        assert ns == us_to_ns(text), text


def _areal_lines(n: int) -> list[dict]:
    """AReaL perf-tracer lines: integer µs from perf_counter, role and rank in args, sessions."""
    lines = [{"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "[actor] Rank 1, Process"}}]
    for k in range(n):
        args = {"rank": 1, "role": "actor", "step": k} | ({"session_id": f"s{k}"} if k % 50 == 0 else {})
        lines.append(
            {"name": ["rollout", "compute_logp"][k % 2], "ph": "X", "ts": 1000 + 10 * k, "dur": 7}
            | {"pid": 9, "tid": 1, "args": args}
        )
    return lines


def test_areal_lines_are_read_as_columns(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "perf_tracer" / "actor" / "traces-r1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in _areal_lines(5000)))
    taken = _per_event_rows(monkeypatch)
    merge([tmp_path], tmp_path / "blocks.pftrace", jobs=1)
    assert all(n == 1 for n in taken) and len(taken) <= 2, "only the metadata lines go one by one"
    monkeypatch.setattr(jsonl, "_add_block", lambda *args: False)
    merge([tmp_path], tmp_path / "lines.pftrace", jobs=1)
    assert (tmp_path / "blocks.pftrace").read_bytes() == (tmp_path / "lines.pftrace").read_bytes()
    got = sorted(
        (s.name, s.ts, s.dur) for s in read_pftrace(tmp_path / "blocks.pftrace").slices if s.cat != "tracemerge"
    )
    assert len([g for g in got if g[0] in ("rollout", "compute_logp")]) == 5000


def test_a_block_with_other_lines_is_read_line_by_line_as_before(tmp_path: Path, monkeypatch) -> None:
    """Spans, a line that is not JSON, a NaN time, a float too large to be exact, args that are
    not an object: their block goes line by line; every block's events end up as one path gives."""
    lines = [json.dumps(line) for line in _areal_lines(9000)]
    lines[4100] = '{"name": "span", "start": 1.5, "end": 2.5, "role": "actor", "rank": 1}'
    lines[4200] = "not json"
    lines[4300] = re.sub(r'"ts": \d+', '"ts": NaN', lines[4300])
    lines[8500] = re.sub(r'"ts": \d+', '"ts": 1790000000001500.5', lines[8500])
    lines[8600] = lines[8600].replace('"args": {', '"args": [{').replace("}}", "}]}")
    path = tmp_path / "traces-r1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    blocks = merge([path], tmp_path / "blocks.pftrace", jobs=1)
    monkeypatch.setattr(jsonl, "_add_block", lambda *args: False)
    each = merge([path], tmp_path / "lines.pftrace", jobs=1)
    assert (tmp_path / "blocks.pftrace").read_bytes() == (tmp_path / "lines.pftrace").read_bytes()
    assert blocks.dropped == each.dropped
    assert sum(blocks.dropped.values()) == 2  # the line that is not JSON, the NaN time
