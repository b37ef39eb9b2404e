"""Each host of a multi-host run is a Perfetto machine in `.pftrace`; a run of one host is as before.

fixtures/machines/two_hosts (fixtures/make_machines.py) holds rl_run's two genuine actor ranks
as torch names them on two hosts, ``node-a_2835.<ns>.pt.trace.json`` and ``node-b_2836.…``, and a
span log that names no host. trace_processor (v52, the viewer the tests run) must show three
machines: its own (the span log's processes and the Pipeline) and one per host, with every event
where tracemerge's own reader finds it.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from builders import EPOCH_US, kineto
from conftest import FIXTURES, unavailable
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official
from readback import read_pftrace

from tracemerge.core.model import UNIX_EPOCH, Identity
from tracemerge.pipeline import merge
from tracemerge.plan.machines import assign_machines
from tracemerge.plan.types import FileScan, UnitPlan
from tracemerge.readback.damage import stored_summary
from tracemerge.viewer.check import check_trace, format_check
from tracemerge.viewer.trace_processor import TraceProcessor, TraceProcessorUnavailable
from tracemerge.writers import perfetto_machines

TWO_HOSTS = FIXTURES / "machines" / "two_hosts"


def packets(path: Path) -> list:
    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    return list(trace.packet)


def query(path: Path, *sql: str) -> list[list[dict]]:
    try:
        tp = TraceProcessor.any()
    except TraceProcessorUnavailable as exc:
        unavailable(f"no trace_processor: {exc}", "TRACEMERGE_REQUIRE_VIEWER")
    with tp:
        tp.load(path)
        return [tp.query(q) for q in sql]


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("machines") / "merged.pftrace"
    return out, merge([TWO_HOSTS], out)


def test_two_hosts_open_as_two_machines_in_trace_processor(two_hosts) -> None:
    out, _ = two_hosts
    machines, processes, problems = query(
        out,
        "select id, raw_id from machine order by id",
        "select p.name, m.raw_id from process p left join machine m on p.machine_id = m.id where p.name is not null",
        "select name, value from stats where severity in ('error', 'data_loss') and value > 0",
    )
    assert [m["raw_id"] for m in machines] == [0, 1, 2]
    assert {p["name"]: p["raw_id"] for p in processes} == {
        "reward · rank 0": None,  # the span log names no host: the trace's own machine
        "reward · rank 1": None,
        "actor · rank 0": 1,  # node-a: the host of the first process with a host
        "actor · rank 1": 2,
    }
    assert problems == []


def test_every_event_is_where_it_was_without_machines(two_hosts) -> None:
    """trace_processor places each machine's events (read through that machine's own clock
    snapshots) at the very nanosecond tracemerge's reader finds them, on the same process."""
    out, report = two_hosts
    rb = read_pftrace(out)
    ours: dict[str, Counter] = defaultdict(Counter)
    for s in [*rb.slices, *rb.instants]:  # trace_processor's slices of no duration: the instants
        ours[rb.processes[rb.threads[s.track][0]]][(s.name, s.ts, s.dur)] += 1
    slices, realtime = query(
        out,
        "select s.name, s.ts, s.dur, p.name as process from slice s "
        "left join thread_track tt on s.track_id = tt.id left join thread t using (utid) "
        "left join process_track pt on s.track_id = pt.id join process p on p.upid = coalesce(t.upid, pt.upid) "
        "where s.category is null or s.category not like 'tracemerge%'",
        "select clock_value - ts as offset from clock_snapshot where clock_name = 'REALTIME' order by snapshot_id",
    )
    theirs: dict[str, Counter] = defaultdict(Counter)
    for s in slices:
        theirs[s["process"]][(s["name"], s["ts"] + realtime[0]["offset"], s["dur"])] += 1
    assert theirs == ours
    assert sum(sum(c.values()) for c in theirs.values()) == report.written.slices + report.written.instants == 982


def test_each_packet_carries_its_machine_and_each_machine_its_name(two_hosts) -> None:
    out, report = two_hosts
    found = packets(out)
    names = {p.machine_id: p.system_info.machine_name for p in found if p.HasField("system_info")}
    assert names == {1: "node-a", 2: "node-b"}
    by_sequence: dict[int, set[int]] = defaultdict(set)
    for p in found:
        by_sequence[p.trusted_packet_sequence_id].add(p.machine_id)
    # The descriptors' sequence (1, with the names) is on every machine; each file's sequence on
    # its host's machine alone, and the derived tracks have a sequence per machine.
    assert by_sequence.pop(1) == {0, 1, 2}
    assert sorted(by_sequence.values(), key=sorted) == [{0}, {0}, {1}, {1}, {2}, {2}]
    assert "hosts as Perfetto machines: node-a (machine 1): actor · rank 0; node-b (machine 2): actor · rank 1" in (
        report.notes
    )


