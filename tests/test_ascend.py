"""Ascend profiling directories: text and DB exports, MSTX, rank/role discovery, raw-data reports."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES
from expected import exact_ns, load_json
from readback import Readback, read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.pipeline import merge
from tracemerge.select import EVERYTHING, Selection

ASCEND = FIXTURES / "ascend"
RUN = "host_101_20260101000000000_ascend_pt"
TEXT = ASCEND / "text" / "actor_update" / RUN / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
DB = ASCEND / "db" / "actor_update" / RUN / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
T0 = 1_767_225_600_000_000_000


def merged(
    tmp_path: Path, *inputs: Path, ext: str = ".pftrace", selection: Selection = EVERYTHING
) -> tuple[Readback, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"out{ext}"
    report = merge(list(inputs), out, selection=selection)
    return (read_pftrace(out) if ext == ".pftrace" else read_chrome_json(out)), report


def per_track(rb: Readback, label: str) -> Counter:
    pid = rb.pid_of(label)
    return Counter(rb.threads[s.track][1] for s in rb.slices if rb.threads[s.track][0] == pid)


def test_text_export_tracks_and_exact_times(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, ASCEND / "text")
    assert list(rb.processes.values()) == ["actor · rank 0"]
    assert per_track(rb, "actor · rank 0") == {
        "Python · Thread 4101": 4,
        "CANN · Thread 4102": 3,
        "MSTX": 1,
        "Ascend Hardware · Stream 2": 5,
        "Ascend Hardware · Stream 4": 2,
        "Ascend Hardware · Stream 4 (overlap 1)": 1,  # two SDMA copies overlap on the stream
        "HCCL · Group 0 Communication": 1,
        "HCCL · Plane 0": 1,
        "HCCL · Plane 1": 1,
        "HCCL · Plane 1 (overlap 1)": 1,
        "Overlap · Computing": 1,
        "Overlap · Communication": 1,
        "Overlap · Exposed comm": 1,  # msprof's "Communication(Not Overlapped)"
        "Overlap · Free": 1,
    }
    by_name = {s.name: s for s in rb.slices}
    assert by_name["ProfilerStep#1"].ts == T0  # ts written without decimals
    assert (by_name["MatMulV2"].ts, by_name["MatMulV2"].dur) == (T0 + 250_000, 55_161)
    assert by_name["aten::addmm"].dur == 100_123
    # MSTX: the range on the MSTX track with its domain as category, the mark as an instant
    assert (by_name["rollout_generate"].cat, by_name["rollout_generate"].dur) == ("default", 800_000)
    [mark] = rb.instants
    assert (mark.name, mark.cat, mark.ts, rb.threads[mark.track][1]) == ("weights_synced", "rl", T0 + 850_000, "MSTX")
    # torch_to_npu (id > 2**53), HostToDevice with a fan-out (one launch, two kernels), and a
    # launch whose task is stamped earlier than the call
    assert report.written.flows == report.read.flows == 5
    assert report.reversed_flows == 1
    counters = {rb.counter_tracks[t][1]: [v for _, v in vals] for t, vals in rb.counters.items()}
    assert counters == {"AI Core freq (MHz)": [1800, 1650]}
    assert report.exit_code == 0


def test_text_and_db_exports_of_one_run_give_the_same_tracks(tmp_path: Path) -> None:
    text, text_report = merged(tmp_path / "t", ASCEND / "text")
    db, db_report = merged(tmp_path / "d", ASCEND / "db")
    assert list(db.processes.values()) == ["actor · rank 0"]
    assert per_track(db, "actor · rank 0") == per_track(text, "actor · rank 0")
    key = lambda s: (s.name, s.ts, s.dur)  # noqa: E731
    assert sorted(map(key, db.slices)) == sorted(map(key, text.slices))
    assert sorted(map(key, db.instants)) == sorted(map(key, text.instants))
    assert db_report.written.as_dict() == text_report.written.as_dict()
    assert {n for _, n in db.counter_tracks.values()} == {n for _, n in text.counter_tracks.values()}


def test_every_db_timeline_row_is_written(tmp_path: Path) -> None:
    """Counted straight from the DB with SQL."""
    con = sqlite3.connect(DB)
    count = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    tasks = count("select count(*) from TASK")
    planes = count("select count(*) from TASK join COMMUNICATION_TASK_INFO using (globalTaskId)")
    slices = (
        tasks
        + planes
        + sum(
            count(f"select count(*) from {t}")
            for t in ("COMMUNICATION_OP", "CANN_API", "PYTORCH_API", "OVERLAP_ANALYSIS")
        )
    )
    ranges = count("select count(*) from MSTX_EVENTS where eventType = 2")
    marks = count("select count(*) from MSTX_EVENTS where eventType in (0, 3)")
    counters = count("select count(*) from AICORE_FREQ")
    con.close()
    _, report = merged(tmp_path, ASCEND / "db")
    assert report.written.as_dict() == {"slices": slices + ranges, "instants": marks, "counters": counters, "flows": 5}
    assert slices + ranges == 24


def test_json_output_of_ascend_runs(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, ASCEND / "text", ext=".json")
    assert report.written.slices == len(rb.slices) == 24
    # the fan-out launch carries two flows: flow events bind both
    assert report.dropped == {}
    assert report.written.flows == sum(rb.flow_links.values()) == 5


def test_level0_prune_quirk_and_role_from_metadata(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, ASCEND / "level0")
    # profiler_metadata.json names the role; profiler_info_1.json (rank_id an int) the rank
    assert list(rb.processes.values()) == ["rollout_generate · rank 1"]
    assert "CANN · Thread 4102" not in rb.thread_names("rollout_generate · rank 1")
    # HostToDevice starts whose CANN slices were pruned cannot be drawn: counted, not hidden
    assert report.dropped == {
        "flow point outside any slice on its thread": 4,
        "flow left with one endpoint after binding": 4,
    }
    assert report.written.flows == 1  # torch_to_npu survives
    assert report.exit_code == 3


def test_bare_msprof_run(tmp_path: Path) -> None:
    rb, report = merged(tmp_path, ASCEND / "prof")
    assert list(rb.processes.values()) == ["rank 2"]  # rank from device_2/info.json.2; "prof" names no role
    assert not any(name.startswith("Python") for name in rb.thread_names("rank 2"))
    assert report.written.flows == 4


def test_raw_only_directory_is_reported_with_the_parse_call(tmp_path: Path) -> None:
    raw = ASCEND / "raw" / "host_103_20260101000000000_ascend_pt"
    result = CliRunner().invoke(cli.app, [str(ASCEND), "-o", str(tmp_path / "m.pftrace")])
    assert result.exit_code == 3
    assert (
        f"skipped {raw}: raw Ascend profiling data only (no ASCEND_PROFILER_OUTPUT); parse it first with "
        f"python -c \"from torch_npu.profiler.profiler import analyse; analyse('{raw}')\""
    ) in result.output.splitlines()
    alone = CliRunner().invoke(cli.app, [str(ASCEND / "raw"), "-o", str(tmp_path / "n.pftrace")])
    assert alone.exit_code == 1
    assert "raw Ascend profiling data only" in alone.output
    assert not (tmp_path / "n.pftrace").exists()


def test_text_and_db_in_one_output_directory_are_read_once(tmp_path: Path) -> None:
    run = tmp_path / "actor_update" / RUN
    shutil.copytree(TEXT.parent.parent, run)
    shutil.copy(DB, run / "ASCEND_PROFILER_OUTPUT")
    _rb, report = merged(tmp_path / "out", tmp_path / "actor_update")
    assert report.written.slices == 24
    assert [p.name for p in report.processes[0].files] == ["trace_view.json"]
    assert run / "ASCEND_PROFILER_OUTPUT" / DB.name in report.ignored


def test_trace_view_events_are_all_written(tmp_path: Path) -> None:
    """Counted straight from trace_view.json with the standard library."""
    events = load_json(TEXT)
    xs = [e for e in events if e["ph"] == "X"]
    mstx_marks = [e for e in xs if e.get("args", {}).get("event_type") == "marker_ex"]
    rb, report = merged(tmp_path, ASCEND / "text")
    assert report.written.slices == len(xs) - len(mstx_marks)
    assert report.written.instants == len(mstx_marks)
    assert sorted(s.ts for s in rb.slices) == sorted(exact_ns(e["ts"]) for e in xs if e not in mstx_marks)


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_perfetto_reads_the_ascend_merge_as_written(tmp_path: Path, ext: str) -> None:
    from test_perfetto_conformance import load

    rb, report = merged(tmp_path, ASCEND, ext=ext)
    tp = load(tmp_path / f"out{ext}")
    assert tp["problems"] == []
    offset = tp["realtime"][0]["offset"] if ext == ".pftrace" else rb.realtime_base
    theirs = Counter((s["name"], s["ts"] + offset, s["dur"]) for s in tp["slices"])
    ours = Counter((s.name, s.ts, s.dur) for s in [*rb.slices, *rb.instants])
    assert theirs == ours
    assert sum(f["n"] for f in tp["flows"]) == report.written.flows
    assert sum(c["n"] for c in tp["counters"]) == report.written.counters


def test_rank_less_runs_of_one_role_stay_apart_and_the_run_dir_itself_keeps_its_role(tmp_path: Path) -> None:
    """Two runs without profiler_info: one process each, named after its run directory."""
    src = next((FIXTURES / "ascend" / "text").rglob("*_ascend_pt"))
    runs = []
    for host in ("nodea", "nodeb"):
        run = tmp_path / "actor" / f"{host}_1_20260101000000000_ascend_pt"
        shutil.copytree(src, run)
        for info in run.glob("profiler_info*.json"):
            info.unlink()
        runs.append(run)
    # two runs, not a copied one (a copy is merged once): their bytes differ, not their events
    view = runs[1] / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    view.write_bytes(view.read_bytes() + b"\n")
    report = merge([tmp_path], tmp_path / "out.pftrace")
    assert sorted(p.label for p in report.processes) == [f"actor · {run.name}" for run in runs]
    events = report.processes[0].read.total
    assert events > 0 and [p.read.total for p in report.processes] == [events, events]
    alone = merge([runs[0]], tmp_path / "one.pftrace")
    assert [p.label for p in alone.processes] == [f"actor · {runs[0].name}"]


def test_db_counter_ids_are_named_as_ids_not_as_strings(tmp_path: Path) -> None:
    """hbmId 0 and llcId 1 are numbers (STRING_IDS 0 and 1 are op names); moduleId is an
    ENUM_MODULE id; type and mode are STRING_IDS; no id column is drawn as a counter; tracks are
    titled as the text export's are; a series of zeros only (HBM 0 read) is left out."""
    run = tmp_path / "actor" / "host_1_20260101000000000_ascend_pt"
    shutil.copytree(next((FIXTURES / "ascend" / "db").rglob("*_ascend_pt")), run)
    [db] = run.rglob("ascend_pytorch_profiler_*.db")
    t0 = 1_767_225_600_000_000_000
    with sqlite3.connect(db) as con:
        con.execute("insert or replace into STRING_IDS values (0, 'aclnnAdd_op'), (1, 'ZerosLike'), (1399, 'read')")
        con.execute(
            "create table HBM (deviceId integer, timestampNs integer, bandwidth numeric, hbmId integer, type integer)"
        )
        con.execute(
            "create table LLC (deviceId integer, llcId integer, timestampNs integer, hitRate numeric, "
            "throughput numeric, mode integer)"
        )
        con.execute(
            "create table NPU_MODULE_MEM (deviceId integer, moduleId integer, timestampNs integer, "
            "totalReserved integer)"
        )
        con.execute("create table ENUM_MODULE (id integer primary key, name text)")
        con.execute("insert into ENUM_MODULE values (0, 'SLOG'), (7, 'HCCL')")
        for n in range(2):
            con.execute("insert into HBM values (0, ?, ?, ?, 1399)", (t0 + n, 10 * n, n))
            con.execute("insert into LLC values (0, 1, ?, 50.5, ?, 1399)", (t0 + n, 1000 * n))
            con.execute("insert into NPU_MODULE_MEM values (0, 7, ?, ?)", (t0 + n, 4096 * n))
    out = tmp_path / "out.pftrace"
    report = merge([tmp_path], out)
    names = {name for _, name in read_pftrace(out).counter_tracks.values()}
    assert names == {
        "AI Core freq (MHz)",
        "HBM 1 read (MB/s)",
        "LLC 1 read hit rate (%)",
        "LLC 1 read (MB/s)",
        "HCCL reserved (MB)",
    }
    assert report.dropped == {ZERO_REASON + "HBM": 1}


