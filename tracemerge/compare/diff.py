"""Two runs' phase summaries side by side, and a regression gate on them.

Each side is the numbers of :func:`tracemerge.analysis.steps.summary` (a run directory merged now, a
trace tracemerge wrote, or the JSON ``tracemerge summary --json`` printed). Steps are matched by
step number; only the steps both sides have are compared. Per quantity, the mean per step:

* ``step wall``: the mean wall time of the matched steps (and each matched step's wall, shown);
* ``role · phase`` (and ``role · idle``): the mean over the role's ranks and the matched steps of
  each rank's time in the phase (a rank without the phase in a step counts 0), so runs of
  different rank counts compare;
* a role without phases: its active time per rank;
* the ``breakdown`` columns (per role, the mean of each ``*_ns`` column over its entries of the
  matched steps), when both summaries carry a ``breakdown`` list; shown, not gated. A trace's
  stored summary keeps the rows of its first steps only when there are very many
  (:data:`tracemerge.analysis.steps.STORED_ROWS`, ``left_out``): then the matched steps both kept.

The noise of a quantity is the spread of the base's samples: the population standard deviation of
the base's step walls, or of the role's per-rank, per-step phase times. A change is beyond the
noise when its size exceeds that spread. The gate (``--fail-over``) fails when the mean step wall
or a role · phase mean grows by more than the threshold (a fraction of the base) and by more than
the noise: :data:`~tracemerge.core.exit_status.EXIT_REGRESSION`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from tracemerge.cli import engine
from tracemerge.report.run_report import format_duration, format_table

STEP_WALL = "step wall"
GATED = frozenset({"wall", "phase"})


def is_summary(data: object) -> bool:
    """Whether ``data`` looks like the numbers of a phase summary."""
    return isinstance(data, dict) and isinstance(data.get("roles"), dict) and isinstance(data.get("steps"), list)


def read_numbers(path: Path) -> dict | None:
    """The phase summary in ``path``: a trace tracemerge wrote, or a summary JSON file; None when it
    holds none. Raises :class:`tracemerge.readback.damage.Unreadable` for a damaged or foreign trace
    (the trace reader is loaded through :mod:`tracemerge.cli.engine` when first used)."""
    try:
        found = engine.stored_summary(path)
    except engine.Unreadable:
        found = None
        if not _summary_file(path):
            raise
    if found is None and _summary_file(path):
        found = json.loads(path.read_bytes())
    return found


def _summary_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            if f.read(1) != b"{":
                return False
        return is_summary(json.loads(path.read_bytes()))
    except (OSError, ValueError, RecursionError):
        return False


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


def _mean(values: list[int]) -> int | None:
    return round(statistics.fmean(values)) if values else None


def _spread(values: list[int]) -> int:
    return round(statistics.pstdev(values)) if len(values) > 1 else 0


def _row(kind: str, role: str | None, name: str, base: list[int] | None, new: list[int] | None) -> dict:
    b = _mean(base) if base is not None else None
    n = _mean(new) if new is not None else None
    noise = _spread(base) if base else 0
    delta = n - b if b is not None and n is not None else None
    return {
        "kind": kind,
        "role": role,
        "name": name,
        "base_ns": b,
        "new_ns": n,
        "delta_ns": delta,
        "delta_pct": 100 * delta / b if delta is not None and b else None,
        "noise_ns": noise,
        "beyond_noise": delta is not None and abs(delta) > noise,
    }


def _samples(numbers: dict, steps: set[int]) -> dict[tuple[str, str], list[int]]:
    """Per (role, phase or idle): each rank's time in each of ``steps``."""
    phases: dict[str, set[str]] = {role: set(r.get("phases", {})) for role, r in numbers["roles"].items()}
    out: dict[tuple[str, str], list[int]] = {}
    for proc in numbers.get("processes", []):
        role = proc["role"]
        for st in proc["steps"]:
            if st["step"] not in steps:
                continue
            for name in phases.get(role, ()):
                out.setdefault((role, name), []).append(st["phases_ns"].get(name, 0))
            out.setdefault((role, "idle"), []).append(st["idle_ns"])
    return out


def _breakdown(numbers: dict, steps: set[int]) -> dict[tuple[str | None, str], list[int]]:
    out: dict[tuple[str | None, str], list[int]] = {}
    for entry in numbers.get("breakdown") or []:
        if not isinstance(entry, dict) or ("step" in entry and entry["step"] not in steps):
            continue
        for key, value in entry.items():
            if key.endswith("_ns") and isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault((entry.get("role"), key.removesuffix("_ns")), []).append(round(value))
    return out


