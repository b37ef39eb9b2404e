"""Read a written trace back the way Perfetto's importer does, with Perfetto's own schema.

``.pftrace`` files are parsed with the official ``perfetto_trace_pb2`` shipped in the ``perfetto``
package (not with tracemerge's trimmed copy). Interning is resolved per sequence in file order,
packets that would be skipped for missing incremental state fail the read, and slices are paired
per track by a stack over the (timestamp, file position) order trace_processor sorts by. Chrome
JSON output is read with the standard library, keeping decimal timestamps exact.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from expected import Expected, exact_ns
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

TE = official.TrackEvent
PIPELINE, PHASES = "Pipeline", "Phases"  # the derived process and track
GROUP_ROW = "Steps"  # the row a group draws on its own track, shown when it is collapsed
CLOCK_NOTE = "clock alignment"  # .pftrace: the track of each process's clock notes


@dataclass
class Slice:
    track: int
    name: str
    cat: str
    ts: int  # absolute ns (Unix epoch when the trace has a wall clock)
    dur: int
    depth: int
    args: dict
    flow_ids: list[int] = field(default_factory=list)
    terminating_flow_ids: list[int] = field(default_factory=list)


@dataclass
class Readback:
    processes: dict[int, str] = field(default_factory=dict)  # pid -> name
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)  # track -> (pid, name)
    slices: list[Slice] = field(default_factory=list)
    instants: list[Slice] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    counter_tracks: dict[int, tuple[int, str]] = field(default_factory=dict)  # track -> (pid, name)
    flow_links: Counter = field(default_factory=Counter)  # pid of the flow's first slice -> links
    realtime_base: int | None = None
    root_ordering: tuple[int, int] | None = None  # the root descriptor's process/thread ordering
    process_rank: dict[int, int] = field(default_factory=dict)  # pid -> sibling_order_rank
    process_instants: dict[int, list[Slice]] = field(default_factory=lambda: defaultdict(list))  # pid -> instants
    # What tracemerge derives (the Pipeline process, each process's Phases track), kept apart from
    # the input's events: (process name, track name) -> slices and instants.
    derived: dict[tuple[str, str], list[Slice]] = field(default_factory=lambda: defaultdict(list))

    def set_derived_apart(self) -> Readback:
        clock_tracks = {track: pid for track, (pid, name) in self.threads.items() if name == CLOCK_NOTE}
        for s in self.instants:
            if s.track in clock_tracks:
                self.process_instants[clock_tracks[s.track]].append(s)
        self.instants = [s for s in self.instants if s.track not in clock_tracks]
        self.threads = {t: v for t, v in self.threads.items() if t not in clock_tracks}
        derived_tracks = {
            track: (self.processes[pid], name)
            for track, (pid, name) in self.threads.items()
            if self.processes.get(pid) == PIPELINE or name == PHASES
        }
        for s in [*self.slices, *self.instants]:
            if s.track in derived_tracks:
                self.derived[derived_tracks[s.track]].append(s)
        self.slices = [s for s in self.slices if s.track not in derived_tracks]
        self.instants = [s for s in self.instants if s.track not in derived_tracks]
        self.threads = {t: v for t, v in self.threads.items() if t not in derived_tracks}
        self.processes = {pid: name for pid, name in self.processes.items() if name != PIPELINE}
        return self

    def pid_of(self, label: str) -> int:
        matches = [pid for pid, name in self.processes.items() if name == label]
        assert len(matches) == 1, f"process {label!r}: {matches} in {sorted(self.processes.values())}"
        return matches[0]

    def counters_of(self, label: str) -> dict[str, list[tuple[int, float]]]:
        """Per counter track of one process, its samples (as floats: JSON reads back decimals)."""
        pid = self.pid_of(label)
        return {
            name: [(ts, float(value)) for ts, value in self.counters[track]]
            for track, (p, name) in self.counter_tracks.items()
            if p == pid
        }

    def expected_view(self, label: str) -> Expected:
        """This process's content in the same shape as :class:`expected.Expected`."""
        pid = self.pid_of(label)
        out = Expected()
        for s in self.slices:
            if self.threads[s.track][0] == pid:
                out.slices[(s.name, s.ts, s.dur)] += 1
        for s in self.instants:
            if self.threads[s.track][0] == pid:
                out.instants[(s.name, s.ts)] += 1
        out.counters = sum(len(v) for t, v in self.counters.items() if self.counter_tracks[t][0] == pid)
        out.flows = self.flow_links[pid]
        return out

    def thread_names(self, label: str) -> set[str]:
        pid = self.pid_of(label)
        return {name for p, name in self.threads.values() if p == pid}


