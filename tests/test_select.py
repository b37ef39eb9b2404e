"""--roles, --ranks, --window and --min-dur: exactly what is asked is left out, and counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.stats import Stat
from tracemerge.core.units import parse_duration
from tracemerge.pipeline import merge
from tracemerge.select import Selection, parse_ranks, parse_window

READ = {".pftrace": read_pftrace, ".json": read_chrome_json}


def test_durations_windows_and_rank_lists_parse() -> None:
    assert parse_duration("1.5ms") == 1_500_000
    assert parse_duration("250us") == parse_duration("250µs") == 250_000
    assert parse_duration("2") == 2_000_000_000
    assert parse_duration("2min") == 120_000_000_000
    assert parse_duration("7ns") == 7
    assert parse_window("10s:20s") == (10_000_000_000, 20_000_000_000)
    assert parse_window(":30ms") == (None, 30_000_000)
    assert parse_window("1.5s:") == (1_500_000_000, None)
    assert parse_ranks("0-2,5") == frozenset({0, 1, 2, 5})
    for bad in ("ten", "5 parsecs", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError):
        parse_window("20s:10s")
    with pytest.raises(ValueError):
        parse_ranks("3-1")


@pytest.mark.parametrize("ext", list(READ))
def test_ranks_and_roles_keep_only_those_processes(tmp_path: Path, ext: str) -> None:
    full = merge([FIXTURES / "rl_run"], tmp_path / f"full{ext}")
    kept = merge(
        [FIXTURES / "rl_run"],
        tmp_path / f"kept{ext}",
        selection=Selection(roles=frozenset({"actor"}), ranks=frozenset({1})),
    )
    rb = READ[ext](tmp_path / f"kept{ext}")
    assert sorted(rb.processes.values()) == ["actor · rank 1"]
    by_label = {p.label: p for p in full.processes}
    assert kept.written.slices == by_label["actor · rank 1"].written.slices == len(rb.slices)
    left_out = {p.label: p.written for p in full.processes if p.label != "actor · rank 1"}
    assert kept.filtered[Stat.FILTERED_PROCESS_SLICES] == sum(c.slices + c.instants for c in left_out.values())
    assert kept.exit_code == 0


@pytest.mark.parametrize("ext", list(READ))
def test_min_dur_leaves_out_exactly_the_shorter_slices(tmp_path: Path, ext: str) -> None:
    merge([FIXTURES / "kineto_gpu"], tmp_path / f"full{ext}")
    full = READ[ext](tmp_path / f"full{ext}")
    threshold = 10_000
    report = merge([FIXTURES / "kineto_gpu"], tmp_path / f"kept{ext}", selection=Selection(min_dur=threshold))
    kept = READ[ext](tmp_path / f"kept{ext}")
    expected = sorted((s.name, s.ts, s.dur) for s in full.slices if s.dur >= threshold)
    assert sorted((s.name, s.ts, s.dur) for s in kept.slices) == expected
    assert report.filtered[Stat.FILTERED_SHORT] == len(full.slices) - len(expected) > 0
    assert len(kept.instants) == len(full.instants)


@pytest.mark.parametrize("ext", list(READ))
def test_window_keeps_what_overlaps_it_relative_to_the_run_start(tmp_path: Path, ext: str) -> None:
    inputs = [FIXTURES / "rl_run"]
    merge(inputs, tmp_path / f"full{ext}")
    full = READ[ext](tmp_path / f"full{ext}")
    run_start = min(s.ts for s in [*full.slices, *full.instants])
    lo, hi = 40_000_000, 90_000_000
    report = merge(inputs, tmp_path / f"kept{ext}", selection=Selection(window=(lo, hi)))
    kept = READ[ext](tmp_path / f"kept{ext}")
    a, b = run_start + lo, run_start + hi
    expected = sorted((s.name, s.ts, s.dur) for s in full.slices if s.ts + s.dur >= a and s.ts <= b)
    assert 0 < len(expected) < len(full.slices)
    assert sorted((s.name, s.ts, s.dur) for s in kept.slices) == expected
    assert sorted((s.name, s.ts) for s in kept.instants) == sorted(
        (s.name, s.ts) for s in full.instants if a <= s.ts <= b
    )
    outside = len(full.slices) - len(expected) + len(full.instants) - len(kept.instants)
    assert report.filtered[Stat.FILTERED_OUTSIDE_WINDOW] == outside
    assert report.exit_code == 0


def test_cli_selection_options_and_bad_values(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "m.pftrace"
    result = runner.invoke(
        cli.app, ["merge", str(FIXTURES / "rl_run"), "-o", str(out), "--ranks", "0", "--min-dur", "1ms"]
    )
    assert result.exit_code == 0, result.output
    assert "left out" in result.output and "(as asked)" in result.output
    bad = runner.invoke(cli.app, ["merge", str(FIXTURES / "rl_run"), "-o", str(out), "--window", "5s"])
    assert bad.exit_code == 2
    assert "START:END" in bad.output
