"""The order the merged trace asks the UI for, read back through Perfetto's trace_processor.

Processes: the Pipeline group first, then roles in the order of an RL step, ranks in numeric
order, whatever their number of slices. `.pftrace` asks for it with the root descriptor's
``process_ordering = EXPLICIT`` and each process's ``sibling_order_rank`` (honoured from v57),
Chrome JSON with ``process_sort_index`` (from v53); v52 lists processes by slice count, whatever a
trace says (the browser test shows that UI). Inside a process: ``Phases``, the main thread, the
other threads, then the process's other tracks. v52 lists a process's threads main thread (tid ==
pid) first, then by tid: the tids the trace gives make that order; v57+ follow the threads'
``sibling_order_rank`` (`.pftrace`) or ``thread_sort_index`` (JSON), which say the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import EPOCH_US, kineto
from conftest import FIXTURES
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official
from test_perfetto_conformance import open_trace_processor

from tracemerge.pipeline import merge

# An RL job's processes, listed as an RL step runs through them; actor rank 7 is a straggler with
# a tenth of the others' events (v52 would list it last).
ROLES = {
    "rollout": [0, 1],
    "actor-rollout-ref": [0],
    "reward": [0],
    "ref": [0],
    "critic": [0],
    "actor": list(range(12)),
    "master": [0],
}
IN_ORDER = [f"{role} · rank {rank}" for role, ranks in ROLES.items() for rank in ranks]


def _job(root: Path) -> Path:
    """One Kineto file per process, written in no particular order, each process with the OS pid
    and tid of every other (as on separate hosts)."""
    for g, (role, ranks) in enumerate(reversed(ROLES.items())):
        for rank in reversed(ranks):
            n = 3 if (role, rank) == ("actor", 7) else 30
            names = tuple(f"{role} op{k}" for k in range(n))
            kineto(
                root / role / f"rank{rank}.pt.trace.json", rank=rank, t0_us=EPOCH_US + 1000 * g + 11 * rank, names=names
            )
    return root


def _json_order(path: Path) -> tuple[list[str], dict[int, list[str]]]:
    """Processes by process_sort_index, and per pid its threads by thread_sort_index."""
    events = json.loads(path.read_bytes())["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    ranks = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    thread_ranks = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    threads: dict[int, list[str]] = {}
    for key in sorted(thread_ranks, key=lambda k: (k[0], thread_ranks[k], k[1])):
        threads.setdefault(key[0], []).append(thread_names[key])
    return [names[pid] for pid in sorted(ranks, key=ranks.get)], threads


def _thread_ranks(path: Path) -> dict[int, list[str]]:
    """Per pid, its thread descriptors in the order of their sibling_order_rank (v57+)."""
    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    ranked: dict[int, list[tuple[int, str]]] = {}
    for packet in trace.packet:
        td = packet.track_descriptor
        if packet.HasField("track_descriptor") and td.HasField("thread"):
            ranked.setdefault(td.thread.pid, []).append((td.sibling_order_rank, td.thread.thread_name))
    return {pid: [name for _, name in sorted(rows)] for pid, rows in ranked.items()}


def _v52_threads(tp_query) -> dict[str, list[str]]:
    """Per process name, its named threads as v52 lists them: main thread first, then by tid."""
    rows = tp_query(
        "select p.name as process, t.name, t.tid, t.tid = p.pid as main from thread t join process p using (upid) "
        "where t.name is not null and p.name is not null order by p.upid, main desc, t.tid"
    )
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["process"], []).append(r["name"])
    return out


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_processes_in_pipeline_order(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"job{ext}"
    report = merge([_job(tmp_path / "job")], out)
    assert [p.label for p in report.processes] == IN_ORDER
    with open_trace_processor() as tp:
        tp.load(out)
        if ext == ".pftrace":
            rows = tp.query(
                "select p.name, extract_arg(t.source_arg_set_id, 'sibling_order_rank') as rank "
                "from process_track t join process p using (upid) where t.type = 'process_track_event' "
                "and t.name is null order by rank"
            )
            assert [r["name"] for r in rows] == IN_ORDER
        else:
            assert _json_order(out)[0] == IN_ORDER
        # Each process keeps its own thread and events, though all share an OS pid and tid.
        counts = tp.query(
            "select p.name, t.tid, count(*) as n from slice s join thread_track tt on s.track_id = tt.id "
            "join thread t using (utid) join process p using (upid) group by p.upid"
        )
    assert sorted((r["name"], r["tid"], r["n"]) for r in counts) == sorted(
        (label, 11, 3 if label == "actor · rank 7" else 30) for label in IN_ORDER
    )


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_pipeline_group_first(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"rl_run{ext}"
    merge([FIXTURES / "rl_run"], out)
    expected = ["Pipeline", "rollout · rank 0", "rollout · rank 1", "reward · rank 0", "reward · rank 1"]
    expected += ["actor · rank 0", "actor · rank 1"]
    if ext == ".json":
        assert _json_order(out)[0] == expected
        return
    with open_trace_processor() as tp:
        tp.load(out)
        rows = tp.query(
            "select coalesce(p.name, t.name) as name, extract_arg(t.source_arg_set_id, 'sibling_order_rank') as rank "
            "from track t left join process p on p.upid = extract_arg(t.dimension_arg_set_id, 'upid') "
            "where (t.type = 'process_track_event' and t.name is null) "
            "or (t.parent_id is null and t.name = 'Pipeline') order by rank"
        )
    assert [r["name"] for r in rows] == expected


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
@pytest.mark.parametrize(
    ("run", "label", "threads"),
    [
        (
            "rl_run",
            "actor · rank 1",
            [
                "Phases",
                "CPU thread 2836 (python)",
                "CPU thread 2840 (pt_gloo_runloop)",
                "CPU thread 2842 (pt_gloo_runloop)",
            ],
        ),
        ("rl_run", "rollout · rank 0", ["Phases", "CPU thread 51000 (MainThread)", "CPU thread 51001"]),
        ("rl_run", "reward · rank 0", ["scorer"]),  # no thread of its own: its track stands as the main one
        ("kineto_gpu", "rank 0", ["Phases", "CPU thread 4242 (pt_main_thread)", "CPU thread 4250 (pt_autograd_0)"]),
    ],
)
def test_tracks_inside_a_process_in_order(tmp_path: Path, ext: str, run: str, label: str, threads: list[str]) -> None:
    out = tmp_path / f"{run}{ext}"
    report = merge([FIXTURES / run], out)
    [pid] = [p.pid for p in report.processes if p.label == label]
    with open_trace_processor() as tp:
        tp.load(out)
        listed = _v52_threads(tp.query)[label]
        tids = {
            r["name"]: r["tid"]
            for r in tp.query(f"select name, tid from thread where upid = (select upid from process where pid = {pid})")
        }
    if ext == ".pftrace":
        # The threads, and nothing else: the process's other tracks are titled by their names.
        assert listed == threads
        assert _thread_ranks(out)[pid] == threads
    else:  # every track is a thread: the others follow (overlap lanes last in v52, beside their thread in v57+)
        assert listed[: len(threads)] == threads
        beside = [name for name in _json_order(out)[1][pid] if "(overlap " not in name]
        assert beside == [name for name in listed if "(overlap " not in name]
    assert tids[threads[0]] == pid  # the main thread, listed first
    for name in threads[1:]:
        assert f"thread {tids[name]}" in name  # an OS thread's own tid
