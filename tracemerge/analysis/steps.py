"""Where each RL step's time went, and who held it up: the numbers of a
:class:`~tracemerge.phases.PhaseModel`, per step (wall time, the critical process and phase, the
process that started last, skews: :mod:`tracemerge.phases.holdups`) and per role and phase (total,
share of the role's step time, the rank holding it up most, idle), the tables printed, and the
readable form a merged trace keeps."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from tracemerge.analysis.device_table import breakdown_table
from tracemerge.analysis.kernels_table import kernels_table
from tracemerge.analysis.role_totals import PERCENTILES_FROM, phase_numbers, role_numbers
from tracemerge.analysis.step_checks import unrecorded, withhold
from tracemerge.analysis.step_kernels import STORED_ROWS as STORED_KERNEL_ROWS
from tracemerge.analysis.step_kernels import step_kernel_rows, step_kernels_table
from tracemerge.analysis.step_rows import counted_text, longest_segments, step_line, step_table
from tracemerge.core.errors import shown
from tracemerge.core.model import Identity
from tracemerge.naming.paths import role_sort_key
from tracemerge.phases.critical_path import NOT_PROFILED
from tracemerge.phases.holdups import order_key
from tracemerge.phases.model import IDLE, PhaseModel, PipelineSlice, ProcessPhases
from tracemerge.phases.tracks import brief
from tracemerge.report.run_report import format_duration, format_table

SHARE_OF = "the role's step time (each rank's steps, summed over its ranks)"
STORED_STEPS = 20  # steps the trace's own summary lists (the longest, in step order)
# Rows of the breakdown and segments of the critical path the trace's own summary keeps: 64 ranks
# × 1000 steps worth of each, whole steps in step order; how many were left out is said beside.
STORED_ROWS = 64 * 1000
CAPPED = {"breakdown": STORED_ROWS, "critical_path": STORED_ROWS, "step_kernels": STORED_KERNEL_ROWS}


def summary(model: PhaseModel, labels: dict[Identity, str] | None = None) -> dict:
    """The per-step rows (``steps``), the per-role numbers in pipeline order (``roles``), the
    processes placed without clock evidence, and each rank's per-step accounting."""

    def name(ident: Identity) -> str:
        return (labels or {}).get(ident, ident.label)

    out: dict = {
        "preset": model.preset,
        "steps": _steps(model, name),
        "share_of": SHARE_OF,
        "roles": _roles(model),
        "unaligned": [i.label for i in sorted(model.unaligned, key=lambda i: (role_sort_key(i.role), i.rank or 0))],
        # why each was placed without clock evidence: a line per such file
        "unaligned_why": {
            i.label: "; ".join(model.unaligned[i])
            for i in sorted(model.unaligned, key=lambda i: (role_sort_key(i.role), i.rank or 0))
        },
        "processes": [],
        "breakdown": _breakdown_rows(model),
        "critical_path": [
            {
                "step": seg.step,
                "role": seg.ident.role,
                "rank": seg.ident.rank,
                "process": name(seg.ident),
                "phase": seg.phase,
                "start_ns": seg.start,
                "end_ns": seg.end,
                "bound_by": seg.bound_by,
            }
            for seg in model.critical_path
        ],
    }
    if model.kernels:
        out["kernels"] = _kernel_rows(model, name)
    if model.step_kernels:
        out["step_kernels"] = step_kernel_rows(model, name)
    for ident, proc in model.processes.items():
        off = unrecorded(proc, model.recorded.get(ident))
        rows: list[dict[str, Any]] = [
            {"step": st.step, "dur_ns": st.dur, "idle_ns": st.idle - off.get(st.step, 0), "phases_ns": dict(st.phases)}
            for st in proc.steps
        ]
        for row in rows:
            row["not_profiled_ns"] = off.get(row["step"], 0)
        out["processes"].append(
            {"process": name(ident), "role": ident.role, "rank": ident.rank, "preset": proc.preset, "steps": rows}
        )
    out["withheld"] = withhold(out)
    return out


def _breakdown_rows(model: PhaseModel) -> list[dict]:
    """Each process's device time per step (:mod:`tracemerge.phases.device_time`), in role and
    rank order; a process without steps has one row (``step`` None) of its whole profiled time."""
    rows = []
    found = [*model.breakdown, *model.whole]
    for ident in sorted(found, key=lambda i: (role_sort_key(i.role), *order_key(i)[1:])):
        numbers = model.breakdown[ident] if ident in model.breakdown else [(None, model.whole[ident])]
        for step, b in numbers:
            row = {"role": ident.role, "rank": ident.rank, "step": step, "wall_ns": b.wall}
            row.update({"compute_ns": b.compute, "communication_ns": b.communication})
            row.update({"overlapped_ns": b.overlapped, "free_ns": b.free, "wait_ns": b.wait})
            row.update({"preparing_ns": b.preparing, "closing_ns": b.closing})
            rows.append(row)
    return rows