def test_db_counters_of_several_devices_lead_with_the_device(tmp_path: Path) -> None:
    """A DB holding two devices' counters: each title starts with its device, so that the two
    tracks of one counter are told apart (the tasks, all of device 0, are named as before)."""
    db = _edit_db(tmp_path, f"insert into AICORE_FREQ values (1, {T0 + 2_000}, 1700), (1, {T0 + 3_000}, 1700)")
    rb, report = merged(tmp_path / "out", db.parents[3])
    assert counter_series(rb) == {
        "NPU 0 AI Core freq (MHz)": [(T0 + 1_000, 1800), (T0 + 600_000, 1650)],
        "NPU 1 AI Core freq (MHz)": [(T0 + 2_000, 1700), (T0 + 3_000, 1700)],
    }
    assert "Ascend Hardware · Stream 2" in rb.thread_names("actor · rank 0")
    assert report.dropped == {}


COUNTERS = ASCEND / "counters"


def counter_series(rb: Readback) -> dict[str, list[tuple[int, float]]]:
    return {rb.counter_tracks[track][1]: sorted(values) for track, values in rb.counters.items()}


def csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# Each counter track of msprof's text export: its former title ("<process>: <event> <arg key>",
# the process left out where the event begins with it) -> its title.
RETITLED = {
    "AI Core Freq MHz": "AI Core freq (MHz)",
    "Acc PMU: acc_id 0 read_bandwidth": "Acc 0 read bw level",
    "Acc PMU: acc_id 0 read_ost": "Acc 0 read OST level",
    "Acc PMU: acc_id 0 write_band_width": "Acc 0 write bw level",
    "Acc PMU: acc_id 0 write_ost": "Acc 0 write OST level",
    "Acc PMU: acc_id 1 read_bandwidth": "Acc 1 read bw level",
    "Acc PMU: acc_id 1 read_ost": "Acc 1 read OST level",
    "Acc PMU: acc_id 1 write_band_width": "Acc 1 write bw level",
    "Acc PMU: acc_id 1 write_ost": "Acc 1 write OST level",
    "DDR/Read Read(MB/s)": "DDR read (MB/s)",
    "DDR/Write Write(MB/s)": "DDR write (MB/s)",
    "HBM 0/Read Read(MB/s)": "HBM 0 read (MB/s)",
    "HBM 0/Write Write(MB/s)": "HBM 0 write (MB/s)",
    "HBM 1/Read Read(MB/s)": "HBM 1 read (MB/s)",
    "HBM 1/Write Write(MB/s)": "HBM 1 write (MB/s)",
    "HCCS: Rx Rx(MB/s)": "HCCS rx (MB/s)",
    "HCCS: Tx Tx(MB/s)": "HCCS tx (MB/s)",
    "LLC 0 Read/Hit Rate Hit Rate(%)": "LLC 0 read hit rate (%)",
    "LLC 0 Read/Throughput Throughput(MB/s)": "LLC 0 read (MB/s)",
    "LLC 1 Read/Hit Rate Hit Rate(%)": "LLC 1 read hit rate (%)",
    "LLC 1 Read/Throughput Throughput(MB/s)": "LLC 1 read (MB/s)",
    "NPU MEM: APP/DDR KB": "NPU mem APP DDR (KB)",
    "NPU MEM: APP/HBM KB": "NPU mem APP HBM (KB)",
    "NPU MEM: APP/Memory KB": "NPU mem APP total (KB)",
    "NPU MEM: Device/DDR KB": "NPU mem device DDR (KB)",
    "NPU MEM: Device/HBM KB": "NPU mem device HBM (KB)",
    "NPU MEM: Device/Memory KB": "NPU mem device total (KB)",
    "PCIe_cpl Rx": "PCIe cpl rx (MB/s)",
    "PCIe_cpl Tx": "PCIe cpl tx (MB/s)",
    "PCIe_nonpost Rx": "PCIe nonpost rx (MB/s)",
    "PCIe_nonpost Tx": "PCIe nonpost tx (MB/s)",
    "PCIe_nonpost_latency Rx": "PCIe latency rx (µs)",
    "PCIe_nonpost_latency Tx": "PCIe latency tx (µs)",
    "PCIe_post Rx": "PCIe post rx (MB/s)",
    "PCIe_post Tx": "PCIe post tx (MB/s)",
    "Stars Soc Info: L2 Buffer Bw Level": "SoC L2 buffer bw level",
    "Stars Soc Info: Mata Bw Level": "SoC Mata bw level",
}
# The series of the counters fixture whose every value is 0, by the group the report names.
ZERO = {
    "Acc PMU": ["Acc 0 write bw level"],
    "NPU MEM": ["NPU mem APP DDR (KB)", "NPU mem device DDR (KB)"],
    "PCIe": ["PCIe latency rx (µs)"],
}
ZERO_REASON = "counter series zero throughout the file, left out (--keep-zero-counters keeps them): "


