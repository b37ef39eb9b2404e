"""The trimmed schema in proto/ must match Perfetto's official one field for field."""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from tracemerge.writers import perfetto_trace_pb2 as trimmed


def _fields(desc):
    return {
        f.name: (f.number, f.type, f.is_repeated, f.message_type.name if f.message_type else None) for f in desc.fields
    }


def test_every_trimmed_message_matches_official() -> None:
    checked = 0
    for desc in trimmed.DESCRIPTOR.message_types_by_name.values():
        ours = [desc, *desc.nested_types]
        for d in ours:
            full = d.full_name.replace("tracemerge.pftrace.", "perfetto.protos.")
            theirs = official.DESCRIPTOR.pool.FindMessageTypeByName(full)
            official_fields = _fields(theirs)
            for field_name, spec in _fields(d).items():
                assert field_name in official_fields, f"{full}.{field_name} is not in Perfetto's schema"
                assert spec == official_fields[field_name], (
                    f"{full}.{field_name}: {spec} != {official_fields[field_name]}"
                )
                checked += 1
            for oneof in d.oneofs:
                theirs_oneof = theirs.oneofs_by_name[oneof.name]
                assert {f.name for f in oneof.fields} <= {f.name for f in theirs_oneof.fields}
    total = sum(len(d.fields) for m in trimmed.DESCRIPTOR.message_types_by_name.values() for d in (m, *m.nested_types))
    assert checked == total == 81


def test_enum_values_match_official() -> None:
    pairs = [
        (trimmed.TrackEvent.Type, official.TrackEvent.Type),
        (trimmed.TracePacket.SequenceFlags, official.TracePacket.SequenceFlags),
        (trimmed.BuiltinClock, official.BuiltinClock),
        (trimmed.CounterDescriptor.Unit, official.CounterDescriptor.Unit),
        (trimmed.TrackDescriptor.ChildTracksOrdering, official.TrackDescriptor.ChildTracksOrdering),
        (trimmed.TrackDescriptor.SiblingMergeBehavior, official.TrackDescriptor.SiblingMergeBehavior),
    ]
    for ours, theirs in pairs:
        for name, number in ours.items():
            assert theirs.Value(name) == number, name


def test_bytes_we_write_parse_identically_with_the_official_schema() -> None:
    pkt = trimmed.TracePacket(timestamp=5, trusted_packet_sequence_id=3, sequence_flags=3)
    pkt.track_event.type = trimmed.TrackEvent.TYPE_SLICE_BEGIN
    pkt.track_event.track_uuid = 99
    pkt.track_event.flow_ids.append(2**63 + 5)
    pkt.track_event.debug_annotations.add(name_iid=1, legacy_json_value="[1]")
    pkt.interned_data.event_names.add(iid=1, name="x")
    theirs = official.TracePacket()
    theirs.ParseFromString(pkt.SerializeToString())
    assert theirs.track_event.flow_ids == [2**63 + 5]
    assert theirs.track_event.track_uuid == 99
    assert theirs.interned_data.event_names[0].name == "x"
    assert theirs.track_event.debug_annotations[0].legacy_json_value == "[1]"
    assert theirs.SerializeToString() == pkt.SerializeToString()
