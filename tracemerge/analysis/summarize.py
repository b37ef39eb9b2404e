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
from collections.abc import Sequence
from pathlib import Path

from tracemerge.analysis.steps import summary
from tracemerge.analysis.summary_model import Summary, from_numbers
from tracemerge.clock import AUTOMATIC, AlignOptions
from tracemerge.metrics_map import NO_MAP, MetricsMap
from tracemerge.phases.rules import AUTO_PHASES, PhaseOptions, resolve
from tracemerge.report.run_report import RunReport
from tracemerge.run.executors import Executor
from tracemerge.run.reading import Runner, asked_of, discover_inputs, read_all
from tracemerge.select import EVERYTHING
from tracemerge.store.file_layout import DEFAULT_BUDGET


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
) -> Summary:
    """The phase summary of the traces found under ``inputs``, as :func:`~tracemerge.pipeline.merge`
    would store it in its output (``report.phases``, which is ``summarize(...).as_dict()``), placed
    by ``clocks`` and derived by ``phase_rules`` as a merge would: a :class:`PhaseOptions`, or as
    ``--phases`` takes them, a preset's name (``"verl"``, ``"auto"``; None is ``"auto"``) or the
    path of a TOML rules file (ValueError when it is neither).

    ``jobs`` and ``executor`` say where files are read, as for a merge. ``report``, when given,
    receives what was found, skipped and ignored. Raises
    :class:`~tracemerge.core.errors.FatalError` when no trace file can be read.
    """
    options = (jobs, executor, clocks, phase_rules, metrics_map, memory_budget, report)
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
) -> dict:
    """:func:`summarize`'s numbers as the JSON they are made as (what the command line prints;
    no records built of them)."""
    report = report if report is not None else RunReport()
    phase_rules = phase_options(phase_rules)
    runner, asked = asked_of(None, EVERYTHING, clocks, phase_rules, metrics_map, memory_budget, jobs, executor)
    with runner, tempfile.TemporaryDirectory(prefix="tracemerge-summary-") as work:
        candidates, _named = discover_inputs(runner, inputs, Path(work) / "summary", False, report)
        first = read_all(Runner(runner, lambda _msg: None), candidates, asked, Path(work), report)
    return summary(first.model, {p.identity: p.name for p in first.plan.processes})


def phase_options(rules: PhaseOptions | str | os.PathLike[str] | None) -> PhaseOptions:
    """Phase rules as ``--phases`` names them (a preset, ``auto``, a rules file), or as given."""
    if isinstance(rules, PhaseOptions):
        return rules
    return PhaseOptions(resolve(None if rules is None else os.fspath(rules)))