def test_db_counters_are_named_and_scaled_as_the_text_export_draws_them(tmp_path: Path) -> None:
    """One run's counters exported both ways (msprof's DB tables with STRING_IDS and ENUM_MODULE,
    and its counter events and CSVs): the same titles, the same values at the same nanoseconds."""
    keep = Selection(keep_zero_counters=True)
    text, text_report = merged(tmp_path / "t", COUNTERS / "text", selection=keep)
    db, db_report = merged(tmp_path / "d", COUNTERS / "db", selection=keep)
    from_text, from_db = counter_series(text), counter_series(db)
    csv_only = ("APP reserved (MB)", "HCCL reserved (MB)", "GE op allocated (MB)", "GE op reserved (MB)")
    assert {name: v for name, v in from_db.items() if name not in csv_only} == from_text
    assert sorted(from_text) == sorted(RETITLED.values())
    t = T0 + 100_000
    assert from_db["HBM 1 write (MB/s)"] == [(t, 13.5), (t + 20_000, 1037.75)]  # B/s in the DB
    # a percentage: the DB's hitRate 79.5 as it is, the text export's 0.795 times 100 (spec change: was 0.795)
    assert from_db["LLC 1 read hit rate (%)"] == [(t, 79.5), (t + 20_000, 79.5)]
    assert from_text["LLC 0 read hit rate (%)"] == [(t, 89.5), (t + 20_000, 89.5)]
    assert from_db["NPU mem device total (KB)"] == [(t, 2_212_081_665 / 1024), (t + 20_000, 2_212_085_761 / 1024)]

    # NPU module and operator memory: scaled as npu_module_mem.csv and memory_record.csv
    out = next(COUNTERS.glob("text/*/*/ASCEND_PROFILER_OUTPUT"))
    from_csv: dict[str, list] = {}
    for row in csv_rows(out / "npu_module_mem.csv"):
        name = f"{row['Component']} reserved (MB)"
        from_csv.setdefault(name, []).append((exact_ns(row["Timestamp(us)"].strip()), float(row["Total Reserved(MB)"])))
    for row in csv_rows(out / "memory_record.csv"):
        for column in ("Allocated", "Reserved"):
            value = float(row[f"Total {column}(MB)"])
            name = f"{row['Component']} op {column.lower()} (MB)"
            from_csv.setdefault(name, []).append((exact_ns(row["Timestamp(us)"].strip()), value))
    assert {name: v for name, v in from_db.items() if name in csv_only} == from_csv
    # each operator allocation and release is an instant named after the operator
    assert [(i.name, i.ts, i.args["args"]["type"], i.args["args"]["size"]) for i in db.instants] == [
        ("MatMul", t, "allocate", 4096),
        ("MatMul", t + 20_000, "release", 4096),
    ]
    assert db_report.written.counters == sum(map(len, from_db.values())) == 82
    assert (text_report.dropped, db_report.dropped) == ({}, {})

    # By default the series of zeros only are left out, counted by group (info).
    for kind, kept in (("text", from_text), ("db", from_db)):
        rb, report = merged(tmp_path / kind / "default", COUNTERS / kind)
        zero = {name for names in ZERO.values() for name in names}
        assert all(v == 0 for name in zero for _, v in kept[name])
        assert counter_series(rb) == {name: v for name, v in kept.items() if name not in zero}
        assert report.dropped == {ZERO_REASON + group: len(names) for group, names in ZERO.items()}
        assert stat_of(report, "counter_all_zero") == ("info", 4)
        assert report.exit_code == 0


