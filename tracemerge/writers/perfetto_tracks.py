"""What a Perfetto trace holds besides the files' events: clock snapshots, track descriptors and
tracemerge's own notes, all on the descriptor sequence except each file's clock snapshot.

:func:`write_header` writes, before any event that uses them, the snapshot that ties the trace to
the wall clock, every process, thread, lane and counter track of the plan (ordered by their
``sibling_order_rank``), the phase summary and the clock notes. :func:`prologue` is the snapshot
that places one file's chunk (whose times count on its sequence's own clock) on the timeline.
"""

from __future__ import annotations

from typing import BinaryIO

from tracemerge.plan.types import CLOCK_NOTE, SUMMARY_NOTE, MergePlan, ThreadTrack, UnitPlan, stable_id
from tracemerge.report.run_report import json_bytes
from tracemerge.writers import perfetto_trace_pb2 as pb
from tracemerge.writers.perfetto import SEQUENCE_CLOCK
from tracemerge.writers.perfetto_machines import machine_name
from tracemerge.writers.perfetto_wire import INT64_MAX, INT64_MIN, packet_record, write_packet

DESCRIPTOR_SEQUENCE = 1


def prologue(unit: UnitPlan, local_min: int) -> bytes:
    """The clock snapshot that places a file's chunk on the trace's timeline (one per sequence of
    the chunk, on the sequence's machine).

    The chunk's timestamps count from the file's earliest one (``local_min``, in the file's own
    clock), whose trace time is ``local_min + unit.shift_ns``.
    """
    own, trace = _unsigned_pair(0, local_min + unit.shift_ns)
    snapshots = []
    for sequence, machine in {unit.sequence_id: 0, **dict(unit.machines)}.items():
        snap = pb.TracePacket(trusted_packet_sequence_id=sequence)
        if machine:
            snap.machine_id = machine
        snap.clock_snapshot.clocks.add(clock_id=SEQUENCE_CLOCK, timestamp=own)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=trace)
        snapshots.append(packet_record(snap.SerializeToString()))
    return b"".join(snapshots)


def _unsigned_pair(a: int, b: int) -> tuple[int, int]:
    """Two clocks' readings at one moment, ``a`` and ``b``, moved together to where neither is
    negative (the same pair of clocks: a snapshot may hold any moment)."""
    low = min(a, b, 0)
    return a - low, b - low


def write_header(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack]) -> None:
    """The clock snapshot and every track descriptor, before any event that uses them."""
    on = _machine_of_process(plan)
    _write_clock_and_root(out, plan, set(on.values()))
    _write_processes(out, plan, on)
    _write_threads(out, plan, lanes, on)
    _write_counters(out, plan, on)
    _write_notes(out, plan, on)


def _machine_of_process(plan: MergePlan) -> dict[int, int]:
    """Each process track's machine (by uuid), where the run has machines (0: the trace's own)."""
    if plan.machines is None:
        return {}
    of_process = plan.machines.of_process
    return {proc.uuid: of_process[proc.identity] for proc in plan.processes if proc.identity in of_process}


def _write_clock_and_root(out: BinaryIO, plan: MergePlan, machines: set[int]) -> None:
    """The wall-clock snapshot (when the trace has a wall clock) and the root descriptor; each
    machine of ``machines`` its own root and its name."""
    seq = DESCRIPTOR_SEQUENCE
    if plan.wall_clock:
        # A time base before 1970 (an epoch clock that wrote a negative time) is placed by the
        # trace time at which the wall clock reads 0: a snapshot's times are unsigned.
        trace, wall = _unsigned_pair(0, plan.base_ns)
        snap = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=trace)
        snap.clock_snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=wall)
        write_packet(out, snap)
    # The root descriptor (uuid 0) asks v57+ UIs to order processes and threads by their
    # sibling_order_rank (role, then rank) instead of by slice count; older ones ignore it.
    root = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=seq)
    root.track_descriptor.uuid = 0
    root.track_descriptor.process_ordering = pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT
    root.track_descriptor.thread_ordering = pb.TrackDescriptor.THREAD_ORDERING_EXPLICIT
    write_packet(out, root)
    if plan.machines is not None:  # each machine's own root, and its name (a split's part: its own)
        for machine, host in plan.machines.names.items():
            if machine not in machines:
                continue
            root.machine_id = machine
            write_packet(out, root)
            out.write(machine_name(machine, host, seq))


def _write_processes(out: BinaryIO, plan: MergePlan, on: dict[int, int]) -> None:
    """A descriptor per process, or per group (a top-level track of its own)."""
    for proc in plan.processes:
        pkt = _descriptor(proc.uuid, machine=on.get(proc.uuid, 0))
        if proc.is_group:  # a top-level track of its own (the UI lists these above the processes)
            pkt.track_descriptor.name = proc.name
        else:
            pkt.track_descriptor.process.pid = proc.pid
            pkt.track_descriptor.process.process_name = proc.name
            pkt.track_descriptor.process.process_labels.extend(proc.labels)
        pkt.track_descriptor.sibling_order_rank = proc.order
        pkt.track_descriptor.child_ordering = pb.TrackDescriptor.EXPLICIT
        write_packet(out, pkt)


