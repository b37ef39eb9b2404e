"""Each step's busiest kernels and ops, per process (:func:`tracemerge.phases.kernels.busiest_per_step`):
the summary's ``step_kernels`` rows and the table ``tracemerge summary`` prints of them.

A run of 64 ranks and 1,000 steps has 64,000 such rows: the table lists them when they are few
(:data:`SHOWN_ROWS`, as ``--steps`` and ``--roles`` choose them) and says how to list the others;
``--json`` gives them all, and a merged trace keeps the first :data:`STORED_ROWS` (whole steps).
"""

from __future__ import annotations

from collections.abc import Callable

from tracemerge.core.model import Identity
from tracemerge.naming.paths import role_sort_key
from tracemerge.phases.holdups import order_key
from tracemerge.phases.model import PhaseModel
from tracemerge.report.run_report import clipped, format_duration, format_table

SHOWN_ROWS = 64  # process-step rows the table lists
STORED_ROWS = 16 * 1000  # rows a merged trace's own summary keeps (16 ranks x 1,000 steps)
NAME_WIDTH = 60
TITLE = (
    "busiest kernels and ops per step and process: count, device time in the step, share of the"
    " process's device busy time in the step"
)


def step_kernel_rows(model: PhaseModel, name: Callable[[Identity], str]) -> list[dict]:
    """Per process in role and rank order, per step in its order: the step's busiest kernels and
    ops, each with its share of the process's device busy time in the step."""
    rows = []
    for ident in sorted(model.step_kernels, key=lambda i: (role_sort_key(i.role), *order_key(i)[1:])):
        for step, found in model.step_kernels[ident]:
            row: dict[str, object] = {"role": ident.role, "rank": ident.rank, "process": name(ident), "step": step}
            row.update({"busy_ns": found.busy_ns, "names": found.names})
            row["top"] = [
                {"name": n, "count": count, "total_ns": total, "share": total / found.busy_ns if found.busy_ns else 0.0}
                for n, total, count in found.top
            ]
            rows.append(row)
    return rows


def step_kernels_table(rows: list[dict], counted: set[int]) -> list[str]:
    """The table of the rows of the counted steps (all rows when none is counted), or a line
    saying how many there are and how to list them when they are more than :data:`SHOWN_ROWS`."""
    shown = [r for r in rows if r["step"] in counted] or rows
    if len(shown) > SHOWN_ROWS:
        processes, steps = len({r["process"] for r in shown}), len({r["step"] for r in shown})
        return [
            "",
            f"busiest kernels and ops per step: {processes} process(es) x {steps} step(s); --steps and --roles"
            " choose which to list, --json gives them all",
        ]
    table = [("step", "process", "kernel / op", "count", "in step", "share")]
    for r in shown:
        where = r["process"] or r["role"] or "-"
        table.append((str(r["step"]), where, f"(device busy {format_duration(r['busy_ns'])})", "", "", ""))
        for k in r["top"]:
            name = clipped(k["name"], NAME_WIDTH)
            table.append(("", "", name, f"{k['count']:,}", format_duration(k["total_ns"]), f"{100 * k['share']:.1f}%"))
    return ["", TITLE, format_table(table, left=frozenset({0, 1, 2}))]
