from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BuiltinClock(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUILTIN_CLOCK_UNKNOWN: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_REALTIME: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_REALTIME_COARSE: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_MONOTONIC: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_MONOTONIC_COARSE: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_MONOTONIC_RAW: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_BOOTTIME: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_TSC: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_PERF: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_TRACE_FILE: _ClassVar[BuiltinClock]
    BUILTIN_CLOCK_MAX_ID: _ClassVar[BuiltinClock]
BUILTIN_CLOCK_UNKNOWN: BuiltinClock
BUILTIN_CLOCK_REALTIME: BuiltinClock
BUILTIN_CLOCK_REALTIME_COARSE: BuiltinClock
BUILTIN_CLOCK_MONOTONIC: BuiltinClock
BUILTIN_CLOCK_MONOTONIC_COARSE: BuiltinClock
BUILTIN_CLOCK_MONOTONIC_RAW: BuiltinClock
BUILTIN_CLOCK_BOOTTIME: BuiltinClock
BUILTIN_CLOCK_TSC: BuiltinClock
BUILTIN_CLOCK_PERF: BuiltinClock
BUILTIN_CLOCK_TRACE_FILE: BuiltinClock
BUILTIN_CLOCK_MAX_ID: BuiltinClock

class Trace(_message.Message):
    __slots__ = ("packet",)
    PACKET_FIELD_NUMBER: _ClassVar[int]
    packet: _containers.RepeatedCompositeFieldContainer[TracePacket]
    def __init__(self, packet: _Optional[_Iterable[_Union[TracePacket, _Mapping]]] = ...) -> None: ...

class TracePacket(_message.Message):
    __slots__ = ("timestamp", "timestamp_clock_id", "clock_snapshot", "track_event", "track_descriptor", "trusted_packet_sequence_id", "interned_data", "sequence_flags", "incremental_state_cleared", "first_packet_on_sequence", "trace_packet_defaults", "machine_id")
    class SequenceFlags(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SEQ_UNSPECIFIED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_INCREMENTAL_STATE_CLEARED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_NEEDS_INCREMENTAL_STATE: _ClassVar[TracePacket.SequenceFlags]
    SEQ_UNSPECIFIED: TracePacket.SequenceFlags
    SEQ_INCREMENTAL_STATE_CLEARED: TracePacket.SequenceFlags
    SEQ_NEEDS_INCREMENTAL_STATE: TracePacket.SequenceFlags
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_FIELD_NUMBER: _ClassVar[int]
    TRACK_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    INTERNED_DATA_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_STATE_CLEARED_FIELD_NUMBER: _ClassVar[int]
    FIRST_PACKET_ON_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRACE_PACKET_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    timestamp_clock_id: int
    clock_snapshot: ClockSnapshot
    track_event: TrackEvent
    track_descriptor: TrackDescriptor
    trusted_packet_sequence_id: int
    interned_data: InternedData
    sequence_flags: int
    incremental_state_cleared: bool
    first_packet_on_sequence: bool
    trace_packet_defaults: TracePacketDefaults
    machine_id: int
    def __init__(self, timestamp: _Optional[int] = ..., timestamp_clock_id: _Optional[int] = ..., clock_snapshot: _Optional[_Union[ClockSnapshot, _Mapping]] = ..., track_event: _Optional[_Union[TrackEvent, _Mapping]] = ..., track_descriptor: _Optional[_Union[TrackDescriptor, _Mapping]] = ..., trusted_packet_sequence_id: _Optional[int] = ..., interned_data: _Optional[_Union[InternedData, _Mapping]] = ..., sequence_flags: _Optional[int] = ..., incremental_state_cleared: bool = ..., first_packet_on_sequence: bool = ..., trace_packet_defaults: _Optional[_Union[TracePacketDefaults, _Mapping]] = ..., machine_id: _Optional[int] = ...) -> None: ...

class TracePacketDefaults(_message.Message):
    __slots__ = ("timestamp_clock_id",)
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    timestamp_clock_id: int
    def __init__(self, timestamp_clock_id: _Optional[int] = ...) -> None: ...

class ClockSnapshot(_message.Message):
    __slots__ = ("clocks", "primary_trace_clock")
    class Clock(_message.Message):
        __slots__ = ("clock_id", "timestamp", "is_incremental", "unit_multiplier_ns")
        CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
        UNIT_MULTIPLIER_NS_FIELD_NUMBER: _ClassVar[int]
        clock_id: int
        timestamp: int
        is_incremental: bool
        unit_multiplier_ns: int
        def __init__(self, clock_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., is_incremental: bool = ..., unit_multiplier_ns: _Optional[int] = ...) -> None: ...
    CLOCKS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_TRACE_CLOCK_FIELD_NUMBER: _ClassVar[int]
    clocks: _containers.RepeatedCompositeFieldContainer[ClockSnapshot.Clock]
    primary_trace_clock: BuiltinClock
    def __init__(self, clocks: _Optional[_Iterable[_Union[ClockSnapshot.Clock, _Mapping]]] = ..., primary_trace_clock: _Optional[_Union[BuiltinClock, str]] = ...) -> None: ...

class ProcessDescriptor(_message.Message):
    __slots__ = ("pid", "cmdline", "process_name", "process_priority", "start_timestamp_ns", "legacy_sort_index", "process_labels")
    PID_FIELD_NUMBER: _ClassVar[int]
    CMDLINE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESS_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    LEGACY_SORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROCESS_LABELS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    cmdline: _containers.RepeatedScalarFieldContainer[str]
    process_name: str
    process_priority: int
    start_timestamp_ns: int
    legacy_sort_index: int
    process_labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pid: _Optional[int] = ..., cmdline: _Optional[_Iterable[str]] = ..., process_name: _Optional[str] = ..., process_priority: _Optional[int] = ..., start_timestamp_ns: _Optional[int] = ..., legacy_sort_index: _Optional[int] = ..., process_labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ThreadDescriptor(_message.Message):
    __slots__ = ("pid", "tid", "thread_name", "legacy_sort_index")
    PID_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    LEGACY_SORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tid: int
    thread_name: str
    legacy_sort_index: int
    def __init__(self, pid: _Optional[int] = ..., tid: _Optional[int] = ..., thread_name: _Optional[str] = ..., legacy_sort_index: _Optional[int] = ...) -> None: ...

class CounterDescriptor(_message.Message):
    __slots__ = ("unit", "unit_name", "unit_multiplier", "is_incremental", "y_axis_share_key")
    class Unit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNIT_UNSPECIFIED: _ClassVar[CounterDescriptor.Unit]
        UNIT_TIME_NS: _ClassVar[CounterDescriptor.Unit]
        UNIT_COUNT: _ClassVar[CounterDescriptor.Unit]
        UNIT_SIZE_BYTES: _ClassVar[CounterDescriptor.Unit]
    UNIT_UNSPECIFIED: CounterDescriptor.Unit
    UNIT_TIME_NS: CounterDescriptor.Unit
    UNIT_COUNT: CounterDescriptor.Unit
    UNIT_SIZE_BYTES: CounterDescriptor.Unit
    UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_NAME_FIELD_NUMBER: _ClassVar[int]
    UNIT_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    Y_AXIS_SHARE_KEY_FIELD_NUMBER: _ClassVar[int]
    unit: CounterDescriptor.Unit
    unit_name: str
    unit_multiplier: int
    is_incremental: bool
    y_axis_share_key: str
    def __init__(self, unit: _Optional[_Union[CounterDescriptor.Unit, str]] = ..., unit_name: _Optional[str] = ..., unit_multiplier: _Optional[int] = ..., is_incremental: bool = ..., y_axis_share_key: _Optional[str] = ...) -> None: ...

class TrackDescriptor(_message.Message):
    __slots__ = ("uuid", "parent_uuid", "name", "static_name", "description", "process", "thread", "counter", "disallow_merging_with_system_tracks", "child_ordering", "sibling_order_rank", "sibling_merge_behavior", "sibling_merge_key", "process_ordering", "thread_ordering")
    class ChildTracksOrdering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        LEXICOGRAPHIC: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        CHRONOLOGICAL: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        EXPLICIT: _ClassVar[TrackDescriptor.ChildTracksOrdering]
    UNKNOWN: TrackDescriptor.ChildTracksOrdering
    LEXICOGRAPHIC: TrackDescriptor.ChildTracksOrdering
    CHRONOLOGICAL: TrackDescriptor.ChildTracksOrdering
    EXPLICIT: TrackDescriptor.ChildTracksOrdering
    class SiblingMergeBehavior(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SIBLING_MERGE_BEHAVIOR_UNSPECIFIED: _ClassVar[TrackDescriptor.SiblingMergeBehavior]
        SIBLING_MERGE_BEHAVIOR_BY_TRACK_NAME: _ClassVar[TrackDescriptor.SiblingMergeBehavior]
        SIBLING_MERGE_BEHAVIOR_NONE: _ClassVar[TrackDescriptor.SiblingMergeBehavior]
        SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY: _ClassVar[TrackDescriptor.SiblingMergeBehavior]
    SIBLING_MERGE_BEHAVIOR_UNSPECIFIED: TrackDescriptor.SiblingMergeBehavior
    SIBLING_MERGE_BEHAVIOR_BY_TRACK_NAME: TrackDescriptor.SiblingMergeBehavior
    SIBLING_MERGE_BEHAVIOR_NONE: TrackDescriptor.SiblingMergeBehavior
    SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY: TrackDescriptor.SiblingMergeBehavior
    class ProcessOrdering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PROCESS_ORDERING_UNSPECIFIED: _ClassVar[TrackDescriptor.ProcessOrdering]
        PROCESS_ORDERING_EXPLICIT: _ClassVar[TrackDescriptor.ProcessOrdering]
    PROCESS_ORDERING_UNSPECIFIED: TrackDescriptor.ProcessOrdering
    PROCESS_ORDERING_EXPLICIT: TrackDescriptor.ProcessOrdering
    class ThreadOrdering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        THREAD_ORDERING_UNSPECIFIED: _ClassVar[TrackDescriptor.ThreadOrdering]
        THREAD_ORDERING_EXPLICIT: _ClassVar[TrackDescriptor.ThreadOrdering]
    THREAD_ORDERING_UNSPECIFIED: TrackDescriptor.ThreadOrdering
    THREAD_ORDERING_EXPLICIT: TrackDescriptor.ThreadOrdering
    UUID_FIELD_NUMBER: _ClassVar[int]
    PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATIC_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    DISALLOW_MERGING_WITH_SYSTEM_TRACKS_FIELD_NUMBER: _ClassVar[int]
    CHILD_ORDERING_FIELD_NUMBER: _ClassVar[int]
    SIBLING_ORDER_RANK_FIELD_NUMBER: _ClassVar[int]
    SIBLING_MERGE_BEHAVIOR_FIELD_NUMBER: _ClassVar[int]
    SIBLING_MERGE_KEY_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ORDERING_FIELD_NUMBER: _ClassVar[int]
    THREAD_ORDERING_FIELD_NUMBER: _ClassVar[int]
    uuid: int
    parent_uuid: int
    name: str
    static_name: str
    description: str
    process: ProcessDescriptor
    thread: ThreadDescriptor
    counter: CounterDescriptor
    disallow_merging_with_system_tracks: bool
    child_ordering: TrackDescriptor.ChildTracksOrdering
    sibling_order_rank: int
    sibling_merge_behavior: TrackDescriptor.SiblingMergeBehavior
    sibling_merge_key: str
    process_ordering: TrackDescriptor.ProcessOrdering
    thread_ordering: TrackDescriptor.ThreadOrdering
    def __init__(self, uuid: _Optional[int] = ..., parent_uuid: _Optional[int] = ..., name: _Optional[str] = ..., static_name: _Optional[str] = ..., description: _Optional[str] = ..., process: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., thread: _Optional[_Union[ThreadDescriptor, _Mapping]] = ..., counter: _Optional[_Union[CounterDescriptor, _Mapping]] = ..., disallow_merging_with_system_tracks: bool = ..., child_ordering: _Optional[_Union[TrackDescriptor.ChildTracksOrdering, str]] = ..., sibling_order_rank: _Optional[int] = ..., sibling_merge_behavior: _Optional[_Union[TrackDescriptor.SiblingMergeBehavior, str]] = ..., sibling_merge_key: _Optional[str] = ..., process_ordering: _Optional[_Union[TrackDescriptor.ProcessOrdering, str]] = ..., thread_ordering: _Optional[_Union[TrackDescriptor.ThreadOrdering, str]] = ...) -> None: ...

class DebugAnnotation(_message.Message):
    __slots__ = ("name_iid", "name", "bool_value", "uint_value", "int_value", "double_value", "string_value", "legacy_json_value", "dict_entries", "array_values")
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    LEGACY_JSON_VALUE_FIELD_NUMBER: _ClassVar[int]
    DICT_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ARRAY_VALUES_FIELD_NUMBER: _ClassVar[int]
    name_iid: int
    name: str
    bool_value: bool
    uint_value: int
    int_value: int
    double_value: float
    string_value: str
    legacy_json_value: str
    dict_entries: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    array_values: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    def __init__(self, name_iid: _Optional[int] = ..., name: _Optional[str] = ..., bool_value: bool = ..., uint_value: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., legacy_json_value: _Optional[str] = ..., dict_entries: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., array_values: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("category_iids", "categories", "name_iid", "name", "type", "track_uuid", "counter_value", "double_counter_value", "flow_ids", "terminating_flow_ids", "debug_annotations")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_BEGIN: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_END: _ClassVar[TrackEvent.Type]
        TYPE_INSTANT: _ClassVar[TrackEvent.Type]
        TYPE_COUNTER: _ClassVar[TrackEvent.Type]
    TYPE_UNSPECIFIED: TrackEvent.Type
    TYPE_SLICE_BEGIN: TrackEvent.Type
    TYPE_SLICE_END: TrackEvent.Type
    TYPE_INSTANT: TrackEvent.Type
    TYPE_COUNTER: TrackEvent.Type
    CATEGORY_IIDS_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    category_iids: _containers.RepeatedScalarFieldContainer[int]
    categories: _containers.RepeatedScalarFieldContainer[str]
    name_iid: int
    name: str
    type: TrackEvent.Type
    track_uuid: int
    counter_value: int
    double_counter_value: float
    flow_ids: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids: _containers.RepeatedScalarFieldContainer[int]
    debug_annotations: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    def __init__(self, category_iids: _Optional[_Iterable[int]] = ..., categories: _Optional[_Iterable[str]] = ..., name_iid: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[TrackEvent.Type, str]] = ..., track_uuid: _Optional[int] = ..., counter_value: _Optional[int] = ..., double_counter_value: _Optional[float] = ..., flow_ids: _Optional[_Iterable[int]] = ..., terminating_flow_ids: _Optional[_Iterable[int]] = ..., debug_annotations: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ...) -> None: ...

class EventCategory(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class EventName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class DebugAnnotationName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class InternedData(_message.Message):
    __slots__ = ("event_categories", "event_names", "debug_annotation_names")
    EVENT_CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_NAMES_FIELD_NUMBER: _ClassVar[int]
    event_categories: _containers.RepeatedCompositeFieldContainer[EventCategory]
    event_names: _containers.RepeatedCompositeFieldContainer[EventName]
    debug_annotation_names: _containers.RepeatedCompositeFieldContainer[DebugAnnotationName]
    def __init__(self, event_categories: _Optional[_Iterable[_Union[EventCategory, _Mapping]]] = ..., event_names: _Optional[_Iterable[_Union[EventName, _Mapping]]] = ..., debug_annotation_names: _Optional[_Iterable[_Union[DebugAnnotationName, _Mapping]]] = ...) -> None: ...
