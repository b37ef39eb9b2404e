"""The per-step rows as printed: the step table of ``tracemerge summary`` and the lines a merged
trace keeps (:mod:`tracemerge.analysis.steps` makes the numbers)."""

from __future__ import annotations

from tracemerge.phases.tracks import brief
from tracemerge.report.run_report import format_duration, format_table


def counted_text(steps: list[dict]) -> str:
    """``, 2 counted (the warm-up and 1 partial left out of the means)``; nothing when all are."""
    left = [s for s in steps if not s.get("counted", True)]
    if not left:
        return ""
    warmup = [s for s in left if s.get("warmup") and not s.get("partial")]
    partial = [s for s in left if s.get("partial")]
    out = [*(["the warm-up"] if warmup else []), *([f"{len(partial)} partial"] if partial else [])]
    return f", {len(steps) - len(left)} counted ({' and '.join(out)} left out of the means)"


def _step_name(s: dict) -> str:
    """``0``, ``0 warm-up``, ``3 partial``."""
    marks = [m for m in ("warm-up", "partial") if s.get(m.replace("-", ""))]
    return " ".join([str(s["step"]), *marks])


def _cause(c: dict | None) -> str:
    """How the critical process held the step up: ``started late 337.0 ms``, ``slower phase``."""
    if not c or not c.get("cause"):
        return "-"
    return f"{c['cause']} {brief(c['cause_ns'])}" if c["cause_ns"] else c["cause"]


def _critical_text(c: dict | None) -> str:
    """The critical process, with its phase when a slower phase is what held the step up."""
    if not c:
        return "-"
    slower = c["phase"] and c.get("cause", "slower phase") == "slower phase"
    return f"{c['process']} · {c['phase']}" if slower else c["process"]


def longest_segments(segments: list[dict]) -> dict[int, dict]:
    """Per step, the longest segment of its critical path (the earliest on a tie)."""
    out: dict[int, dict] = {}
    for seg in segments:
        found = out.get(seg["step"])
        if found is None or seg["end_ns"] - seg["start_ns"] > found["end_ns"] - found["start_ns"]:
            out[seg["step"]] = seg
    return out


def _segment_text(seg: dict | None) -> str:
    """``actor · rank 1 · update_actor, 35.0 ms (compute)``."""
    if seg is None:
        return "-"
    where = seg.get("process") or seg["role"] or "-"
    return f"{where} · {seg['phase']}, {brief(seg['end_ns'] - seg['start_ns'])} ({seg['bound_by']})"


def step_table(steps: list[dict], longest: dict[int, dict] | None = None) -> str:
    head = ("step", "wall", "period", "critical: process · phase", "how", "waited on it", "started last")
    rows = [(*head, "start skew", "end skew", "longest on the critical path")]
    for s in steps:
        c, late = s.get("critical"), s.get("late")
        period = s.get("period_ns")
        rows.append(
            (
                _step_name(s),
                format_duration(s["wall_ns"]),
                format_duration(period) if period is not None else "-",
                _critical_text(c),
                _cause(c),
                format_duration(c["ns"]) if c and c["ns"] is not None else "-",
                late["process"] if late and late["ns"] else "-",  # all started at once: nobody late
                format_duration(s["start_skew_ns"]) if late else "-",
                format_duration(s["end_skew_ns"]) if late else "-",
                _segment_text((longest or {}).get(s["step"])),
            )
        )
    return format_table(rows, left=frozenset({0, 3, 4, 6, 9}))


def step_line(s: dict) -> str:
    marks = [m for m in ("warm-up", "partial") if s.get(m.replace("-", ""))]
    flags = f" ({', '.join(marks)})" if marks else ""
    text = f"step {s['step']}{flags}: {brief(s['wall_ns'])}"
    if s.get("period_ns") is not None:
        text += f", the next {brief(s['period_ns'])} after its start"
    c, late = s.get("critical"), s.get("late")
    if c:
        how = f": {_cause(c)}" if c.get("cause") else ""
        waited = f"{brief(c['ns'])} waited on it" if c["ns"] is not None else "wait not shown"
        text += f"; held up by {_critical_text(c)}{how} ({waited})"
    if late and late["ns"]:
        text += f"; started last: {late['process']}, {brief(late['ns'])} after the first of its role"
    return text
