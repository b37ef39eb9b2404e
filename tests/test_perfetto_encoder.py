"""The hand-written TrackEvent encoder, decoded with Perfetto's official schema."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from typing import ClassVar

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official
from readback import read_pftrace

from tracemerge.core.errors import FatalError
from tracemerge.core.model import FlowPhase
from tracemerge.layout.types import Items
from tracemerge.pipeline import merge
from tracemerge.plan.types import CounterTrack, ThreadTrack
from tracemerge.writers import packing, perfetto
from tracemerge.writers.packing import ForkedPacker
from tracemerge.writers.perfetto import SEQUENCE_CLOCK, UnitEncoder

TRACK = ThreadTrack(uuid=2**63 - 5, pid=1, tid=10001, name="t", order=0, process_uuid=7)
COUNTER = CounterTrack(uuid=300, pid=1, name="c", process_uuid=7, json_name="c", json_key="v")


def encode(calls) -> list:
    out = io.BytesIO()
    enc = UnitEncoder(77, out)
    for call in calls:
        call(enc)
    enc.close()
    trace = official.Trace()
    trace.ParseFromString(out.getvalue())
    return list(trace.packet)


def items(stamps: list[int], durs: list[int], bodies: list[bytes], flows: list[list[tuple[int, int]]] | None = None):
    """Items on TRACK; a duration of None makes an instant."""
    flows = flows or [[] for _ in stamps]
    return Items(
        lanes=np.zeros(len(stamps), np.int64),
        stamps=np.array(stamps, np.int64),
        durs=np.array([d or 0 for d in durs], np.int64),
        instants=np.array([d is None for d in durs]),
        lengths=np.array([len(b) for b in bodies], np.int64),
        bodies=b"".join(bodies),
        flow_counts=np.array([len(f) for f in flows], np.int64),
        flow_ids=np.array([fid for f in flows for fid, _ in f], np.uint64),
        flow_phases=np.array([int(phase) for f in flows for _, phase in f], np.int64),
    )


def test_slices_instants_and_counters_decode_exactly() -> None:
    args = b'{"i":-3,"s":"\xc3\xbc","l":[1,{"k":"v"}]}'
    flows = [(2**64 - 1, FlowPhase.START), (9, FlowPhase.END)]

    def events(e: UnitEncoder) -> None:
        body = e.prefix("op", "cpu") + e.args(args)
        e.ends([TRACK], np.array([0]), np.array([1_000_000_000_128]))
        e.items(
            [TRACK],
            items([1_000_000_000_123, 1_000_000_000_124], [5, None], [body, e.prefix("op", "")], [flows, []]),
            False,
        )
        e.items([TRACK], items([1_000_000_000_130], [0], [e.prefix("zero", "")]), True)

    packets = encode(
        [
            events,
            lambda e: e.counter(COUNTER, 5, -7),
            lambda e: e.counter(COUNTER, 6, 0.25),
            lambda e: e.counter(COUNTER, 7, 2**70),
        ]
    )
    end, first, instant, zero_begin, zero_end, c1, c2, c3 = packets
    assert [p.trusted_packet_sequence_id for p in packets] == [77] * 8
    assert end.sequence_flags == 3 and end.first_packet_on_sequence
    assert end.trace_packet_defaults.timestamp_clock_id == SEQUENCE_CLOCK
    assert all(p.sequence_flags == 2 and not p.first_packet_on_sequence for p in packets[1:])
    assert end.track_event.type == official.TrackEvent.TYPE_SLICE_END and end.timestamp == 1_000_000_000_128
    assert end.track_event.track_uuid == 2**63 - 5
    assert not end.track_event.HasField("name_iid")
    assert first.timestamp == 1_000_000_000_123
    te = first.track_event
    assert te.type == official.TrackEvent.TYPE_SLICE_BEGIN
    assert te.track_uuid == 2**63 - 5
    names = {n.iid: n.name for p in packets for n in p.interned_data.event_names}
    cats = {c.iid: c.name for c in end.interned_data.event_categories}
    arg_names = {a.iid: a.name for a in end.interned_data.debug_annotation_names}
    assert names[te.name_iid] == "op" and [cats[c] for c in te.category_iids] == ["cpu"]
    [annotation] = te.debug_annotations
    assert arg_names[annotation.name_iid] == "args"
    assert annotation.legacy_json_value.encode() == args
    assert list(te.flow_ids) == [2**64 - 1] and list(te.terminating_flow_ids) == [9]
    # The second event reuses the interned name and has no category; a name interned later
    # comes with the first packet after it.
    assert not instant.HasField("interned_data")
    assert instant.track_event.name_iid == te.name_iid and not instant.track_event.category_iids
    assert instant.track_event.type == official.TrackEvent.TYPE_INSTANT
    assert instant.track_event.track_uuid == 2**63 - 5
    # A zero-length slice: its END right after its BEGIN, at the same time.
    assert zero_begin.track_event.type == official.TrackEvent.TYPE_SLICE_BEGIN
    assert names[zero_begin.track_event.name_iid] == "zero" and zero_begin.HasField("interned_data")
    assert zero_end.track_event.type == official.TrackEvent.TYPE_SLICE_END
    assert zero_begin.timestamp == zero_end.timestamp == 1_000_000_000_130
    assert c1.track_event.counter_value == -7 and c1.track_event.track_uuid == 300
    assert c2.track_event.double_counter_value == 0.25
    assert c3.track_event.double_counter_value == float(2**70)


def test_args_trace_processor_cannot_show_become_text() -> None:
    """trace_processor v52 drops nulls and wraps integers beyond int64: those become strings."""
    args = b'{"n":null,"big":18446744073709551615,"ok":[1,{"m":null}],"t":"nullable"}'
    [packet] = encode([lambda e: e.items([TRACK], items([1], [None], [e.prefix("x", "") + e.args(args)]), False)])
    [annotation] = packet.track_event.debug_annotations
    assert json.loads(annotation.legacy_json_value) == {
        "n": "null",
        "big": "18446744073709551615",
        "ok": [1, {"m": "null"}],
        "t": "nullable",
    }


def test_the_default_track_is_named_once_on_the_sequence() -> None:
    """Events on the sequence's default track (its busiest thread) leave out their track_uuid;
    trace_processor takes it from the TrackEventDefaults of the sequence's first packet."""
    other = ThreadTrack(uuid=42, pid=1, tid=10002, name="u", order=1, process_uuid=7)

    def events(e: UnitEncoder) -> None:
        e.default_track(TRACK.uuid)
        e.ends([TRACK, other], np.array([0, 1]), np.array([20, 21]))
        e.items([TRACK], items([10], [None], [e.prefix("i", "")]), False)

    first, second, instant = encode([events])
    assert first.trace_packet_defaults.track_event_defaults.track_uuid == TRACK.uuid
    assert first.trace_packet_defaults.timestamp_clock_id == SEQUENCE_CLOCK
    assert not first.track_event.HasField("track_uuid") and not instant.track_event.HasField("track_uuid")
    assert second.track_event.track_uuid == 42