def read_pftrace(path: Path) -> Readback:
    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    rb = Readback()
    names: dict[int, dict] = {}
    cats: dict[int, dict] = {}
    arg_names: dict[int, dict] = {}
    cleared: set[int] = set()
    per_track: dict[int, list] = defaultdict(list)
    parents: dict[int, int] = {}
    thread_pid: dict[int, int] = {}
    process_pid: dict[int, int] = {}
    group_pid: dict[int, int] = {}
    counter_descs: dict[int, tuple[int, str]] = {}
    lane_names: dict[int, str] = {}
    # Sequence-scoped clocks (ids 64-127): per sequence, the clock a packet's timestamp is on by
    # default, and the BOOTTIME reading of each clock at a snapshot (clock -> (its time, BOOTTIME)).
    default_clock: dict[int, int] = {}
    default_track: dict[int, int] = {}  # per sequence, TrackEventDefaults.track_uuid
    seq_clocks: dict[tuple[int, int], tuple[int, int]] = {}
    for pos, pkt in enumerate(trace.packet):
        seq = pkt.trusted_packet_sequence_id
        if pkt.HasField("trace_packet_defaults") and pkt.trace_packet_defaults.HasField("timestamp_clock_id"):
            default_clock[seq] = pkt.trace_packet_defaults.timestamp_clock_id
        if pkt.HasField("trace_packet_defaults") and pkt.trace_packet_defaults.HasField("track_event_defaults"):
            default_track[seq] = pkt.trace_packet_defaults.track_event_defaults.track_uuid
        if pkt.sequence_flags & official.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared.add(seq)
            names[seq], cats[seq], arg_names[seq] = {}, {}, {}
        if pkt.sequence_flags & official.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE:
            assert seq in cleared, f"packet {pos} needs incremental state its sequence {seq} never cleared"
        if pkt.HasField("interned_data"):
            for e in pkt.interned_data.event_names:
                names[seq][e.iid] = e.name
            for e in pkt.interned_data.event_categories:
                cats[seq][e.iid] = e.name
            for e in pkt.interned_data.debug_annotation_names:
                arg_names[seq][e.iid] = e.name
        if pkt.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in pkt.clock_snapshot.clocks}
            boottime = clocks[official.BUILTIN_CLOCK_BOOTTIME]
            if official.BUILTIN_CLOCK_REALTIME in clocks:
                assert rb.realtime_base is None, "two REALTIME snapshots"
                rb.realtime_base = clocks[official.BUILTIN_CLOCK_REALTIME] - boottime
            for clock_id, value in clocks.items():
                if 64 <= clock_id < 128:
                    assert (seq, clock_id) not in seq_clocks, f"packet {pos}: second snapshot of clock {clock_id}"
                    seq_clocks[(seq, clock_id)] = (value, boottime)
        if pkt.HasField("track_descriptor"):
            td = pkt.track_descriptor
            if td.uuid == 0:
                rb.root_ordering = (td.process_ordering, td.thread_ordering)
                continue
            if not td.HasField("process") and not td.HasField("thread") and not td.parent_uuid:
                # A top-level group of tracks (Pipeline): a pseudo process, its children pseudo threads.
                group_pid[td.uuid] = -len(group_pid) - 1
                rb.processes[group_pid[td.uuid]] = td.name
                # Its own track holds its header row (tracemerge.core.model.GROUP_HEADER): the Steps.
                rb.threads[td.uuid] = (group_pid[td.uuid], GROUP_ROW)
            elif td.parent_uuid in group_pid and not td.HasField("counter"):
                thread_pid[td.uuid] = group_pid[td.parent_uuid]
                rb.threads[td.uuid] = (group_pid[td.parent_uuid], td.name)
            elif td.parent_uuid in process_pid and not td.HasField("counter"):
                # A thread of the process, or a track of it titled by its name.
                thread_pid[td.uuid] = process_pid[td.parent_uuid]
                name = td.thread.thread_name if td.HasField("thread") else td.name
                rb.threads[td.uuid] = (process_pid[td.parent_uuid], name)
            elif td.HasField("process"):
                process_pid[td.uuid] = td.process.pid
                rb.process_rank[td.process.pid] = td.sibling_order_rank
                assert td.process.pid not in rb.processes, f"pid {td.process.pid} described twice"
                rb.processes[td.process.pid] = td.process.process_name
            elif td.HasField("thread"):
                thread_pid[td.uuid] = td.thread.pid
                rb.threads[td.uuid] = (td.thread.pid, td.thread.thread_name)
            elif td.HasField("counter"):
                counter_descs[td.uuid] = (td.parent_uuid, td.name)
            else:
                lane_names[td.uuid] = td.name
            if td.parent_uuid:
                parents[td.uuid] = td.parent_uuid
        if pkt.HasField("track_event"):
            te = pkt.track_event
            if not te.HasField("track_uuid") and seq in default_track:
                te.track_uuid = default_track[seq]
            assert te.track_uuid, f"packet {pos}: track event without track"
            clock = pkt.timestamp_clock_id if pkt.HasField("timestamp_clock_id") else default_clock.get(seq, 6)
            ts = pkt.timestamp
            if clock != official.BUILTIN_CLOCK_BOOTTIME:
                assert (seq, clock) in seq_clocks, f"packet {pos}: clock {clock} has no snapshot before it"
                at, boottime = seq_clocks[(seq, clock)]
                ts = ts - at + boottime
            per_track[te.track_uuid].append((ts, pos, te, seq))

    process_uuid_pid = {}
    for uuid, parent in parents.items():
        if uuid in thread_pid:
            process_uuid_pid[parent] = thread_pid[uuid]
    for uuid, name in lane_names.items():
        parent = parents[uuid]
        rb.threads[uuid] = (thread_pid[parent], name)
    for uuid, (parent, name) in counter_descs.items():
        rb.counter_tracks[uuid] = (process_uuid_pid.get(parent, group_pid.get(parent, -1)), name)

    base = rb.realtime_base or 0
    flow_slices: dict[int, list[Slice]] = defaultdict(list)
    for track, events in per_track.items():
        events.sort(key=lambda e: (e[0], e[1]))
        stack: list[Slice] = []
        for ts, pos, te, seq in events:
            if te.type == TE.TYPE_INSTANT and (track in process_pid or track in group_pid):
                args = {a.name or arg_names[seq][a.name_iid]: _value(a) for a in te.debug_annotations}
                pid = process_pid[track] if track in process_pid else group_pid[track]
                rb.process_instants[pid].append(Slice(track, te.name, "", ts + base, 0, 0, args))
                continue
            if te.type == TE.TYPE_SLICE_BEGIN or te.type == TE.TYPE_INSTANT:
                assert track in rb.threads, f"packet {pos}: slice on undescribed track {track}"
                name = names[seq][te.name_iid] if te.HasField("name_iid") else te.name
                assert te.name_iid == 0 or te.name_iid in names[seq], f"packet {pos}: unresolved name iid"
                s = Slice(
                    track,
                    name,
                    ",".join(cats[seq][c] for c in te.category_iids),
                    ts + base,
                    0,
                    len(stack),
                    {a.name or arg_names[seq][a.name_iid]: _value(a) for a in te.debug_annotations},
                    list(te.flow_ids),
                    list(te.terminating_flow_ids),
                )
                for fid in [*s.flow_ids, *s.terminating_flow_ids]:
                    flow_slices[fid].append(s)
                if te.type == TE.TYPE_INSTANT:
                    rb.instants.append(s)
                else:
                    stack.append(s)
            elif te.type == TE.TYPE_SLICE_END:
                assert stack, f"packet {pos}: END on track {track} with no open slice"
                s = stack.pop()
                s.dur = ts + base - s.ts
                rb.slices.append(s)
            elif te.type == TE.TYPE_COUNTER:
                assert track in counter_descs, f"packet {pos}: counter on undescribed track"
                value = te.counter_value if te.HasField("counter_value") else te.double_counter_value
                rb.counters[track].append((ts + base, value))
        assert not stack, f"track {track}: {len(stack)} slices never ended"
    for fid, slices in flow_slices.items():
        assert len(slices) >= 2, f"flow {fid} has one end only"
        first = min(slices, key=lambda s: s.ts)
        rb.flow_links[rb.threads[first.track][0]] += len(slices) - 1
    return rb.set_derived_apart()