# -- exports read once, damaged ones reported, DB rows kept or counted ---------------------------

PROF = ASCEND / "prof" / "PROF_000001_20260101000000000_ABCDEFGHIJKLMNOP"
MSPROF = PROF / "mindstudio_profiler_output" / "msprof_20260101000000.json"


def copy_run(tmp_path: Path, kind: str) -> Path:
    """A copy of the fixture run of ``kind`` ("text" or "db") under tmp_path/in/actor_update."""
    run = tmp_path / "in" / "actor_update" / RUN
    shutil.copytree(ASCEND / kind / "actor_update" / RUN, run)
    return run


def copy_prof(tmp_path: Path) -> Path:
    prof = tmp_path / "in" / PROF.name
    shutil.copytree(PROF, prof)
    return prof


def stat_of(report, name: str) -> tuple[str, int]:
    entry = report.as_dict()["stats"][name]
    return entry["severity"], entry["count"]


def test_msprof_json_beside_trace_view_is_claimed_and_reported_not_read(tmp_path: Path) -> None:
    """data_simplification=False keeps PROF_*/mindstudio_profiler_output/msprof_*.json, whose
    events trace_view.json already holds: read once, the other named with the reason."""
    run = copy_run(tmp_path, "text")
    msprof = run / PROF.name / "mindstudio_profiler_output" / MSPROF.name
    msprof.parent.mkdir(parents=True)
    shutil.copy(MSPROF, msprof)
    _rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert [(p.label, [f.name for f in p.files]) for p in report.processes] == [("actor · rank 0", ["trace_view.json"])]
    assert report.written.slices == 24
    assert msprof in report.ignored
    assert report.dropped == {f"same-run export not read (trace_view.json holds its events): {msprof}": 1}
    assert stat_of(report, "export_read_elsewhere") == ("info", 1)
    assert report.exit_code == 0
    named = CliRunner().invoke(cli.app, [str(msprof), "-o", str(tmp_path / "n.pftrace")])
    assert named.exit_code == 1  # named alone: nothing else to merge, and said why
    assert f"{msprof}: not read: {run / 'ASCEND_PROFILER_OUTPUT' / 'trace_view.json'} holds the same events" in (
        named.output
    )


