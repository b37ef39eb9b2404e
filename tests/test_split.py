"""--split-by: one trace per role, host or step window, cut from the one plan of the whole run."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from readback import Readback, read_chrome_json, read_pftrace
from typer.testing import CliRunner

from tracemerge.cli.main import app
from tracemerge.core.errors import FatalError
from tracemerge.phases.rules import PhaseOptions, resolve
from tracemerge.pipeline import merge
from tracemerge.select import Selection


def _slices(rb: Readback) -> Counter:
    return Counter((s.name, s.ts, s.dur) for s in rb.slices)


def _instants(rb: Readback) -> Counter:
    return Counter((s.name, s.ts) for s in rb.instants)


def test_split_by_role_holds_every_event_of_the_whole_run_once(fixtures: Path, tmp_path: Path) -> None:
    whole = read_pftrace(_whole(fixtures / "rl_run", tmp_path / "whole.pftrace")).set_derived_apart()
    (tmp_path / "out").mkdir()
    report = merge([fixtures / "rl_run"], tmp_path / "out" / "m.pftrace", split_by="role")

    index = json.loads((tmp_path / "out" / "m.index.json").read_text())
    names = ["m.pipeline.pftrace", "m.rollout.pftrace", "m.reward.pftrace", "m.actor.pftrace"]
    assert [t["file"] for t in index["traces"]] == names
    assert report.parts == [tmp_path / "out" / n for n in [*names, "m.index.json"]]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*names, "m.index.json"])
    assert index["split_by"] == "role" and index["time_base_unix_ns"] == report.time_base_unix_ns

    parts = {t["group"]: read_pftrace(tmp_path / "out" / t["file"]).set_derived_apart() for t in index["traces"]}
    assert sorted(parts["actor"].processes.values()) == ["actor · rank 0", "actor · rank 1"]
    assert sorted(parts["reward"].processes.values()) == ["reward · rank 0", "reward · rank 1"]
    assert sorted(parts["rollout"].processes.values()) == ["rollout · rank 0", "rollout · rank 1"]
    assert [len(t["inputs"]) for t in index["traces"]] == [0, 4, 1, 2]
    assert sum((_slices(p) for p in parts.values()), Counter()) == _slices(whole)
    assert sum((_instants(p) for p in parts.values()), Counter()) == _instants(whole)
    assert sum(sum(p.flow_links.values()) for p in parts.values()) == sum(whole.flow_links.values())
    # The Phases and Pipeline tracks are in the pipeline part alone, as in the whole run.
    assert parts["pipeline"].derived == whole.derived
    assert all(not p.derived for g, p in parts.items() if g != "pipeline")
    for t in index["traces"]:
        assert t["bytes"] == (tmp_path / "out" / t["file"]).stat().st_size


def test_split_by_step_window_cuts_the_run_at_each_step(fixtures: Path, tmp_path: Path) -> None:
    whole = read_chrome_json(_whole(fixtures / "phases", tmp_path / "whole.json")).set_derived_apart()
    merge([fixtures / "phases"], tmp_path / "s.json", split_by="step-window")

    index = json.loads((tmp_path / "s.index.json").read_text())
    assert [t["file"] for t in index["traces"]] == ["s.step0.json", "s.step1.json", "s.step2.json"]
    windows = [t["window_ns"] for t in index["traces"]]
    assert windows[0][0] is None and windows[-1][1] is None
    assert [w[1] + 1 for w in windows[:-1]] == [w[0] for w in windows[1:]]  # they tile the run
    base = index["time_base_unix_ns"]
    for t, (lo, hi) in zip(index["traces"], windows, strict=True):
        part = read_chrome_json(tmp_path / t["file"]).set_derived_apart()
        start = None if lo is None else base + lo
        end = None if hi is None else base + hi
        # What --window keeps: slices that share time with the window, instants within it.
        expected = Counter(
            (s.name, s.ts, s.dur)
            for s in whole.slices
            if (start is None or (s.ts + s.dur >= start and not (s.dur > 0 and s.ts + s.dur == start)))
            and (end is None or s.ts <= end)
        )
        assert _slices(part) == expected
        assert part.derived == whole.derived
    assert sum(len(read_chrome_json(tmp_path / t["file"]).slices) for t in index["traces"]) > len(whole.slices)


def test_split_by_step_window_keeps_to_the_window_asked(fixtures: Path, tmp_path: Path) -> None:
    merge([fixtures / "phases"], tmp_path / "all.json", split_by="step-window")
    windows = [t["window_ns"] for t in json.loads((tmp_path / "all.index.json").read_text())["traces"]]
    asked = (windows[1][0] + 1_000, windows[2][0] + 2_000)  # most of step 1, the start of step 2
    merge([fixtures / "phases"], tmp_path / "s.json", split_by="step-window", selection=Selection(window=asked))
    index = json.loads((tmp_path / "s.index.json").read_text())
    assert [(t["file"], t["window_ns"]) for t in index["traces"]] == [
        ("s.step1.json", [asked[0], windows[1][1]]),
        ("s.step2.json", [windows[2][0], asked[1]]),
    ]


def test_split_by_step_window_keeps_to_the_steps_asked(fixtures: Path, tmp_path: Path) -> None:
    merge([fixtures / "phases"], tmp_path / "all.json", split_by="step-window")
    windows = [t["window_ns"] for t in json.loads((tmp_path / "all.index.json").read_text())["traces"]]
    only_step_1 = PhaseOptions(resolve("auto"), frozenset({1}))
    merge([fixtures / "phases"], tmp_path / "s.json", split_by="step-window", phase_rules=only_step_1)
    index = json.loads((tmp_path / "s.index.json").read_text())
    [part] = index["traces"]
    assert part["file"] == "s.step1.json"
    # --steps keeps the whole of step 1 (to its last rank's end, past the start of step 2: the
    # steps of this run overlap; the Steps track draws it up to step 2's start, its wall time in
    # its args), not the run.
    whole = read_chrome_json(_whole(fixtures / "phases", tmp_path / "whole.json")).set_derived_apart()
    [step] = [
        s for (process, _), found in whole.derived.items() if process == "Pipeline" for s in found if s.name == "step 1"
    ]
    base = index["time_base_unix_ns"]
    assert part["window_ns"] == [windows[1][0], step.ts + step.args.get("args", step.args)["wall_ns"] - 1 - base]
    assert windows[1][0] == step.ts - base


def test_a_file_that_changes_before_its_step_is_encoded_is_left_out_of_that_part(
    fixtures: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(fixtures / "phases", run_dir)
    victim = run_dir / "actor" / "rank0.pt.trace.json"
    report = merge(
        [run_dir], tmp_path / "s.pftrace", split_by="step-window", on_plan=lambda _: victim.write_bytes(b"garbage")
    )
    assert report.skipped == [
        f"{victim}: changed while being merged, left out of step{n} (no events)" for n in range(3)
    ]
    index = json.loads((tmp_path / "s.index.json").read_text())
    assert [t["inputs"] for t in index["traces"]] == [
        [str(run_dir / "trainer" / "spans.jsonl")],
        [str(run_dir / "trainer" / "spans.jsonl")],
        [str(run_dir / "trainer" / "spans.jsonl"), str(run_dir / "actor" / "rank1.pt.trace.json")],
    ]
    for t in index["traces"]:
        # No track of the file is declared (empty) in the part either.
        rb = read_pftrace(tmp_path / t["file"])
        assert "actor · rank 0" not in {rb.processes[pid] for pid, _ in rb.threads.values()}


def test_strict_writes_no_part_when_a_file_fails_its_step(fixtures: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(fixtures / "phases", run_dir)
    victim = run_dir / "actor" / "rank0.pt.trace.json"
    with pytest.raises(FatalError) as raised:
        merge(
            [run_dir],
            tmp_path / "s.pftrace",
            split_by="step-window",
            strict=True,
            on_plan=lambda _: victim.write_bytes(b"garbage"),
        )
    assert str(raised.value) == f"--strict: {victim}: changed while being merged, left out of step0 (no events)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_split_by_host_groups_files_by_the_host_that_wrote_them(fixtures: Path, tmp_path: Path) -> None:
    merge([fixtures / "clock" / "gloo"], tmp_path / "g.pftrace", split_by="host")
    index = json.loads((tmp_path / "g.index.json").read_text())
    groups = {t["group"]: t for t in index["traces"]}
    # No phases in a bare gloo run, but each rank numbers its steps (record_function "step<N>"):
    # the Pipeline group holds them.
    assert sorted(groups) == ["node-a", "node-b", "pipeline"]
    assert groups["node-a"]["processes"] == ["rank 0", "rank 1"]
    assert groups["node-b"]["processes"] == ["rank 2", "rank 3"]
    assert sorted(Path(p).name for p in groups["node-b"]["inputs"]) == ["rank2.pt.trace.json", "rank3.pt.trace.json"]


def test_cli_refuses_an_unknown_grouping(fixtures: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [str(fixtures / "rl_run"), "-o", str(tmp_path / "m.pftrace"), "--split-by", "x"])
    assert result.exit_code == 2
    assert "--split-by: unknown grouping 'x'" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_split_never_replaces_an_input_or_a_read_only_part(fixtures: Path, tmp_path: Path) -> None:
    # A JSON split written into the directory it reads: running it again finds its own parts
    # as inputs, and must not overwrite them (as -o would not).
    run_dir = tmp_path / "run"
    shutil.copytree(fixtures / "rl_run", run_dir)
    merge([run_dir], run_dir / "m.json", split_by="role")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name.startswith("m.")}
    result = CliRunner().invoke(app, [str(run_dir), "-o", str(run_dir / "m.json"), "--split-by", "role", "-q"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"tracemerge: error: {run_dir / 'm.pipeline.json'}: is one of the inputs; "
        "not overwriting it (use --force to replace it)"
    )
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name.startswith("m.")} == before
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".tracemerge-")]

    out = tmp_path / "out"
    out.mkdir()
    merge([fixtures / "rl_run"], out / "m.json", split_by="role")
    part = out / "m.actor.json"
    part.chmod(0o444)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = CliRunner().invoke(app, [str(fixtures / "rl_run"), "-o", str(out / "m.json"), "--split-by", "role", "-q"])
    assert result.exit_code == 1
    assert result.output.strip() == f"tracemerge: error: {part}: is read-only; not replacing it"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def _whole(run: Path, out: Path) -> Path:
    merge([run], out)
    return out


def test_groups_that_make_one_file_name_each_get_a_file_of_their_own(tmp_path: Path) -> None:

    for n, role in enumerate(["ro le", "ro_le", "index", "ro?le"]):
        # a role the data names (a span log's "role"): a folder that is no role word names none
        span = {"name": role, "start": 1_790_000_000.0 + n, "end": 1_790_000_000.5 + n, "role": role, "rank": 0}
        (tmp_path / "run" / f"r{n}").mkdir(parents=True)
        (tmp_path / "run" / f"r{n}" / "spans.jsonl").write_text(json.dumps(span) + "\n")
    report = merge([tmp_path / "run"], tmp_path / "m.json", split_by="role")
    assert report.exit_code == 0
    index = json.loads((tmp_path / "m.index.json").read_text())
    files = {t["group"]: t["file"] for t in index["traces"]}
    # Numbered in the order of their processes in the trace; the index names each file's group.
    assert files == {
        "ro le": "m.ro_le.json",
        "ro?le": "m.ro_le-2.json",
        "ro_le": "m.ro_le-3.json",
        "index": "m.index-2.json",
    }
    for group, name in files.items():  # each part holds its own group's slice
        assert [s.name for s in read_chrome_json(tmp_path / name).slices] == [group]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", "m.index.json", *files.values()])


def test_a_host_name_too_long_for_a_file_name_is_cut_and_told_apart(tmp_path: Path) -> None:
    hosts = ["h" * 100_000, "h" * 99_999]
    for n, host in enumerate(hosts):
        event = {"ph": "X", "name": f"e{n}", "pid": 1, "tid": 1, "ts": 1_790_000_000_000_000 + n, "dur": 5}
        path = tmp_path / "run" / f"rank{n}.pt.trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"hostName": host, "traceEvents": [event]}))
    report = merge([tmp_path / "run"], tmp_path / "m.pftrace", split_by="host")
    assert report.exit_code == 0
    index = json.loads((tmp_path / "m.index.json").read_text())
    assert [len(t["group"]) for t in index["traces"]] == [100_000, 99_999]
    names = [t["file"] for t in index["traces"]]
    assert [(n[:82], len(n)) for n in names] == [("m." + "h" * 80, 99)] * 2 and names[0] != names[1]
    assert sum(len(read_pftrace(tmp_path / n).slices) for n in names) == 2
