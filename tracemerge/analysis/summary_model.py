"""The phase summary as typed records: what ``summarize()`` returns, what ``tracemerge summary``
prints and ``--json`` serialises, what a merged trace stores and ``diff`` reads back.

Each record's fields are the keys of the summary's JSON, so a summary converts both ways without
loss (:func:`from_numbers`, :meth:`Summary.as_dict`). A key an older tracemerge did not write is
:data:`msgspec.UNSET` and stays absent when written again. Reading checks every value's type and
range: a summary of another shape is refused with one line naming the place
(:class:`NotASummary`), never a ``KeyError`` later.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from tracemerge.analysis.role_totals import retotalled

# Times are int64 nanoseconds, as in every trace (a count or a time beyond is no summary's).
Ns = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
Count = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Fraction = Annotated[float, Meta(ge=-1e300, le=1e300)]  # a finite number (NaN fails both bounds)


class NotASummary(ValueError):
    """A document that is no phase summary tracemerge reads: the message says where and why."""


class _Record(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    pass


class Who(_Record):
    """A process named in a step's row: the one holding it up, or the one starting it last."""

    role: str | None
    rank: int | None
    process: str
    ns: Ns | None  # None: withheld (a figure that cannot be true, said in ``withheld``)
    phase: str | UnsetType | None = UNSET
    cause: str | UnsetType = UNSET  # started late, slower phase, waiting on a role
    cause_ns: Ns | UnsetType | None = UNSET


class StepRow(_Record):
    """One job step: its window and wall time, and (from the step-counting contract) its period,
    whether it is partial or a warm-up, and whether it is counted in means and gates."""

    step: Ns
    wall_ns: Ns
    start_ns: Ns | UnsetType = UNSET
    end_ns: Ns | UnsetType = UNSET
    period_ns: Ns | UnsetType | None = UNSET
    partial: bool | UnsetType = UNSET
    warmup: bool | UnsetType = UNSET
    counted: bool | UnsetType = UNSET
    start_skew_ns: Ns | UnsetType = UNSET
    end_skew_ns: Ns | UnsetType = UNSET
    critical: Who | UnsetType = UNSET
    late: Who | UnsetType = UNSET


class HeldUp(_Record):
    rank: int | None
    process: str
    ns: Ns
    steps: Count


class PhaseNumbers(_Record):
    total_ns: Ns
    share: Fraction
    mean_ns: Ns
    max_ns: Ns
    p50_ns: Ns | UnsetType | None = UNSET
    p90_ns: Ns | UnsetType | None = UNSET
    critical: HeldUp | UnsetType | None = UNSET
    late: HeldUp | UnsetType | None = UNSET


class RoleNumbers(_Record):
    """A role's numbers: per phase and idle; a role without phases has its active time alone."""

    ranks: Count
    phases: dict[str, PhaseNumbers]
    step_ns: Ns | UnsetType = UNSET
    idle_ns: Ns | UnsetType = UNSET
    idle_fraction: Fraction | UnsetType = UNSET
    not_profiled_ns: Ns | UnsetType = UNSET  # step time no profiler recorded: not idle
    not_profiled_fraction: Fraction | UnsetType = UNSET
    active_ns: Ns | UnsetType = UNSET


class ProcessStep(_Record):
    step: Ns
    dur_ns: Ns
    idle_ns: Ns
    phases_ns: dict[str, Ns]
    not_profiled_ns: Ns | UnsetType = UNSET


class ProcessRow(_Record):
    process: str
    role: str | None
    rank: int | None
    steps: list[ProcessStep]
    preset: str | UnsetType = UNSET


class DeviceRow(_Record):
    """One process's device time in one step (:mod:`tracemerge.phases.device_time`); ``step``
    is None for a process without steps (its whole active window)."""

    role: str | None
    rank: int | None
    step: Ns | None
    wall_ns: Ns
    compute_ns: Ns
    communication_ns: Ns
    overlapped_ns: Ns
    free_ns: Ns
    wait_ns: Ns | UnsetType | None = UNSET  # None: withheld (longer than its step)
    preparing_ns: Ns | UnsetType = UNSET
    closing_ns: Ns | UnsetType = UNSET
    process: str | UnsetType = UNSET


class KernelRow(_Record):
    """One kernel or op of a process: its count, total device time, and share of the process's
    device busy time."""

    name: str
    count: Count
    total_ns: Ns
    share: Fraction


class ProcessKernels(_Record):
    """A process's busiest kernels and ops over its whole profiled time
    (:mod:`tracemerge.phases.kernels`): the longest first; ``names``: how many it ran in all."""

    role: str | None
    rank: int | None
    process: str
    busy_ns: Ns
    names: Count
    top: list[KernelRow]