def test_the_trace_keeps_its_summary_readable(two_hosts) -> None:
    """The machines' names sit on the descriptor sequence, where the phase summary is read."""
    out, report = two_hosts
    assert stored_summary(out) == report.phases


def test_a_run_of_one_host_has_no_machines(tmp_path: Path) -> None:
    out = tmp_path / "merged.pftrace"
    report = merge([FIXTURES / "rl_run"], out)
    assert not [p for p in packets(out) if p.HasField("machine_id") or p.HasField("system_info")]
    assert not [n for n in report.notes if "machine" in n]


def test_chrome_json_output_has_no_machines(tmp_path: Path) -> None:
    report = merge([TWO_HOSTS], tmp_path / "merged.json")
    assert not [n for n in report.notes if "machine" in n]
    assert b"machine" not in (tmp_path / "merged.json").read_bytes()


def test_four_ranks_on_two_hosts_by_their_own_metadata(tmp_path: Path) -> None:
    """clock/gloo: four ranks whose Kineto metadata names two hosts, two ranks each."""
    out = tmp_path / "merged.pftrace"
    merge([FIXTURES / "clock" / "gloo"], out)
    processes, problems = query(
        out,
        "select p.name, m.raw_id from process p join machine m on p.machine_id = m.id where p.name is not null",
        "select name, value from stats where severity in ('error', 'data_loss') and value > 0",
    )
    assert problems == []
    assert sorted((p["name"], p["raw_id"]) for p in processes) == [
        ("rank 0", 1),
        ("rank 1", 1),
        ("rank 2", 2),
        ("rank 3", 2),
    ]


# -- which process is on which machine -------------------------------------------------------------


def scan(name: str, host: str | None, *idents: Identity, sequence: int = 2) -> FileScan:
    return FileScan(
        path=Path(name),
        format="kineto",
        clock=UNIX_EPOCH,
        sequence_id=sequence,
        origin_ns=0,
        identities={},
        counts={},
        threads={ident: {} for ident in idents},
        counter_series={},
        ts_min=0,
        ts_max=1,
        host=host,
    )


A, B, C, D = (Identity("actor", n, "") for n in range(4))


def test_one_host_is_no_machines() -> None:
    assert assign_machines([scan("a", "node-a", A), scan("b", "node-a", B), scan("c", None, C)], {}) is None


def test_processes_of_one_file_and_files_of_one_process_share_a_machine() -> None:
    scans = [
        scan("a", "node-b", A, B, sequence=2),  # one file, two processes
        scan("b", None, B, sequence=3),  # B's other file names no host: B stays on node-b
        scan("c", "node-a", C, sequence=4),
        scan("d", "node-a", D, sequence=5),
        scan("d2", "node-c", D, sequence=6),  # D's files name two hosts
    ]
    machines = assign_machines(scans, {A: 0, B: 1, C: 2, D: 3})
    assert machines is not None
    assert machines.names == {1: "node-b", 2: "node-a"}  # by the place of their first process
    assert machines.of_process == {A: 1, B: 1, C: 2}
    assert machines.of_file == {Path("a"): 1, Path("b"): 1, Path("c"): 2}
    assert machines.conflicts == {D: ("node-a", "node-c")}


# -- stamping a chunk's packets ------------------------------------------------------------------


def test_stamping_adds_the_machine_to_each_packet_of_its_sequences(monkeypatch, tmp_path: Path) -> None:
    """Every packet of a real trace, read in blocks that cut packets anywhere: those of the
    sequences named get the machine and nothing else changes."""
    out = tmp_path / "rl.pftrace"
    merge([FIXTURES / "rl_run"], out)
    before = packets(out)
    sequences = sorted({p.trusted_packet_sequence_id for p in before})
    stamped = {sequences[1]: 7, sequences[-1]: 300}
    monkeypatch.setattr(perfetto_machines, "_BLOCK", 97)
    unit = UnitPlan(out, "perfetto", 2, 0, 0, {}, {}, {}, machines=tuple(stamped.items()))
    copy = io.BytesIO()
    with out.open("rb") as f:
        perfetto_machines.copy_chunk(f, copy, unit)
    after = official.Trace()
    after.ParseFromString(copy.getvalue())
    assert len(after.packet) == len(before)
    for old, new in zip(before, after.packet, strict=True):
        assert new.machine_id == stamped.get(old.trusted_packet_sequence_id, 0)
        new.ClearField("machine_id")
        assert new == old


