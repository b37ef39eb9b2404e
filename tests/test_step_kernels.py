"""Each step's busiest kernels and ops: a kernel's device time counted in the step it ran in (its
part in each when it runs across a step's edge), the same windows as the step's device breakdown."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from builders import kineto_device
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.evidence.kernel_tally import KernelTally
from tracemerge.phases import kernels

runner = CliRunner()
FIXTURES = Path(__file__).parent.parent / "fixtures"


def _summary(*args: str) -> dict:
    result = runner.invoke(cli.app, ["summary", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _by_step(numbers: dict, rank: int) -> dict[int, dict]:
    out = {}
    for r in numbers["step_kernels"]:
        if r["rank"] == rank:
            out[r["step"]] = {"busy": r["busy_ns"], "names": r["names"]}
            out[r["step"]].update({k["name"]: (k["total_ns"], k["count"]) for k in r["top"]})
    return out


def test_a_kernel_across_a_step_edge_counts_its_part_in_each_step(tmp_path: Path) -> None:
    kernels = [
        ("A", 7, 900, 1100),  # 100 µs in step 1, 100 µs in step 2
        ("B", 7, 1500, 1600),
        ("A", 8, 1550, 1650),  # on another stream, at once with B
        ("A", 7, 2100, 2150),
        ("Memcpy HtoD", 7, 2400, 2410),
    ]
    kineto_device(tmp_path / "rank0.pt.trace.json", 0, [(0, 1000), (1000, 2000), (2000, 3000)], kernels)
    numbers = _summary(str(tmp_path))
    steps = _by_step(numbers, 0)
    assert steps == {
        1: {"busy": 100_000, "names": 1, "A": (100_000, 1)},
        2: {"busy": 250_000, "names": 2, "A": (200_000, 2), "B": (100_000, 1)},
        3: {"busy": 60_000, "names": 2, "A": (50_000, 1), "Memcpy HtoD": (10_000, 1)},
    }
    # the busy time is the step's device breakdown's compute and communication
    breakdown = {r["step"]: r["compute_ns"] + r["communication_ns"] for r in numbers["breakdown"]}
    assert {n: s["busy"] for n, s in steps.items()} == breakdown
    # the longest first, then by name
    assert [k["name"] for k in numbers["step_kernels"][1]["top"]] == ["A", "B"]


def test_the_fixture_steps_kernels_are_its_kernels_in_each_profiler_step() -> None:
    steps = _by_step(_summary(str(FIXTURES / "kineto_gpu")), 0)
    # rank 0: each ProfilerStep launches one 120.333 µs sgemm and one 30.007 µs copy
    one = {"busy": 150_340, "names": 2, "volta_sgemm_128x64_tn": (120_333, 1)}
    one["Memcpy HtoD (Pageable -> Device)"] = (30_007, 1)
    assert steps == {1: one, 2: one}


def test_summary_lists_the_counted_steps_kernels(tmp_path: Path) -> None:
    kineto_device(tmp_path / "rank0.pt.trace.json", 0, [(0, 1000), (1000, 2000)], [("gemm", 7, 1100, 1200)])
    result = runner.invoke(cli.app, ["summary", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table = result.output.split("busiest kernels and ops per step and process")[1]
    assert "gemm" in table and "100.0 µs" in table and "100.0%" in table


def _brute(starts, durs, codes, names, windows):
    out: dict[int, dict[str, list[int]]] = {}
    for a, d, c in zip(starts, durs, codes, strict=True):
        for w, (lo, hi) in enumerate(windows):
            part = min(a + d, hi) - max(a, lo)
            if part > 0 or (d == 0 and lo <= a < hi):
                found = out.setdefault(w, {}).setdefault(names[c], [0, 0])
                found[0] += part
                found[1] += 1
    return out


@pytest.mark.parametrize("chunk", [1 << 20, 7])
def test_window_totals_match_a_kernel_by_kernel_count(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(kernels, "CHUNK", chunk)
    rng = random.Random(7)
    for trial in range(80):
        tally = KernelTally()
        for _ in range(rng.randint(1, 80)):
            start = rng.randint(0, 10_000)
            tally.add(1, (0, rng.randint(1, 3)), rng.choice("abcd"), start, rng.choice([0, 1, 5, 50, 400, 3000]))
        edges = sorted(rng.sample(range(0, 11_000), 2 * rng.randint(1, 6)))
        windows = list(zip(edges[::2], edges[1::2], strict=True))
        if trial % 3 == 0:  # overlapping windows: counted window by window
            windows.append((windows[0][0], windows[-1][1]))
        expected: dict[int, dict[str, list[int]]] = {}
        found: dict[int, dict[str, list[int]]] = {}
        for stream in tally.times.values():  # one stream at a time
            remap = np.arange(len(stream.names))
            keys, inside, counts = kernels.window_sums(stream, windows, remap, len(stream.names))
            for key, total, count in zip(keys.tolist(), inside.tolist(), counts.tolist(), strict=True):
                win, code = divmod(key, len(stream.names))
                mine = found.setdefault(win, {}).setdefault(stream.names[code], [0, 0])
                mine[0] += total
                mine[1] += count
            starts, durs = list(stream.starts), list(stream.durs)
            for w, names in _brute(starts, durs, list(stream.codes), stream.names, windows).items():
                for name, (total, count) in names.items():
                    mine = expected.setdefault(w, {}).setdefault(name, [0, 0])
                    mine[0] += total
                    mine[1] += count
        assert found == expected


def test_a_step_keeps_its_five_longest_names_then_by_name_across_streams_and_files() -> None:
    from tracemerge.core.model import Identity

    first, second = KernelTally(), KernelTally()
    for n, name in enumerate("gfedcba"):  # seven names of 10 ns in the step, on two streams
        first.add(1, (0, 7 + n % 2), name, 100 + 20 * n, 10)
    second.add(1, (0, 7), "z", 0, 30)  # another file, its own clock 1,000 ns behind: 30 ns in the step
    ident = Identity("actor", 0)
    parts = [(t, 0) for t in first.times.values()] + [(t, 1_000) for t in second.times.values()]
    found = kernels.busiest_per_step({ident: parts}, {ident: [(4, 1_000, 1_500), (5, 1_500, 2_000)]}, {ident: [100]})
    # the windows are in the first file's times shifted by 0: nothing of it falls in them
    assert found[ident][0][1].top == [("z", 30, 1)] and found[ident][1][1].top == []
    found = kernels.busiest_per_step({ident: parts}, {ident: [(4, 0, 1_030)]}, {ident: [100]})
    ((step, busiest),) = found[ident]
    assert step == 4 and busiest.busy_ns == 100 and busiest.names == 8
    assert busiest.top == [("z", 30, 1), ("a", 10, 1), ("b", 10, 1), ("c", 10, 1), ("d", 10, 1)]
