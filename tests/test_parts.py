"""A large Chrome JSON file read in parts by several processes gives the bytes one read gives.

Parts are cut from 2 KiB here (8 MiB in use), so that small traces holding every kind of event
(slices, B/E pairs, instants, counters, flows by id and by bind_id, metadata, names watched as
clock evidence) are read in several parts, each kind straddling the cuts.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import signal
from pathlib import Path

import pytest

from tracemerge.core.errors import FatalError
from tracemerge.evidence import notes as evidence
from tracemerge.layout import emit
from tracemerge.pipeline import merge
from tracemerge.run import executors, filework
from tracemerge.run.executors import ForkedPartReads
from tracemerge.sources.chrome import files as common
from tracemerge.sources.json import segments as json_segments
from tracemerge.sources.json.text import KEYED_BOUNDARY
from tracemerge.writers import packing, perfetto

T0 = 1_700_000_000_000  # µs from baseTimeNanoseconds


@pytest.fixture
def small_parts(monkeypatch) -> list:
    """Parts from 2 KiB on; returns, per read asked for in parts, whether it was read so."""
    monkeypatch.setattr(json_segments, "PART_MIN", 2048)
    monkeypatch.setattr(json_segments, "_SEARCH", 4096)
    taken: list = []
    real = common.read_in_parts

    def noted(*args, **kwargs):
        found = real(*args, **kwargs)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(common, "read_in_parts", noted)
    return taken


def _events(seed: int) -> list[dict]:
    rng = random.Random(seed)
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python"}}]
    t = 0
    for step in range(40):
        events.append(
            {
                "ph": "X",
                "name": f"ProfilerStep#{step}",
                "cat": "user_annotation",
                "pid": 7,
                "tid": 7,
                "ts": t,
                "dur": 900,
            }
        )
        for n in range(rng.randrange(3, 8)):
            at = t + 10 + n * 100
            kind = rng.choice(("X", "X", "X", "BE", "i", "C", "flow", "bind"))
            if kind == "X":
                events.append(
                    {
                        "ph": "X",
                        "name": f"op{rng.randrange(9)}",
                        "cat": "cpu_op",
                        "pid": 7,
                        "tid": 7,
                        "ts": at,
                        "dur": rng.choice((0, 50, 90)),
                        "args": {"n": n},
                    }
                )
            elif kind == "BE":
                events.append({"ph": "B", "name": "region", "pid": 7, "tid": 8, "ts": at})
                events.append({"ph": "E", "pid": 7, "tid": 8, "ts": at + 40})
            elif kind == "i":
                events.append({"ph": "i", "s": "t", "name": f"mark{n}", "pid": 7, "tid": 7, "ts": at})
            elif kind == "C":
                events.append({"ph": "C", "name": "Memory", "pid": 7, "ts": at, "args": {"used": rng.randrange(100)}})
            elif kind == "flow":
                fid = step * 10 + n
                events.append(
                    {
                        "ph": "X",
                        "name": "cudaLaunchKernel",
                        "cat": "cuda_runtime",
                        "pid": 7,
                        "tid": 7,
                        "ts": at,
                        "dur": 8,
                    }
                )
                events.append({"ph": "s", "id": fid, "pid": 7, "tid": 7, "ts": at, "cat": "ac2g", "name": "ac2g"})
                events.append(
                    {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": at + 30, "dur": 20}
                )
                events.append(
                    {"ph": "f", "bp": "e", "id": fid, "pid": 0, "tid": 7, "ts": at + 30, "cat": "ac2g", "name": "ac2g"}
                )
            else:
                fid = f"0x{step * 10 + n:x}"
                events.append(
                    {
                        "ph": "X",
                        "name": "send",
                        "pid": 7,
                        "tid": 9,
                        "ts": at,
                        "dur": 5,
                        "bind_id": fid,
                        "flow_out": True,
                    }
                )
                events.append(
                    {
                        "ph": "X",
                        "name": "recv",
                        "pid": 7,
                        "tid": 9,
                        "ts": at + 60,
                        "dur": 5,
                        "bind_id": fid,
                        "flow_in": True,
                    }
                )
        t += 1000
    events.append({"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "worker"}})
    if rng.random() < 0.5:  # ties read out of their walk order, across the cuts too
        rng.shuffle(events)
    return events


def _merged_whole_and_in_parts(run: Path, tmp_path: Path) -> tuple:
    """``run`` merged by one process and by four: the same bytes. Returns the two reports."""
    whole = merge([run], tmp_path / "whole.pftrace", jobs=1)
    parts = merge([run], tmp_path / "parts.pftrace", jobs=4)
    assert (tmp_path / "parts.pftrace").read_bytes() == (tmp_path / "whole.pftrace").read_bytes()
    return whole, parts


def _write(path: Path, events: list[dict], tail: str = "") -> None:
    lines = ",\n".join(json.dumps(e) for e in events)
    path.write_text('{"traceEvents": [\n' + lines + '\n], "baseTimeNanoseconds": 1700000000000000000' + tail + "}\n")


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parts_give_the_bytes_of_one_read(tmp_path: Path, small_parts: list, seed: int, ext: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "rank0.pt.trace.json", _events(seed))
    whole = merge([run], tmp_path / f"whole{ext}", jobs=1)
    assert small_parts == []  # one process: no parts asked for
    parts = merge([run], tmp_path / f"parts{ext}", jobs=4)
    assert small_parts and all(small_parts), small_parts
    assert (tmp_path / f"parts{ext}").read_bytes() == (tmp_path / f"whole{ext}").read_bytes()
    assert parts.as_dict()["written"] == whole.as_dict()["written"]
    assert parts.as_dict()["dropped"] == whole.as_dict()["dropped"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts" + ext, "run", "whole" + ext]  # no run file left


@pytest.mark.parametrize("eighths", [1, 3, 7])  # in the first part (read here), in another, in the last
def test_a_cut_file_read_in_parts_loses_what_one_read_loses(tmp_path: Path, small_parts: list, eighths: int) -> None:
    """Damage in a part: the parts after it are not taken, as one read stops there."""
    run = tmp_path / "run"
    run.mkdir()
    src = run / "rank0.pt.trace.json"
    _write(src, _events(4))
    text = src.read_bytes()
    at = text.index(b",\n", len(text) * eighths // 8) + 2  # between two events, away from the cuts
    src.write_bytes(text[:at] + b'{"ph": "X", "name": oops},\n' + text[at:])
    whole, parts = _merged_whole_and_in_parts(run, tmp_path)
    assert small_parts == [True]
    [lost] = [reason for reason in whole.dropped if "events after it are lost" in reason]
    assert parts.dropped == whole.dropped and lost.count(":") >= 3  # named by line and column


def test_a_cut_inside_a_string_reads_the_file_whole(tmp_path: Path, small_parts: list) -> None:
    """Where every place to cut falls in a string that looks like a boundary, the parts do not
    end between two events: the file is read whole."""
    run = tmp_path / "run"
    run.mkdir()
    trap = "}, {" * 3000
    events = [{"ph": "X", "name": "big", "pid": 1, "tid": 1, "ts": n, "dur": 1, "args": {"s": trap}} for n in range(4)]
    _write(run / "rank0.pt.trace.json", events)
    _merged_whole_and_in_parts(run, tmp_path)
    assert small_parts == [False]


def test_times_too_precise_for_floats_read_the_file_whole(tmp_path: Path, small_parts: list) -> None:
    run = tmp_path / "run"
    run.mkdir()
    events = [
        {
            "ph": "X",
            "name": f"op{n}",
            "pid": 1,
            "tid": 1,
            "ts": 1_700_000_000_000_000.125 + n,
            "dur": 1.5,
            "args": {"k": "v" * 200},
        }
        for n in range(60)
    ]
    (run / "rank0.json").write_text(json.dumps({"traceEvents": events}))
    _merged_whole_and_in_parts(run, tmp_path)
    assert small_parts == [False]


def test_a_gzipped_file_is_read_whole(tmp_path: Path, small_parts: list) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = ",\n".join(json.dumps(e) for e in _events(5))
    (run / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(('{"traceEvents": [\n' + lines + "\n]}").encode()))
    merge([run], tmp_path / "parts.pftrace", jobs=4)
    assert small_parts == [False]


def _part(n: int, how: str) -> int:
    """A part reader's stand-in: returns, raises, or dies as ``how`` says."""
    if how == "raise":
        raise ValueError(f"part {n} is damaged")
    if how == "fatal":
        raise FatalError(f"part {n} is damaged")
    if how == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return n


