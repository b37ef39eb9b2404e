"""One bad value in a trace costs that value (counted under its statistic), never the file: a
header too long to look at first, a key written twice, NaN in a header, a rank that is no rank, a
clock anchor out of range."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from readback import read_pftrace

from tracemerge.core.model import as_rank
from tracemerge.core.stats import Stat
from tracemerge.pipeline import merge

T0_US = 1_790_000_000_000_000


def _event(name: str, n: int = 0) -> str:
    return json.dumps({"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": T0_US + 10 * n, "dur": 5})


def _write(tmp_path: Path, text: str, name: str = "rank0.pt.trace.json") -> Path:
    path = tmp_path / "run" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return path


def _slice_names(out: Path) -> list[str]:
    return sorted(s.name for s in read_pftrace(out).slices)


@pytest.mark.parametrize("name", ["rank0.pt.trace.json", "rank0.pt.trace.json.gz", "trace.json"])
def test_a_minified_trace_with_a_header_longer_than_the_head_is_read(tmp_path: Path, name: str) -> None:
    config = json.dumps([{"group": "x" * 100}] * 1000, separators=(",", ":"))  # 110 KB before the array
    _write(tmp_path, f'{{"pg_config":{config},"traceEvents":[{_event("a")}]}}', name)
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.skipped, report.ignored, report.exit_code) == (1, [], [], 0)


def test_a_json_file_of_keys_alone_is_still_not_a_trace(tmp_path: Path) -> None:
    config = json.dumps({"pg_config": [{"group": "x" * 100}] * 1000})
    _write(tmp_path, config, "config.json")
    _write(tmp_path, f'{{"traceEvents":[{_event("a")}]}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert report.ignored == [tmp_path / "run" / "config.json"]


def test_every_traceEvents_key_written_twice_or_more_is_read(tmp_path: Path) -> None:
    arrays = ",".join(f'"traceEvents":[{_event(f"e{n}", n)}]' for n in range(3))
    _write(tmp_path, f'{{"schemaVersion":1,{arrays},"baseTimeNanoseconds":0}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.exit_code) == (3, 0)
    assert _slice_names(tmp_path / "out.pftrace") == ["e0", "e1", "e2"]


def test_a_further_traceEvents_key_that_is_no_array_is_counted(tmp_path: Path) -> None:
    _write(tmp_path, f'{{"traceEvents":[{_event("a")}],"traceEvents":7}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert report.read.slices == 1
    assert report.stats.tally()["event_not_object"]["reasons"] == {
        f"{tmp_path / 'run' / 'rank0.pt.trace.json'}: a further traceEvents key that is not an event array, not read": 1
    }


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "7" * 5000])
def test_a_header_value_json_cannot_hold_keeps_the_file(tmp_path: Path, value: str) -> None:
    _write(tmp_path, f'{{"schemaVersion":1,"deviceProperties":[{{"x":{value}}}],"traceEvents":[{_event("a")}]}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.skipped, report.exit_code) == (1, [], 0)


@pytest.mark.parametrize(
    ("rank", "shown"),
    [('"²"', "'²'"), ("7" * 5000, "77777777777777777777…(5,000 characters)"), ('"٣"', "'٣'"), ("-5", "-5")],
)
def test_a_rank_that_is_no_rank_costs_the_rank_not_the_file(tmp_path: Path, rank: str, shown: str) -> None:
    _write(tmp_path, f'{{"distributedInfo":{{"rank":{rank}}},"traceEvents":[{_event("a")}]}}', "trace.json")
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.skipped, report.exit_code) == (1, [], 3)
    assert [p.rank for p in report.processes] == [None]
    assert report.stats.tally()["rank_unreadable"]["reasons"] == {
        f"distributedInfo.rank that is not a rank ({shown})": 1
    }


def test_a_span_rank_that_is_no_rank_is_counted_per_span(tmp_path: Path) -> None:
    lines = [
        {"name": "step", "start_ns": T0_US * 1000 + n, "end_ns": T0_US * 1000 + n + 5, "rank": r}
        for n, r in enumerate(["²", 3, "1e3"])
    ]
    _write(tmp_path, "".join(json.dumps(line) + "\n" for line in lines), "spans.jsonl")
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert report.read.slices == 3
    assert report.stats.tally()["rank_unreadable"]["reasons"] == {"span whose rank is not a rank: read without it": 2}


def test_minus_one_is_no_rank_not_an_unreadable_one(tmp_path: Path) -> None:
    _write(tmp_path, f'{{"distributedInfo":{{"rank":-1}},"traceEvents":[{_event("a")}]}}', "trace.json")
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert ([p.rank for p in report.processes], report.exit_code) == ([None], 0)


def test_as_rank_never_raises() -> None:
    assert [as_rank(v) for v in ("²", "٣", "7" * 5000, " 12 ", 10**39, 10**40, -1, 1.0, True)] == [
        None,
        None,
        None,
        12,
        10**39,
        None,
        None,
        None,
        None,
    ]


def test_a_clock_anchor_out_of_range_costs_the_anchor_not_the_file(tmp_path: Path) -> None:
    _write(tmp_path, f'{{"traceEvents":[{_event("a")}],"baseTimeNanoseconds":{10**30}}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.skipped, report.exit_code) == (1, [], 3)
    assert report.stats.tally()["clock_anchor_unreadable"]["reasons"] == {
        f"baseTimeNanoseconds out of range (timestamp beyond 64 bits ({10**30} ns)): the file is placed without it": 1
    }


def test_a_further_traceEvents_key_after_a_value_json_cannot_hold_is_read(tmp_path: Path) -> None:
    second = json.loads(_event("b", 1)) | {"args": {"n": "N"}}
    tail = '"x":NaN,"traceEvents":[' + json.dumps(second).replace('"N"', "7" * 5000) + "]"
    _write(tmp_path, f'{{"traceEvents":[{_event("a")}],{tail}}}')
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert (report.read.slices, report.exit_code) == (2, 0)
    assert _slice_names(tmp_path / "out.pftrace") == ["a", "b"]


@pytest.mark.parametrize(("rank_id", "rank", "unreadable"), [("3", 3, 0), ('"²"', None, 1)])
def test_an_ascend_profiler_info_with_nan_keeps_its_rank_and_a_bad_one_is_counted(
    tmp_path: Path, rank_id: str, rank: int | None, unreadable: int
) -> None:
    import shutil

    from conftest import FIXTURES

    run = tmp_path / "run" / "actor_update"
    shutil.copytree(FIXTURES / "ascend" / "text" / "actor_update", run)
    [info] = run.rglob("profiler_info_0.json")
    text = info.read_text().replace('"rank_id": 0', f'"x": NaN, "rank_id": {rank_id}')
    info.unlink()
    (info.parent / "profiler_info.json").write_text(text)
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert report.skipped == []
    assert {p.rank for p in report.processes} == {rank}
    assert report.stats.count(Stat.RANK_UNREADABLE) == unreadable


def test_a_session_record_rank_that_is_no_rank_is_counted_and_the_record_kept(tmp_path: Path) -> None:
    from conftest import FIXTURES

    source = FIXTURES / "clock" / "areal" / "session_tracer" / "rollout" / "sessions-r0.jsonl"
    before = merge([source], tmp_path / "a.pftrace")
    lines = source.read_text().splitlines()
    lines[0] = lines[0].replace('"rank": 0', '"rank": "²"', 1)
    _write(tmp_path, "\n".join(lines) + "\n", "sessions-r0.jsonl")
    report = merge([tmp_path / "run"], tmp_path / "out.pftrace")
    assert report.read.as_dict() == before.read.as_dict()
    assert report.stats.tally()["rank_unreadable"]["reasons"] == {
        "session record whose rank is not a rank: read without it": 1
    }
