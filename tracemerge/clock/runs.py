"""Runs, not files: inputs whose timelines lie far apart are separate runs of a job.

A framework that keeps appending to one save folder holds the files of every run of the job side
by side; two profiler traces picked from different days are unrelated. Merged onto one timeline
they give step walls of a day and collective waits longer than their steps. Once the clocks are
placed, :func:`find_runs` groups the files by their span on the placed timeline: a gap of more
than :func:`gap_limit` with no file recording anything starts a new run. :func:`choose` picks the
runs a merge or a summary keeps (``--run``: the latest by default).

Contract: ``find_runs(scans, alignment)`` takes every file read and its placement and returns the
runs in time order (numbered from 1), each with its files, its processes and its span, and the
files no time places (:attr:`Runs.unplaced`): files without events, and files nothing relates to
a wall clock (placed ``unrelated``: at the run start, on no evidence). Those go with whichever run
is kept. A timeline that is not wall-clock time (no file has an epoch clock or a modification time)
holds no run (``Runs.runs`` empty): its gaps measure nothing, and every file is one run.

The stages use :func:`runs_of` (the files placed, then the runs among those their own clock places,
each file only evidence places joining its own run), :func:`choose`, and for ``--run all``
:func:`one_timeline` (each run placed as if alone, side by side).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import msgspec
from msgspec.structs import replace

from tracemerge.clock.alignment import align
from tracemerge.clock.placement import Alignment, AlignOptions, HasClock
from tracemerge.core.model import Identity

HOUR_NS = 3600 * 10**9
# A gap shorter than this never separates runs: profiling windows of one job (torch.profiler's
# schedule, a trace per N steps) can lie many steps apart without a new run starting.
MIN_GAP_NS = HOUR_NS
# Files that each span hours (a whole-run span log) may pause for a while between them: a gap
# separates runs only when it is this many times the longest file's span...
SPAN_FACTOR = 10
# ...but never more than this: no run is one timeline with a day-long gap in it.
MAX_GAP_NS = 12 * HOUR_NS

# Placements by a file's own clock, and by other files' evidence (tracemerge.clock.alignment).
OWN_CLOCK = frozenset({"reference", "exact", "manual", "mtime", "raw"})
BY_EVIDENCE = frozenset({"collectives", "sync", "session"})

LATEST = "latest"
ALL = "all"
_TIME_PREFIX = re.compile(r"\d{4}(-\d{2}(-\d{2}([ T]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?)?)?")


class HasSpan(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def ts_min(self) -> int: ...
    @property
    def ts_max(self) -> int: ...
    @property
    def counts(self) -> dict: ...
    @property
    def threads(self) -> dict: ...
    @property
    def counter_series(self) -> dict: ...


class HasClockAndSpan(HasSpan, HasClock, Protocol):
    """A file's summary that is placed (:func:`~tracemerge.clock.align`), then grouped into runs."""


class Run(msgspec.Struct, frozen=True):
    """One run: its files, the labels of its processes, and its first and last event on the
    placed timeline (Unix-epoch ns when the timeline is wall-clock time)."""

    number: int  # 1 for the earliest
    start_ns: int
    end_ns: int
    files: tuple[Path, ...]
    processes: tuple[str, ...]
    # Files only evidence places that the records of several runs placed alike: put with this run
    # as sharing the longest folder with its files.
    ambiguous: tuple[Path, ...] = ()

    @property
    def started(self) -> str:
        """Its start in UTC, as the run table shows it and ``--run`` names it."""
        return utc_text(self.start_ns)

    def as_dict(self, merged: bool) -> dict:
        return {
            "number": self.number,
            "start_unix_ns": self.start_ns,
            "start_utc": self.started,
            "end_unix_ns": self.end_ns,
            "files": [str(p) for p in self.files],
            "processes": list(self.processes),
            "merged": merged,
            "ambiguous": [str(p) for p in self.ambiguous],
        }


