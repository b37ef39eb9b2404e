"""The busiest kernels and ops of two runs side by side, in ``tracemerge diff``: shown, never
gated (a kernel renamed between versions, or one fused into another, would fail a gate with no
regression). Per process both summaries name (by its role, rank and name), each kernel or op in
either run's busiest: its total device time and count on each side; a name in one run's busiest
only has no figure on the other (it may have run there, below the busiest)."""

from __future__ import annotations

from tracemerge.report.run_report import clipped, format_duration, format_table

NAME_WIDTH = 60


def _by_process(side: dict) -> dict[tuple, dict]:
    return {(r["role"], r["rank"], r["process"]): r for r in side.get("kernels") or ()}


def compare_kernels(base: dict, new: dict) -> dict | None:
    """Per process of both runs, a row per kernel or op in either's busiest (base's order, then
    the new run's others): base and new total and count, delta; the processes of one run only.
    None when neither summary carries the busiest kernels (one an older tracemerge made)."""
    sides = [_by_process(side) for side in (base, new)]
    if not any(sides):
        return None
    rows = []
    for key, b in sides[0].items():
        n = sides[1].get(key)
        if n is None:
            continue
        tops = [{k["name"]: k for k in side["top"]} for side in (b, n)]
        for name in dict.fromkeys([*tops[0], *tops[1]]):
            found = [top.get(name) for top in tops]
            totals = [None if k is None else k["total_ns"] for k in found]
            rows.append(
                {
                    "role": key[0],
                    "rank": key[1],
                    "process": key[2],
                    "name": name,
                    "base_ns": totals[0],
                    "new_ns": totals[1],
                    "delta_ns": None if totals[0] is None or totals[1] is None else totals[1] - totals[0],
                    "base_count": None if found[0] is None else found[0]["count"],
                    "new_count": None if found[1] is None else found[1]["count"],
                }
            )
    only = [[key[2] for key in sides[i] if key not in sides[1 - i]] for i in (0, 1)]
    return {"rows": rows, "only_base": only[0], "only_new": only[1], "gated": False}


def format_kernels(found: dict | None) -> list[str]:
    """The table of :func:`compare_kernels` (nothing when neither run carries the kernels)."""
    if found is None:
        return []

    def ns(value: int | None, signed: bool = False) -> str:
        return "-" if value is None else format_duration(value, signed=signed)

    lines = ["", "busiest kernels and ops per process, whole profiled time (shown, not gated)"]
    if found["rows"]:
        table = [("process", "kernel / op", "base", "new", "delta", "delta %", "count base -> new")]
        for r in found["rows"]:
            b, d = r["base_ns"], r["delta_ns"]
            pct = "-" if d is None or not b else f"{100 * d / b:+.1f}%"
            counts = " -> ".join("-" if c is None else f"{c:,}" for c in (r["base_count"], r["new_count"]))
            name = clipped(r["name"], NAME_WIDTH)
            table.append((r["process"], name, ns(b), ns(r["new_ns"]), ns(d, True), pct, counts))
        lines.append(format_table(table, left=frozenset({0, 1})))
    for key, side in (("only_base", "base"), ("only_new", "new")):
        if found[key]:
            lines.append(f"busiest kernels only in {side}: {', '.join(found[key])}")
    return lines
