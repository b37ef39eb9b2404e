"""Names and values from data reach the terminal escaped: no folder, span role or file name can
clear the screen, colour a line or forge one; a command printed to be copied is shell-quoted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from builders import areal_jsonl, kineto
from conftest import FIXTURES
from typer.testing import CliRunner

from tracemerge.cli import main as cli
from tracemerge.core.errors import shown, terminal_text
from tracemerge.core.stats import Losses, Stat
from tracemerge.naming.paths import needs_export
from tracemerge.report.run_report import format_losses, format_table

runner = CliRunner()
HOSTILE = "x\x1b[2J\nwrote ok"
ESCAPED = "x\\x1b[2J\\nwrote ok"


def run(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def _forged(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("wrote ok")]


def test_a_file_name_with_control_characters_is_escaped_in_the_tables(tmp_path: Path) -> None:
    """A folder that is no role names no process (only the file's own rank does), so the name
    printed is the file's: escaped in the alignment table, the line it tries to start never begun."""
    kineto(tmp_path / "run" / "actor" / f"{HOSTILE}.pt.trace.json", rank=0)
    kineto(tmp_path / "run" / "actor" / "rank1.pt.trace.json", rank=1, names=("c",))
    result = run("merge", tmp_path / "run", "-o", tmp_path / "out.pftrace")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert _forged(result.output) == []
    [found] = [line for line in result.output.splitlines() if f"{ESCAPED}.pt.trace.json" in line]
    assert found.startswith("actor · rank 0  ")  # the alignment table's row of the file


def test_a_role_from_span_content_is_escaped_in_the_summary(tmp_path: Path) -> None:
    areal_jsonl(tmp_path / "run" / "traces-r0.jsonl", rank=0, role=HOSTILE)
    areal_jsonl(tmp_path / "run" / "traces-r1.jsonl", rank=1, role="actor")
    result = run("summary", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert _forged(result.output) == []
    assert f"unaligned (placed without clock evidence): actor · rank 1, {ESCAPED} · rank 0;" in result.output


def test_roles_in_a_summary_file_are_escaped_in_the_diff_table(tmp_path: Path) -> None:
    numbers = run("summary", FIXTURES / "phases", "--json")
    assert numbers.exit_code == 0
    text = numbers.output.replace('"trainer"', json.dumps(HOSTILE)).replace(
        "trainer ·", json.dumps(HOSTILE)[1:-1] + " ·"
    )
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "b.json").write_text(text)
    result = run("diff", tmp_path / "a.json", tmp_path / "b.json")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert _forged(result.output) == []
    assert sum(line.startswith(ESCAPED) for line in result.output.splitlines()) == 5  # four phases and idle


def test_format_table_escapes_every_cell() -> None:
    table = format_table([("role", "n"), (HOSTILE, "1")], left=frozenset({0}))
    assert table.splitlines() == ["role                n", "------------------  -", f"{ESCAPED}  1"]


def test_loss_messages_skipped_files_and_notes_are_one_line_each() -> None:
    losses = Losses.one(Stat.LINE_UNREADABLE, f"{HOSTILE}.jsonl:3: not JSON")
    assert format_losses(losses) == [
        "line_unreadable 1 (data_loss): lines that are not JSON or not an event",
        f"  dropped 1 input events: {ESCAPED}.jsonl:3: not JSON",
    ]


def test_terminal_text_keeps_the_tools_lines_and_escapes_the_rest() -> None:
    assert terminal_text("a\x1b[31m\tb\nc\u202e") == "a\\x1b[31m\\tb\nc\\u202e"
    assert shown("a\nb\x9b") == "a\\nb\\x9b"


def test_the_nsys_export_command_is_quoted_for_a_shell() -> None:
    name = "x; touch PWNED; echo $(id) _worker_process_1.nsys-rep"
    reason = needs_export(Path("/runs") / name)
    assert reason is not None
    command = reason.partition("export it first with ")[2]
    assert command == (
        "nsys export --type sqlite -o 'x; touch PWNED; echo $(id) _worker_process_1.sqlite' "
        "'x; touch PWNED; echo $(id) _worker_process_1.nsys-rep'"
    )
    assert shlex.split(command)[-3:] == ["-o", name.replace(".nsys-rep", ".sqlite"), name]


def test_the_nsys_hint_with_a_newline_in_its_name_stays_one_line(tmp_path: Path) -> None:
    kineto(tmp_path / "run" / "rank0.pt.trace.json", rank=0)
    (tmp_path / "run" / "a\nwrote ok $(id)_worker_process_1.nsys-rep").write_bytes(b"NSYS")
    result = run("merge", tmp_path / "run", "-o", tmp_path / "out.pftrace", "--report", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    assert _forged(result.output) == []
    skipped = [line for line in result.output.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 1
    assert skipped[0].endswith(
        "-o 'a\\nwrote ok $(id)_worker_process_1.sqlite' 'a\\nwrote ok $(id)_worker_process_1.nsys-rep'"
    )


def test_info_lines_say_only_what_belongs_to_them() -> None:
    losses = Losses()
    losses.add(Stat.FILE_SAME_CONTENT, 1, "file with the same bytes as another input, read once: b.json")
    losses.add(Stat.COUNTER_ALL_ZERO, 2, "all-zero counter series left out")
    losses.add(Stat.FLOW_END_WITHOUT_START, 1, "flow step/end without a start")
    lines = format_losses(losses)
    assert "  info: 1 file with the same bytes as another input, read once: b.json" in lines
    assert "  info: 2 all-zero counter series left out" in lines
    assert "  info: 1 flow step/end without a start (as in the input; Perfetto ignores these too)" in lines


def test_the_against_column_is_cut_and_the_report_keeps_it_whole(tmp_path: Path) -> None:
    result = run(
        "merge", FIXTURES / "frameworks" / "areal", "-o", tmp_path / "o.pftrace", "--report", tmp_path / "r.json"
    )
    assert result.exit_code == 0, result.output
    whole = [a["against"] for a in json.loads((tmp_path / "r.json").read_text())["alignment"]]
    assert max(len(a) for a in whole) == 158
    cut = [line.split("  ")[-1] for line in result.output.splitlines() if "fsdp_engine." in line]
    assert [len(c) for c in cut] == [120, 120]
    assert set(cut) <= {w[:119] + "…" for w in whole}