def test_msprof_tx_and_step_trace_files_are_parts_of_msprof_json(tmp_path: Path) -> None:
    from tracemerge.discovery.discover import recognise

    prof = copy_prof(tmp_path)
    out = prof / "mindstudio_profiler_output"
    events = json.loads(MSPROF.read_text())
    tx = [e for e in events if e["ph"] == "M" and e["args"]["name"] == "python3"]
    tx += [e for e in events if "event_type" in e.get("args", {})]
    (out / "msprof_tx_20260101000000.json").write_text(json.dumps(tx))
    (out / "step_trace_20260101000000.json").write_text(json.dumps(events[:1]))
    _rb, alone = merged(tmp_path / "a", PROF)
    _rb, report = merged(tmp_path / "b", tmp_path / "in")
    assert (
        report.written.as_dict()
        == alone.written.as_dict()
        == {
            "slices": 20,
            "instants": 1,
            "counters": 2,
            "flows": 4,
        }
    )
    assert [f.name for p in report.processes for f in p.files] == [MSPROF.name]
    assert report.dropped == {
        f"same-run export not read ({MSPROF.name} holds its events): {out / name}": 1
        for name in ("msprof_tx_20260101000000.json", "step_trace_20260101000000.json")
    }
    assert report.exit_code == 0
    # without the whole timeline, the part is what there is: read as an Ascend export
    (out / MSPROF.name).unlink()
    (out / "step_trace_20260101000000.json").unlink()
    fmt = recognise(out / "msprof_tx_20260101000000.json")
    assert fmt is not None and fmt.name == "ascend-text"
    rb, report = merged(tmp_path / "c", tmp_path / "in")
    assert [(s.name, rb.threads[s.track][1]) for s in rb.slices] == [("rollout_generate", "MSTX")]
    assert report.dropped == {}


def test_bare_msprof_run_with_json_and_db_is_read_once(tmp_path: Path) -> None:
    """msprof exports a PROF_ directory as msprof_{ts}.json and msprof_{ts}.db by default: the
    text export is read, as in ASCEND_PROFILER_OUTPUT; the DB only when the text is damaged."""
    prof = copy_prof(tmp_path)
    db = prof / "msprof_20260101000000.db"
    shutil.copy(DB, db)
    _rb, alone = merged(tmp_path / "a", PROF)
    _rb, report = merged(tmp_path / "b", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[MSPROF.name]]
    assert report.written.as_dict() == alone.written.as_dict()
    assert db in report.ignored
    assert report.dropped == {f"same-run export not read ({MSPROF.name} holds its events): {db}": 1}
    assert report.exit_code == 0
    text = prof / "mindstudio_profiler_output" / MSPROF.name
    text.write_bytes(b"\0" * 4096)  # a crash left the text export zero-filled: the DB is read
    _rb, report = merged(tmp_path / "c", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[db.name]]
    assert report.written.slices == 24
    assert report.skipped == [f"{text}:1:1: not JSON: it begins with NUL bytes (a damaged export)"]


def test_sliced_msprof_export_is_read_as_one_file(tmp_path: Path) -> None:
    """msprof cuts a large export into msprof_slice_{i}_{ts}.json, each with the metadata: the
    slices are read as one file, so the HostToDevice flow cut between them is kept."""
    prof = copy_prof(tmp_path)
    out = prof / "mindstudio_profiler_output"
    (out / MSPROF.name).unlink()
    events = json.loads(MSPROF.read_text())
    header = [e for e in events if e["ph"] == "M"]
    body = [e for e in events if e["ph"] != "M"]
    cut = next(n for n, e in enumerate(body) if e["ph"] == "s") + 1  # the flow starts in slice 0 and ends in 1
    slices = [out / f"msprof_slice_{i}_20260101000000.json" for i in range(2)]
    slices[0].write_text(json.dumps(header + body[:cut]))
    slices[1].write_text(json.dumps(header + body[cut:]))
    whole, alone = merged(tmp_path / "a", PROF)
    rb, report = merged(tmp_path / "b", tmp_path / "in")
    key = lambda s: (s.name, s.ts, s.dur, rb.threads[s.track][1])  # noqa: E731
    assert sorted(map(key, rb.slices)) == sorted((s.name, s.ts, s.dur, whole.threads[s.track][1]) for s in whole.slices)
    assert report.written.as_dict() == report.read.as_dict() == alone.written.as_dict()
    assert report.written.flows == 4
    assert report.dropped == {f"export slice read with {slices[0].name}: {slices[1]}": 1}
    assert [[f.name for f in p.files] for p in report.processes] == [[slices[0].name]]
    assert report.exit_code == 0


