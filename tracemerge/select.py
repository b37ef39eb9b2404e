"""What to keep: ``--roles``, ``--ranks``, ``--where``, ``--window`` and ``--min-dur``, parsed and applied.

Durations and times take a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``min``; plain numbers
are seconds). A window is ``START:END`` relative to the run start, either side may be left out
(``:30s``, ``1.5s:``). Events outside the selection are not written and are counted in the run
report as filtered, which is not a loss: the exit status stays 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from tracemerge.layouts import COORDINATES, PathFacts
from tracemerge.model import Identity

# What --where and --split-by can select by: the parallel coordinates a file's name gives.
WHERE_KEYS = (*COORDINATES, "replica")

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "min": 60_000_000_000}
_DURATION = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def parse_duration(text: str) -> int:
    """``"1.5ms"`` -> 1500000 ns; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise ValueError(f"not a duration: {text!r} (use a number with ns, us, ms, s or min)")
    try:
        value = Decimal(m.group(1)) * _UNITS[m.group(2) or "s"]
    except InvalidOperation:
        raise ValueError(f"not a duration: {text!r}") from None
    return int(value.to_integral_value())


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


def parse_ranks(text: str) -> frozenset[int]:
    """``"0-7,12"`` -> {0, ..., 7, 12}."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                first, last = int(lo), int(hi)
                if last < first:
                    raise ValueError
                ranks.update(range(first, last + 1))
            else:
                ranks.add(int(part))
        except ValueError:
            raise ValueError(f"not a rank list: {text!r} (use e.g. 0-7,12)") from None
    return frozenset(ranks)


def parse_where(texts: list[str]) -> tuple[tuple[str, frozenset[int]], ...]:
    """``["dp=0", "tp=0-1"]`` -> (("dp", {0}), ("tp", {0, 1})): processes whose file names give
    these parallel coordinates (tp, pp, dp, cp, ep, replica)."""
    where = []
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip().lower()
        if not sep or key not in WHERE_KEYS:
            raise ValueError(f"--where: {text!r} is not KEY=VALUES with KEY one of {', '.join(WHERE_KEYS)} (e.g. dp=0)")
        try:
            where.append((key, parse_ranks(values)))
        except ValueError:
            raise ValueError(f"--where: {text!r}: values are numbers or ranges, e.g. dp=0 or tp=0-3") from None
    return tuple(where)


def parse_roles(text: str) -> frozenset[str]:
    return frozenset(r.strip() for r in text.split(",") if r.strip())


@dataclass(frozen=True)
class Selection:
    """What to keep. ``window`` is in ns after the run start."""

    roles: frozenset[str] | None = None
    ranks: frozenset[int] | None = None
    window: tuple[int | None, int | None] | None = None
    min_dur: int = 0
    # --where: (coordinate, values) pairs a file's name must give (a file that gives none is left out)
    where: tuple[tuple[str, frozenset[int]], ...] = ()
    # --keep-zero-counters: Ascend counter series whose every value is 0 are kept (else left out, counted)
    keep_zero_counters: bool = False

    @property
    def everything(self) -> bool:
        return self.roles is None and self.ranks is None and not self.where and self.window is None and not self.min_dur

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


@dataclass(frozen=True)
class TimeFilter:
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