def _kernel_rows(model: PhaseModel, name: Callable[[Identity], str]) -> list[dict]:
    """Per process, in role and rank order: its busiest kernels and ops
    (:mod:`tracemerge.phases.kernels`), each with its share of the process's device busy time."""
    rows = []
    for ident in sorted(model.kernels, key=lambda i: (role_sort_key(i.role), *order_key(i)[1:])):
        found = model.kernels[ident]
        row: dict[str, Any] = {"role": ident.role, "rank": ident.rank, "process": name(ident), "busy_ns": found.busy_ns}
        row["names"] = found.names
        row["top"] = [
            {"name": n, "count": count, "total_ns": total, "share": total / found.busy_ns if found.busy_ns else 0.0}
            for n, total, count in found.top
        ]
        rows.append(row)
    return rows


def _steps(model: PhaseModel, name: Callable[[Identity], str]) -> list[dict]:
    """Per job step: its first and last event across every process, wall and period, whether
    means count it (:mod:`tracemerge.phases.step_counting`), and who held it up."""
    rows = []
    for step, a, b in model.steps:
        held = model.holdups.get(step)
        row = {"step": step, "start_ns": a, "end_ns": b, "wall_ns": b - a, **_kind(model, step)}
        if held is not None:
            c, late = held.critical, held.late
            row["start_skew_ns"], row["end_skew_ns"] = held.start_skew, held.end_skew
            row["critical"] = {"role": c.role, "rank": c.rank, "phase": held.phase, "ns": held.waited}
            row["critical"].update({"process": name(c), "cause": held.cause, "cause_ns": held.cause_ns})
            row["late"] = {"role": late.role, "rank": late.rank, "process": name(late), "ns": held.start_skew}
        rows.append(row)
    return rows


def _kind(model: PhaseModel, step: int) -> dict:
    kind = model.kinds.get(step)
    if kind is None:  # (a model made without classifying its steps)
        return {"period_ns": None, "partial": False, "warmup": False, "counted": True}
    return {"period_ns": kind.period, "partial": kind.partial, "warmup": kind.warmup, "counted": kind.counted}


def _roles(model: PhaseModel) -> dict[str, dict]:
    by_role: dict[str, dict[Identity, ProcessPhases]] = defaultdict(dict)
    for ident, proc in model.processes.items():
        by_role[ident.role][ident] = proc
    quiet: dict[str, list[int]] = defaultdict(list)  # roles without phases: each rank's active time
    for ident, active in model.active.items():
        if ident.role not in by_role:
            quiet[ident.role].append(active)
    out: dict[str, dict] = {}
    if not by_role:
        return out  # no phases anywhere: nothing to set the quiet roles beside
    for role in sorted({*by_role, *quiet}, key=role_sort_key):
        if role in quiet:
            out[role] = {"ranks": len(quiet[role]), "active_ns": sum(quiet[role]), "phases": {}}
        else:
            counted = {i: _counted_steps(p, model) for i, p in by_role[role].items()}
            off = {
                i: sum(n for st, n in unrecorded(p, model.recorded.get(i)).items() if model.counted(st))
                for i, p in by_role[role].items()
            }
            out[role] = _role(
                counted, [s for s in model.roles.get(role, []) if model.counted(s.step)], sum(off.values())
            )
    return out


def _counted_steps(proc: ProcessPhases, model: PhaseModel) -> ProcessPhases:
    """The process with the steps the means count alone."""
    return ProcessPhases(proc.preset, steps=[st for st in proc.steps if model.counted(st.step)])


def _role(procs: dict[Identity, ProcessPhases], slices: list[PipelineSlice], not_profiled: int) -> dict:
    """A role's numbers: per phase, total, share, per-rank mean (and p50, p90 from 5 ranks), max,
    the rank holding it up most and the one starting it last most; its idle time, and the part
    of its step time its profilers did not record (``not_profiled``: no longer idle)."""
    step_total = sum(st.dur for p in procs.values() for st in p.steps)
    idle_total = sum(st.idle for p in procs.values() for st in p.steps) - not_profiled
    names = sorted({ph for p in procs.values() for st in p.steps for ph in st.phases})
    phases = {}
    for name in names:
        values = sorted(sum(st.phases.get(name, 0) for st in p.steps) for p in procs.values())
        phases[name] = {**phase_numbers(values, step_total), **_held_up(s for s in slices if s.phase == name)}
    return role_numbers(len(procs), step_total, idle_total, not_profiled, phases)


