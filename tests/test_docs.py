"""The documentation holds together: every relative link resolves (file and heading), the README's
commands use only options the command line has, and the statistics page is the table's."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tracemerge.report.statistics_page import statistics_markdown

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
COMMANDS = ("merge", "summary", "diff", "check", "open", "scrape")


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    out, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+ (.*)", line)):
            out.add(_slug(m.group(1)))
    return out


def _code_lines(text: str) -> list[str]:
    """The lines inside the fenced code blocks of a Markdown text."""
    out, in_code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            out.append(line)
    return out


def test_the_readme_is_for_the_first_five_minutes() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 400
    # exactly two set-up commands: one runs the shipped example, one the test suite
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in _code_lines(setup) if line.strip()]
    assert commands == [
        "pip install . && tracemerge fixtures/rl_run -o merged.pftrace",
        'pip install ".[test]" && python -m pytest -m ""',
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute address
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


def _help(command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tracemerge", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "PATH": "", "PYTHONPATH": str(ROOT)},
    )
    return done.stdout


def _readme_invocations() -> list[tuple[str, list[str]]]:
    """(command, options) of every ``tracemerge …`` line in the README's code blocks."""
    found = []
    for line in _code_lines((ROOT / "README.md").read_text()):
        line = line.split("#", 1)[0].strip().removeprefix("$ ")
        for part in re.split(r"&&|\|\|", line):
            words = shlex.split(part.strip(), posix=True) if part.strip() else []
            if not words or words[0] != "tracemerge":
                continue
            command = words[1] if len(words) > 1 and words[1] in COMMANDS else "merge"
            found.append((command, [w.split("=", 1)[0] for w in words if w.startswith("--")]))
    return found


def test_the_readme_s_commands_use_options_the_command_line_has() -> None:
    invocations = _readme_invocations()
    assert {command for command, _ in invocations} >= {"merge", "summary", "diff", "open", "check"}
    helps = {command: _help(command) for command in {c for c, _ in invocations}}
    unknown = [(c, o) for c, options in invocations for o in options if o not in helps[c]]
    assert not unknown, unknown


def test_the_statistics_page_is_generated_from_the_table() -> None:
    page = (ROOT / "docs" / "statistics.md").read_text()
    assert page == statistics_markdown(), "regenerate: python -m tracemerge.report.statistics_page > docs/statistics.md"
