"""What to keep: ``--roles``, ``--ranks``, ``--where``, ``--window`` and ``--min-dur``, parsed and applied.

Durations and times take a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``min``; plain numbers
are seconds). A window is ``START:END`` relative to the run start, either side may be left out
(``:30s``, ``1.5s:``). Events outside the selection are not written and are counted in the run
report as filtered, which is not a loss: the exit status stays 0.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

import msgspec

from tracemerge.core.model import Identity
from tracemerge.core.units import parse_duration
from tracemerge.naming.paths import COORDINATES, PathFacts

# What --where and --split-by can select by: the parallel coordinates a file's name gives.
WHERE_KEYS = (*COORDINATES, "replica")


def parse_window(text: str) -> tuple[int | None, int | None]:
    """``"10s:20s"`` -> (10e9, 20e9) ns after the run start; a side may be empty."""
    if ":" not in text:
        raise ValueError(f"not a window: {text!r} (use START:END, e.g. 10s:20s)")
    start_text, _, end_text = text.partition(":")
    start = parse_duration(start_text) if start_text.strip() else None
    end = parse_duration(end_text) if end_text.strip() else None
    if start is not None and end is not None and end < start:
        raise ValueError(f"window {text!r} ends before it starts")
    return start, end


class Numbers:
    """Whole numbers as sorted, disjoint ranges: ``0-20000000`` is one pair, not 20 million ints.
    Supports ``in`` and equality with a set of the same numbers."""

    __slots__ = ("_starts", "ranges")

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        self.ranges = tuple(merged)
        self._starts = [lo for lo, _ in merged]

    def __contains__(self, n: object) -> bool:
        if type(n) is not int:
            return False
        at = bisect_right(self._starts, n) - 1
        return at >= 0 and n <= self.ranges[at][1]

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Numbers):
            return self.ranges == other.ranges
        if isinstance(other, (set, frozenset)):
            return self.count() == len(other) and all(n in self for n in other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __reduce__(self) -> tuple:
        return (Numbers, (self.ranges,))

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    __repr__ = __str__


def format_numbers(numbers: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    return str(Numbers((n, n) for n in numbers))


def parse_ranks(text: str, what: str = "--ranks") -> Numbers:
    """``"0-7,12"`` -> the numbers 0 to 7 and 12, as ranges (in memory of the text's size, whatever
    the numbers). No number at all, a range ending before it starts, or a negative number is an error."""
    ranges = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:  # a negative or not a number, or more digits than Python reads
            raise ValueError(f"{what}: not a list of numbers: {text!r} (use e.g. 0-7,12)") from None
        if last < first:
            raise ValueError(f"{what}: {part!r} ends before it starts (use e.g. {last}-{first})")
        ranges.append((first, last))
    if not ranges:
        raise ValueError(f"{what}: no number given (use e.g. 0-7,12)")
    return Numbers(ranges)


def parse_where(texts: list[str]) -> tuple[tuple[str, Numbers], ...]:
    """``["dp=0", "tp=0-1"]`` -> (("dp", {0}), ("tp", {0, 1})): processes whose file names give
    these parallel coordinates (tp, pp, dp, cp, ep, replica)."""
    where = []
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip().lower()
        if not sep or key not in WHERE_KEYS:
            raise ValueError(f"--where: {text!r} is not KEY=VALUES with KEY one of {', '.join(WHERE_KEYS)} (e.g. dp=0)")
        try:
            where.append((key, parse_ranks(values, "--where")))
        except ValueError:
            raise ValueError(f"--where: {text!r}: values are numbers or ranges, e.g. dp=0 or tp=0-3") from None
    return tuple(where)


def parse_roles(text: str) -> frozenset[str]:
    roles = frozenset(r.strip() for r in text.split(",") if r.strip())
    if not roles:
        raise ValueError("--roles: no role given (use e.g. actor,rollout)")
    return roles


class Selection(msgspec.Struct, frozen=True):
    """What to keep. ``window`` is in ns after the run start."""

    roles: frozenset[str] | None = None
    ranks: frozenset[int] | Numbers | None = None
    window: tuple[int | None, int | None] | None = None
    min_dur: int = 0
    # --where: (coordinate, values) pairs a file's name must give (a file that gives none is left out)
    where: tuple[tuple[str, frozenset[int] | Numbers], ...] = ()
    # --keep-zero-counters: Ascend counter series whose every value is 0 are kept (else left out, counted)
    keep_zero_counters: bool = False

    @property
    def by_process(self) -> bool:
        """Whether whole processes are selected (--roles, --ranks, --where)."""
        return self.roles is not None or self.ranks is not None or bool(self.where)

    def keeps(self, ident: Identity) -> bool:
        if self.roles is not None and ident.role not in self.roles:
            return False
        return self.ranks is None or ident.rank in self.ranks

    def keeps_file(self, facts: PathFacts) -> bool:
        """Whether the coordinates a file's name gives are the ones --where asks for."""
        return all(facts.coord(key) in values for key, values in self.where)


EVERYTHING = Selection()


class TimeFilter(msgspec.Struct, frozen=True):
    """A file's share of a selection, in its own timestamps: keep slices of at least ``min_dur``
    that share time with [lo, hi], and instants and counter samples within it."""

    lo: int | None = None
    hi: int | None = None
    min_dur: int = 0

    def keeps_slice(self, start: int, dur: int) -> bool:
        if dur < self.min_dur:
            return False
        # A slice that ends where the window starts shares no time with it (an instant there does).
        if self.lo is not None and (start + dur < self.lo or (dur > 0 and start + dur == self.lo)):
            return False
        return self.hi is None or start <= self.hi

    def keeps_point(self, ts: int) -> bool:
        return (self.lo is None or ts >= self.lo) and (self.hi is None or ts <= self.hi)