def _held_up(slices: Iterable[PipelineSlice]) -> dict:
    """Over a role's steps of one phase: the rank the others waited on most (in total, then in
    most steps), and the one that started it last most, by how much in all."""
    waited: Counter[Identity] = Counter()
    critical: Counter[Identity] = Counter()
    late_by: Counter[Identity] = Counter()
    late: Counter[Identity] = Counter()
    for s in slices:
        waited[s.holdup.critical] += s.holdup.waited
        critical[s.holdup.critical] += 1
        late_by[s.holdup.late] += s.holdup.start_skew
        late[s.holdup.late] += 1
    out = {}
    for key, ns, steps in (("critical", waited, critical), ("late", late_by, late)):
        who = min(steps, key=lambda i: (-ns[i], -steps[i], order_key(i)), default=None)
        out[key] = None if who is None else {"rank": who.rank, "process": who.label, "ns": ns[who], "steps": steps[who]}
    return out


def per_step(numbers: dict) -> bool:
    """Whether ``numbers`` has the per-step rows (a trace an older tracemerge wrote has not)."""
    return all(isinstance(s, dict) for s in numbers.get("steps", ()))


def format_summary(numbers: dict) -> str:
    """The terminal tables of :func:`summary`: one row per step, then per role and phase."""
    if not numbers["roles"] or not numbers["steps"]:
        device = [breakdown_table(numbers["breakdown"])] if numbers.get("breakdown") else []
        device += [kernels_table(numbers["kernels"])] if numbers.get("kernels") else []
        none = "phases: none found (name a preset or a rules file with --phases)"
        return "\n".join([none, *_run_line(numbers), *_warning(numbers), *device])
    steps = numbers["steps"]
    preset = numbers["preset"] or "none: steps only"
    head = [f"phases ({preset}), {len(steps)} step(s){counted_text(steps)}", *_run_line(numbers), *_warning(numbers)]
    head += [f"  {shown(who)}: {why}" for who, why in (numbers.get("unaligned_why") or {}).items()]
    head += [f"⚠ {line}" for line in numbers.get("withheld") or ()]
    counted = {s["step"] for s in steps if s.get("counted", True)}
    device = [breakdown_table(numbers["breakdown"], counted)] if numbers.get("breakdown") else []
    device += [kernels_table(numbers["kernels"])] if numbers.get("kernels") else []
    device += step_kernels_table(numbers["step_kernels"], counted) if numbers.get("step_kernels") else []
    longest = longest_segments(numbers.get("critical_path") or [])
    left = _left_out_lines(numbers.get("left_out") or {})
    return "\n".join([*head, step_table(steps, longest), "", _role_table(numbers), *device, *left])


def _run_line(numbers: dict) -> list[str]:
    """``run 2 of 3 among the inputs, started 2026-11-30 15:37:48.421 UTC``: said when the inputs
    held several runs (the summary's ``run``, :func:`tracemerge.clock.runs.held`)."""
    held = numbers.get("run")
    if not held:
        return []
    if held["number"] is None:
        return [f"all {held['runs']} runs among the inputs, on one timeline from {held['start_utc']}"]
    return [f"run {held['number']} of {held['runs']} among the inputs, started {held['start_utc']}"]


def _warning(numbers: dict) -> list[str]:
    found = numbers.get("unaligned") or []
    if not found:
        return []
    n, names = len(found), ", ".join(map(shown, found))
    return [
        f"⚠ {n} process{'es' if n > 1 else ''} unaligned (placed without clock evidence): {names};"
        " left out of skews, late, critical and waits (their times are not comparable with the others')"
    ]


def _role_table(numbers: dict) -> str:
    many = any(r["ranks"] >= PERCENTILES_FROM for r in numbers["roles"].values())
    head = ["role", "ranks", "phase", "total", "share", "mean/rank", "max/rank"]
    head += ["p50", "p90"] if many else []
    rows = [(*head, "held up by", "started last")]
    for role, r in numbers["roles"].items():
        lead = (role or "-", str(r["ranks"]))
        if "active_ns" in r:  # a role without phases
            rows.append((*lead, "(no phases: active)", format_duration(r["active_ns"]), *[""] * (len(head) - 2)))
            continue
        for name, p in r["phases"].items():
            pct = [format_duration(p[k]) if p[k] is not None else "" for k in ("p50_ns", "p90_ns")] if many else []
            rows.append(
                (
                    *lead,
                    name,
                    format_duration(p["total_ns"]),
                    f"{100 * p['share']:.1f}%",
                    format_duration(p["mean_ns"]),
                    format_duration(p["max_ns"]),
                    *pct,
                    _who(p["critical"], r["ranks"], waited=True),
                    _who(p["late"], r["ranks"], waited=False),
                )
            )
        idle = (*lead, IDLE, format_duration(r["idle_ns"]), f"{100 * r['idle_fraction']:.1f}%")
        rows.append((*idle, *[""] * (len(rows[0]) - len(idle))))
        if r.get("not_profiled_ns"):  # time its profilers did not record: not idle
            off = (
                *lead,
                NOT_PROFILED,
                format_duration(r["not_profiled_ns"]),
                f"{100 * r['not_profiled_fraction']:.1f}%",
            )
            rows.append((*off, *[""] * (len(rows[0]) - len(off))))
    title = f"per role, in pipeline order; share: of {SHARE_OF}"
    return title + "\n" + format_table(rows, left=frozenset({0, 2, len(rows[0]) - 2, len(rows[0]) - 1}))


