"""``--split-by role|host|step-window|tp|pp|dp|cp|ep|replica``: one trace per group of the run, and an index of them.

Every part is cut from the one plan of the whole run, so all parts share its processes, pids,
clock alignment and time base: a process is named alike and an instant has the same time in each.
By role or host, each file's chunk goes whole into the part of its role (its first process's) or
host; the Phases and Pipeline tracks go into a part of their own (``pipeline``) that holds every
process's Phases track. By step window, each part is the time of one step of the job (the first
from the run start, the last to its end), encoded like ``--window`` would (each file is encoded
once per part it shares time with), and carries the Phases and Pipeline tracks of the whole run.
The index (``<name>.index.json`` beside the parts) lists each part's file, group, processes,
input files, time range in ns after the run start (and, by step window, the window), and size.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.core.errors import FatalError
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.types import FileScan, MergePlan, UnitPlan
from tracemerge.report.run_report import json_bytes
from tracemerge.run.derived_unit import DERIVED_FORMAT
from tracemerge.select import WHERE_KEYS

# By a parallel coordinate (--split-by dp): each file goes whole to the part of the value its name
# gives (``dp0``, ``dp1``); files whose names give none to ``dp-none``.
SPLIT_KINDS = ("role", "host", "step-window", *WHERE_KEYS)
PIPELINE_PART = "pipeline"
UNKNOWN_HOST = "unknown-host"


class Part(msgspec.Struct, frozen=True):
    group: str
    units: list[UnitPlan]
    window: tuple[int | None, int | None] | None = None  # ns after the run start (step-window)


def check_kind(by: str) -> str:
    if by not in SPLIT_KINDS:
        raise ValueError(f"--split-by: unknown grouping {by!r} (choose from {', '.join(SPLIT_KINDS)})")
    return by


def groups(by: str, plan: MergePlan, scan_of: Mapping[Path, FileScan], derived: Path | None) -> list[Part]:
    """The parts of a role or host split, in the order of their first process in the trace."""
    found: dict[str, list[UnitPlan]] = {}
    for unit in plan.units:
        if unit.path == derived:
            key = PIPELINE_PART
        elif by == "host":
            key = scan_of[unit.path].host or UNKNOWN_HOST
        elif by in WHERE_KEYS:
            value = scan_of[unit.path].facts.coord(by)
            key = f"{by}{value}" if value is not None else f"{by}-none"
        else:
            key = _role_of(unit, plan)
        found.setdefault(key, []).append(unit)
    parts = [Part(group, units) for group, units in found.items()]
    return sorted(parts, key=lambda part: min((p.order for p in sub_plan(plan, part.units).processes), default=0))


def _role_of(unit: UnitPlan, plan: MergePlan) -> str:
    owners = {t.process_uuid for t in unit.threads.values()} | {c.process_uuid for c in unit.counters.values()}
    for proc in plan.processes:  # in process order: the file's first process decides
        if proc.uuid in owners and not proc.is_group:
            return proc.identity.role or proc.name
    return PIPELINE_PART


def step_windows(steps: list[tuple[int, int, int]], base_ns: int) -> list[tuple[str, tuple[int | None, int | None]]]:
    """One window per step of the job, in ns after the run start; together they cover the run."""
    if not steps:
        raise FatalError("--split-by step-window: the run has no steps (no step markers and no phases)")
    ordered = sorted(steps, key=lambda s: s[1])
    windows = []
    for n, (step, start, _end) in enumerate(ordered):
        lo = None if n == 0 else start - base_ns
        hi = None if n == len(ordered) - 1 else ordered[n + 1][1] - base_ns - 1
        windows.append((f"step{step}", (lo, hi)))
    return windows


def sub_plan(plan: MergePlan, units: list[UnitPlan]) -> MergePlan:
    """The plan of a part: its units, and the processes, threads and counters they write on."""
    threads = {t.uuid for u in units for t in u.threads.values()}
    counters = {c.uuid for u in units for c in u.counters.values()}
    owners = {t.process_uuid for t in plan.threads if t.uuid in threads}
    owners |= {c.process_uuid for c in plan.counters if c.uuid in counters}
    return replace(
        plan,
        units=units,
        processes=[p for p in plan.processes if p.uuid in owners],
        threads=[t for t in plan.threads if t.uuid in threads],
        counters=[c for c in plan.counters if c.uuid in counters],
        clock_notes=[n for n in plan.clock_notes if n.process_uuid in owners],
        phase_summary=plan.phase_summary if any(p.is_group and p.uuid in owners for p in plan.processes) else {},
    )


def _stem_and_extension(out_path: Path, extensions: tuple[str, ...]) -> tuple[str, str]:
    name = out_path.name
    ext = next((e for e in sorted(extensions, key=len, reverse=True) if name.endswith(e)), out_path.suffix)
    return (name[: len(name) - len(ext)] if ext else name), ext


# Longest group name kept whole in a part's file name (a file name holds 255 bytes); a longer one
# is cut there and told apart by a digest of it.
GROUP_NAME_CHARS = 80


def part_path(out_path: Path, group: str, extensions: tuple[str, ...], taken: Collection[str] = ()) -> Path:
    """``merged.pftrace`` and group ``actor`` -> ``merged.actor.pftrace``. Groups from the data may
    make one name (``ro le`` and ``ro_le``), or the index's (a role ``index`` of ``merged.json``):
    a name in ``taken`` gets ``-2``, ``-3``, ... (the index says which group each file holds)."""
    stem, ext = _stem_and_extension(out_path, extensions)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", group).strip(".") or "_"
    if len(safe) > GROUP_NAME_CHARS:
        safe = f"{safe[:GROUP_NAME_CHARS]}-{hashlib.sha256(group.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    name, n = f"{stem}.{safe}{ext}", 1
    while name in taken:
        n += 1
        name = f"{stem}.{safe}-{n}{ext}"
    return out_path.with_name(name)


def index_path(out_path: Path, extensions: tuple[str, ...]) -> Path:
    """``merged.pftrace`` -> ``merged.index.json``."""
    stem, _ = _stem_and_extension(out_path, extensions)
    return out_path.with_name(f"{stem}.index.json")


def index_entry(part: Part, path: Path, plan: MergePlan, sub: MergePlan, scan_of: Mapping[Path, FileScan]) -> dict:
    """One part in the index: its file, group, processes (``sub``: its plan), inputs and time range."""
    spans = [
        (s.ts_min + plan.offsets.get(s.path, 0) - plan.base_ns, s.ts_max + plan.offsets.get(s.path, 0) - plan.base_ns)
        for u in part.units
        if (s := scan_of[u.path]).ts_min is not None and s.ts_max is not None
    ]
    start = min((a for a, _ in spans), default=0)
    end = max((b for _, b in spans), default=0)
    if part.window is not None:
        lo, hi = part.window
        start, end = max(start, lo) if lo is not None else start, min(end, hi) if hi is not None else end
    entry = {
        "file": path.name,
        "group": part.group,
        "processes": [p.name for p in sub.processes if not p.is_group],
        "inputs": [str(u.path) for u in part.units if scan_of[u.path].format != DERIVED_FORMAT],
        "start_ns": start,
        "end_ns": end,
        "bytes": path.stat().st_size,
    }
    if part.window is not None:
        entry["window_ns"] = list(part.window)
    return entry


def write_index(path: Path, by: str, writer: str, plan: MergePlan, entries: list[dict]) -> None:
    doc = {
        "producer": "tracemerge",
        "split_by": by,
        "format": writer,
        "time_base_unix_ns": plan.base_ns if plan.wall_clock else None,
        "traces": entries,
    }
    path.write_bytes(json_bytes(doc) + b"\n")


def write_parts(
    by: str,
    parts: Iterable[tuple[Part, dict[Path, EncodedFile]]],
    out_path: Path,
    extensions: tuple[str, ...],
    work: Path,
    plan: MergePlan,
    writer: str,
    assemble: Callable[[MergePlan, dict[Path, EncodedFile], Path], None],
    check: Callable[[Path], None],
) -> list[Path]:
    """Assemble every part in ``work``, then move them and the index into place; the paths written.

    ``check`` refuses a path that must not be replaced (as it refuses ``-o``), before any part
    is assembled for it; nothing is moved into place unless every path passes."""
    written: list[tuple[Path, Path]] = []
    entries = []
    index = index_path(out_path, extensions)
    check(index)
    taken = {index.name}
    for n, (part, files) in enumerate(parts):
        target = part_path(out_path, part.group, extensions, taken)
        taken.add(target.name)
        check(target)
        staged = work / f"part{n:05d}"
        sub = sub_plan(plan, part.units)
        assemble(sub, files, staged)
        written.append((staged, target))
        scan_of = {path: f.scan for path, f in files.items()}
        entries.append(index_entry(part, staged, plan, sub, scan_of) | {"file": target.name})
    staged_index = work / "index.json"
    write_index(staged_index, by, writer, plan, entries)
    for staged, target in [*written, (staged_index, index)]:
        os.replace(staged, target)
    return [t for _, t in written] + [index]