def _batches(enc: UnitEncoder, count: int) -> None:
    """``count`` batches of slices and their ENDs on TRACK, a name new to the sequence in each."""
    for k in range(count):
        stamps = list(range(1_000_000 * k, 1_000_000 * k + 3000, 3))
        bodies = [enc.prefix(f"op{k}", "cpu") + enc.args(b'{"k":%d}' % n) for n in range(len(stamps))]
        enc.ends([TRACK], np.zeros(len(stamps), np.int64), np.array(stamps, np.int64) + 2)
        enc.items([TRACK], items(stamps, [2] * len(stamps), bodies), False)
        enc.counter(COUNTER, stamps[0], k)


class _NotedPacker(ForkedPacker):
    """A packer that notes the pid of each process it forks."""

    pids: ClassVar[list[int]] = []

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.pids.append(self.pid)


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_packing_ahead_writes_the_bytes_packing_in_turn_writes(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_NotedPacker, "pids", [])
    monkeypatch.setattr(perfetto, "ForkedPacker", _NotedPacker)
    written = []
    for ahead in (False, True):
        path = tmp_path / f"{ahead}.bin"
        with path.open("wb") as out:
            out.write(b"before")  # what the chunk held already stays first
            enc = UnitEncoder(77, out, ahead=ahead)
            _batches(enc, 6)
            enc.close()
        written.append(path.read_bytes())
    assert written[0] == written[1]
    (pid,) = _NotedPacker.pids  # one process packed the batches ahead, and was waited for
    assert pid != os.getpid() and _reaped(pid)
    trace = official.Trace()
    trace.ParseFromString(written[1][len(b"before") :])
    assert len(trace.packet) == 6 * (1000 + 1000 + 1)


