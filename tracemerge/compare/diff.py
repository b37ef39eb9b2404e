"""Two runs' summaries side by side, and a regression gate on them.

Each side is the numbers of :func:`tracemerge.analysis.steps.summary` (a run directory or trace
files summarized now, a trace tracemerge wrote, or the JSON ``tracemerge summary --json``
printed), checked against :class:`tracemerge.analysis.summary_model.Summary` first. The quantities
compared, each with its value per step, are :mod:`tracemerge.compare.samples`'s: the step wall,
each role · phase (and idle), a role's device compute, exposed communication, overlap, free,
preparing and wait time, and the active time of a role without phases. Each process's busiest
kernels and ops are shown beside (:mod:`tracemerge.compare.kernels`), never gated.

Which steps: of the steps kept (``--steps``), the counted ones (the steady state; warm-up and
partial steps are left out when the summary says so). When both runs profiled the same step
numbers (or counted the same: one run's extra partial step does not stop it), step k of the base
is compared with step k of the new run (*paired*): base and new are
the medians over the pairs, and the noise is the spread the per-step change itself shows, the
base's median times the population standard deviation of the pairs' ratios new_k / base_k (a run
slowed evenly has every ratio alike and no noise, however unlike its steps are). Otherwise each
side gives the median of its counted steps and the noise is the population standard deviation of
the base's counted steps. ``delta`` is new - base; a change is beyond the noise when its size
exceeds the noise.

The gate (``--fail-over``) fails (:data:`~tracemerge.core.exit_status.EXIT_REGRESSION`) on each
gated quantity (the step wall, every role · phase, a role's device compute and communication;
never idle, free or the other columns alone) that grew by more than the threshold (a fraction of
the base), by more than the noise and, with ``--min-delta``, by at least that long. It fails too
when no gated quantity has a value on both sides: a gate never passes with nothing compared.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

from tracemerge.analysis.summary_model import Summary
from tracemerge.compare.kernels import compare_kernels, format_kernels
from tracemerge.compare.samples import (
    ACTIVE,
    DEVICE,
    GATED_DEVICE,
    IDLE,
    NO_PHASES,
    PHASE,
    STEP_WALL,
    WALL,
    Key,
    Side,
    Values,
    side_of,
)
from tracemerge.readback.damage import Unreadable, stored_summary
from tracemerge.report.run_report import format_duration, format_table

GATED = frozenset({WALL, PHASE})  # and the device columns of GATED_DEVICE


def is_summary(data: object) -> bool:
    """Whether ``data`` is meant as the numbers of a phase summary (a JSON object with ``roles`` and
    ``steps``, and no trace events): it is then checked, and refused when of another shape."""
    return isinstance(data, dict) and "roles" in data and "steps" in data and "traceEvents" not in data


def read_numbers(path: Path) -> dict | None:
    """The phase summary in ``path``: a trace tracemerge wrote, or a summary JSON file; None when it
    holds none. Raises :class:`tracemerge.readback.damage.Unreadable` for a damaged or foreign trace."""
    try:
        found = stored_summary(path)
    except Unreadable:
        found = None
        if not _summary_file(path):
            raise
    if found is None and _summary_file(path):
        found = json.loads(path.read_bytes())
    return found


def _summary_file(path: Path) -> bool:
    """Whether ``path`` is a summary JSON file: an object whose first key is one a summary has (a
    trace's is ``traceEvents`` or its own metadata: it is then not loaded whole to find out)."""
    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip(b" \t\r\n")
        first = _FIRST_KEY.match(head)
        if first is None or first[1].decode() not in SUMMARY_KEYS:
            return False
        return is_summary(json.loads(path.read_bytes()))
    except (OSError, ValueError, RecursionError):
        return False


_FIRST_KEY = re.compile(rb'\{\s*"([A-Za-z_]{1,40})"\s*:')
SUMMARY_KEYS = frozenset(Summary.__struct_fields__)


def parse_threshold(text: str) -> float:
    """``10%`` (or ``10``) as the fraction 0.1."""
    body = text.strip().removesuffix("%").strip()
    try:
        value = float(body)
    except ValueError:
        raise ValueError(f"--fail-over: {text!r} is not a percentage (e.g. 10%)") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"--fail-over: {text!r} must be a percentage of 0 or more")
    return value / 100


