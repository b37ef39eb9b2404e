"""Every fixture, merged to every format, loaded into Perfetto's own trace_processor.

Our read-back tests can agree with our own mistakes; trace_processor is what the UI runs. The
engine is the wasm build of the offline Perfetto UI (v52) under Node.js, or a native
``trace_processor_shell`` named by $TRACE_PROCESSOR_SHELL. Without either the tests skip, except
where $TRACEMERGE_REQUIRE_VIEWER is set (CI), where they fail.

Import problems trace_processor reports in its ``stats`` table, all of which must stay zero. We
check every stat of severity ``error`` or ``data_loss``; among them the ones a merger can cause:

- ``misplaced_end_event``: an END closed a slice other than the one it began (bad nesting);
- ``slice_drop_overlapping_complete_event`` (JSON): an ``X`` overlapping a sibling was dropped;
- ``clock_sync_failure``: timestamps on a clock with no path to the trace clock were dropped;
- ``tokenizer_skipped_packets``: packets skipped, e.g. for interned ids before the sequence's
  incremental state was cleared;
- ``interned_data_tokenizer_errors`` / ``track_event_tokenizer_errors`` /
  ``track_event_parser_errors``: unresolved interned ids, counters on undescribed tracks, events on
  unknown tracks;
- ``json_tokenizer_failure`` / ``json_parser_failure``: JSON the importer could not read;
- ``flow_*`` errors: flows without a start, duplicate or invalid flow ids.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURES, unavailable
from expected import FIXTURE_RUNS, anchored_start, fixture_expectations
from readback import read_chrome_json, read_pftrace

from tracemerge.pipeline import merge
from tracemerge.viewer.trace_processor import TraceProcessor, TraceProcessorUnavailable

NAMED_STATS = (
    "misplaced_end_event",
    "slice_drop_overlapping_complete_event",
    "clock_sync_failure",
    "tokenizer_skipped_packets",
    "interned_data_tokenizer_errors",
    "track_event_tokenizer_errors",
    "track_event_parser_errors",
    "json_tokenizer_failure",
    "json_parser_failure",
)
EXTENSIONS = (".pftrace", ".json", ".json.gz")


def open_trace_processor() -> TraceProcessor:
    try:
        return TraceProcessor.any()
    except TraceProcessorUnavailable as exc:
        unavailable(f"no trace_processor: {exc}", "TRACEMERGE_REQUIRE_VIEWER")


def load(path: Path) -> dict:
    """Everything the assertions need, queried in one trace_processor session."""
    with open_trace_processor() as tp:
        tp.load(path)
        q = tp.query
        return {
            "stat_names": {r["name"] for r in q("select distinct name from stats")},
            "problems": q(
                "select name, idx, severity, value from stats where severity in ('error', 'data_loss') and value > 0"
            ),
            # The input's processes and threads; the derived Pipeline and Phases tracks apart.
            "processes": q("select upid, pid, name from process where name is not null and name != 'Pipeline'"),
            "threads": q(
                "select utid, upid, tid, name from thread where name is not null and upid is not null "
                "and name != 'Phases' and upid not in (select upid from process where name = 'Pipeline')"
            ),
            # Filtered here: v52 drops a row when this filter is in the SQL (seen on kineto_gpu).
            "process_tracks": [
                r
                for r in q("select p.upid, p.name, p.id from process_track p")
                if r["name"] not in (None, "Phases", "clock alignment")
            ],
            "derived": q(
                "select s.name, s.ts, s.dur, s.category, coalesce(t.name, '') as track, p.name as process "
                "from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) "
                "join process p using (upid) where s.category like 'tracemerge.%'"
            ),
            # Input events; the clock notes tracemerge adds (category "tracemerge") apart.
            "slices": q(
                "select s.name, s.ts, s.dur, s.track_id, coalesce(t.upid, p.upid) as upid "
                "from slice s left join thread_track tt on s.track_id = tt.id "
                "left join thread t using (utid) "
                "left join process_track p on s.track_id = p.id "
                "where s.category is null or s.category not like 'tracemerge%'"
            ),
            "clock_notes": q(
                "select s.name, s.ts, p.upid, a.key, a.display_value from slice s "
                "join process_track p on s.track_id = p.id join args a using (arg_set_id) "
                "where s.category = 'tracemerge'"
            ),
            "track_thread": q("select tr.id as track_id, tt.utid from track tr left join thread_track tt using (id)"),
            "counters": q(
                "select p.upid, p.name, count(*) as n from counter c "
                "join process_counter_track p on c.track_id = p.id group by 1, 2"
            ),
            "flows": q(
                "select coalesce(t.upid, pt.upid) as upid, count(*) as n from flow f "
                "join slice s on f.slice_out = s.id "
                "left join thread_track tt on s.track_id = tt.id left join thread t using (utid) "
                "left join process_track pt on s.track_id = pt.id group by 1"
            ),
            "realtime": q(
                "select clock_value - ts as offset from clock_snapshot where clock_name = 'REALTIME' "
                "order by snapshot_id limit 1"
            ),
            "first_ts": q("select min(ts) as ts from slice")[0]["ts"],
        }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict:
    """Each fixture merged to each format and loaded once."""
    out: dict = {}
    for run in FIXTURE_RUNS:
        for ext in EXTENSIONS:
            path = tmp_path_factory.mktemp(run) / f"merged{ext}"
            merge([FIXTURES / run], path)
            out[(run, ext)] = (path, load(path))
    return out


CASES = [(run, ext) for run in FIXTURE_RUNS for ext in EXTENSIONS]


@pytest.mark.parametrize(("run", "ext"), CASES)
def test_no_import_errors_or_data_losses(loaded, run: str, ext: str) -> None:
    _, tp = loaded[(run, ext)]
    assert tp["problems"] == []
    # The stats we name are real trace_processor stats (a typo would make the check vacuous).
    known = {name for name in NAMED_STATS if name in tp["stat_names"]}
    assert known == set(NAMED_STATS)


@pytest.mark.parametrize(("run", "ext"), CASES)
def test_per_process_content_equals_the_input(loaded, run: str, ext: str) -> None:
    path, tp = loaded[(run, ext)]
    expected = fixture_expectations(FIXTURES, run)
    upid_of = {p["name"]: p["upid"] for p in tp["processes"]}
    assert sorted(upid_of) == sorted(expected)
    offset = tp["realtime"][0]["offset"] if ext == ".pftrace" else read_chrome_json(path).realtime_base
    slices_by_upid: dict = defaultdict(Counter)
    for s in tp["slices"]:
        slices_by_upid[s["upid"]][(s["name"], s["ts"] + offset, s["dur"])] += 1
    counters = Counter()
    for c in tp["counters"]:
        counters[c["upid"]] += c["n"]
    flows = {f["upid"]: f["n"] for f in tp["flows"]}
    for label, e in expected.items():
        upid = upid_of[label]
        want = Counter(e.slices)
        for (name, ts), n in e.instants.items():
            want[(name, ts, 0)] += n
        if ext != ".pftrace":  # Perfetto's JSON importer shows an empty name as "[No name]"
            want = Counter({((n or "[No name]"), t, d): c for (n, t, d), c in want.items()})
        assert slices_by_upid[upid] == want, label
        assert counters[upid] == e.counters, label
        assert flows.get(upid, 0) == e.flows, label


@pytest.mark.parametrize(("run", "ext"), CASES)
def test_process_and_thread_names_are_what_we_wrote(loaded, run: str, ext: str) -> None:
    path, tp = loaded[(run, ext)]
    ours = read_pftrace(path) if ext == ".pftrace" else read_chrome_json(path)
    theirs_processes = {p["pid"]: p["name"] for p in tp["processes"]}
    assert theirs_processes == ours.processes
    name_of_upid = {p["upid"]: p["name"] for p in tp["processes"]}
    # .pftrace writes a process's OS threads and its first track as threads (what the UI draws a
    # collapsed process with), its other tracks and the overlap lanes beside a thread as named
    # tracks of the process; Chrome JSON has threads only (lanes are threads of their own there).
    rows = [*tp["process_tracks"], *tp["threads"]] if ext == ".pftrace" else tp["threads"]
    theirs_threads = Counter((name_of_upid[t["upid"]], t["name"]) for t in rows if t["upid"] in name_of_upid)
    ours_threads = Counter((ours.processes[pid], name) for pid, name in ours.threads.values())
    assert theirs_threads == ours_threads
    if ext == ".pftrace":  # the UI titles a thread "<name> <tid>": its own tid, or its process's pid
        pid_of_upid = {p["upid"]: p["pid"] for p in tp["processes"]}
        for t in tp["threads"]:
            if t["upid"] in name_of_upid:
                assert t["tid"] == pid_of_upid[t["upid"]] or f"thread {t['tid']}" in t["name"].lower(), t


@pytest.mark.parametrize("run", FIXTURE_RUNS)
def test_wall_clock_time_of_the_first_event(loaded, run: str) -> None:
    _, tp = loaded[(run, ".pftrace")]
    expected = fixture_expectations(FIXTURES, run)
    assert tp["first_ts"] == 0  # timestamps count from the run start
    assert tp["first_ts"] + tp["realtime"][0]["offset"] == anchored_start(list(expected.values()))


def test_args_survive_as_perfetto_shows_them(tmp_path: Path) -> None:
    """Caught only by trace_processor: a bare JSON null arg crashed v52, a null inside an object
    is dropped, uint64 args showed wrapped. Args are written as one JSON object, which
    trace_processor flattens under ``debug.args``."""
    out = tmp_path / "edge.pftrace"
    merge([FIXTURES / "edge_cases"], out)
    with open_trace_processor() as tp:
        tp.load(out)
        rows = tp.query(
            "select a.key, a.display_value from slice s join args a using (arg_set_id) "
            "where s.name = 'args' and a.key like 'debug.%' order by a.key"
        )
    assert {r["key"]: r["display_value"] for r in rows} == {
        "debug.args.big": "18446744073709551615",
        "debug.args.flag": "true",
        "debug.args.flt": "1.0e+300",
        "debug.args.neg": "-5",
        "debug.args.nested.a[0]": "1",
        "debug.args.nested.a[1].b": "null",  # trace_processor drops a null even inside an object
        "debug.args.none": "null",
        "debug.args.text": "ünïcode",
    }
