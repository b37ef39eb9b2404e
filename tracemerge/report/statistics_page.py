"""The statistics reference (``docs/statistics.md``), generated from :class:`~tracemerge.core.stats.Stat`.

    python -m tracemerge.report.statistics_page > docs/statistics.md

``tests/test_docs.py`` checks that the page in the repository is what this prints, so a statistic
added to the table without the page regenerated fails the suite.
"""

from __future__ import annotations

from tracemerge.core.stats import Severity, Stat

_MEANING = {
    Severity.INFO: "nothing of the trace is lost (Perfetto would ignore it too, or it was left out as asked)",
    Severity.DATA_LOSS: "input events are not in the output: the exit status is 3",
    Severity.ERROR: "a whole file could not be used: the exit status is 3",
    Severity.FILTERED: "left out as a selection option asked (`--roles`, `--window`, `--min-dur`, `--steps`…): "
    "not a loss, listed under `filtered` in the report",
}


def statistics_markdown() -> str:
    """The page: what a statistic is, the severities, then every statistic by severity and name."""
    lines = [
        "# Statistics",
        "",
        "Every event a merge does not write is counted under one of these named statistics, with a",
        "severity, like Perfetto's `stats` table. The run output lists each statistic counted with the",
        "messages that say where (the first 20 of each), then a `statistics:` line; `--report FILE` has",
        "them under `stats`. This page is generated from `tracemerge/core/stats.py`",
        "(`python -m tracemerge.report.statistics_page > docs/statistics.md`).",
        "",
        "| severity | meaning |",
        "| --- | --- |",
    ]
    lines += [f"| `{severity.value}` | {meaning} |" for severity, meaning in _MEANING.items()]
    for severity in Severity:
        members = sorted((s for s in Stat if s.severity is severity), key=lambda s: s.value)
        lines += ["", f"## {severity.value}", "", "| statistic | what it counts |", "| --- | --- |"]
        lines += [f"| `{s.value}` | {s.description.replace('|', '/')} |" for s in members]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(statistics_markdown(), end="")
