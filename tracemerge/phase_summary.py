"""Where each RL step's time went: the numbers of a :class:`~tracemerge.phases.PhaseModel` per
role and phase (total, share, spread across ranks, idle), and their table."""

from __future__ import annotations

import statistics
from collections import defaultdict

from tracemerge.model import Identity
from tracemerge.phases import IDLE, PhaseModel, ProcessPhases, slowest_rank


def summary(model: PhaseModel, labels: dict[Identity, str] | None = None) -> dict:
    """Per role and phase: total time, share of step time, mean/p50/p90/max across ranks (of the
    per-rank totals), the slowest rank, and the idle fraction; the per-rank, per-step accounting."""
    out: dict = {"preset": model.preset, "steps": [s for s, _, _ in model.steps], "roles": {}, "processes": []}
    by_role: dict[str, dict[Identity, ProcessPhases]] = defaultdict(dict)
    for ident, proc in model.processes.items():
        by_role[ident.role][ident] = proc
        out["processes"].append(
            {
                "process": (labels or {}).get(ident, ident.label),
                "role": ident.role,
                "rank": ident.rank,
                "preset": proc.preset,
                "steps": [
                    {"step": st.step, "dur_ns": st.dur, "idle_ns": st.idle, "phases_ns": dict(st.phases)}
                    for st in proc.steps
                ],
            }
        )
    for role, procs in sorted(by_role.items()):
        step_total = sum(st.dur for p in procs.values() for st in p.steps)
        idle_total = sum(st.idle for p in procs.values() for st in p.steps)
        names = sorted({ph for p in procs.values() for st in p.steps for ph in st.phases})
        phases = {}
        for name in names:
            per_rank = {ident: sum(st.phases.get(name, 0) for st in p.steps) for ident, p in procs.items()}
            values = sorted(per_rank.values())
            slowest = slowest_rank(per_rank)
            phases[name] = {
                "total_ns": sum(values),
                "share": sum(values) / step_total if step_total else 0.0,
                "mean_ns": round(statistics.fmean(values)),
                "p50_ns": _quantile(values, 0.5),
                "p90_ns": _quantile(values, 0.9),
                "max_ns": values[-1],
                "slowest_rank": slowest.rank,
            }
        out["roles"][role] = {
            "ranks": len(procs),
            "step_ns": step_total,
            "idle_ns": idle_total,
            "idle_fraction": idle_total / step_total if step_total else 0.0,
            "phases": phases,
        }
    return out


def _quantile(values: list[int], q: float) -> int:
    """Nearest-rank quantile of sorted ``values``."""
    rank = max(1, -(-len(values) * q // 1))
    return values[int(rank) - 1]


def format_summary(numbers: dict) -> str:
    """The terminal table of :func:`summary`."""
    from tracemerge.report import format_duration, format_table

    if not numbers["roles"]:
        return "phases: none found (name a preset or a rules file with --phases)"
    rows = [("role", "phase", "total", "share", "mean", "p50", "p90", "max", "slowest rank")]
    for role, r in numbers["roles"].items():
        for name, p in sorted(r["phases"].items(), key=lambda kv: -kv[1]["total_ns"]):
            rows.append(
                (
                    role or "-",
                    name,
                    format_duration(p["total_ns"]),
                    f"{100 * p['share']:.1f}%",
                    format_duration(p["mean_ns"]),
                    format_duration(p["p50_ns"]),
                    format_duration(p["p90_ns"]),
                    format_duration(p["max_ns"]),
                    "-" if p["slowest_rank"] is None else str(p["slowest_rank"]),
                )
            )
        rows.append(
            (
                role or "-",
                IDLE,
                format_duration(r["idle_ns"]),
                f"{100 * r['idle_fraction']:.1f}%",
                "",
                "",
                "",
                "",
                "",
            )
        )
    steps = numbers["steps"]
    head = f"phases ({numbers['preset']}), {len(steps)} step(s); per rank: totals over its steps"
    return head + "\n" + format_table(rows, left=frozenset({0, 1}))