def test_packing_ahead_into_memory_packs_in_turn(monkeypatch) -> None:
    monkeypatch.setattr(_NotedPacker, "pids", [])
    monkeypatch.setattr(perfetto, "ForkedPacker", _NotedPacker)
    outs = [io.BytesIO(), io.BytesIO()]
    for ahead, out in zip((False, True), outs, strict=True):
        enc = UnitEncoder(77, out, ahead=ahead)
        _batches(enc, 2)
        enc.close()
    assert outs[0].getvalue() == outs[1].getvalue()
    assert _NotedPacker.pids == []  # no other process can write to memory


def test_a_failure_packing_ahead_is_raised_by_the_encoder(tmp_path, monkeypatch) -> None:
    def broken(*args) -> bytes:
        raise MemoryError("no room to pack")

    monkeypatch.setattr(_NotedPacker, "pids", [])
    monkeypatch.setattr(perfetto, "ForkedPacker", _NotedPacker)
    monkeypatch.setattr(perfetto, "pack_events", broken)
    with (tmp_path / "chunk").open("wb") as out:
        enc = UnitEncoder(77, out, ahead=True)
        with pytest.raises(MemoryError, match="no room to pack"):  # at the next write, or at close
            _batches(enc, 3)
            enc.close()
    (pid,) = _NotedPacker.pids
    assert _reaped(pid)


def test_a_packer_killed_fails_in_one_line(tmp_path) -> None:
    with (tmp_path / "chunk").open("wb") as out:
        packer = ForkedPacker(out, lambda data: data)
        packer.pack(b"x")
        os.kill(packer.pid, signal.SIGKILL)
        pid = packer.pid
        with pytest.raises(FatalError) as failed:
            for _ in range(64):  # the pipe takes a few before it breaks
                packer.pack(b"y" * 65536)
            packer.close()
    assert str(failed.value) == "the process packing a file's events was killed by signal 9 before it was done"
    assert _reaped(pid)


def _sleeping(data: bytes) -> bytes:
    time.sleep(60)
    return data


def test_a_packer_given_up_is_killed_not_waited_for(tmp_path) -> None:
    with (tmp_path / "chunk").open("wb") as out:
        out.write(b"head")
        packer = ForkedPacker(out, _sleeping)
        packer.pack(b"ab" * 100_000)  # the child sleeps on it
        packer.write(b"raw")
        pid = packer.pid
        started = time.monotonic()
        packer.end()
        packer.end()  # once is enough
        assert time.monotonic() - started < 10
    assert _reaped(pid)
    assert (tmp_path / "chunk").read_bytes() == b"head"  # nothing it had left was written


def _huge_failure(data: bytes) -> bytes:
    raise ValueError("z" * (1 << 20))  # pickled, larger than a pipe holds


