"""Conformance over the real Ascend samples in ../shared/corpus/ascend (skipped when absent).

Every event of each trace_view.json and every row of the timeline tables of each profiler DB
must be in the merged output, on its (role, rank) process and track, at its exact nanosecond.
Expectations are computed here with the standard library and SQL, not with tracemerge's readers.
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.parse
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import ROOT
from expected import exact_ns, load_json
from readback import read_pftrace

from tracemerge.pipeline import merge
from tracemerge.select import Selection

CORPUS = ROOT.parent / "shared" / "corpus" / "ascend"
pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
LANE = re.compile(r" \(overlap \d+\)$")
OVERLAP = {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"}
KEEP_ZERO = Selection(keep_zero_counters=True)


def title(process: str, thread: str) -> str:
    """A slice track's title: msprof's process and thread, the thread alone when named as its
    process, Overlap Analysis shorter."""
    if process == thread:
        return process
    if process == "Overlap Analysis":
        return "Overlap · " + {"Communication(Not Overlapped)": "Exposed comm"}.get(thread, thread)
    return f"{process} · {thread}"


# Counter values per DB row, as msprof's text export draws the same data (its counter events per
# sample; for NPU_MODULE_MEM and NPU_OP_MEM the columns of npu_module_mem.csv and memory_record.csv).
TEXT_EXPORT_SAMPLES = {
    "HBM": 1,
    "LLC": 2,
    "NPU_MEM": 3,
    "AICORE_FREQ": 1,
    "SOC_BANDWIDTH_LEVEL": 2,
    "ACC_PMU": 4,
    "HCCS": 2,
    "DDR": 2,
    "PCIE": 8,
    "QOS": 1,
    "NPU_MODULE_MEM": 1,
    "NPU_OP_MEM": 2,
}
ID_AND_NAME_COLUMNS = {"deviceId", "timestampNs", "globalTid", "streamPtr", "addr", "type", "mode", "component"}


def _label(run: Path) -> str:
    """The process of a run: its rank alone, as the folders above it (level0, level1) are no role."""
    [info] = run.glob("profiler_info_*.json")
    return f"rank {int(info.stem.rsplit('_', 1)[1])}"


def text_expectations(path: Path) -> tuple[Counter, int]:
    """(track, name, ts, dur) of every X and i event, and the number of counter values."""
    events = load_json(path)
    process = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    out: Counter = Counter()
    counters = 0
    for e in events:
        if e["ph"] == "X":
            args = e.get("args", {})
            if "event_type" in args and "domain" in args:
                track = "MSTX"
            else:
                tid = e["tid"]
                track = title(process[e["pid"]], thread.get((e["pid"], tid), f"Thread {tid}"))
            out[(track, e.get("name", ""), exact_ns(e["ts"]), exact_ns(e["dur"]))] += 1
        elif e["ph"] == "C":
            # an Acc PMU event's acc_id names its accelerator, it is not a value
            counters += sum(1 for k, v in e["args"].items() if not isinstance(v, (str, bool)) and k != "acc_id")
    return out, counters


def db_expectations(path: Path) -> tuple[Counter, int]:
    con = sqlite3.connect("file:" + urllib.parse.quote(str(path)) + "?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}

    def q(sql: str) -> list:
        # A table this DB lacks holds no rows (column sets and tables differ between versions).
        missing = [t for t in re.findall(r"(?:from|join) (\w+)", sql) if t not in tables and t != "STRING_IDS"]
        return [] if missing else list(con.execute(sql))

    out: Counter = Counter()
    for start, end, stream in q("select startNs, endNs, streamId from TASK"):
        out[(f"Ascend Hardware · Stream {stream}", start, end - start)] += 1
    for start, end, plane in q(
        "select startNs, endNs, planeId from TASK join COMMUNICATION_TASK_INFO using (globalTaskId)"
    ):
        out[(f"HCCL · Plane {plane}", start, end - start)] += 1
    groups = sorted({g for (g,) in q("select s.value from COMMUNICATION_OP c join STRING_IDS s on c.groupName = s.id")})
    for start, end, group in q(
        "select startNs, endNs, s.value from COMMUNICATION_OP c join STRING_IDS s on c.groupName = s.id"
    ):
        out[(f"HCCL · Group {groups.index(group)} Communication", start, end - start)] += 1
    for start, end, tid in q("select startNs, endNs, globalTid & 4294967295 from CANN_API"):
        out[(f"CANN · Thread {tid}", start, end - start)] += 1
    for start, end, tid in q("select startNs, endNs, globalTid & 4294967295 from PYTORCH_API"):
        out[(f"Python · Thread {tid}", int(start), int(end) - int(start))] += 1
    for start, end, kind in q("select startNs, endNs, type from OVERLAP_ANALYSIS"):
        out[(title("Overlap Analysis", OVERLAP[kind]), start, end - start)] += 1
    if "MSTX_EVENTS" in tables:
        for start, end, kind in q("select startNs, endNs, eventType from MSTX_EVENTS"):
            out[("MSTX", start, 0 if kind in (0, 3) else end - start)] += 1
    for (ts,) in q("select timestampNs from NPU_OP_MEM"):
        out[("NPU OP MEM", ts, 0)] += 1  # an operator's allocation or release
    counters = 0
    for table in sorted(tables):
        cols = [r[1] for r in q(f"pragma table_info('{table}')")]
        if "timestampNs" not in cols or table in ("TASK", "MSTX_EVENTS"):
            continue
        rows = q(f'select count(*) from "{table}"')[0][0]
        if table in TEXT_EXPORT_SAMPLES:
            counters += rows * TEXT_EXPORT_SAMPLES[table]
        else:
            for col in (c for c in cols if c not in ID_AND_NAME_COLUMNS):
                counters += q(f"select count(*) from \"{table}\" where typeof(\"{col}\") in ('integer', 'real')")[0][0]
    con.close()
    return out, counters


@pytest.fixture(scope="module")
def merged_corpus(tmp_path_factory):
    """Every counter series kept (--keep-zero-counters), so that every row is drawn."""
    out = tmp_path_factory.mktemp("corpus") / "ascend.pftrace"
    report = merge([CORPUS], out, selection=KEEP_ZERO)
    return read_pftrace(out), report


def test_every_event_and_row_is_on_its_process_and_track(merged_corpus) -> None:
    rb, report = merged_corpus
    got: dict[str, Counter] = defaultdict(Counter)
    got_counters: Counter = Counter()
    for s in [*rb.slices, *rb.instants]:
        pid, track = rb.threads[s.track]
        got[rb.processes[pid]][(LANE.sub("", track), s.name, s.ts, s.dur)] += 1
    for track, values in rb.counters.items():
        got_counters[rb.processes[rb.counter_tracks[track][0]]] += len(values)

    want: dict[str, Counter] = defaultdict(Counter)
    want_counters: Counter = Counter()
    texts = sorted(CORPUS.rglob("ASCEND_PROFILER_OUTPUT/trace_view.json"))
    dbs = sorted(CORPUS.rglob("ascend_pytorch_profiler_*.db"))
    hand_edited = sorted(CORPUS.rglob("msprof_*.db"))
    assert len(texts) == 4 and len(dbs) == 4 and len(hand_edited) == 1
    for path in texts:
        events, counters = text_expectations(path)
        want[_label(path.parent.parent)].update(events)
        want_counters[_label(path.parent.parent)] += counters
    db_got: dict[str, Counter] = defaultdict(Counter)
    for label, slices in got.items():
        for (track, _name, ts, dur), n in slices.items():
            db_got[label][(track, ts, dur)] += n
    db_want: dict[str, Counter] = defaultdict(Counter)
    for path in [*dbs, *hand_edited]:
        label = _label(path.parent.parent) if path in dbs else path.name
        rows, counters = db_expectations(path)
        db_want[label].update(rows)
        want_counters[label] += counters
    for label, text_events in want.items():
        for (track, _name, ts, dur), n in text_events.items():
            db_want[label][(track, ts, dur)] += n
    # Text events with names and times; text and DB events together by track and time.
    for label, events in want.items():
        missing = events - got[label]
        assert not missing, f"{label}: {sum(missing.values())} trace_view events missing, e.g. {next(iter(missing))}"
    assert dict(db_got) == dict(db_want)
    assert got_counters == want_counters
    assert report.read.slices + report.read.instants == sum(sum(c.values()) for c in db_want.values())


def test_one_process_per_rank_and_reported_gaps(merged_corpus) -> None:
    rb, report = merged_corpus
    # the runs of both levels are ranks 0 and 1 (their folders name no role); the hand-edited DB
    # is in no run folder and its folders name no role ("msinsight" is the tool's repository):
    # it states no rank, so its file names it
    assert sorted(rb.processes.values()) == ["msprof_0.db", "rank 0", "rank 1"]
    names = rb.thread_names("rank 0")
    for expected in (
        "Python · Thread 3096504",
        "CANN · Thread 3099702",
        "Ascend Hardware · Stream 2",
        "HCCL · Group 0 Communication",
        "HCCL · Plane 0",
        "Overlap · Free",
    ):
        assert expected in names
    assert "MSTX" in rb.thread_names("msprof_0.db")
    # The 4 Level2 runs hold summaries only; the Level0 exports lost their CANN launches.
    assert len(report.skipped) == 4 and all("summaries only" in s for s in report.skipped)
    # Memory records, which the text export keeps in CSVs too, are counted, not drawn (info).
    not_drawn = Counter()
    for db in CORPUS.rglob("ascend_pytorch_profiler_*.db"):
        con = sqlite3.connect("file:" + urllib.parse.quote(str(db)) + "?mode=ro&immutable=1", uri=True)
        for table in ("MEMORY_RECORD", "OP_MEMORY"):
            not_drawn[table] += con.execute(f"select count(*) from {table}").fetchone()[0]
        con.close()
    assert not_drawn == {"MEMORY_RECORD": 4 * 990, "OP_MEMORY": 4 * 184}
    assert report.dropped == {
        "flow point outside any slice on its thread": 430,
        "flow left with one endpoint after binding": 430,
        **{f"{t} rows not drawn (the text export keeps them in CSVs too)": n for t, n in not_drawn.items()},
    }
    stats = report.as_dict()["stats"]
    assert (stats["db_rows_not_drawn"]["severity"], stats["db_rows_not_drawn"]["count"]) == ("info", 4 * (990 + 184))
    assert json.loads(json.dumps(report.as_dict()))["exit_code"] == 3


def test_perfetto_loads_the_corpus_merge_cleanly(merged_corpus, tmp_path: Path) -> None:
    from test_perfetto_conformance import load

    _rb, report = merged_corpus
    tp = load(report.output)
    assert tp["problems"] == []
    assert len(tp["slices"]) == report.written.slices + report.written.instants
    assert sum(f["n"] for f in tp["flows"]) == report.written.flows
    assert sum(c["n"] for c in tp["counters"]) == report.written.counters


@pytest.mark.parametrize("level", ["level0", "level1"])
def test_db_and_text_exports_of_one_level_draw_the_same_counters(level: str, tmp_path: Path) -> None:
    """The corpus holds a text and a DB export (of different runs) of each level: the same
    counter tracks, except the metrics one of the two exports does not hold."""
    names = {}
    for kind in ("text", "db"):
        out = tmp_path / f"{kind}.pftrace"
        merge([CORPUS / "msinsight" / "test" / "data" / "pytorch" / kind / level], out, selection=KEEP_ZERO)
        names[kind] = Counter(name for _, name in read_pftrace(out).counter_tracks.values())
    assert len(names["text"]) == 134  # 28 accelerators × 4 Acc PMU series among them
    # QoS has no table in this CANN's DB; module and operator memory are CSVs in the text export.
    assert names["text"] - names["db"] == Counter({"QoS OTHERS": 2})
    only_db = names["db"] - names["text"]
    [db] = (CORPUS / "msinsight" / "test" / "data" / "pytorch" / "db" / level).rglob("*_profiler_0.db")
    con = sqlite3.connect("file:" + urllib.parse.quote(str(db)) + "?mode=ro&immutable=1", uri=True)
    sql = "select distinct e.name from NPU_MODULE_MEM m join ENUM_MODULE e on m.moduleId = e.id"
    modules = [name for (name,) in con.execute(sql)]
    con.close()
    assert only_db == Counter(
        {f"{m} reserved (MB)": 2 for m in modules} | {f"GE op {k} (MB)": 2 for k in ("allocated", "reserved")}
    )


@pytest.mark.parametrize(
    ("export", "kept", "tracks"),
    [("text/level0", 39, 268), ("text/level1", 38, 268), ("db/level0", 46, 424), ("db/level1", 47, 424)],
)
def test_counter_series_of_zeros_are_left_out_and_titles_stay_short(
    export: str, kept: int, tracks: int, tmp_path: Path
) -> None:
    """Of each export's counter tracks (both ranks), those whose every value is 0 are left out by
    default, one count each under counter_all_zero; every title is short and says each word once."""
    run = CORPUS / "msinsight" / "test" / "data" / "pytorch" / export
    merge([run], tmp_path / "every.pftrace", selection=KEEP_ZERO)
    rb_every = read_pftrace(tmp_path / "every.pftrace")
    report = merge([run], tmp_path / "default.pftrace")
    rb = read_pftrace(tmp_path / "default.pftrace")

    def series(rb) -> dict[tuple[str, str], list]:
        return {(rb.processes[pid], name): rb.counters[t] for t, (pid, name) in rb.counter_tracks.items()}

    all_series, shown = series(rb_every), series(rb)
    assert (len(all_series), len(shown)) == (tracks, kept)
    zero = {key for key, values in all_series.items() if all(v == 0 for _, v in values)}
    assert shown == {key: values for key, values in all_series.items() if key not in zero}
    assert report.as_dict()["stats"]["counter_all_zero"]["count"] == len(zero) == tracks - kept
    for _, name in all_series:
        words = name.lower().split()
        assert len(name) <= 28 and len(words) == len(set(words)), name