def _median(values: list[int]) -> int:
    return round(statistics.median(values))


def _stats(base: Values, new: Values, keys: tuple[Iterable, Iterable] | list) -> tuple[int, int, int, int]:
    """(base, new, noise, samples) of a quantity: over the pairs ``keys`` (a list), or over each
    side's own steps (a pair of iterables)."""
    if isinstance(keys, list):
        b, n = [base[k] for k in keys], [new[k] for k in keys]
        ratios = [y / x for x, y in zip(b, n, strict=True) if x > 0]
        mid = _median(b)
        noise = round(mid * statistics.pstdev(ratios)) if len(ratios) > 1 else 0
        return mid, _median(n), noise, len(keys)
    b = [base[k] for k in keys[0] if k in base]
    n = [new[k] for k in keys[1] if k in new]
    if not b or not n:
        raise LookupError
    return _median(b), _median(n), round(statistics.pstdev(b)) if len(b) > 1 else 0, min(len(b), len(n))


def _row(key: Key, values: list[Values | None], steps: list[int] | None, steady: list[frozenset[int]]) -> dict:
    kind, role, name = key
    b = n = noise = None
    count = 0
    if values[0] is not None and values[1] is not None:
        if steps is not None:  # paired: the steps (and a value of no step) both sides have
            keys: tuple | list = [k for k in values[0] if k in values[1] and (k is None or k in steps)]
        else:
            keys = tuple([None, *sorted(s)] for s in steady)
        try:
            if keys:
                b, n, noise, count = _stats(values[0], values[1], keys)
        except LookupError:
            pass
    elif values[0] is not None or values[1] is not None:  # on one side only: its value, shown
        found = values[0] if values[0] is not None else values[1]
        assert found is not None  # one side has it
        mine = steady[0] if values[0] is not None else steady[1]
        shown = [v for k, v in found.items() if k is None or k in mine]
        if shown:
            b, n = (_median(shown), None) if values[0] is not None else (None, _median(shown))
    delta = n - b if b is not None and n is not None else None
    return {
        "kind": kind,
        "role": role,
        "name": name,
        "base_ns": b,
        "new_ns": n,
        "delta_ns": delta,
        "delta_pct": 100 * delta / b if delta is not None and b else None,
        "noise_ns": noise or 0,
        "beyond_noise": delta is not None and abs(delta) > (noise or 0),
        "gated": kind in GATED or (kind == DEVICE and name in GATED_DEVICE),
        "samples": count,
    }


def _keys(sides: list[Side]) -> list[Key]:
    """Every quantity of either side: the step wall, then per role (the base's order, then the
    new run's) its phases and idle, its active time, its device columns."""
    roles = list(sides[0].roles) + [r for r in sides[1].roles if r not in sides[0].roles]
    keys: list[Key] = [(WALL, None, STEP_WALL)]
    found = set(sides[0].samples) | set(sides[1].samples)
    for role in roles:
        names = [*sides[0].phases.get(role, [])]
        names += [n for n in sides[1].phases.get(role, []) if n not in names]
        keys += [(PHASE, role, name) for name in names]
        keys += [k for k in ((IDLE, role, IDLE),) if k in found]
        keys += [k for k in ((ACTIVE, role, NO_PHASES),) if k in found]
    devices = [k for s in sides for k in s.samples if k[0] == DEVICE]
    keys += [k for k in dict.fromkeys(devices) if k not in keys]
    return keys