@pytest.fixture
def forked(monkeypatch) -> list[int]:
    """The pids of the readers forked, as the parent forks them."""
    pids: list[int] = []
    real = executors._fork_reader

    def noted(*args):
        pid, fd = real(*args)
        pids.append(pid)
        return pid, fd

    monkeypatch.setattr(executors, "_fork_reader", noted)
    return pids


def _waited_for(pids: list[int]) -> bool:
    """Whether every one of ``pids`` was waited for (none left running or a zombie)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def test_forked_readers_return_in_order_and_leave_no_process(forked: list[int]) -> None:
    tasks = [(n, "return") for n in range(1, 4)]
    here, found = ForkedPartReads(4).map(_part, tasks, here=lambda: os.getpid())
    assert here == os.getpid() and found == [1, 2, 3]
    assert len(set(forked)) == 3 and os.getpid() not in forked  # each in a process of its own
    assert _waited_for(forked)


def test_a_reader_s_exception_is_raised_here_as_it_was(forked: list[int]) -> None:
    with pytest.raises(ValueError, match="part 2 is damaged") as raised:
        ForkedPartReads(3).map(_part, [(1, "return"), (2, "raise")], here=lambda: 0)
    assert len(forked) == 2 and _waited_for(forked)
    # A bug's traceback in the reader comes with it: where the reader raised it, not only here.
    (note,) = raised.value.__notes__
    lines = note.splitlines()
    assert lines[0] == f"in the helper process {forked[1]}:"
    assert lines[-3:] == [
        f'  File "{__file__}", line {_part.__code__.co_firstlineno + 3}, in _part',
        '    raise ValueError(f"part {n} is damaged")',
        "ValueError: part 2 is damaged",
    ]


def test_an_input_error_in_a_reader_comes_without_a_traceback(forked: list[int]) -> None:
    """What is wrong with the input is said in one line, with no note of where in the code."""
    with pytest.raises(FatalError, match="part 2 is damaged") as raised:
        ForkedPartReads(3).map(_part, [(1, "return"), (2, "fatal")], here=lambda: 0)
    assert not hasattr(raised.value, "__notes__")


def test_a_reader_killed_fails_the_read_in_one_line(forked: list[int]) -> None:
    tasks = [(1, "die"), (2, "return"), (3, "return")]
    with pytest.raises(FatalError, match="a process reading part of a large file was killed by signal 9"):
        ForkedPartReads(4).map(_part, tasks, here=lambda: 0)
    assert len(forked) == 3 and _waited_for(forked)


def test_a_failure_here_ends_the_readers(forked: list[int]) -> None:
    def here() -> None:
        raise MemoryError("no room for the first part")

    with pytest.raises(MemoryError, match="no room for the first part"):
        ForkedPartReads(3).map(_part, [(1, "return"), (2, "return")], here=here)
    assert len(forked) == 2 and _waited_for(forked)


def test_a_cut_lands_on_the_first_boundary_read_a_little_at_a_time(monkeypatch) -> None:
    """The boundary after a cut's place is the first in the searched window, though the window
    is read in growing pieces and a boundary's spaces straddle them."""
    monkeypatch.setattr(json_segments, "_FIRST_LOOK", 16)
    monkeypatch.setattr(json_segments, "_SEARCH", 4096)
    rng = random.Random(9)
    pieces = []
    for n in range(300):
        pieces.append(json.dumps({"name": "x" * rng.randrange(0, 60), "n": n}))
        pieces.append(" " * rng.choice((0, 1, 5, 40)) + "," + "\n" * rng.choice((0, 1, 30)))
    data = ("[" + "".join(pieces) + "{}]").encode()
    for at in range(0, len(data), 7):
        found = KEYED_BOUNDARY.search(data[at : at + 4096])
        expected = None if found is None else at + found.end() - 1
        assert json_segments._boundary_after(io.BytesIO(data), at) == expected, at