class StepKernels(_Record):
    """A process's busiest kernels and ops in one step (:func:`tracemerge.phases.kernels.busiest_per_step`):
    the longest first, each with its time in the step; ``busy_ns``: the process's device busy time
    in the step; ``names``: how many it ran in the step in all."""

    role: str | None
    rank: int | None
    process: str
    step: Ns
    busy_ns: Ns
    names: Count
    top: list[KernelRow]


class Segment(_Record):
    step: Ns
    role: str | None
    rank: int | None
    process: str
    phase: str
    start_ns: Ns
    end_ns: Ns
    bound_by: str


class LeftOut(_Record):
    rows: Count
    steps: Count
    limit: Count


class RunHeld(_Record):
    """Which run among the inputs the summary is of, when they held several
    (:func:`tracemerge.clock.runs.held`): its number (None: all of them, ``--run all``), its
    start, and how many runs the inputs held."""

    number: Count | None
    start_unix_ns: Ns
    start_utc: str
    runs: Count


class Summary(_Record):
    """Where each step's time went (:func:`tracemerge.analysis.steps.summary`)."""

    steps: list[StepRow | str | int]  # step numbers or text lines: a summary an older tracemerge stored
    roles: dict[str, RoleNumbers]
    preset: str | UnsetType | None = UNSET
    share_of: str | UnsetType = UNSET
    unaligned: list[str] | UnsetType = UNSET
    processes: list[ProcessRow] | UnsetType = UNSET
    breakdown: list[DeviceRow] | UnsetType = UNSET
    critical_path: list[Segment] | UnsetType = UNSET
    kernels: list[ProcessKernels] | UnsetType = UNSET
    step_kernels: list[StepKernels] | UnsetType = UNSET
    left_out: dict[str, LeftOut] | UnsetType = UNSET
    withheld: list[str] | UnsetType = UNSET  # figures not shown, each with why
    unaligned_why: dict[str, str] | UnsetType = UNSET  # per process placed without clock evidence
    run: RunHeld | UnsetType = UNSET  # present when the inputs held several runs

    def as_dict(self) -> dict:
        """The summary as the JSON ``--json`` prints (and a merged trace stores)."""
        return msgspec.to_builtins(self)

    def format(self) -> str:
        """The tables ``tracemerge summary`` prints."""
        from tracemerge.analysis.steps import format_summary

        return format_summary(self.as_dict())


def from_numbers(numbers: object, where: str = "summary") -> Summary:
    """``numbers`` (a summary's JSON, as parsed) as a :class:`Summary`; :class:`NotASummary`
    naming ``where`` and the place of the first value of the wrong type or range."""
    if isinstance(numbers, Summary):
        return numbers
    try:
        return msgspec.convert(numbers, Summary, strict=True)
    except (msgspec.ValidationError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, msgspec.ValidationError) else "nested too deeply"
        raise NotASummary(f"{where}: not a phase summary tracemerge reads: {why}") from None


def checked(numbers: object, where: str = "summary") -> dict:
    """``numbers`` checked as a :class:`Summary` and given back (its JSON, what is compared): a
    dict that passes holds every value in the type its record says."""
    found = from_numbers(numbers, where)
    return numbers if isinstance(numbers, dict) else found.as_dict()


def kept(numbers: dict, steps: Container[int] | None, roles: Container[str] | None) -> dict:
    """``numbers`` with only the steps in ``steps`` and the roles in ``roles`` (None: all): their
    step rows, processes, breakdown rows, critical-path segments and busiest kernels per step.
    When steps are left out, the roles' totals are made again over the steps kept
    (:func:`~tracemerge.analysis.role_totals.retotalled`; ``summary --steps`` on a run directory
    derives the kept steps alone, and leaves none out here)."""
    if steps is None and roles is None:
        return numbers

    def step_kept(row: object) -> bool:
        return not isinstance(row, dict) or steps is None or row.get("step") is None or row["step"] in steps

    def role_kept(row: dict) -> bool:
        return roles is None or row.get("role") in roles

    out = dict(numbers)
    out["steps"] = [s for s in numbers["steps"] if step_kept(s)]
    if steps is not None and len(out["steps"]) < len(numbers["steps"]):
        out = retotalled(out, steps)
    out["roles"] = {role: r for role, r in out["roles"].items() if roles is None or role in roles}
    if "processes" in numbers:
        out["processes"] = [
            {**p, "steps": [s for s in p["steps"] if step_kept(s)]} for p in numbers["processes"] if role_kept(p)
        ]
    for key in ("breakdown", "critical_path", "step_kernels"):
        if key in numbers:
            out[key] = [r for r in numbers[key] if role_kept(r) and step_kept(r)]
    if "kernels" in numbers:
        out["kernels"] = [r for r in numbers["kernels"] if role_kept(r)]
    return out
