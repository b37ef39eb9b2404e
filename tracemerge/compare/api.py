"""The library's ``diff(base, new)``: two runs compared, and the regression gate, as
``tracemerge diff`` does it (:mod:`tracemerge.compare.diff`), with a typed result."""

from __future__ import annotations

import os
from collections.abc import Container
from pathlib import Path

import msgspec

from tracemerge.analysis.summary_model import Summary, checked
from tracemerge.clock.runs import LATEST, check_pair
from tracemerge.compare.diff import compare, format_diff, format_gate, gate, parse_threshold
from tracemerge.compare.inputs import comparable, numbers_of
from tracemerge.select import parse_duration


class Row(msgspec.Struct):
    """One quantity: base and new (medians per step), their delta, the noise, whether gated."""

    kind: str  # wall, phase, idle, active or device
    role: str | None
    name: str
    base_ns: int | None
    new_ns: int | None
    delta_ns: int | None
    delta_pct: float | None
    noise_ns: int
    beyond_noise: bool
    gated: bool
    samples: int


class Gate(msgspec.Struct):
    fail_over: float  # a fraction of the base
    min_delta_ns: int
    passed: bool
    compared: int  # gated quantities with a value on both sides
    regressions: list[Row]


class KernelChange(msgspec.Struct):
    """One kernel or op of one process in both runs (None: not among that run's busiest)."""

    role: str | None
    rank: int | None
    process: str
    name: str
    base_ns: int | None
    new_ns: int | None
    delta_ns: int | None
    base_count: int | None
    new_count: int | None


class KernelChanges(msgspec.Struct):
    """The busiest kernels and ops side by side: shown, never gated."""

    rows: list[KernelChange]
    only_base: list[str]  # processes with busiest kernels in one run only
    only_new: list[str]
    gated: bool = False


class Comparison(msgspec.Struct, omit_defaults=True):
    """What :func:`diff` found (the JSON ``tracemerge diff --json`` prints)."""

    mode: str  # "paired" (step k against step k) or "steady state" (each run's median)
    steps_matched: list[int]
    steps_only_base: list[int]
    steps_only_new: list[int]
    steps_base: list[int]  # the steps each side's numbers come from
    steps_new: list[int]
    steps_not_counted: list[list[int]]  # per side: kept, but warm-up or partial
    appeared: list[str]
    vanished: list[str]
    breakdown: str | None
    rows: list[Row]
    breakdown_steps: list[int] | None = None
    gate: Gate | None = None
    kernels: KernelChanges | None = None  # the busiest kernels and ops, shown, not gated

    @property
    def passed(self) -> bool:
        """The gate's verdict (True when no gate was asked for)."""
        return self.gate is None or self.gate.passed

    def as_dict(self) -> dict:
        return msgspec.to_builtins(self)

    def format(self) -> str:
        """The table ``tracemerge diff`` prints, then the gate's lines."""
        doc = self.as_dict()
        text = format_diff(doc)
        return text if self.gate is None else text + "\n" + format_gate(doc["gate"])


Side = str | os.PathLike[str] | Summary | dict


def diff(
    base: Side,
    new: Side,
    *,
    fail_over: float | str | None = None,
    min_delta: int | str = 0,
    steps: Container[int] | None = None,
    roles: Container[str] | None = None,
    keep_warmup: bool = False,
    phase_rules: object = None,
    run: str = LATEST,
) -> Comparison:
    """NEW against BASE, each a run directory or trace files (summarized with ``phase_rules``: a
    preset's name, a rules file or a PhaseOptions), a trace tracemerge wrote, a summary JSON
    file, a :class:`Summary` or its JSON as a dict. ``fail_over`` (a fraction, or text as
    ``--fail-over`` takes it: ``"10%"``) and ``min_delta`` (ns, or text: ``"1ms"``) set the
    gate; ``steps`` and ``roles`` keep only those; ``run`` (as ``--run`` takes it: one choice for
    both, or ``"BASE:NEW"``) picks the run of a side given as a path that holds several. Raises
    ValueError on a bad option or input."""
    base_run, new_run = check_pair(run)
    sides = [_numbers(side, phase_rules, choice) for side, choice in ((base, base_run), (new, new_run))]
    result = compare(*sides, steps=steps, roles=roles, keep_warmup=keep_warmup)  # type: ignore[arg-type]
    if fail_over is not None:
        threshold = parse_threshold(fail_over) if isinstance(fail_over, str) else float(fail_over)
        least = parse_duration(min_delta) if isinstance(min_delta, str) else int(min_delta)
        result["gate"] = gate(result, threshold, least)
    return msgspec.convert(result, Comparison)


def _numbers(side: Side, phase_rules: object, run: str) -> dict:
    if isinstance(side, Summary):
        return comparable(side.as_dict(), "summary")
    if isinstance(side, dict):
        return comparable(checked(side), "summary")
    return comparable(numbers_of(Path(side), phase_rules, run=run), str(side))