# What a crash or a failed copy leaves of one file of an export.
DAMAGE = {
    "zero-filled": lambda data: b"\0" * len(data),
    "not JSON": lambda data: b"<html>502 Bad Gateway</html>",
    "cut": lambda data: data[: len(data) // 2],
}
OVERLAP_SLICE = (22, 26)  # the fixture's body cut so that slice 1 holds its four Overlap Analysis events


def write_slices(prof: Path, *ends: int) -> list[Path]:
    """The fixture's msprof export in place of msprof_{ts}.json, cut into slices (each with the
    metadata) before the body positions ``ends``."""
    out = prof / "mindstudio_profiler_output"
    (out / MSPROF.name).unlink()
    events = json.loads(MSPROF.read_text())
    header = [e for e in events if e["ph"] == "M"]
    body = [e for e in events if e["ph"] != "M"]
    bounds = [0, *ends, len(body)]
    slices = [out / f"msprof_slice_{i}_20260101000000.json" for i in range(len(bounds) - 1)]
    for path, start, end in zip(slices, bounds, bounds[1:], strict=False):
        path.write_text(json.dumps(header + body[start:end]))
    return slices


@pytest.mark.parametrize(("damage", "begins"), [("zero-filled", "NUL bytes"), ("not JSON", "b'<html>502 Bad Ga'")])
def test_a_damaged_slice_loses_only_its_events_when_no_other_export_is_whole(
    tmp_path: Path, damage: str, begins: str
) -> None:
    """Without another export of the run, the slices before and after the damaged one are read,
    and the damaged one is counted by name."""
    prof = copy_prof(tmp_path)
    slices = write_slices(prof, *OVERLAP_SLICE)
    slices[1].write_bytes(DAMAGE[damage](slices[1].read_bytes()))
    rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[slices[0].name]]
    assert report.written.as_dict() == {"slices": 20 - 4, "instants": 1, "counters": 2, "flows": 4}
    assert not [name for name in rb.thread_names("rank 2") if name.startswith("Overlap Analysis")]
    [mstx] = [s for s in rb.slices if s.name == "rollout_generate"]  # from slice 2
    assert (mstx.ts, mstx.dur) == (T0 + 11_000, 800_000)
    lost = f"{slices[1]}:1:1: not JSON: it begins with {begins} (a damaged export); events after it are lost"
    assert report.dropped == {
        f"{lost} (the other slices are read)": 1,
        f"export slice read with {slices[0].name}: {slices[1]}": 1,
        f"export slice read with {slices[0].name}: {slices[2]}": 1,
    }
    assert stat_of(report, "file_damaged") == ("data_loss", 1)
    assert stat_of(report, "export_read_elsewhere") == ("info", 2)
    assert report.skipped == []
    assert report.exit_code == 3


@pytest.mark.parametrize(
    ("damage", "begins"), [("zero-filled", "NUL bytes"), ("not JSON", "b'<html>502 Bad Ga'"), ("cut", None)]
)
def test_a_sliced_export_with_a_damaged_slice_gives_way_to_the_whole_db_of_the_run(
    tmp_path: Path, damage: str, begins: str | None
) -> None:
    """The export read is one that is whole: the DB holds every event the damaged slice held."""
    prof = copy_prof(tmp_path)
    slices = write_slices(prof, *OVERLAP_SLICE)
    db = prof / "msprof_20260101000000.db"
    shutil.copy(DB, db)
    slices[1].write_bytes(DAMAGE[damage](slices[1].read_bytes()))
    _rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[db.name]]
    assert report.written.as_dict() == {"slices": 24, "instants": 1, "counters": 2, "flows": 5}
    claimed = [slices[0], slices[2]] if begins else slices  # a cut slice begins as JSON: claimed too
    assert report.dropped == {f"same-run export not read ({db.name} holds its events): {p}": 1 for p in claimed}
    assert stat_of(report, "export_read_elsewhere") == ("info", len(claimed))
    if begins is None:
        assert (report.skipped, report.exit_code) == ([], 0)
    else:  # named with its damage, as any export that does not begin as one
        assert report.skipped == [f"{slices[1]}:1:1: not JSON: it begins with {begins} (a damaged export)"]
        assert report.exit_code == 3


def test_an_export_written_again_is_read_once_the_newest(tmp_path: Path) -> None:
    """Running msprof export again writes msprof_{ts}.json with a later stamp beside the first:
    the newest is read and the other claimed; a damaged newest gives way to the older one."""
    prof = copy_prof(tmp_path)
    older = prof / "mindstudio_profiler_output" / MSPROF.name
    newer = older.with_name("msprof_20260102000000.json")
    shutil.copy(MSPROF, newer)
    events = json.loads(MSPROF.read_text())
    older.write_text(json.dumps([e for e in events if "event_type" not in e.get("args", {})]))  # without MSTX
    _rb, report = merged(tmp_path / "a", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[newer.name]]
    assert report.written.as_dict() == {"slices": 20, "instants": 1, "counters": 2, "flows": 4}
    assert older in report.ignored
    assert report.dropped == {f"same-run export not read ({newer.name} holds its events): {older}": 1}
    assert stat_of(report, "export_read_elsewhere") == ("info", 1)
    assert report.exit_code == 0
    named = CliRunner().invoke(cli.app, [str(older), "-o", str(tmp_path / "n.pftrace")])
    assert named.exit_code == 1
    assert f"{older}: not read: {newer} holds the same events and is read in its place" in named.output

    newer.write_bytes(b"\0" * 4096)
    _rb, report = merged(tmp_path / "b", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[older.name]]
    assert report.written.as_dict() == {"slices": 19, "instants": 0, "counters": 2, "flows": 4}
    assert report.skipped == [f"{newer}:1:1: not JSON: it begins with NUL bytes (a damaged export)"]
    assert report.dropped == {}
    assert report.exit_code == 3