def test_a_cut_steps_over_the_boundaries_a_string_holds() -> None:
    """Serialized JSON in an arg holds ``}, {`` at every object: a part starts at the next event
    after it, not inside the string."""
    config = json.dumps([{"k": n} for n in range(200)])
    data = json.dumps([{"name": "a"}, {"name": "config", "args": {"config": config}}, {"name": "b"}]).encode()
    inside = data.index(b"}, {", data.index(b'"config": "'))
    assert json_segments._boundary_after(io.BytesIO(data), inside) == data.index(b'{"name": "b"}')


def test_a_whole_read_after_the_first_part_counts_what_one_read_counts(
    tmp_path: Path, small_parts: list, monkeypatch
) -> None:
    """The first part read here, then a cut inside a string: the file is read again whole, and
    the marks its first read counted beyond the cap are not counted twice."""
    monkeypatch.setattr(evidence, "MAX_MARKS", 10)
    run = tmp_path / "run"
    run.mkdir()
    kernel = {"ph": "X", "name": "ncclDevKernel_AllReduce_Sum_f32", "cat": "kernel", "pid": 0, "tid": 7, "dur": 2}
    events = [{**kernel, "ts": n * 10} for n in range(30)]
    trap = "}, {" * 3000
    events += [{"ph": "X", "name": "big", "pid": 1, "tid": 1, "ts": n, "dur": 1, "args": {"s": trap}} for n in range(4)]
    _write(run / "rank0.pt.trace.json", events)
    whole, parts = _merged_whole_and_in_parts(run, tmp_path)
    assert small_parts == [False]
    [over] = [reason for reason in whole.dropped if "beyond the cap" in reason]
    assert parts.dropped == whole.dropped and whole.dropped[over] == 20


