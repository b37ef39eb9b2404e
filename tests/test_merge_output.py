"""Every fixture merged to every output format, read back and compared with its input files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, assert_spilling_changes_nothing
from expected import FIXTURE_RUNS, Expected, fixture_expectations, kineto_file
from readback import Readback, read_chrome_json, read_pftrace

from tracemerge.pipeline import merge
from tracemerge.sources.json import stream as json_stream

FORMATS = {".pftrace": read_pftrace, ".json": read_chrome_json, ".json.gz": read_chrome_json}


def merged(tmp_path: Path, ext: str, *inputs: Path) -> tuple[Readback, object]:
    out = tmp_path / f"merged{ext}"
    report = merge(list(inputs), out)
    return FORMATS[ext](out), report


def assert_same(rb: Readback, label: str, expected: Expected) -> None:
    got = rb.expected_view(label)
    assert sum(got.slices.values()) == sum(expected.slices.values())
    assert got.slices == expected.slices
    assert got.instants == expected.instants
    assert got.counters == expected.counters
    assert got.flows == expected.flows


@pytest.mark.parametrize("ext", list(FORMATS))
def test_kineto_gpu_run(tmp_path: Path, ext: str) -> None:
    rb, report = merged(tmp_path, ext, FIXTURES / "kineto_gpu")
    rank0 = kineto_file(FIXTURES / "kineto_gpu" / "rank0.pt.trace.json")
    rank1 = kineto_file(FIXTURES / "kineto_gpu" / "rank1.pt.trace.json.gz")
    assert sorted(rb.processes.values()) == ["rank 0", "rank 1"]
    assert_same(rb, "rank 0", rank0)
    assert_same(rb, "rank 1", rank1)
    # Exact counts the fixture was built with (2 steps per rank).
    assert sum(rank0.slices.values()) == 2 * 13 + 2  # 12 X and one B/E pair per step, plus Spans and overhead
    assert rank0.flows == 6 and rank0.counters == 6 and sum(rank0.instants.values()) == 4
    assert report.exit_code == 0
    assert report.moved_to_lanes == 2  # rank 0's "detach" ends 0.2 µs after its parent, twice

    names = rb.thread_names("rank 0")
    for expected_name in (
        "CPU thread 4242 (pt_main_thread)",
        "CPU thread 4250 (pt_autograd_0)",
        "GPU 0 stream 7",
        "GPU 0 stream 20",
        "Profiler spans",
        "Profiler iterations",
        "Profiler",
        "Profiler overhead",
        "CPU thread 4242 (pt_main_thread) (overlap 1)",
    ):
        assert expected_name in names
    # Both ranks' kernels ran on their own GPU; the same CPU pid 4242 stays two processes.
    assert "GPU 1 stream 7" in rb.thread_names("rank 1")
    assert rb.pid_of("rank 0") != rb.pid_of("rank 1")


@pytest.mark.parametrize("ext", list(FORMATS))
def test_precision_survives_to_the_nanosecond(tmp_path: Path, ext: str) -> None:
    rb, _ = merged(tmp_path, ext, FIXTURES / "precision")
    by_name = {s.name: s for s in rb.slices}
    assert by_name["outer"].ts == 1732924800123456789
    assert by_name["outer"].dur == 10001
    assert by_name["inner"].ts == 1732924800123456790
    assert by_name["inner"].depth == 1
    assert by_name["next"].ts == 1732924800123466790
    assert by_name["next"].depth == 0  # starts the nanosecond "outer" ends: a sibling, not a child
    assert [i.ts for i in rb.instants] == [1732924800123466791]


@pytest.mark.parametrize("ext", list(FORMATS))
@pytest.mark.parametrize("run", FIXTURE_RUNS)
def test_every_fixture_matches_its_inputs(tmp_path: Path, ext: str, run: str) -> None:
    rb, report = merged(tmp_path, ext, FIXTURES / run)
    expected = fixture_expectations(FIXTURES, run)
    assert sorted(rb.processes.values()) == sorted(expected)
    for label, e in expected.items():
        assert_same(rb, label, e)
    assert report.exit_code == 0
    assert report.read.as_dict() == report.written.as_dict()
    assert report.written.slices == sum(sum(e.slices.values()) for e in expected.values())


@pytest.mark.parametrize("ext", list(FORMATS))
def test_rl_run_process_order(tmp_path: Path, ext: str) -> None:
    rb, _ = merged(tmp_path, ext, FIXTURES / "rl_run")
    if ext == ".pftrace":
        # Explicit ordering for v57+ UIs: a root descriptor and a rank per process descriptor.
        assert rb.root_ordering == (1, 1)
        # The derived Pipeline group is first (rank 0), then the processes.
        assert [rb.process_rank[pid] for pid in rb.processes] == [1, 2, 3, 4, 5, 6]
    assert list(rb.processes.values()) == [
        "rollout · rank 0",
        "rollout · rank 1",
        "reward · rank 0",
        "reward · rank 1",
        "actor · rank 0",
        "actor · rank 1",
    ]


@pytest.mark.parametrize("ext", list(FORMATS))
def test_nesting_is_valid_on_every_track(tmp_path: Path, ext: str) -> None:
    """Children lie inside their parents on every track of every fixture."""
    rb, _ = merged(tmp_path, ext, FIXTURES / "rl_run", FIXTURES / "kineto_gpu")
    by_track: dict = {}
    for s in sorted(rb.slices, key=lambda s: (s.track, s.ts, -s.dur)):
        stack = by_track.setdefault(s.track, [])
        while stack and stack[-1].ts + stack[-1].dur <= s.ts and stack[-1] is not s:
            stack.pop()
        if stack:
            assert stack[-1].ts <= s.ts and s.ts + s.dur <= stack[-1].ts + stack[-1].dur
        stack.append(s)


@pytest.mark.parametrize("ext", [".pftrace", ".json.gz"])
def test_worker_processes_write_the_same_bytes(tmp_path: Path, ext: str) -> None:
    """Files encoded in parallel workers concatenate to exactly the serial output."""
    inputs = [FIXTURES / "rl_run", FIXTURES / "kineto_gpu", FIXTURES / "edge_cases"]
    serial = merge(inputs, tmp_path / f"serial{ext}", jobs=1)
    parallel = merge(inputs, tmp_path / f"parallel{ext}", jobs=2)
    assert (tmp_path / f"serial{ext}").read_bytes() == (tmp_path / f"parallel{ext}").read_bytes()
    assert serial.as_dict()["written"] == parallel.as_dict()["written"]
    assert serial.as_dict()["dropped"] == parallel.as_dict()["dropped"]


def test_a_pool_starts_the_largest_file_first_and_yields_in_the_jobs_order(tmp_path: Path) -> None:
    """A large file started last would run alone while the other workers idle: jobs go to the
    pool largest first, and their outcomes still come back in the jobs' order."""
    from concurrent.futures import Future

    from tracemerge.discovery.discover import discover
    from tracemerge.run import executors
    from tracemerge.run.filework import FileJob

    sizes = {"a.pt.trace.json": 10, "b.pt.trace.json": 300, "c.pt.trace.json": 40, "d.pt.trace.json": 300}
    for name, n in sizes.items():
        events = [{"ph": "X", "name": "s", "pid": 1, "tid": 1, "ts": 10 * t, "dur": 1} for t in range(n)]
        (tmp_path / name).write_text(json.dumps({"traceEvents": events}))
    jobs = [FileJob(c, n) for n, c in enumerate(discover([tmp_path]).candidates)]
    submitted: list[str] = []

    class Pool:  # runs each job when it is handed over, noting the order
        def submit(self, fn, job):
            submitted.append(job.candidate.path.name)
            done: Future = Future()
            done.set_result(fn(job))
            return done

    outcomes = list(executors._largest_first(Pool(), jobs))
    assert submitted == ["b.pt.trace.json", "d.pt.trace.json", "c.pt.trace.json", "a.pt.trace.json"]
    assert [o.candidate.path.name for o in outcomes] == sorted(sizes)
    spans = [o.scan.ts_max - o.scan.ts_min for o in outcomes]  # each outcome is its own file's
    assert spans == [(10 * (sizes[name] - 1) + 1) * 1000 for name in sorted(sizes)]


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_spilling_to_disk_writes_the_same_bytes(tmp_path: Path, ext: str, monkeypatch) -> None:
    """A file whose events exceed the memory budget is laid out from blocks spilled to disk:
    with small read batches and a budget of a few events, every fixture spills into many runs,
    and the output is byte for byte the in-memory one."""
    inputs = [FIXTURES / "rl_run", FIXTURES / "kineto_gpu", FIXTURES / "edge_cases", FIXTURES / "precision"]
    inputs.append(FIXTURES / "ascend" / "text")
    in_memory = merge(inputs, tmp_path / f"memory{ext}", jobs=1)
    assert_spilling_changes_nothing(in_memory, inputs, tmp_path / f"spilled{ext}", 5, monkeypatch)