def compare(base: dict, new: dict) -> dict:
    """Rows of base, new, delta, delta % and noise; the steps matched and not; the roles and phases
    that appear or vanish."""
    walls = [{s["step"]: s["wall_ns"] for s in side["steps"]} for side in (base, new)]
    matched = sorted(set(walls[0]) & set(walls[1]))
    common = set(matched)
    rows = []
    if matched:
        rows.append(_row("wall", None, STEP_WALL, [walls[0][s] for s in matched], [walls[1][s] for s in matched]))
        noise = rows[0]["noise_ns"]
        for s in matched:
            row = _row("step", None, f"step {s} wall", [walls[0][s]], [walls[1][s]])
            row["noise_ns"], row["beyond_noise"] = noise, abs(row["delta_ns"]) > noise
            rows.append(row)
    samples = [_samples(side, common) for side in (base, new)]
    appeared, vanished = [], []
    roles = list(base["roles"]) + [r for r in new["roles"] if r not in base["roles"]]
    for role in roles:
        sides = [side["roles"].get(role) for side in (base, new)]
        if sides[0] is None or sides[1] is None:
            (appeared if sides[0] is None else vanished).append(role)
        if any(r is not None and "active_ns" in r for r in sides):
            active = [[r["active_ns"] // max(1, r["ranks"])] if r and "active_ns" in r else None for r in sides]
            rows.append(_row("active", role, "(no phases: active)", *active))
            continue
        names = [*(sides[0] or {}).get("phases", {}), "idle"]
        names += [n for n in (sides[1] or {}).get("phases", {}) if n not in names]
        for name in names:
            got = [
                samples[i].get((role, name), []) if r is not None and (name == "idle" or name in r["phases"]) else None
                for i, r in enumerate(sides)
            ]
            if sides[0] is not None and sides[1] is not None and (got[0] is None) != (got[1] is None):
                (appeared if got[0] is None else vanished).append(f"{role} · {name}")
            rows.append(_row("phase", role, name, *got))
    out: dict = {
        "steps_matched": matched,
        "steps_only_base": sorted(set(walls[0]) - common),
        "steps_only_new": sorted(set(walls[1]) - common),
        "appeared": appeared,
        "vanished": vanished,
    }
    carried = [isinstance(side.get("breakdown"), list) for side in (base, new)]
    if all(carried):
        shared = common
        if any("breakdown" in (side.get("left_out") or {}) for side in (base, new)):
            # a stored summary kept the rows of its first steps only: those both kept are compared
            kept = [{r.get("step") for r in side["breakdown"] if isinstance(r, dict)} for side in (base, new)]
            shared = common & kept[0] & kept[1]
            out["breakdown_steps"] = sorted(shared)
        columns = [_breakdown(side, shared) for side in (base, new)]
        for key in [*columns[0], *(k for k in columns[1] if k not in columns[0])]:
            rows.append(_row("breakdown", key[0], key[1], columns[0].get(key), columns[1].get(key)))
    out["breakdown"] = (
        "compared" if all(carried) else "only in base" if carried[0] else "only in new" if carried[1] else None
    )
    out["rows"] = rows
    return out


def regressions(result: dict, threshold: float) -> list[dict]:
    """The rows the gate fails on: the mean step wall or a role · phase mean grown by more than
    ``threshold`` (a fraction of the base) and by more than the noise."""
    return [
        r
        for r in result["rows"]
        if r["kind"] in GATED
        and r["delta_ns"] is not None
        and r["delta_ns"] > 0
        and r["beyond_noise"]
        and r["base_ns"] is not None
        and r["delta_ns"] > threshold * r["base_ns"]
    ]


def label(row: dict) -> str:
    if row["kind"] in ("wall", "step"):
        return row["name"]
    if row["kind"] == "breakdown":
        return f"{row['role'] or '(all)'} · {row['name']} (breakdown)"
    return f"{row['role'] or '(no role)'} · {row['name']}"


def format_diff(result: dict) -> str:
    """The table of :func:`compare`, then the steps, roles and phases on one side only."""

    def ns(value: int | None, signed: bool = False) -> str:
        return "-" if value is None else format_duration(value, signed=signed)

    rows = [("quantity (mean per step)", "base", "new", "delta", "delta %", "noise", "beyond noise")]
    for r in result["rows"]:
        pct = r["delta_pct"]
        shown = "-" if pct is None else f"{pct:+.1f}%"
        beyond = "-" if r["delta_ns"] is None else "yes" if r["beyond_noise"] else "no"
        rows.append(
            (label(r), ns(r["base_ns"]), ns(r["new_ns"]), ns(r["delta_ns"], True), shown, ns(r["noise_ns"]), beyond)
        )
    lines = [f"steps compared: {_steps(result['steps_matched'])}"]
    for key, side in (("steps_only_base", "base"), ("steps_only_new", "new")):
        if result[key]:
            lines.append(f"steps only in {side}: {_steps(result[key])}")
    lines.append(format_table(rows, left=frozenset({0})))
    for key in ("appeared", "vanished"):
        if result[key]:
            lines.append(f"{key}: {', '.join(result[key])}")
    if result["breakdown"] and result["breakdown"] != "compared":
        lines.append(f"breakdown {result['breakdown']}: not compared")
    if "breakdown_steps" in result:
        lines.append(
            f"breakdown compared on the steps both summaries kept rows of: {_steps(result['breakdown_steps'])}"
        )
    return "\n".join(lines)


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if steps else "none"


def format_gate(failed: list[dict], threshold: float) -> str:
    """One line per regression, then the verdict."""
    over = f"{100 * threshold:g}%"
    lines = [
        f"regression: {label(r)}: {format_duration(r['base_ns'])} -> {format_duration(r['new_ns'])} "
        f"({r['delta_pct']:+.1f}%, over {over} and the noise {format_duration(r['noise_ns'])})"
        for r in failed
    ]
    verdict = (
        f"gate failed: {len(failed)} over {over}" if failed else f"gate passed: nothing grew over {over} and the noise"
    )
    return "\n".join([*lines, verdict])
