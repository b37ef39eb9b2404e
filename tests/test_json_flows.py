"""Chrome JSON keeps every flow, bound as the .pftrace output binds it, as trace_processor reads it.

Each input is merged to both formats and loaded into Perfetto's trace_processor; the flows it
finds are compared as (slice, slice) pairs, slices named by (name, time after the first slice,
duration).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from readback import read_chrome_json
from test_perfetto_conformance import open_trace_processor

from tracemerge.pipeline import merge

CORPUS = ROOT.parent / "shared" / "corpus"
HTA_NCCL = CORPUS / "torch" / "HolisticTraceAnalysis" / "tests" / "data" / "nccl_parser_config"
ASCEND_CORPUS = CORPUS / "ascend" / "msinsight" / "test" / "data" / "pytorch"
T0 = 1_700_000_000_000_000  # µs
PAIRS = (
    "select so.name as a, so.ts as a_ts, so.dur as a_dur, si.name as b, si.ts as b_ts, si.dur as b_dur "
    "from flow f join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id"
)


def flow_pairs(path: Path) -> tuple[Counter, list]:
    """The flows trace_processor finds, and its import problems."""
    with open_trace_processor() as tp:
        tp.load(path)
        first = tp.query("select min(ts) as ts from slice")[0]["ts"]
        pairs = Counter(
            (r["a"], r["a_ts"] - first, r["a_dur"], r["b"], r["b_ts"] - first, r["b_dur"]) for r in tp.query(PAIRS)
        )
        problems = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    return pairs, problems


def both_formats(tmp_path: Path, *inputs: Path) -> dict[str, tuple]:
    out = {}
    for ext in (".pftrace", ".json"):
        report = merge(list(inputs), tmp_path / f"out{ext}")
        out[ext] = (report, *flow_pairs(tmp_path / f"out{ext}"))
    return out


def kineto_with_crowded_slices(path: Path) -> Path:
    """A CPU thread where flows start on slices that share their start with shorter ones (step ⊃
    aten::mm ⊃ cudaLaunchKernel, all at 0), two flows on one launch, and two kernels that each end
    two flows: every slice carries flows beyond one, and the JSON needs B/E for the crowded ones."""
    cpu, gpu = {"pid": 10, "tid": 11}, {"pid": 0, "tid": 7}

    def x(name: str, at: int, dur: int, where: dict) -> dict:
        return {"ph": "X", "name": name, "ts": T0 + at, "dur": dur, "cat": "cpu_op", **where}

    def flow(ph: str, fid: int, at: int, where: dict) -> dict:
        return {"ph": ph, "id": fid, "ts": T0 + at, "cat": "ac2g", "name": "ac2g", "bp": "e", **where}

    events = [
        x("step", 0, 100, cpu),
        x("aten::mm", 0, 60, cpu),
        x("cudaLaunchKernel", 0, 10, cpu),
        {"ph": "i", "s": "t", "name": "mark", "ts": T0, **cpu},
        x("kernel_a", 200, 50, gpu),
        x("kernel_b", 300, 20, gpu),
        flow("s", 1, 5, cpu),  # cudaLaunchKernel → kernel_a
        flow("s", 4, 6, cpu),  # cudaLaunchKernel → kernel_b
        flow("s", 3, 30, cpu),  # aten::mm → kernel_b
        flow("s", 2, 80, cpu),  # step → kernel_a
        flow("f", 1, 200, gpu),
        flow("f", 2, 210, gpu),
        flow("f", 3, 300, gpu),
        flow("f", 4, 305, gpu),
    ]
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return path


def test_every_flow_of_crowded_slices_survives_in_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    kineto_with_crowded_slices(run / "rank0.pt.trace.json")
    got = both_formats(tmp_path, run)
    pftrace_report, pftrace_pairs, pftrace_problems = got[".pftrace"]
    json_report, json_pairs, json_problems = got[".json"]
    assert pftrace_pairs == {
        ("cudaLaunchKernel", 0, 10_000, "kernel_a", 200_000, 50_000): 1,
        ("cudaLaunchKernel", 0, 10_000, "kernel_b", 300_000, 20_000): 1,
        ("aten::mm", 0, 60_000, "kernel_b", 300_000, 20_000): 1,
        ("step", 0, 100_000, "kernel_a", 200_000, 50_000): 1,
    }
    assert json_pairs == pftrace_pairs
    assert (pftrace_problems, json_problems) == ([], [])
    assert json_report.written.flows == pftrace_report.written.flows == 4
    assert json_report.dropped == {}
    # the slices sharing a start with a flow-carrying one are B/E pairs, read back as they nest
    rb = read_chrome_json(tmp_path / "out.json")
    assert sorted((s.name, s.depth) for s in rb.slices) == [
        ("aten::mm", 1),
        ("cudaLaunchKernel", 2),
        ("kernel_a", 0),
        ("kernel_b", 0),
        ("step", 0),
    ]
    assert sum(rb.flow_links.values()) == 4


@pytest.mark.parametrize("inputs", ["ascend_fixture", "hta_nccl", "ascend_corpus"])
def test_json_and_pftrace_draw_the_same_flows(tmp_path: Path, inputs: str) -> None:
    path = {"ascend_fixture": FIXTURES / "ascend", "hta_nccl": HTA_NCCL, "ascend_corpus": ASCEND_CORPUS}[inputs]
    if not path.is_dir():
        pytest.skip(f"no corpus at {path}")
    got = both_formats(tmp_path, path)
    pftrace_report, pftrace_pairs, _ = got[".pftrace"]
    json_report, json_pairs, json_problems = got[".json"]
    assert json_pairs == pftrace_pairs
    assert json_problems == []
    assert json_report.written.flows == pftrace_report.written.flows == sum(pftrace_pairs.values())
    assert not [reason for reason in json_report.dropped if reason.startswith("flows beyond")]


def _x(name: str, at: int, dur: int, where: dict, **flow) -> dict:
    return {"ph": "X", "name": name, "cat": "op", "ts": T0 + at, "dur": dur, **where, **flow}


CPU, GPU = {"pid": 10, "tid": 11}, {"pid": 0, "tid": 7}


def test_bind_id_flows_join_the_slices_trace_processor_joins(tmp_path: Path) -> None:
    """Flow v2 (``bind_id`` with ``flow_out`` / ``flow_in`` on X events), on the outermost and on the
    innermost of slices sharing a start, a chain through a slice with both, an id as hex text."""
    events = [
        _x("step", 0, 100, CPU, bind_id=1001, flow_out=True),
        _x("aten::mm", 0, 60, CPU),
        _x("launch", 0, 10, CPU, bind_id=1002, flow_out=True),
        _x("kernel_a", 200, 50, GPU, bind_id=1001, flow_in=True),
        _x("kernel_b", 300, 20, GPU, bind_id=1002, flow_in=True, flow_out=True),
        _x("kernel_c", 400, 20, GPU, bind_id=1002, flow_in=True),
        _x("copy", 500, 5, CPU, bind_id="0x3f0", flow_out=True),
        _x("kernel_d", 600, 5, GPU, bind_id=1008, flow_in=True),
        _x("plain", 700, 5, CPU, bind_id=1009),  # no direction: no flow (Perfetto draws none either)
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    expected = {
        ("step", 0, 100_000, "kernel_a", 200_000, 50_000): 1,
        ("launch", 0, 10_000, "kernel_b", 300_000, 20_000): 1,
        ("kernel_b", 300_000, 20_000, "kernel_c", 400_000, 20_000): 1,
        ("copy", 500_000, 5_000, "kernel_d", 600_000, 5_000): 1,
    }
    assert flow_pairs(path)[0] == expected  # trace_processor reading the input itself
    for ext, (report, pairs, problems) in both_formats(tmp_path, path).items():
        assert (pairs, problems) == (expected, []), ext
        assert report.written.flows == 4
        assert report.dropped == {"bind_id flow on a slice without flow_in or flow_out": 1}
        assert report.exit_code == 0


def test_a_bind_id_flow_on_a_slice_between_others_starting_with_it_is_counted(tmp_path: Path) -> None:
    events = [
        _x("step", 0, 100, CPU),
        _x("aten::mm", 0, 60, CPU, bind_id=7, flow_out=True),
        _x("launch", 0, 10, CPU),
        _x("kernel", 200, 50, GPU, bind_id=7, flow_in=True),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    report = merge([path], tmp_path / "out.pftrace")
    assert report.dropped == {
        "bind_id flow on a slice nested in one that starts with it (not bound)": 1,
        "flow step/end without a start": 1,
    }
    assert report.written.flows == 0


def test_id2_flows_are_drawn_from_typed_batches(tmp_path: Path) -> None:
    """``id2`` ({"local": ...} or {"global": ...}) instead of ``id`` on s / f events."""

    def flow(ph: str, id2: dict, at: int, where: dict) -> dict:
        return {"ph": ph, "id2": id2, "ts": T0 + at, "cat": "c", "name": "f", "bp": "e", **where}

    events = [
        _x("op", 0, 10, CPU),
        _x("kernel", 100, 10, GPU),
        flow("s", {"local": "0x5"}, 1, CPU),
        flow("f", {"local": "0x5"}, 100, GPU),
        flow("s", {"global": "0x6"}, 2, CPU),
        flow("f", {"global": "0x6"}, 105, GPU),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for ext, (report, pairs, problems) in both_formats(tmp_path, path).items():
        assert (pairs, problems) == ({("op", 0, 10_000, "kernel", 100_000, 10_000): 2}, []), ext
        assert (report.written.flows, report.dropped) == (2, {})


def _pair(n: int, out_id: object, in_id: object, **flags: object) -> list[dict]:
    """A slice on the CPU thread and one on the GPU stream, bound by ``bind_id`` with ``flags``
    (``flow_out`` / ``flow_in``: true unless given)."""
    out_flag, in_flag = flags.get("flow_out", True), flags.get("flow_in", True)
    return [
        _x(f"out{n}", 100 * n, 10, CPU, bind_id=out_id, flow_out=out_flag),
        _x(f"in{n}", 100 * n + 50, 10, GPU, bind_id=in_id, flow_in=in_flag),
    ]


def test_bind_id_flows_are_read_as_trace_processor_reads_them(tmp_path: Path) -> None:
    """Only JSON true is a direction (1 and "true" are not); an id is an integer of 64 bits, or
    hexadecimal text, compared as unsigned 64 bits (5.0 is none)."""
    events = [
        *_pair(0, 5, 5),
        *_pair(1, 11, 11, flow_out=1, flow_in=1),
        *_pair(2, 12, 12, flow_out="true", flow_in="true"),
        *_pair(3, 13.0, 13.0),
        *_pair(4, "0x0e", 14),
        *_pair(5, "10", 16),  # text is hexadecimal, always
        *_pair(6, -5, "fffffffffffffffb"),
        *_pair(7, 1 << 63, "8000000000000000"),  # an integer beyond 64 signed bits is no id
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    expected = {(f"out{n}", 100_000 * n, 10_000, f"in{n}", 100_000 * n + 50_000, 10_000): 1 for n in (0, 4, 5, 6)}
    assert flow_pairs(path)[0] == expected  # trace_processor reading the input itself
    for ext, (report, pairs, problems) in both_formats(tmp_path, path).items():
        assert (pairs, problems) == (expected, []), ext
        assert report.written.flows == 4
        assert report.dropped == {
            "bind_id flow on a slice without flow_in or flow_out": 4,
            "bind_id flow event without id (bind_id neither an integer nor hexadecimal text)": 3,
            "flow step/end without a start": 1,
        }


def test_a_flow_in_of_1_beside_a_true_flow_out_ends_the_flow_there(tmp_path: Path) -> None:
    """``flow_in: true, flow_out: 1`` ends the flow on that slice (a later flow_in ends it again)."""
    other = {"pid": 0, "tid": 8}
    events = [
        _x("a", 0, 10, CPU, bind_id=9, flow_out=True),
        _x("b", 100, 10, GPU, bind_id=9, flow_in=True, flow_out=1),
        _x("c", 200, 10, other, bind_id=9, flow_in=True),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    expected = {("a", 0, 10_000, "b", 100_000, 10_000): 1, ("a", 0, 10_000, "c", 200_000, 10_000): 1}
    assert flow_pairs(path)[0] == expected
    for ext, (report, pairs, problems) in both_formats(tmp_path, path).items():
        assert (pairs, problems, report.written.flows, report.dropped) == (expected, [], 2, {}), ext