def compare(
    base: dict,
    new: dict,
    *,
    steps: frozenset[int] | None = None,
    roles: frozenset[str] | None = None,
    keep_warmup: bool = False,
) -> dict:
    """Rows of base, new, delta, delta % and noise (see the module's text); the steps compared,
    and those of one side only; the roles and phases that appear or vanish."""
    sides = [side_of(side, steps, roles, keep_warmup) for side in (base, new)]
    numbers = [set(side.walls) for side in sides]
    steady = [side.counted for side in sides]
    # the same steps profiled (or the same counted: one run's extra partial step leaves the pairs)
    paired = bool(steady[0] & steady[1]) and (numbers[0] == numbers[1] or steady[0] == steady[1])
    pairs = sorted(steady[0] & steady[1]) if paired else None
    rows = [_row(key, [side.samples.get(key) for side in sides], pairs, steady) for key in _keys(sides)]
    rows = [r for r in rows if r["base_ns"] is not None or r["new_ns"] is not None]  # (no steps: no wall)
    if pairs:
        wall = rows[0]
        for s in pairs:
            row = _row((WALL, None, f"step {s} wall"), [{s: sides[0].walls[s]}, {s: sides[1].walls[s]}], [s], steady)
            row.update(noise_ns=wall["noise_ns"], beyond_noise=abs(row["delta_ns"]) > wall["noise_ns"], gated=False)
            rows.append(row)
    out: dict = {
        "mode": "paired" if paired else "steady state",
        "steps_matched": sorted(numbers[0] & numbers[1]),
        "steps_only_base": sorted(numbers[0] - numbers[1]),
        "steps_only_new": sorted(numbers[1] - numbers[0]),
        "steps_base": sorted(steady[0]) if pairs is None else pairs,
        "steps_new": sorted(steady[1]) if pairs is None else pairs,
        "steps_not_counted": [sorted(set(side.walls) - side.counted) for side in sides],
    }
    out.update(_appearing(sides))
    carried = [isinstance(side.get("breakdown"), list) for side in (base, new)]
    out["breakdown"] = (
        "compared" if all(carried) else "only in base" if carried[0] else "only in new" if carried[1] else None
    )
    if all(carried) and any("breakdown" in (side.get("left_out") or {}) for side in (base, new)):
        # a stored summary kept the rows of its first steps only: the steps both kept are compared
        kept = [{r["step"] for r in side["breakdown"]} for side in (base, new)]
        out["breakdown_steps"] = sorted(k for k in kept[0] & kept[1] & set(pairs or ()) if k is not None)
    out["rows"] = rows
    kernels = compare_kernels(base, new)
    if kernels is not None:
        out["kernels"] = kernels  # shown, never gated (tracemerge.compare.kernels)
    return out


def _appearing(sides: list[Side]) -> dict:
    appeared: list[str] = []
    vanished: list[str] = []
    for role in [*sides[0].roles, *(r for r in sides[1].roles if r not in sides[0].roles)]:
        found = [role in side.roles for side in sides]
        if not all(found):
            (appeared if not found[0] else vanished).append(role)
            continue
        names = [set(side.phases.get(role, ())) for side in sides]
        vanished += [f"{role} · {n}" for n in sides[0].phases.get(role, []) if n not in names[1]]
        appeared += [f"{role} · {n}" for n in sides[1].phases.get(role, []) if n not in names[0]]
    return {"appeared": appeared, "vanished": vanished}


def regressions(result: dict, threshold: float, min_delta: int = 0) -> list[dict]:
    """The rows the gate fails on: a gated quantity grown by more than ``threshold`` (a fraction of
    the base), by more than the noise, and by at least ``min_delta`` ns."""
    return [
        r
        for r in result["rows"]
        if r["gated"]
        and r["delta_ns"] is not None
        and r["delta_ns"] > 0
        and r["beyond_noise"]
        and r["delta_ns"] > threshold * r["base_ns"]
        and r["delta_ns"] >= min_delta
    ]


