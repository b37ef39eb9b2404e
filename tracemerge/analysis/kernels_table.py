"""The busiest kernels and ops in ``tracemerge summary``'s tables: per process, its kernels and
ops that took the most device time (:mod:`tracemerge.phases.kernels`)."""

from __future__ import annotations

from tracemerge.report.run_report import clipped, format_duration, format_table

NAME_WIDTH = 72  # a demangled C++ kernel name runs to hundreds of characters: its head is shown
TITLE = (
    "busiest kernels and ops per process, over its whole profiled time: count, total device time,"
    " share of the process's device busy time (kernels on several streams at once can share it)"
)


def kernels_table(rows: list[dict]) -> str:
    """Per process (role, rank or name), its busiest kernels and ops, the longest first."""
    table = [("process", "kernel / op", "count", "total", "share")]
    for r in rows:
        where = r["process"] or r["role"] or "-"
        shown = f"{len(r['top'])} of {r['names']} names" if r["names"] > len(r["top"]) else f"{r['names']} names"
        table.append((where, f"(device busy {format_duration(r['busy_ns'])}; {shown})", "", "", ""))
        for k in r["top"]:
            name = clipped(k["name"], NAME_WIDTH)
            table.append(("", name, f"{k['count']:,}", format_duration(k["total_ns"]), f"{100 * k['share']:.1f}%"))
    return "\n" + TITLE + "\n" + format_table(table, left=frozenset({0, 1}))
