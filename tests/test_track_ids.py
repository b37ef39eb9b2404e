"""Track uuids no two tracks share, by construction: two threads whose 35-bit hashes are equal (in
one file, or in two) each keep their own track, and no file is read a second time for it."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURES
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official
from readback import read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.model import Identity
from tracemerge.phases.tracks import PHASES_THREAD
from tracemerge.pipeline import merge
from tracemerge.plan import planner, types, unique_ids
from tracemerge.plan.types import LocalTracks, free_id, thread_uuid
from tracemerge.run import reading
from tracemerge.writers.perfetto_renames import copy_renamed
from tracemerge.writers.perfetto_wire import varint

# Found by hashing (see tracemerge.plan.types.track_id): thread (pid 1, tid) keys whose narrow
# uuids are equal, in a file's process named after the file.
SAME_FILE = ("trace.json", 115_079, 329_771)
ACROSS = (("a.json", 175_019), ("b.json", 201_626))
TWO_HOSTS = FIXTURES / "machines" / "two_hosts"  # two actor ranks on two hosts (tests/test_machines.py)


def _trace(path: Path, threads: dict[int, str]) -> None:
    events = [
        {"ph": "X", "name": name, "pid": 1, "tid": tid, "ts": n + 1, "dur": 1}
        for n, (tid, name) in enumerate(threads.items())
    ]
    path.write_text(json.dumps({"traceEvents": events}))


def _merge_once(monkeypatch: pytest.MonkeyPatch, folder: Path, out: Path) -> list[bool]:
    """Merges ``folder`` into ``out``; returns the id width of each read of the files."""
    reads: list[bool] = []
    original = reading._read

    def counted(*args):  # type: ignore[no-untyped-def]
        reads.append(args[-1])  # wide
        return original(*args)

    monkeypatch.setattr(reading, "_read", counted)
    result = CliRunner().invoke(cli.app, [str(folder), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return reads


def _slices_by_thread(out: Path) -> dict[str, tuple[int, str, int]]:
    """Per slice name: its track, its thread's name and its start (ns)."""
    back = read_pftrace(out).set_derived_apart()
    return {s.name: (s.track, back.threads[s.track][1], s.ts) for s in back.slices}


def test_the_hashes_of_the_data_are_equal() -> None:
    name, a, b = SAME_FILE
    ident = Identity("", None, name)
    assert thread_uuid(ident, (1, a)) == thread_uuid(ident, (1, b))
    (file_a, tid_a), (file_b, tid_b) = ACROSS
    assert thread_uuid(Identity("", None, file_a), (1, tid_a)) == thread_uuid(Identity("", None, file_b), (1, tid_b))


def test_a_file_s_two_threads_of_one_hash_get_two_tracks_in_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, a, b = SAME_FILE
    tracks = LocalTracks()
    ident = Identity("", None, name)
    first, second = tracks.thread(ident, (1, a)), tracks.thread(ident, (1, b))
    assert first.uuid == thread_uuid(ident, (1, a)) and second.uuid == free_id(first.uuid, {first.uuid})
    assert tracks.moved == {("thread", ident, (1, b)): second.uuid} and tracks.thread(ident, (1, b)) is second
    (tmp_path / "run").mkdir()
    _trace(tmp_path / "run" / name, {a: "on a", b: "on b"})
    out = tmp_path / "out.pftrace"
    assert _merge_once(monkeypatch, tmp_path / "run", out) == [False]
    found = _slices_by_thread(out)
    assert found["on a"][0] != found["on b"][0]
    assert (found["on a"][1], found["on b"][1]) == (f"CPU thread {a}", f"CPU thread {b}")
    assert found["on b"][2] - found["on a"][2] == 1_000


def test_threads_of_two_files_of_one_hash_get_two_tracks_in_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan gives the second file's thread another uuid; its chunk is copied with it."""
    (tmp_path / "run").mkdir()
    for file, tid in ACROSS:
        _trace(tmp_path / "run" / file, {tid: f"in {file}", 7: f"beside, in {file}"})
    out = tmp_path / "out.pftrace"
    assert _merge_once(monkeypatch, tmp_path / "run", out) == [False]
    found = _slices_by_thread(out)
    (file_a, tid_a), (file_b, tid_b) = ACROSS
    assert len({track for track, _, _ in found.values()}) == 4
    assert found[f"in {file_a}"][1] == f"CPU thread {tid_a}" and found[f"in {file_b}"][1] == f"CPU thread {tid_b}"
    assert found[f"beside, in {file_b}"][1] == "CPU thread 7"
    assert found[f"beside, in {file_b}"][2] - found[f"in {file_b}"][2] == 1_000


