"""The library's ``summarize(inputs)``: where each RL step's time went, without writing a trace.

It runs the stages a merge runs up to the phases (discover → read → align → derive phases) and
returns the numbers a merge stores in its trace (:func:`~tracemerge.analysis.steps.summary`, as a
typed :class:`~tracemerge.analysis.summary_model.Summary`): per
step wall time and who held it up, per role and phase totals, the device breakdown and the
critical path. Nothing is encoded and nothing is written outside a temporary folder for the files
a large read spills. ``tracemerge summary RUN_DIR`` and ``tracemerge diff`` call it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from tracemerge.analysis.steps import summary
from tracemerge.analysis.summary_model import Summary, from_numbers
from tracemerge.clock import AUTOMATIC, AlignOptions
from tracemerge.clock.runs import ALL, LATEST, held
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.phases.rules import AUTO_PHASES, PhaseOptions, resolve
from tracemerge.report.findings import Findings, joined, tell
from tracemerge.report.run_report import RunReport
from tracemerge.run.executors import Executor
from tracemerge.run.reading import (
    Asked,
    FirstRead,
    Runner,
    asked_of,
    discover_inputs,
    read_all,
    read_each_run,
    with_archives,
)
from tracemerge.select import EVERYTHING
from tracemerge.store.file_layout import DEFAULT_BUDGET

T = TypeVar("T")


def summarize(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    jobs: int = 0,
    executor: Executor | None = None,
    clocks: AlignOptions = AUTOMATIC,
    phase_rules: PhaseOptions | str | os.PathLike[str] | None = AUTO_PHASES,
    metrics_map: MetricsMap = NO_MAP,
    memory_budget: int = DEFAULT_BUDGET,
    report: RunReport | None = None,
    run: str = LATEST,
) -> Summary:
    """The phase summary of the traces found under ``inputs``, as :func:`~tracemerge.pipeline.merge`
    would store it in its output (``report.phases``, which is ``summarize(...).as_dict()``), placed
    by ``clocks`` and derived by ``phase_rules`` as a merge would: a :class:`PhaseOptions`, or as
    ``--phases`` takes them, a preset's name (``"verl"``, ``"auto"``; None is ``"auto"``) or the
    path of a TOML rules file (ValueError when it is neither).

    ``jobs`` and ``executor`` say where files are read, as for a merge. ``report``, when given,
    receives what was found, skipped and ignored, and the runs among the inputs (``run`` says
    which is summarized, as for a merge; ``"all"`` here is :func:`summarize_each`). Raises
    :class:`~tracemerge.core.errors.FatalError` when no trace file can be read.
    """
    options = (jobs, executor, clocks, phase_rules, metrics_map, memory_budget, report, run)
    return from_numbers(summary_numbers(inputs, *options))


def summary_numbers(
    inputs: Sequence[str | os.PathLike[str]],
    jobs: int = 0,
    executor: Executor | None = None,
    clocks: AlignOptions = AUTOMATIC,
    phase_rules: PhaseOptions | str | os.PathLike[str] | None = AUTO_PHASES,
    metrics_map: MetricsMap = NO_MAP,
    memory_budget: int = DEFAULT_BUDGET,
    report: RunReport | None = None,
    run: str = LATEST,
) -> dict:
    """:func:`summarize`'s numbers as the JSON they are made as (what the command line prints;
    no records built of them)."""
    phase_rules = phase_options(phase_rules)
    runner, asked = asked_of(None, EVERYTHING, clocks, phase_rules, metrics_map, memory_budget, jobs, executor, run)
    found, first = _read(inputs, runner, asked, read_all)
    if report is not None:
        tell(report, joined(found, first.findings))
    numbers = _numbers(first)
    if (runs_held := held(first.findings.runs)) is not None:  # which of the inputs' runs it is of
        numbers["run"] = runs_held
    return numbers


def phase_options(rules: PhaseOptions | str | os.PathLike[str] | None) -> PhaseOptions:
    """Phase rules as ``--phases`` names them (a preset, ``auto``, a rules file), or as given."""
    if isinstance(rules, PhaseOptions):
        return rules
    return PhaseOptions(resolve(None if rules is None else os.fspath(rules)))


def summarize_each(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    clocks: AlignOptions = AUTOMATIC,
    phase_rules: PhaseOptions | str | os.PathLike[str] | None = AUTO_PHASES,
    report: RunReport | None = None,
) -> list[tuple[int | None, dict]]:
    """The summary numbers of each run among ``inputs`` (:mod:`tracemerge.clock.runs`), each placed
    and derived on its own, in time order: (the run's number, its numbers); one entry, numbered
    None, when the inputs hold one run."""
    rules = phase_options(phase_rules)
    runner, asked = asked_of(None, EVERYTHING, clocks, rules, NO_MAP, DEFAULT_BUDGET, 0, None, ALL)
    found, (each, read_said) = _read(inputs, runner, asked, read_each_run)
    if report is not None:
        tell(report, joined(found, read_said))
    return [(None if one is None else one.number, _numbers(first)) for one, first in each]


def _read(
    inputs: Sequence[str | os.PathLike[str]], runner: Executor, asked: Asked, reader: Callable[..., T]
) -> tuple[Findings, T]:
    """What ``reader`` (:func:`read_all` or :func:`read_each_run`) makes of the files found under
    ``inputs`` (archives expanded), read in a temporary folder that is gone afterwards; and what
    finding them said."""
    with runner, tempfile.TemporaryDirectory(prefix="tracemerge-summary-") as work:
        found = discover_inputs(runner, inputs, Path(work) / "summary", False, lambda: Path(work))
        asked = with_archives(asked, found.unpacked)
        return found.findings, reader(
            Runner(runner, lambda _msg: None), found.candidates, asked, Path(work), found.findings
        )


def _numbers(first: FirstRead) -> dict:
    """The summary numbers of what one read derived, processes named as the plan names them."""
    return summary(first.model, {p.identity: p.name for p in first.plan.processes})