@pytest.fixture
def packers(monkeypatch) -> list[int]:
    """Every file packs ahead where a core is idle for it, whatever its size; returns the pids
    of the packing processes, as they are forked."""
    monkeypatch.setattr(filework, "PACK_AHEAD_MIN", 0)
    pids: list[int] = []
    real = packing.ForkedPacker.__init__

    def noted(self, *args) -> None:
        real(self, *args)
        pids.append(self.pid)

    monkeypatch.setattr(packing.ForkedPacker, "__init__", noted)
    return pids


def test_a_file_packed_ahead_gives_the_bytes_of_one_process(tmp_path: Path, small_parts: list, packers: list) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "rank0.pt.trace.json", _events(4))
    merge([run], tmp_path / "whole.pftrace", jobs=1)
    assert packers == []  # no core left over
    merge([run], tmp_path / "ahead.pftrace", jobs=4)
    assert len(packers) == 1 and _waited_for(packers)
    assert (tmp_path / "ahead.pftrace").read_bytes() == (tmp_path / "whole.pftrace").read_bytes()


def test_a_file_given_up_in_its_layout_stops_its_packer(
    tmp_path: Path, small_parts: list, packers: list, monkeypatch
) -> None:
    def broken(*args, **kwargs):
        raise ValueError("no layout")

    run = tmp_path / "run"
    run.mkdir()
    _write(run / "rank0.pt.trace.json", _events(5))
    monkeypatch.setattr(emit, "finish", broken)
    with pytest.raises(FatalError, match=r"rank0\.pt\.trace\.json: cannot be read \(ValueError: no layout\)"):
        merge([run], tmp_path / "out.pftrace", jobs=4)
    assert len(packers) == 1 and _waited_for(packers)


def _killed(*args) -> bytes:
    os.kill(os.getpid(), signal.SIGKILL)
    return b""


def test_a_packer_killed_fails_the_merge_naming_the_file(
    tmp_path: Path, small_parts: list, packers: list, monkeypatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "rank0.pt.trace.json", _events(6))
    monkeypatch.setattr(perfetto, "pack_events", _killed)  # the packer dies on its first batch
    with pytest.raises(FatalError) as failed:
        merge([run], tmp_path / "out.pftrace", jobs=4)
    assert str(failed.value).endswith(
        "rank0.pt.trace.json: the process packing a file's events was killed by signal 9 before it was done"
    )
    assert len(packers) == 1 and _waited_for(packers)
    assert not (tmp_path / "out.pftrace").exists()