class Runs(msgspec.Struct, frozen=True):
    """The runs in time order, the gap that separated them, and the files no time places."""

    runs: tuple[Run, ...]
    gap_ns: int
    unplaced: tuple[Path, ...] = ()
    placed: Alignment | None = None  # runs_of: every file placed at once, as align() places them

    @property
    def several(self) -> bool:
        return len(self.runs) > 1


def utc_text(ns: int) -> str:
    """``2026-10-02 09:57:48.421 UTC``: an epoch time to the ms."""
    moment = datetime.fromtimestamp(ns // 10**9, timezone.utc)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{ns % 10**9 // 10**6:03d} UTC"


def gap_limit(spans: Sequence[int]) -> int:
    """The gap that separates two runs, given every placed file's span (last less first event)."""
    return min(max(MIN_GAP_NS, SPAN_FACTOR * max(spans, default=0)), MAX_GAP_NS)


def find_runs(scans: Sequence[HasSpan], alignment: Alignment) -> Runs:
    """The runs among ``scans`` as ``alignment`` places them (see the module's contract)."""
    placed, unplaced = [], []
    for s in scans:
        source = alignment.sources.get(s.path)
        if s.ts_min is None or source is None or source.method == "unrelated" or not alignment.wall_clock:
            unplaced.append(s)
        else:
            offset = alignment.offsets[s.path]
            placed.append((s.ts_min + offset, (s.ts_max or s.ts_min) + offset, s))
    return _grouped(placed, unplaced)


def _grouped(placed: list[tuple[int, int, HasSpan]], unplaced: Sequence[HasSpan]) -> Runs:
    gap = gap_limit([hi - lo for lo, hi, _ in placed])
    groups: list[list[tuple[int, int, HasSpan]]] = []
    end = None
    for lo, hi, s in sorted(placed, key=lambda p: (p[0], p[1], str(p[2].path))):
        if end is None or lo - end > gap:
            groups.append([])
            end = hi
        groups[-1].append((lo, hi, s))
        end = max(end, hi)
    runs = tuple(_run(n, group) for n, group in enumerate(groups, 1))
    return Runs(runs, gap, tuple(s.path for s in unplaced))


def runs_of(scans: Sequence[HasClockAndSpan], options: AlignOptions, order: Callable[[Identity], tuple]) -> Runs:
    """The runs among ``scans``, placed as :func:`~tracemerge.clock.align` places them.

    A file that only another file's evidence places (a per-process clock placed by collectives,
    sync spans or sessions) could be placed against the records of any run that holds the same
    session numbers or spans. So the runs are found among the files their own clock places; then
    each other file goes with the run whose files place it by evidence, and when several do, with
    the one whose files share the longest folder with it (:attr:`Run.ambiguous` lists those)."""
    first = align(list(scans), options, order)
    own = [s for s in scans if _method(first, s) in OWN_CLOCK]
    floating = [s for s in scans if _method(first, s) in BY_EVIDENCE]
    runs = find_runs(own, first)
    if not runs.several or not floating:
        return replace(find_runs(scans, first), placed=first)
    claims: dict[Path, list[Run]] = {s.path: [] for s in floating}
    for run in runs.runs:
        files = set(run.files)
        placed = align([*(s for s in scans if s.path in files), *floating], options, order)
        for s in floating:
            if _method(placed, s) in BY_EVIDENCE:
                claims[s.path].append(run)
    joined: dict[int, list[HasSpan]] = {r.number: [] for r in runs.runs}
    ambiguous: dict[int, list[Path]] = {r.number: [] for r in runs.runs}
    for s in floating:
        if not claims[s.path]:
            continue
        best = max(claims[s.path], key=lambda r: (_common_folder(s.path, r.files), -r.number))
        joined[best.number].append(s)
        if len(claims[s.path]) > 1:
            ambiguous[best.number].append(s.path)
    taken = {s.path for group in joined.values() for s in group} | {p for r in runs.runs for p in r.files}
    unplaced = tuple(s.path for s in scans if s.path not in taken)
    by_path = {s.path: s for s in scans}
    grown = []
    for r in runs.runs:
        group: list[tuple[int, int, HasSpan]] = [(r.start_ns, r.end_ns, by_path[p]) for p in r.files]
        group += [(r.start_ns, r.end_ns, s) for s in joined[r.number]]
        grown.append(_run(r.number, group, tuple(ambiguous[r.number])))
    return Runs(tuple(grown), runs.gap_ns, unplaced, first)


def one_timeline(
    runs: Runs, scans: Sequence[HasClockAndSpan], options: AlignOptions, order: Callable[[Identity], tuple]
) -> Alignment:
    """What ``--run all`` merges: each run placed as if alone (its files only evidence places
    against its own records, not another run's), side by side on the wall-clock timeline they
    share. The files no time places are placed with the first run, at its start."""
    by_run = [set(r.files) for r in runs.runs]
    by_run[0] |= set(runs.unplaced)
    placements = [align([s for s in scans if s.path in files], options, order) for files in by_run]
    offsets = {path: offset for a in placements for path, offset in a.offsets.items()}
    sources = {path: source for a in placements for path, source in a.sources.items()}
    wall_clock = all(a.wall_clock for a in placements)
    return Alignment(offsets, min(a.base_ns for a in placements), wall_clock, sources)


def owner(path: Path, runs: Sequence[Run]) -> Run | None:
    """The run a file without time (tracker scalars, keyed by step) belongs to: the one whose
    files share the longest folder with it; None when several share it alike (a file beside the
    runs' folders, not in one of them) or there is no run."""
    shared = [(_common_folder(path, r.files), r) for r in runs]
    best = max((n for n, _ in shared), default=0)
    owners = [r for n, r in shared if n == best]
    return owners[0] if len(owners) == 1 else None


def _method(alignment: Alignment, scan: HasSpan) -> str:
    source = alignment.sources.get(scan.path)
    return source.method if source is not None and scan.ts_min is not None else ""


def _common_folder(path: Path, files: Sequence[Path]) -> int:
    """How many leading folders ``path`` shares with the nearest of ``files``."""
    return max((_shared_parts(path.parent.parts, f.parent.parts) for f in files), default=0)


def _shared_parts(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _run(number: int, group: list[tuple[int, int, HasSpan]], ambiguous: tuple[Path, ...] = ()) -> Run:
    labels = {i.label for _, _, s in group for i in (*s.counts, *s.threads, *s.counter_series)}
    return Run(
        number,
        min(lo for lo, _, _ in group),
        max(hi for _, hi, _ in group),
        tuple(s.path for _, _, s in group),
        tuple(sorted(labels)),
        ambiguous,
    )


def check_choice(text: str) -> str:
    """``--run``'s value, checked for its form: ``latest``, ``all``, a run's number (1 the
    earliest) or the start of its UTC start time (``2026-10-02``, ``2026-10-02T09:57``)."""
    choice = text.strip()
    if choice in (LATEST, ALL) or (choice.isdigit() and int(choice) >= 1):
        return choice
    if _TIME_PREFIX.fullmatch(_as_shown(choice)):
        return choice
    raise ValueError(
        f"--run: {text!r} is not latest, all, a run's number (1 the earliest) or its UTC start time "
        "(e.g. 2026-10-02T09:57)"
    )


def check_pair(text: str) -> tuple[str, str]:
    """``diff --run``'s value: one choice (:func:`check_choice`) for both sides, or
    ``BASE:NEW``, a choice for each. A value that is itself one choice (a start time has colons:
    ``2026-10-02T09:57``) is one for both; else it must split at exactly one colon into two.
    ``all`` is refused: a comparison is of one run each side."""
    try:
        pair = (check_choice(text),) * 2
    except ValueError:
        pairs = set()
        for at in (i for i, c in enumerate(text) if c == ":"):
            try:
                pairs.add((check_choice(text[:at]), check_choice(text[at + 1 :])))
            except ValueError:
                continue
        if len(pairs) != 1:
            raise ValueError(
                f"--run: {text!r} is neither a run's choice for both sides (latest, a run's number, its UTC start)"
                " nor BASE:NEW, one for each (e.g. 1:2, latest:1, 2026-10-01:2026-10-02)"
            ) from None
        pair = pairs.pop()
    if ALL in pair:
        raise ValueError("--run: diff compares one run of each side, not all: name it (latest, N or START)")
    return pair[0], pair[1]


def names_held(held_run: dict, choice: str) -> bool:
    """Whether ``choice`` names the run a stored summary records (:func:`held`); ``latest`` is
    whatever it holds (the default asks nothing)."""
    if choice == LATEST:
        return True
    if held_run["number"] is None:  # every run, on one timeline
        return False
    if choice.isdigit():
        return int(choice) == held_run["number"]
    return held_run["start_utc"].startswith(_as_shown(choice))


def _as_shown(choice: str) -> str:
    """A start time as the run table shows it: a space between date and time, no zone."""
    return choice.removesuffix("Z").removesuffix(" UTC").replace("T", " ")


def choose(runs: Runs, choice: str) -> tuple[Run, ...]:
    """The runs ``choice`` keeps (:func:`check_choice`); ``ValueError`` naming the runs found
    when it names none of them, or a start time several of them share."""
    if choice == ALL or (not runs.runs and choice in (LATEST, "1")):
        return runs.runs
    if not runs.runs:
        raise ValueError(f"--run {choice}: no file of the inputs has a wall clock, so they are one run (1)")
    if choice == LATEST:
        return runs.runs[-1:]
    if choice.isdigit():
        picked = [r for r in runs.runs if r.number == int(choice)]
    else:
        picked = [r for r in runs.runs if r.started.startswith(_as_shown(choice))]
    if len(picked) != 1:
        how = "no run" if not picked else f"{len(picked)} runs"
        raise ValueError(f"--run {choice}: {how} of the inputs' {len(runs.runs)}: {listed(runs.runs)}")
    return tuple(picked)


def listed(runs: Sequence[Run]) -> str:
    """``1 (started 2026-10-01 09:57:48.421 UTC, 7 files), 2 (...)``: runs named in a line."""
    return ", ".join(f"{r.number} (started {r.started}, {len(r.files)} file{'s' * (len(r.files) != 1)})" for r in runs)


def held(listed_runs: Sequence[dict]) -> dict | None:
    """What a summary records of the runs it holds, of runs as :meth:`Run.as_dict` lists them
    (None when the inputs hold one run: a summary of one run says nothing of runs). ``number`` is
    None when every run is held (``--run all``); ``start_*`` is then the first run's start."""
    if len(listed_runs) < 2:
        return None
    merged = [r for r in listed_runs if r["merged"]]
    return {
        "number": merged[0]["number"] if len(merged) == 1 else None,
        "start_unix_ns": merged[0]["start_unix_ns"],
        "start_utc": merged[0]["start_utc"],
        "runs": len(listed_runs),
    }


def chosen_number(listed_runs: Sequence[dict], choice: str) -> int | None:
    """The number of the run ``choice`` names among runs as :meth:`Run.as_dict` lists them (None:
    no run is placed in time, the inputs are one); ``ValueError`` as :func:`choose`."""
    runs = tuple(
        Run(
            d["number"], d["start_unix_ns"], d["end_unix_ns"], tuple(Path(f) for f in d["files"]), tuple(d["processes"])
        )
        for d in listed_runs
    )
    picked = choose(Runs(runs, 0), choice)
    return picked[-1].number if len(picked) == 1 else None