def test_a_chunk_copied_with_a_uuid_given_again(tmp_path: Path) -> None:
    """Only the track_uuid fields change (an event's, the sequence default's); the same bytes
    elsewhere (an annotation's text) and every other packet are copied as they are."""
    old, new = 29_121_491_083, 5
    uuid = b"\x58" + varint(old)
    event = b"\x5a" + varint(len(uuid + b"\x48\x01")) + uuid + b"\x48\x01"
    defaults = b"\xda\x03" + varint(len(uuid) + 2) + b"\x5a" + varint(len(uuid)) + uuid
    text = b"\x62" + varint(len(uuid)) + uuid  # interned_data holding the same bytes: not a uuid
    packets = [b"\x40\x07" + defaults, b"\x40\x08" + event + text, b"\x40\x09\x5a\x02\x48\x02"]
    chunk = tmp_path / "chunk"
    chunk.write_bytes(b"".join(b"\x0a" + varint(len(p)) + p for p in packets))
    out = tmp_path / "out"
    with out.open("wb") as f:
        assert copy_renamed(chunk, f, {old: new}) == 2
    fresh = b"\x58" + varint(new)
    renamed_event = b"\x5a" + varint(len(fresh) + 2) + fresh + b"\x48\x01"
    expected = [
        b"\x40\x07\xda\x03" + varint(len(fresh) + 2) + b"\x5a" + varint(len(fresh)) + fresh,
        b"\x40\x08" + renamed_event + text,
        packets[2],
    ]
    assert out.read_bytes() == b"".join(b"\x0a" + varint(len(p)) + p for p in expected)


def _clashing_unique_ids(real):  # type: ignore[no-untyped-def]
    """``unique_ids`` as if every process, thread and counter of the run had a twin before it
    with its hash: each is given an alternative uuid, every chunk copied renamed."""

    def clashing(processes, threads, counters):  # type: ignore[no-untyped-def]
        twins = [{("twin", key): track for key, track in tracks.items()} for tracks in (processes, threads, counters)]
        found = real(*({**twin, **tracks} for twin, tracks in zip(twins, (processes, threads, counters), strict=True)))
        return tuple(
            {k: v for k, v in tracks.items() if not (isinstance(k, tuple) and k[:1] == ("twin",))} for tracks in found
        )

    return clashing


def _events(out: Path) -> tuple[Counter, Counter, dict[int, set[int]], int, set[int]]:
    """The trace's slices and instants (process, track, name, start, duration), its counter values,
    the machines of each packet sequence, its number of track descriptors (a group's row on the
    group's own track has none of its own), and the uuids its events name."""
    back = read_pftrace(out)
    events = Counter(
        (back.processes[back.threads[s.track][0]], back.threads[s.track][1], s.name, s.ts, s.dur)
        for s in [*back.slices, *back.instants]
    )
    counters = Counter(
        (back.processes.get(back.counter_tracks[t][0]), back.counter_tracks[t][1], ts, value)
        for t, values in back.counters.items()
        for ts, value in values
    )
    trace = official.Trace()
    trace.ParseFromString(out.read_bytes())
    machines: dict[int, set[int]] = defaultdict(set)
    for p in trace.packet:
        machines[p.trusted_packet_sequence_id].add(p.machine_id)
    named = {p.track_event.track_uuid for p in trace.packet if p.HasField("track_event")}
    described = sum(p.HasField("track_descriptor") for p in trace.packet)
    return events, counters, dict(machines), described, named - {0}


def test_a_two_host_run_whose_uuids_are_all_given_again_is_renamed_and_stamped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk of a multi-host run is renamed and stamped with its machines (the derived unit's
    sequences too): every event on the track and machine it is on when no hash clashes."""
    plain = tmp_path / "plain.pftrace"
    merge([TWO_HOSTS], plain)
    monkeypatch.setattr(planner, "unique_ids", _clashing_unique_ids(planner.unique_ids))
    renamed = tmp_path / "renamed.pftrace"
    report = merge([TWO_HOSTS], renamed)
    events, counters, machines, described, named = _events(renamed)
    plain_events, plain_counters, plain_machines, plain_described, plain_named = _events(plain)
    assert sum(events.values()) == report.written.slices + report.written.instants == 982
    assert (events, counters, machines, described) == (plain_events, plain_counters, plain_machines, plain_described)
    assert described == 34  # the Pipeline's row on its own track adds none
    assert sorted(machines.values(), key=sorted) == [{0}, {0}, {0, 1, 2}, {1}, {1}, {2}, {2}]
    assert len(named) == len(plain_named) and not named & plain_named  # every track named again


def test_the_phases_of_two_hosts_of_one_hash_keep_their_own_tracks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The derived unit is encoded on a sequence per machine: the two actor ranks' Phases tracks
    (on two hosts) hashed to one uuid still get two, each rank's phases on its own."""
    plain = tmp_path / "plain.pftrace"
    merge([TWO_HOSTS], plain)
    real = types.thread_uuid

    def one_hash(ident: Identity, key: tuple, salt: str = "", wide: bool = False) -> int:
        if key == PHASES_THREAD and ident.role == "actor":
            ident = Identity("actor", 0, ident.tag)
        return real(ident, key, salt, wide)

    for module in (types, planner, unique_ids):
        monkeypatch.setattr(module, "thread_uuid", one_hash)
    clashing = tmp_path / "clashing.pftrace"
    merge([TWO_HOSTS], clashing)
    found, expected = read_pftrace(clashing).set_derived_apart(), read_pftrace(plain).set_derived_apart()
    phases = {key: slices for key, slices in found.derived.items() if key[1] == "Phases"}
    assert sorted(phases) == [("actor · rank 0", "Phases"), ("actor · rank 1", "Phases")]
    for key, slices in phases.items():
        assert [(s.name, s.ts, s.dur) for s in slices] == [(s.name, s.ts, s.dur) for s in expected.derived[key]]
    assert len({s.track for key in phases if key[0].startswith("actor") for s in phases[key]}) == 2