def test_of_two_msprof_dbs_of_a_prof_folder_the_newest_is_read(tmp_path: Path) -> None:
    prof = copy_prof(tmp_path)
    (prof / "mindstudio_profiler_output" / MSPROF.name).unlink()
    older, newer = (prof / f"msprof_2026010{day}000000.db" for day in (1, 2))
    for db in (older, newer):
        shutil.copy(DB, db)
    _rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[newer.name]]
    assert report.written.as_dict() == {"slices": 24, "instants": 1, "counters": 2, "flows": 5}
    assert report.dropped == {f"same-run export not read ({newer.name} holds its events): {older}": 1}
    assert report.exit_code == 0


def test_a_cut_trace_view_gives_way_to_the_whole_db_of_the_run(tmp_path: Path) -> None:
    """A trace_view.json cut while being written (it begins as JSON, so only its end tells) is not
    read when the run's DB is whole; without the DB its events before the cut are read."""
    run = copy_run(tmp_path, "text")
    output = run / "ASCEND_PROFILER_OUTPUT"
    view = output / "trace_view.json"
    view.write_bytes(DAMAGE["cut"](view.read_bytes()))
    shutil.copy(DB, output)
    _rb, report = merged(tmp_path / "a", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[DB.name]]
    assert report.written.as_dict() == {"slices": 24, "instants": 1, "counters": 2, "flows": 5}
    assert report.dropped == {f"same-run export not read ({DB.name} holds its events): {view}": 1}
    assert report.exit_code == 0
    (output / DB.name).unlink()
    _rb, report = merged(tmp_path / "b", tmp_path / "in")
    assert [[f.name for f in p.files] for p in report.processes] == [[view.name]]
    assert stat_of(report, "file_damaged") == ("data_loss", 1)
    assert report.exit_code == 3


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}


@pytest.mark.parametrize("with_shm", [False, True])
def test_wal_database_is_read_from_a_private_copy(tmp_path: Path, with_shm: bool) -> None:
    """Rows still in the -wal file are read, and nothing beside the DB is created or changed
    (opening it in place would create or rewrite its -shm file)."""
    work = tmp_path / "work.db"
    shutil.copy(DB, work)
    con = sqlite3.connect(work)
    con.execute("pragma journal_mode=wal")
    con.execute("pragma wal_autocheckpoint=0")
    con.execute(f"insert into OVERLAP_ANALYSIS values (9, 0, {T0 + 900_000}, {T0 + 901_000}, 3)")
    con.commit()
    run = copy_run(tmp_path, "db")
    out = run / "ASCEND_PROFILER_OUTPUT"
    for suffix in ("", "-wal", "-shm") if with_shm else ("", "-wal"):
        shutil.copy(work.with_name(work.name + suffix), out / (DB.name + suffix))
    con.close()
    before = _snapshot(out)
    _rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert _snapshot(out) == before
    assert report.written.slices == 25


def test_database_with_a_hot_journal_is_read_as_last_committed(tmp_path: Path) -> None:
    """A writer killed in a transaction leaves pages of it in the DB and the originals in its
    -journal: the copy is rolled back, never the input, and no half-written name is read."""
    run = copy_run(tmp_path, "db")
    db = run / "ASCEND_PROFILER_OUTPUT" / DB.name
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("pragma cache_size=1")  # so that the transaction's pages are written before commit
    con.execute("begin")
    con.execute("update STRING_IDS set value = 'torn'")
    con.execute("create table PAD (x)")
    con.executemany("insert into PAD values (?)", [(b"x" * 2000,) for _ in range(100)])
    killed = tmp_path / "killed"
    killed.mkdir()
    for name in (db.name, db.name + "-journal"):
        shutil.copy(db.with_name(name), killed / name)
    con.execute("rollback")
    con.close()
    for name in (db.name, db.name + "-journal"):
        shutil.copy(killed / name, db.with_name(name))
    before = _snapshot(db.parent)
    rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert _snapshot(db.parent) == before
    assert "torn" not in {s.name for s in rb.slices}
    assert report.written.slices == 24


def _edit_db(tmp_path: Path, *sql: str) -> Path:
    run = copy_run(tmp_path, "db")
    db = run / "ASCEND_PROFILER_OUTPUT" / DB.name
    with sqlite3.connect(db) as con:
        for statement in sql:
            con.execute(statement)
    con.close()
    return db


def test_mstx_mark_without_a_start_is_counted_and_the_rest_read(tmp_path: Path) -> None:
    _edit_db(tmp_path, "update MSTX_EVENTS set startNs = NULL where eventType = 3")
    rb, report = merged(tmp_path / "out", tmp_path / "in")
    assert (report.written.slices, report.written.instants, rb.instants) == (24, 0, [])
    assert report.dropped == {"MSTX_EVENTS row with unreadable times": 1}
    assert stat_of(report, "event_time_unreadable") == ("data_loss", 1)
    assert report.exit_code == 3


def test_task_details_without_their_task_id_are_counted_and_the_tasks_kept(tmp_path: Path) -> None:
    """COMPUTE_TASK_INFO without globalTaskId cannot name its tasks: they keep their task type
    as name; MSTX_EVENTS without startNs: its rows are counted, naming the column."""
    _edit_db(
        tmp_path,
        "create table INFO as select name, blockDim, taskType, opType from COMPUTE_TASK_INFO",
        "drop table COMPUTE_TASK_INFO",
        "alter table INFO rename to COMPUTE_TASK_INFO",
        "alter table MSTX_EVENTS drop column startNs",
    )
    rb, report = merged(tmp_path / "out", tmp_path / "in")
    stream = Counter(s.name for s in rb.slices if rb.threads[s.track][1] == "Ascend Hardware · Stream 2")
    assert stream == {"AI_CORE": 1, "AI_VECTOR_CORE": 3, "MEMCPY_ASYNC": 1}
    assert report.written.slices == 24 - 1 and report.written.instants == 0
    assert report.dropped == {
        "COMPUTE_TASK_INFO row without a globalTaskId (its task keeps its type as name)": 5,
        "MSTX_EVENTS row not read: the table has no startNs column": 2,
    }
    assert stat_of(report, "task_info_unjoined") == ("data_loss", 5)
    assert stat_of(report, "db_column_missing") == ("data_loss", 2)
    assert report.exit_code == 3