def _write_threads(out: BinaryIO, plan: MergePlan, lanes: list[ThreadTrack], on: dict[int, int]) -> None:
    """A descriptor per thread track, then per overlap lane (placed by whether its track is a thread)."""
    as_thread = {thread.uuid for thread in plan.threads if thread.as_thread}
    for thread in plan.threads:
        if thread.uuid == thread.process_uuid:
            continue  # a group's row on the group's own track (GROUP_HEADER): described with the group
        pkt = _descriptor(thread.uuid, thread.process_uuid, on.get(thread.process_uuid, 0))
        td = pkt.track_descriptor
        td.sibling_order_rank = thread.order  # the thread's place in its process (v57+)
        if thread.as_thread:
            # A thread of its process: what the UI draws a collapsed process and the overview bar
            # with, listed main thread (tid == pid) first, titled "<name> <tid>" (thread_ids.py).
            td.thread.pid, td.thread.tid, td.thread.thread_name = thread.pid, thread.tid, thread.name
        else:
            # A track of its process, titled by its name alone. Same-named siblings (two files'
            # copies of a thread) stay apart.
            td.name = thread.name
            td.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
        write_packet(out, pkt)
    for lane in lanes:
        # Beside a thread, a lane is a track of the thread's process (a track under a thread would
        # be listed above or below the thread's own, by the lane's name); beside another track it
        # is that track's child.
        parent = lane.process_uuid if lane.parent_uuid in as_thread else lane.parent_uuid
        pkt = _descriptor(lane.uuid, parent, on.get(lane.process_uuid, 0))
        pkt.track_descriptor.name = lane.name
        pkt.track_descriptor.sibling_order_rank = lane.lane
        pkt.track_descriptor.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
        write_packet(out, pkt)


def _write_counters(out: BinaryIO, plan: MergePlan, on: dict[int, int]) -> None:
    """A counter track descriptor per counter, after every slice track of its process."""
    for counter in plan.counters:
        pkt = _descriptor(counter.uuid, counter.process_uuid, on.get(counter.process_uuid, 0))
        pkt.track_descriptor.name = counter.name
        if counter.description:  # the full name of a short title (the UI's help popup, v53+)
            pkt.track_descriptor.description = counter.description
        pkt.track_descriptor.sibling_order_rank = 1 << 29  # after every slice track (v57+; v52 sorts by name)
        pkt.track_descriptor.counter.SetInParent()
        write_packet(out, pkt)


def _write_notes(out: BinaryIO, plan: MergePlan, on: dict[int, int]) -> None:
    """The phase summary on the first group's track, and the clock notes, each process's on a track
    of its own."""
    group = next((proc for proc in plan.processes if proc.is_group), None)
    if plan.phase_summary and group is not None:
        write_packet(out, _note(0, group.uuid, SUMMARY_NOTE, {"summary": plan.phase_summary}))
    clock_tracks: dict[int, int] = {}
    for note in plan.clock_notes:
        # On a track of its own, titled by its name (the process's own track shows its pid).
        track = clock_tracks.get(note.process_uuid)
        machine = on.get(note.process_uuid, 0)
        if track is None:
            track = clock_tracks[note.process_uuid] = stable_id("clock", note.process_uuid)
            pkt = _descriptor(track, note.process_uuid, machine)
            pkt.track_descriptor.name = CLOCK_NOTE
            pkt.track_descriptor.sibling_order_rank = 1 << 30  # after the threads
            write_packet(out, pkt)
        write_packet(out, _note(note.ts, track, CLOCK_NOTE, note.args, machine))


def _note(ts: int, track: int, name: str, args: dict, machine: int = 0) -> pb.TracePacket:
    """An instant of tracemerge's own (category ``tracemerge``) on the descriptor sequence, its
    args as typed annotations (an object as JSON, which trace_processor flattens)."""
    pkt = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=DESCRIPTOR_SEQUENCE)
    if machine:
        pkt.machine_id = machine
    event = pkt.track_event
    event.type, event.track_uuid, event.name = pb.TrackEvent.TYPE_INSTANT, track, name
    event.categories.append("tracemerge")
    for key, value in args.items():
        annotation = event.debug_annotations.add(name=key)
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            annotation.int_value = value
        elif type(value) is dict:
            annotation.legacy_json_value = json_bytes(value, indent=False).decode()
        else:
            annotation.string_value = str(value)
    return pkt


def _descriptor(uuid: int, parent: int = 0, machine: int = 0) -> pb.TracePacket:
    """A TrackDescriptor packet on the descriptor sequence (of ``machine``, where not 0)."""
    pkt = pb.TracePacket(timestamp=0, trusted_packet_sequence_id=DESCRIPTOR_SEQUENCE)
    if machine:
        pkt.machine_id = machine
    pkt.track_descriptor.uuid = uuid
    if parent:
        pkt.track_descriptor.parent_uuid = parent
    return pkt


def write_footer(out: BinaryIO, plan: MergePlan) -> None:
    """Nothing follows the last packet in a protobuf trace."""