def test_narrow_track_ids_that_collide_are_encoded_again_wide(tmp_path: Path, monkeypatch) -> None:
    """Track uuids are 35-bit hashes; when no alternative uuid is left for a track whose hash
    another has (the narrow ids all taken), every file is encoded again with 63-bit ones. Forced
    here with 2-bit hashes: the content is what the fixture holds all the same."""
    from tracemerge.plan import types as plan

    monkeypatch.setattr(plan, "NARROW_ID_BITS", 2)
    out = tmp_path / "merged.pftrace"
    merge([FIXTURES / "kineto_gpu"], out, jobs=1)
    rb = read_pftrace(out)
    assert min(rb.threads) >= 1 << 2  # wide uuids
    expected = fixture_expectations(FIXTURES, "kineto_gpu")
    for label, exp in expected.items():
        assert_same(rb, label, exp)


@pytest.mark.parametrize("ext", list(FORMATS))
def test_a_counter_named_after_its_value_key_is_titled_once(tmp_path: Path, ext: str) -> None:
    """Ascend writes counters whose one arg has the counter's own name: "L2 Buffer Bw Level"."""
    events = [
        {
            "ph": "C",
            "name": "L2 Buffer Bw Level",
            "pid": 1,
            "ts": 1_700_000_000_000_000 + n,
            "args": {"L2 Buffer Bw Level": n},
        }
        for n in range(3)
    ]
    events.append({"ph": "C", "name": "Memory", "pid": 1, "ts": 1_700_000_000_000_000, "args": {"used": 5}})
    src = tmp_path / "in" / "rank0.json"
    src.parent.mkdir()
    src.write_text(json.dumps({"traceEvents": events}))
    rb, _ = merged(tmp_path, ext, src.parent)
    assert sorted(name for _, name in rb.counter_tracks.values()) == ["L2 Buffer Bw Level", "Memory used"]


def test_chrome_json_reads_each_file_once(tmp_path: Path, monkeypatch) -> None:
    """Its second pass encodes the events the first read laid out and kept, with the plan."""
    reads: list[Path] = []
    real = json_stream.EventStream.__init__

    def counted(self, path, *args, **kwargs):
        reads.append(path)
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(json_stream.EventStream, "__init__", counted)
    out = tmp_path / "out.json"
    merge([FIXTURES / "kineto_gpu"], out, jobs=1)
    assert sorted(p.name for p in reads) == ["rank0.pt.trace.json", "rank1.pt.trace.json.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # the kept layouts are gone too


@pytest.mark.parametrize("run", ["metrics_run", "ascend"])
def test_output_is_the_same_bytes_in_every_process(tmp_path: Path, run: str) -> None:
    """Separate processes write the same bytes: nothing depends on hash order (a key holding None
    hashes by its address, which differs from process to process)."""
    import subprocess
    import sys

    digests = set()
    for n in range(3):
        out = tmp_path / f"{n}.pftrace"
        subprocess.run([sys.executable, "-m", "tracemerge", str(FIXTURES / run), "-o", str(out), "-q"], check=False)
        digests.add(out.read_bytes())
    assert len(digests) == 1