def test_a_chunk_cut_within_a_packet_is_refused(tmp_path: Path) -> None:
    unit = UnitPlan(tmp_path / "x", "perfetto", 2, 0, 0, {}, {}, {}, machines=((2, 1),))
    with pytest.raises(ValueError, match="ends within a packet"):
        perfetto_machines.copy_chunk(io.BytesIO(b"\x0a\x05\x50\x02"), io.BytesIO(), unit)


def test_a_split_part_names_only_its_own_machines(tmp_path: Path) -> None:
    report = merge([TWO_HOSTS], tmp_path / "m.pftrace", split_by="host")
    named = {}
    for part in (p for p in report.parts if p.suffix == ".pftrace"):  # not the index
        named[part.name] = {
            p.machine_id: p.system_info.machine_name for p in packets(part) if p.HasField("system_info")
        }
    assert named == {
        "m.node-a.pftrace": {1: "node-a"},
        "m.node-b.pftrace": {2: "node-b"},
        "m.pipeline.pftrace": {1: "node-a", 2: "node-b"},  # each process's Phases track
        "m.unknown-host.pftrace": {},
    }
    [machines] = query(tmp_path / "m.node-b.pftrace", "select raw_id from machine order by raw_id")
    assert machines == [{"raw_id": 0}, {"raw_id": 2}]


@pytest.mark.parametrize("key", ["host_name", "hostName", "hostname"])
def test_each_way_a_kineto_trace_names_its_host(tmp_path: Path, key: str) -> None:
    for rank, host in enumerate(("gpu-1", "gpu-2")):
        path = kineto(tmp_path / "run" / f"rank{rank}.pt.trace.json", rank=rank)
        top = json.loads(path.read_text())
        top[key] = host
        path.write_text(json.dumps(top))
    report = merge([tmp_path / "run"], tmp_path / "merged.pftrace")
    assert "hosts as Perfetto machines: gpu-1 (machine 1): rank 0; gpu-2 (machine 2): rank 1" in report.notes


def test_check_shows_each_process_on_its_machine(two_hosts) -> None:
    out, _ = two_hosts
    try:
        result = check_trace(out)
    except TraceProcessorUnavailable as exc:
        unavailable(f"no trace_processor: {exc}", "TRACEMERGE_REQUIRE_VIEWER")
    # v52 keeps no machine names: the machines' ids in the trace.
    assert {p.name: p.machine for p in result.processes} == {
        "reward · rank 0": "",
        "reward · rank 1": "",
        "actor · rank 0": "machine 1",
        "actor · rank 1": "machine 2",
    }
    lines = format_check(result).splitlines()
    assert lines[1].split() == ["pid", "process", "machine", "tracks", "slices", "counters", "flows"]
    assert lines[5].split()[1:6] == ["actor", "·", "rank", "0", "machine"]


def test_a_process_whose_files_name_two_hosts_is_on_no_machine(tmp_path: Path) -> None:
    for name, rank, host, t0 in (
        ("rank0-a", 0, "gpu-a", 0),
        ("rank0-b", 0, "gpu-b", 10_000),  # later in the run, on another host
        ("rank1", 1, "gpu-c", 0),
        ("rank2", 2, "gpu-d", 0),
    ):
        path = kineto(tmp_path / "run" / f"{name}.pt.trace.json", rank=rank, t0_us=EPOCH_US + t0)
        top = json.loads(path.read_text())
        top["host_name"] = host
        path.write_text(json.dumps(top))
    out = tmp_path / "merged.pftrace"
    report = merge([tmp_path / "run"], out)
    assert [n for n in report.notes if "machine" in n] == [
        "hosts as Perfetto machines: gpu-c (machine 1): rank 1; gpu-d (machine 2): rank 2",
        "rank 0: its files name hosts gpu-a and gpu-b; on no machine",
    ]
    [processes] = query(out, "select p.name, p.machine_id from process p where p.name like 'rank %'")
    on_a_machine = {p["name"]: p["machine_id"] is not None for p in processes}
    assert on_a_machine == {"rank 0": False, "rank 1": True, "rank 2": True}
