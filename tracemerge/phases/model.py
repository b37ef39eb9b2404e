"""The phase model: what deriving the phases gives (per process its steps, phases and idle
time, per role the phase spans of each step, who held each step up, device time and the critical
path), as :mod:`tracemerge.phases.derivation` makes it and the summary and tracks read it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Protocol

import msgspec
from msgspec import field

from tracemerge.core.model import Identity
from tracemerge.core.stats import Losses, Stat
from tracemerge.phases.critical_path import Segment
from tracemerge.phases.device_time import Breakdown
from tracemerge.phases.holdups import Holdup, Timeline
from tracemerge.phases.kernels import Busiest

IDLE = "idle"


class HasMarks(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def marks(self) -> dict[Identity, dict[str, list[tuple[int, int]]]]: ...


class Occurrence(msgspec.Struct):
    phase: str
    start: int
    end: int
    step: int | None = None  # the step its start falls in


class Step(msgspec.Struct):
    step: int
    start: int
    end: int
    phases: Counter[str] = field(default_factory=Counter)  # ns per phase (innermost wins)
    idle: int = 0

    @property
    def dur(self) -> int:
        return self.end - self.start


class ProcessPhases(msgspec.Struct):
    preset: str
    occurrences: list[Occurrence] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    idle: list[tuple[int, int, int]] = field(default_factory=list)  # (step, start, end)
    timeline: Timeline = field(default_factory=Timeline)


class PipelineSlice(msgspec.Struct):
    """One phase of one step across a role's ranks: first start to last end."""

    phase: str
    step: int
    start: int
    end: int
    holdup: Holdup
    spread_ns: int  # longest minus shortest of the ranks' times in it
    ranks: int


class StepScalars(msgspec.Struct):
    """A file of step-keyed values (tracker scalars): step -> name -> value."""

    path: Path
    values: dict[int, dict[str, float]]
    dropped: Losses = field(default_factory=Losses)


class StepKind(msgspec.Struct, frozen=True):
    """What a job step is, for the means (:mod:`tracemerge.phases.step_counting`)."""

    partial: bool  # no process did real work in it
    warmup: bool  # the run's first step
    counted: bool  # in means and gates: not partial, and not the warm-up unless it is kept
    period: int | None  # the next step's start minus this one's (None for the last)


class PhaseModel(msgspec.Struct):
    preset: str  # the presets used, as the processes chose them ("" when no phase was found)
    processes: dict[Identity, ProcessPhases]
    steps: list[tuple[int, int, int]]  # job steps: (step, start, end)
    roles: dict[str, list[PipelineSlice]]
    left_out: Counter[Stat] = field(default_factory=Counter)  # --steps
    found_steps: list[int] = field(default_factory=list)  # every step, kept by --steps or not
    scalars: dict[int, dict[str, float]] = field(default_factory=dict)  # of the job steps, by step
    holdups: dict[int, Holdup] = field(default_factory=dict)  # of the job steps, by step
    # Processes placed without clock evidence: per process, a line per such file (tracemerge.clock.unaligned).
    unaligned: dict[Identity, list[str]] = field(default_factory=dict)
    span: tuple[int, int] | None = None  # the run's first and last event (aligned)
    active: dict[Identity, int] = field(default_factory=dict)  # per process: first to last event
    recorded: dict[Identity, tuple[int, int]] = field(default_factory=dict)  # its first and last event
    # Per process with device activity, per step: its device time (tracemerge.phases.device_time).
    breakdown: dict[Identity, list[tuple[int, Breakdown]]] = field(default_factory=dict)
    # Per process with device activity and no steps: its device time over its whole profiled time.
    whole: dict[Identity, Breakdown] = field(default_factory=dict)
    # Per process with device activity: its busiest kernels and ops (tracemerge.phases.kernels).
    kernels: dict[Identity, Busiest] = field(default_factory=dict)
    # Per process with device activity and steps, per step: its busiest kernels and ops in the step.
    step_kernels: dict[Identity, list[tuple[int, Busiest]]] = field(default_factory=dict)
    # Per job step, in step order: its critical path across roles and ranks (tracemerge.phases.critical_path).
    critical_path: list[Segment] = field(default_factory=list)
    kinds: dict[int, StepKind] = field(default_factory=dict)  # of the job steps, by step

    def counted(self, step: int) -> bool:
        """Whether a mean over steps counts ``step`` (one not classified is)."""
        kind = self.kinds.get(step)
        return kind is None or kind.counted

    @property
    def empty(self) -> bool:
        return not self.processes
