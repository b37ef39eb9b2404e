"""A role's totals per phase, from its ranks' per-step rows: made once when the summary is made
(:func:`tracemerge.analysis.steps.summary`), and made again from a stored summary's process rows
when ``summary --steps`` keeps some of its steps (:func:`retotalled`)."""

from __future__ import annotations

import statistics
from collections.abc import Container

PERCENTILES_FROM = 5  # ranks a role needs for its p50 and p90 to mean something
NOT_RECOMPUTED = (
    "held up by and started last per role: not shown for --steps on a stored summary (a merged trace keeps"
    " them for all its steps; `tracemerge summary RUN_DIR --steps` derives them for the steps kept)"
)


def quantile(values: list[int], q: float) -> int:
    """Nearest-rank quantile of sorted ``values``."""
    rank = max(1, -(-len(values) * q // 1))
    return values[int(rank) - 1]


def phase_numbers(per_rank: list[int], step_total: int) -> dict:
    """A phase's total, share of the role's ``step_total``, per-rank mean (and p50, p90 from
    :data:`PERCENTILES_FROM` ranks) and max, of each rank's time in it (``per_rank``, sorted)."""
    many = len(per_rank) >= PERCENTILES_FROM
    return {
        "total_ns": sum(per_rank),
        "share": sum(per_rank) / step_total if step_total else 0.0,
        "mean_ns": round(statistics.fmean(per_rank)),
        "p50_ns": quantile(per_rank, 0.5) if many else None,
        "p90_ns": quantile(per_rank, 0.9) if many else None,
        "max_ns": per_rank[-1],
    }


def retotalled(numbers: dict, steps: Container[int]) -> dict:
    """``numbers`` whose roles with phases are totalled again over the counted steps in ``steps``
    alone (when none of them is counted, as when the warm-up alone is asked for: the whole ones
    among them), from its process rows (what a stored summary keeps per rank and step). The rank holding
    a phase up and the one starting it last are per step figures a summary does not keep: they are
    left out (None) and ``withheld`` says so. Numbers without process rows are given back as they are."""
    rows = numbers.get("processes")
    if not rows:
        return numbers
    rows_kept = [s for s in numbers["steps"] if isinstance(s, dict) and s["step"] in steps]
    counted = {s["step"] for s in rows_kept if s.get("counted", True)}
    if not counted:  # only steps the means leave out asked for (the warm-up): those asked, whole ones
        counted = {s["step"] for s in rows_kept if not s.get("partial", False)}
    roles = dict(numbers["roles"])
    for role, found in numbers["roles"].items():
        if "active_ns" in found:
            continue  # a role without phases: its whole active time, not per step
        ranks = [[st for st in p["steps"] if st["step"] in counted] for p in rows if (p["role"] or "") == (role or "")]
        if ranks:
            roles[role] = _role(ranks)
    withheld = [*numbers.get("withheld", ()), NOT_RECOMPUTED]
    return {**numbers, "roles": roles, "withheld": withheld}


def _role(ranks: list[list[dict]]) -> dict:
    """A role's numbers from each rank's step rows (as :func:`tracemerge.analysis.steps.summary`
    writes them)."""
    step_total = sum(st["dur_ns"] for steps in ranks for st in steps)
    idle_total = sum(st["idle_ns"] for steps in ranks for st in steps)
    not_profiled = sum(st.get("not_profiled_ns", 0) for steps in ranks for st in steps)
    names = sorted({ph for steps in ranks for st in steps for ph in st["phases_ns"]})
    phases = {}
    for name in names:
        per_rank = sorted(sum(st["phases_ns"].get(name, 0) for st in steps) for steps in ranks)
        phases[name] = {**phase_numbers(per_rank, step_total), "critical": None, "late": None}
    return role_numbers(len(ranks), step_total, idle_total, not_profiled, phases)


def role_numbers(ranks: int, step_total: int, idle_total: int, not_profiled: int, phases: dict) -> dict:
    """A role's numbers as the summary keeps them: its phases longest first (then by name), its
    step, idle and unrecorded time and their shares of the step time."""
    return {
        "ranks": ranks,
        "step_ns": step_total,
        "idle_ns": idle_total,
        "idle_fraction": idle_total / step_total if step_total else 0.0,
        "not_profiled_ns": not_profiled,
        "not_profiled_fraction": not_profiled / step_total if step_total else 0.0,
        "phases": dict(sorted(phases.items(), key=lambda kv: (-kv[1]["total_ns"], kv[0]))),
    }