GC_PID = 4100 << 10 | 1 << 5  # torch_npu's Python GC process: (pid << 10) | (sort index 1 << 5) | device
GCS = [(T0 + 100_000, 50_000), (T0 + 700_000, 10_250)]


def test_gc_records_are_drawn_where_the_text_export_draws_them(tmp_path: Path) -> None:
    """GC_RECORD rows become the slices trace_view.json holds for them: "GC" on the Python GC
    thread of the Python GC process; memory tables kept in CSVs by the text export are counted."""
    run = copy_run(tmp_path / "t", "text")
    view = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(view.read_text())
    events += [
        {"ph": "M", "name": "process_name", "pid": GC_PID, "tid": 0, "args": {"name": "Python GC"}},
        {"ph": "M", "name": "thread_name", "pid": GC_PID, "tid": 4100, "args": {"name": "Python GC"}},
    ]
    for ts, dur in GCS:
        us = f"{ts // 1000}.{ts % 1000:03d}"
        events.append(
            {"ph": "X", "name": "GC", "pid": GC_PID, "tid": 4100, "ts": us, "dur": dur / 1000, "cat": "GC", "args": {}}
        )
    view.write_text(json.dumps(events))
    rows = ", ".join(f"({ts}, {ts + dur}, {4100 << 32 | 4100})" for ts, dur in GCS)
    _edit_db(
        tmp_path / "d",
        "create table GC_RECORD (startNs integer, endNs integer, globalTid integer)",
        f"insert into GC_RECORD values {rows}",
        "create table MEMORY_RECORD (component integer, timestamp integer, totalAllocated integer)",
        f"insert into MEMORY_RECORD values (1, {T0}, 10), (1, {T0 + 1}, 20), (2, {T0 + 2}, 30)",
        "create table OP_MEMORY (name integer, size integer, allocationTime integer, releaseTime integer)",
        f"insert into OP_MEMORY values (1, 512, {T0}, {T0 + 5})",
    )
    text, _ = merged(tmp_path / "t" / "out", tmp_path / "t" / "in")
    db, report = merged(tmp_path / "d" / "out", tmp_path / "d" / "in")
    for rb in (text, db):
        gc = [(s.name, s.cat, s.ts, s.dur) for s in rb.slices if rb.threads[s.track][1] == "Python GC"]
        assert gc == [("GC", "GC", ts, dur) for ts, dur in GCS]
    assert report.written.slices == 24 + 2
    assert report.dropped == {
        "MEMORY_RECORD rows not drawn (the text export keeps them in CSVs too)": 3,
        "OP_MEMORY rows not drawn (the text export keeps them in CSVs too)": 1,
    }
    assert stat_of(report, "db_rows_not_drawn") == ("info", 4)
    assert report.exit_code == 0


def test_damaged_exports_at_their_places_are_skipped_with_the_reason(tmp_path: Path) -> None:
    """Zero-filled by a crash, beside good ranks: named and skipped (exit 3), not passed over."""
    copy_run(tmp_path, "text")
    view = tmp_path / "in" / "actor_update" / "host_102_20260101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    db = tmp_path / "in" / "actor_update" / "host_103_20260101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    for directory, name in ((view, "trace_view.json"), (db, "ascend_pytorch_profiler_1.db")):
        directory.mkdir(parents=True)
        (directory / name).write_bytes(b"\0" * 65536)
    result = CliRunner().invoke(cli.app, [str(tmp_path / "in"), "-o", str(tmp_path / "m.pftrace")])
    assert result.exit_code == 3
    skipped = [line for line in result.output.splitlines() if line.startswith("skipped ")]
    assert skipped == [
        f"skipped {view / 'trace_view.json'}:1:1: not JSON: it begins with NUL bytes (a damaged export)",
        f"skipped {db / 'ascend_pytorch_profiler_1.db'}: not an SQLite database: it begins with NUL bytes "
        "(a damaged export)",
    ]


def test_mstx_connection_sentinels_name_no_task(tmp_path: Path) -> None:
    """4294967295 (no device link, older CANN) and 4000000000 (a legacy tx marker) link nothing:
    tasks carrying them keep their own names."""
    _edit_db(
        tmp_path,
        "update MSTX_EVENTS set connectionId = 4294967295 where eventType = 2",
        "update MSTX_EVENTS set connectionId = 4000000000 where eventType = 3",
        "update TASK set connectionId = 4294967295 where globalTaskId = 1",
        "update TASK set connectionId = 4000000000 where globalTaskId = 4",
        "delete from COMPUTE_TASK_INFO where globalTaskId in (1, 4)",
    )
    rb, report = merged(tmp_path / "out", tmp_path / "in")
    stream = sorted((s.ts, s.name) for s in rb.slices if rb.threads[s.track][1] == "Ascend Hardware · Stream 2")
    assert stream == [
        (T0 + 250_000, "MatMulV2"),
        (T0 + 320_000, "AI_VECTOR_CORE"),
        (T0 + 450_000, "Mul"),
        (T0 + 460_000, "Mul_tail"),
        (T0 + 599_000, "MEMCPY_ASYNC"),
    ]
    assert report.written.flows == 5 - 2  # tasks 1 and 4 lost their HostToDevice links with their ids
