"""The hand-written TrackEvent encoder, decoded with Perfetto's official schema."""

from __future__ import annotations

import io
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from tracemerge.model import Event, FlowPhase, Kind
from tracemerge.plan import CounterTrack, ThreadTrack, UnitPlan
from tracemerge.writers.perfetto import UnitEncoder

TRACK = ThreadTrack(uuid=2**63 - 5, pid=1, tid=10001, name="t", order=0, process_uuid=7)
COUNTER = CounterTrack(uuid=300, pid=1, name="c", process_uuid=7, json_name="c", json_key="v")


def encode(calls) -> list:
    out = io.BytesIO()
    plan = UnitPlan(Path("x"), "f", 77, 0, 0, {}, {}, {})
    enc = UnitEncoder(plan, out)
    for call in calls:
        call(enc)
    trace = official.Trace()
    trace.ParseFromString(out.getvalue())
    return list(trace.packet)


def test_slices_instants_and_counters_decode_exactly() -> None:
    args = {"i": -3, "big": 2**64 - 1, "f": 2.5, "b": False, "s": "ü", "n": None, "l": [1, {"k": "v"}]}
    ev = Event(Kind.SLICE, 0, (1, 1), "op", "cpu", 5, args)
    packets = encode(
        [
            lambda e: e.slice_begin(TRACK, 1_000_000_000_123, ev, [(2**64 - 1, FlowPhase.START), (9, FlowPhase.END)]),
            lambda e: e.instant(TRACK, 1_000_000_000_124, Event(Kind.INSTANT, 0, (1, 1), "op", "", 0)),
            lambda e: e.slice_end(TRACK, 1_000_000_000_128),
            lambda e: e.counter(COUNTER, 5, -7),
            lambda e: e.counter(COUNTER, 6, 0.25),
            lambda e: e.counter(COUNTER, 7, 2**70),
        ]
    )
    first, instant, end, c1, c2, c3 = packets
    assert [p.trusted_packet_sequence_id for p in packets] == [77] * 6
    assert first.sequence_flags == 3 and first.first_packet_on_sequence
    assert all(p.sequence_flags == 2 and not p.first_packet_on_sequence for p in packets[1:])
    assert first.timestamp == 1_000_000_000_123
    te = first.track_event
    assert te.type == official.TrackEvent.TYPE_SLICE_BEGIN
    assert te.track_uuid == 2**63 - 5
    names = {n.iid: n.name for n in first.interned_data.event_names}
    cats = {c.iid: c.name for c in first.interned_data.event_categories}
    arg_names = {a.iid: a.name for a in first.interned_data.debug_annotation_names}
    assert names[te.name_iid] == "op" and [cats[c] for c in te.category_iids] == ["cpu"]
    decoded = {
        arg_names[a.name_iid]: (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for a in te.debug_annotations
    }
    assert decoded == {
        "i": ("int_value", -3),
        "big": ("string_value", "18446744073709551615"),
        "f": ("double_value", 2.5),
        "b": ("bool_value", False),
        "s": ("string_value", "ü"),
        "n": ("string_value", "null"),
        "l": ("legacy_json_value", '[1,{"k":"v"}]'),
    }
    assert list(te.flow_ids) == [2**64 - 1] and list(te.terminating_flow_ids) == [9]
    # The second event reuses the interned name and has no category.
    assert not instant.HasField("interned_data")
    assert instant.track_event.name_iid == te.name_iid and not instant.track_event.category_iids
    assert instant.track_event.type == official.TrackEvent.TYPE_INSTANT
    assert end.track_event.type == official.TrackEvent.TYPE_SLICE_END and end.timestamp == 1_000_000_000_128
    assert not end.track_event.HasField("name_iid")
    assert c1.track_event.counter_value == -7 and c1.track_event.track_uuid == 300
    assert c2.track_event.double_counter_value == 0.25
    assert c3.track_event.double_counter_value == float(2**70)