def gate(result: dict, threshold: float, min_delta: int = 0) -> dict:
    """The gate's verdict on :func:`compare`'s result: it passes when no gated quantity regressed
    and at least one was compared."""
    failed = regressions(result, threshold, min_delta)
    compared = [label(r) for r in result["rows"] if r["gated"] and r["delta_ns"] is not None]
    return {
        "fail_over": threshold,
        "min_delta_ns": min_delta,
        "passed": not failed and bool(compared),
        "compared": len(compared),
        "regressions": failed,
    }


def label(row: dict) -> str:
    """``step wall``, ``actor · update_actor``, ``actor · compute (device)``."""
    if row["kind"] == WALL:
        return row["name"]
    text = f"{row['role'] or '(no role)'} · {row['name']}"
    return f"{text} (device)" if row["kind"] == DEVICE else text


def format_diff(result: dict) -> str:
    """The steps compared, the table of :func:`compare`, then what is on one side only."""

    def ns(value: int | None, signed: bool = False) -> str:
        return "-" if value is None else format_duration(value, signed=signed)

    head = ("quantity (median per step)", "base", "new", "delta", "delta %", "noise", "beyond noise", "gated")
    rows = [head]
    for r in result["rows"]:
        pct = r["delta_pct"]
        shown = "-" if pct is None else f"{pct:+.1f}%"
        beyond = "-" if r["delta_ns"] is None else "yes" if r["beyond_noise"] else "no"
        cells = (label(r), ns(r["base_ns"]), ns(r["new_ns"]), ns(r["delta_ns"], True), shown, ns(r["noise_ns"]))
        rows.append((*cells, beyond, "yes" if r["gated"] else ""))
    tables = [format_table(rows, left=frozenset({0})), *_one_side_lines(result)]
    return "\n".join([*_step_lines(result), *tables, *format_kernels(result.get("kernels"))])


def _step_lines(result: dict) -> list[str]:
    if not result["steps_base"] and not result["steps_new"] and not result["steps_matched"]:
        lines = ["no steps in either run: each process's whole profiled time compared"]
    elif result["mode"] == "paired":
        lines = [f"steps compared pair by pair: {_steps(result['steps_base'])}"]
    else:
        lines = [
            "steps compared as the median of each run's counted steps: "
            f"base {_steps(result['steps_base'])}; new {_steps(result['steps_new'])}"
        ]
    for key, side in (("steps_only_base", "base"), ("steps_only_new", "new")):
        if result[key]:
            lines.append(f"steps only in {side}: {_steps(result[key])}")
    left = result["steps_not_counted"]
    if any(left):
        lines.append(f"steps not counted (warm-up or partial): base {_steps(left[0])}; new {_steps(left[1])}")
    return lines


def _one_side_lines(result: dict) -> list[str]:
    lines = [f"{key}: {', '.join(result[key])}" for key in ("appeared", "vanished") if result[key]]
    if result["breakdown"] and result["breakdown"] != "compared":
        lines.append(f"breakdown {result['breakdown']}: not compared")
    if "breakdown_steps" in result:
        lines.append(
            f"breakdown compared on the steps both summaries kept rows of: {_steps(result['breakdown_steps'])}"
        )
    return lines


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if steps else "none"


def format_gate(verdict: dict) -> str:
    """One line per regression, then the verdict naming what failed."""
    over = f"{100 * verdict['fail_over']:g}%"
    if verdict["min_delta_ns"]:
        over += f" and {format_duration(verdict['min_delta_ns'])}"
    failed = verdict["regressions"]
    lines = [
        f"regression: {label(r)}: {format_duration(r['base_ns'])} -> {format_duration(r['new_ns'])} "
        f"({r['delta_pct']:+.1f}%, over {over} and the noise {format_duration(r['noise_ns'])})"
        for r in failed
    ]
    if failed:
        lines.append(f"gate failed: {len(failed)} over {over}: {', '.join(label(r) for r in failed)}")
    elif not verdict["compared"]:
        lines.append("gate failed: nothing compared (no step wall, phase, compute or communication on both sides)")
    else:
        lines.append(f"gate passed: nothing of {verdict['compared']} compared grew over {over} and the noise")
    return "\n".join(lines)