def test_a_failure_larger_than_a_pipe_is_raised_not_waited_on(tmp_path) -> None:
    def stuck(signum, frame):
        raise TimeoutError("the packer and its parent wait on each other")

    before = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    try:
        with (tmp_path / "chunk").open("wb") as out:
            packer = ForkedPacker(out, _huge_failure)
            pid = packer.pid
            with pytest.raises(ValueError) as failed:
                for _ in range(100):
                    packer.pack(b"q" * 65536)
                packer.close()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert _reaped(pid)
    assert str(failed.value) == "z" * (1 << 20)
    (note,) = failed.value.__notes__  # the packer's traceback, with the message again at its end
    assert note.startswith(f"in the helper process {pid}:\nTraceback")
    assert note.endswith("ValueError: " + "z" * (1 << 20))


class TwoArgumentError(Exception):
    """An exception whose class takes other arguments than its pickle gives it back."""

    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} at {where}")


def _odd_failure(data: bytes) -> bytes:
    raise TwoArgumentError("no room", 7)


def test_a_failure_that_cannot_be_built_again_is_raised_as_its_text(tmp_path) -> None:
    with (tmp_path / "chunk").open("wb") as out:
        packer = ForkedPacker(out, _odd_failure)
        pid = packer.pid
        packer.pack(b"x")
        with pytest.raises(RuntimeError) as failed:
            packer.close()
    assert str(failed.value) == "TwoArgumentError: no room at 7"
    (note,) = failed.value.__notes__  # where the packer raised it
    assert note.startswith(f"in the helper process {pid}:\nTraceback")
    assert note.endswith('raise TwoArgumentError("no room", 7)\ntest_perfetto_encoder.TwoArgumentError: no room at 7')


def test_no_process_to_fork_packs_in_place(tmp_path, monkeypatch) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    written = []
    for refuse in (False, True):
        if refuse:
            monkeypatch.setattr(packing.os, "fork", no_fork)
        path = tmp_path / f"{refuse}.bin"
        with path.open("wb") as out:
            enc = UnitEncoder(77, out, ahead=True)
            _batches(enc, 2)
            enc.close()
        written.append(path.read_bytes())
    assert written[0] == written[1]
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds  # the pipes of the fork that failed closed


def test_a_packer_writes_in_the_order_given(tmp_path) -> None:
    with (tmp_path / "chunk").open("wb") as out:
        packer = ForkedPacker(out, lambda data, times: data * times)
        for k in range(50):
            packer.write(b"<%d>" % k)
            packer.pack(b"%d," % k, k % 3)
        packer.close()
    assert (tmp_path / "chunk").read_bytes() == b"".join(b"<%d>" % k + b"%d," % k * (k % 3) for k in range(50))


def test_many_small_threads_are_packed_a_batch_at_a_time(tmp_path, monkeypatch) -> None:
    """3,000 threads of one slice each: their packets packed together (a pack per thread cost
    0.3 ms of numpy each), and every slice on its own thread, at its own time."""
    events = [{"ph": "X", "name": "k", "pid": 1, "tid": t, "ts": 10 + t, "dur": 1} for t in range(3000)]
    path = tmp_path / "threads.json"
    path.write_text(json.dumps({"traceEvents": events}))
    packs = []
    pack = perfetto.pack_events

    def counted(head: bytes, stamps: np.ndarray, parts: list) -> bytes:
        packs.append((head, len(stamps)))
        return pack(head, stamps, parts)

    monkeypatch.setattr(perfetto, "pack_events", counted)
    merge([path], tmp_path / "out.pftrace", jobs=1)
    rb = read_pftrace(tmp_path / "out.pftrace")
    # The file's sequence is 2 (1 carries the descriptors): its 6,000 packets (a BEGIN and an
    # END per slice) in one pack, but the first, which carries the interned names.
    assert [n for head, n in packs if head.startswith(b"P\x02")] == [5999]
    slices = sorted((s.ts, s.dur, s.track) for s in rb.slices if s.name == "k")
    assert [(ts - slices[0][0], dur) for ts, dur, _ in slices] == [(1000 * t, 1000) for t in range(3000)]
    assert len({track for _, _, track in slices}) == 3000