def _value(a) -> object:
    kind = a.WhichOneof("value")
    value = getattr(a, kind)
    return json.loads(value) if kind == "legacy_json_value" else value


def read_chrome_json(path: Path) -> Readback:
    """Reads our JSON output; asserts slices on each thread nest (Perfetto drops overlaps)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    top = json.loads(data, parse_float=Decimal)
    rb = Readback()
    base = top["metadata"].get("time_base_unix_ns") or 0
    rb.realtime_base = base
    per_thread: dict[tuple, list] = defaultdict(list)
    flow_ends: dict[int, list] = defaultdict(list)
    # B events open on each thread, and the slice each thread's flow events bind to: the one
    # written last before them (the writer puts a slice's flow events right after it).
    open_begins: dict[tuple, list[Slice]] = defaultdict(list)
    last_slice: dict[tuple, Slice] = {}
    counter_ids: dict[tuple, int] = {}
    for e in top["traceEvents"]:
        ph = e["ph"]
        if ph == "M":
            if e["name"] == "process_name":
                rb.processes[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                rb.threads[(e["pid"], e["tid"])] = (e["pid"], e["args"]["name"])
            continue
        ts = base + exact_ns(e["ts"])
        thread = (e.get("pid"), e.get("tid"))
        if ph in ("X", "B"):
            dur = exact_ns(e["dur"]) if ph == "X" else 0
            s = Slice(thread, e["name"], e.get("cat", ""), ts, dur, 0, e.get("args", {}))
            if ph == "X":
                per_thread[thread].append(s)
            else:
                open_begins[thread].append(s)
            last_slice[thread] = s
            if "bind_id" in e:
                flow_ends[e["bind_id"]].append((s, e.get("flow_out", False), e.get("flow_in", False)))
        elif ph == "E":
            s = open_begins[thread].pop()
            s.dur = ts - s.ts
            per_thread[thread].append(s)
        elif ph in ("s", "t", "f"):
            assert ph != "f" or e.get("bp") == "e", "flow ends bind to their enclosing slice"
            flow_ends[e["id"]].append((last_slice[thread], ph != "f", ph != "s"))
        elif ph == "i" and e.get("s") == "p":
            rb.process_instants[e["pid"]].append(Slice(e["pid"], e["name"], e.get("cat", ""), ts, 0, 0, e["args"]))
        elif ph == "i":
            rb.instants.append(Slice((e["pid"], e["tid"]), e["name"], e.get("cat", ""), ts, 0, 0, e.get("args", {})))
        elif ph == "C":
            [(key, value)] = e["args"].items()
            cid = counter_ids.setdefault((e["pid"], e["name"], key), len(counter_ids) + 1)
            rb.counter_tracks[cid] = (e["pid"], f"{e['name']} {key}")
            rb.counters[cid].append((ts, value))
        else:
            raise AssertionError(f"unexpected phase {ph!r} in output")
    assert not any(open_begins.values()), "B events without their E"
    for key, slices in per_thread.items():
        assert key in rb.threads, f"thread {key} has no thread_name"
        slices.sort(key=lambda s: (s.ts, -s.dur))
        stack: list[Slice] = []
        for s in slices:
            while stack and stack[-1].ts + stack[-1].dur <= s.ts:
                stack.pop()
            if stack:
                parent = stack[-1]
                assert s.ts + s.dur <= parent.ts + parent.dur, f"{key}: {s.name} overlaps {parent.name} without nesting"
            s.depth = len(stack)
            stack.append(s)
            rb.slices.append(s)
    for fid, ends in flow_ends.items():
        outs = [s for s, out, _ in ends if out]
        assert outs, f"flow {fid} never starts"
        first = min(outs, key=lambda s: s.ts)
        rb.flow_links[first.track[0]] += len(ends) - 1
    return rb.set_derived_apart()