def _who(found: dict | None, ranks: int, waited: bool) -> str:
    """``rank 1: 6.2 ms waited, 2 step(s)``; ``-`` for a role of one rank, or when no one waited
    (started later)."""
    if found is None or ranks < 2 or not found["ns"]:
        return "-"
    name = f"rank {found['rank']}" if found["rank"] is not None else found["process"].partition(" · ")[2]
    return f"{name}: {brief(found['ns'])} {'waited' if waited else 'late'}, {found['steps']} step(s)"


def stored(numbers: dict) -> dict:
    """The summary a merged trace keeps (the ``phase summary`` instant on the Pipeline group): a
    line per step (the longest :data:`STORED_STEPS`) and per role, as a person reads them, and the
    numbers themselves as one JSON text (for ``tracemerge summary TRACE``)."""
    steps = numbers["steps"]
    shown = sorted(sorted(steps, key=lambda s: -s["wall_ns"])[:STORED_STEPS], key=lambda s: s["step"])
    lines = [step_line(s) for s in shown]
    if len(shown) < len(steps):
        lines.append(f"the {len(shown)} longest of {len(steps)} steps; `tracemerge summary` lists them all")
    out: dict = {"steps": lines, "roles": [_role_line(role, r) for role, r in numbers["roles"].items()]}
    if numbers.get("unaligned"):
        out["unaligned"] = _warning(numbers)[0]
    if numbers.get("run"):
        out["run"] = _run_line(numbers)[0]
    numbers = capped(numbers, STORED_ROWS)
    if numbers.get("left_out"):
        out["left_out"] = _left_out_lines(numbers["left_out"])
    out["numbers"] = json.dumps(numbers, separators=(",", ":"))
    return out


def capped(numbers: dict, limit: int) -> dict:
    """``numbers`` with at most ``limit`` rows (or the fewer :data:`CAPPED` names) of each list of
    :data:`CAPPED`: the rows of whole steps, in step order; per list cut, ``left_out`` says how
    many rows and steps were left out."""
    out = dict(numbers)
    for key, most in CAPPED.items():
        rows = numbers.get(key) or []
        cap = min(limit, most)
        if len(rows) <= cap:
            continue
        per_step: Counter[int | None] = Counter(r["step"] for r in rows)
        kept, total = set(), 0
        for step in sorted(per_step, key=lambda n: (n is not None, n or 0)):  # rows of no step first
            if total + per_step[step] > cap:
                break
            kept.add(step)
            total += per_step[step]
        out[key] = [r for r in rows if r["step"] in kept]
        left = {"rows": len(rows) - total, "steps": len(per_step) - len(kept), "limit": cap}
        out["left_out"] = {**out.get("left_out", {}), key: left}
    return out


def _left_out_lines(left_out: dict) -> list[str]:
    """``breakdown: 1,200 rows of 10 steps left out (at most 64,000 kept, whole steps in order)``."""
    return [
        f"{key}: {n['rows']:,} rows of {n['steps']:,} step(s) left out (at most {n['limit']:,} kept, whole steps"
        " in step order); `tracemerge summary RUN_DIR` lists them all"
        for key, n in left_out.items()
    ]


def _role_line(role: str, r: dict) -> str:
    name = f"{role or '(no role)'} ({r['ranks']} rank{'s' if r['ranks'] > 1 else ''})"
    if "active_ns" in r:
        return f"{name}: no phases; active {brief(r['active_ns'])} (first to last event, summed over ranks)"
    shares = [f"{ph} {100 * p['share']:.1f}%" for ph, p in r["phases"].items()]
    shares.append(f"idle {100 * r['idle_fraction']:.1f}%")
    if r.get("not_profiled_ns"):
        shares.append(f"not profiled {100 * r['not_profiled_fraction']:.1f}%")
    return f"{name}: " + ", ".join(shares) + " of its step time"
