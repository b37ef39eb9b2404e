"""What one side of a comparison gives: per quantity, its value in each step.

A quantity is a (kind, role, name) key: the step wall; a role's phase, or its idle time (the mean
over the role's ranks having the step of each rank's time in it, a rank without the phase in a
step counting 0: runs of different rank counts compare); a role without phases (its active time
per rank, one value); and a role's device time (each column of the breakdown, the mean over the
role's rows of the step; a row without a step, of a process without steps, is one value).

Only the steps kept (``--steps``) are read, and of those the *counted* ones are the steady state
(a summary whose steps carry no ``counted`` field counts them all; ``--keep-warmup`` counts the
warm-up steps too, never a partial one).
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

WALL, PHASE, IDLE, ACTIVE, DEVICE = "wall", "phase", "idle", "active", "device"
STEP_WALL = "step wall"
NO_PHASES = "(no phases: active)"
DEVICE_PARTS = ("compute", "communication", "overlapped", "free", "preparing", "closing", "wait")
GATED_DEVICE = frozenset({"compute", "communication"})  # a device column the gate watches

Key = tuple[str, str | None, str]  # (kind, role, name)
Values = dict[int | None, int]  # step (None: no step) -> ns


class Side(NamedTuple):
    walls: dict[int, int]  # every step kept: its wall
    counted: frozenset[int]  # the steady-state steps (counted in means and gates)
    samples: dict[Key, Values]
    roles: dict[str, dict]  # the roles kept (--roles)
    phases: dict[str, list[str]]  # per role kept: its phases, in the summary's order


def counted(row: dict, keep_warmup: bool) -> bool:
    """Whether a step row is counted: its ``counted`` field (true when absent), or, with
    ``keep_warmup``, a warm-up step that is not partial."""
    if row.get("counted", True) is not False:
        return True
    return keep_warmup and bool(row.get("warmup")) and not row.get("partial")


def side_of(
    numbers: dict,
    steps: frozenset[int] | None = None,
    roles: frozenset[str] | None = None,
    keep_warmup: bool = False,
) -> Side:
    """The samples of one (checked) summary, of the steps in ``steps`` and roles in ``roles``
    (None: all)."""
    rows = [s for s in numbers["steps"] if isinstance(s, dict) and (steps is None or s["step"] in steps)]
    walls = {s["step"]: s["wall_ns"] for s in rows}
    steady = frozenset(s["step"] for s in rows if counted(s, keep_warmup))
    kept = {role: r for role, r in numbers["roles"].items() if roles is None or role in roles}
    samples: dict[Key, Values] = {(WALL, None, STEP_WALL): dict(walls)}
    phases = {role: list(r.get("phases", {})) for role, r in kept.items()}
    _phase_samples(numbers, walls, kept, phases, samples)
    for role, r in kept.items():
        if "active_ns" in r:
            samples[(ACTIVE, role, NO_PHASES)] = {None: r["active_ns"] // max(1, r["ranks"])}
    _device_samples(numbers, walls, roles, samples)
    return Side(walls, steady, samples, kept, phases)


def _phase_samples(
    numbers: dict, walls: dict[int, int], kept: dict[str, dict], phases: dict[str, list[str]], out: dict
) -> None:
    sums: dict[Key, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for proc in numbers.get("processes") or []:
        role = proc["role"]
        if role not in kept or "active_ns" in kept[role]:
            continue
        for st in proc["steps"]:
            if st["step"] not in walls:
                continue
            for name in phases[role]:
                sums[(PHASE, role, name)][st["step"]].append(st["phases_ns"].get(name, 0))
            sums[(IDLE, role, IDLE)][st["step"]].append(st["idle_ns"])
    for key, by_step in sums.items():
        out[key] = {step: _mean(values) for step, values in by_step.items()}


def _device_samples(numbers: dict, walls: dict[int, int], roles: frozenset[str] | None, out: dict) -> None:
    sums: dict[Key, dict[int | None, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row in numbers.get("breakdown") or []:
        role, step = row["role"], row["step"]
        if (roles is not None and role not in roles) or (step is not None and step not in walls):
            continue
        for part in DEVICE_PARTS:
            value = row.get(f"{part}_ns")
            if value is not None:
                sums[(DEVICE, role, part)][step].append(value)
    for key, by_step in sums.items():
        out[key] = {step: _mean(values) for step, values in by_step.items()}


def _mean(values: list[int]) -> int:
    """The mean, rounded half up, in integers (exact at any size)."""
    whole, rest = divmod(sum(values), len(values))
    return whole + (2 * rest >= len(values))
