"""The critical path of each step across roles and ranks: the chain of phase spans, collective
waits and hand-offs between roles that sets the step's end, as segments tiling the step window.

A walk back in time from the step's end (the last end of any process in the step), on the process
that ends last (the first in role and rank order on a tie):

* inside a collective of the process that another process of its role entered later (but before
  the walk's time), the walk moves to the process that entered last, at its entry (the rule of
  :mod:`tracemerge.phases.holdups`); the time from that entry to the walk's time is a segment of the
  waiting process, bound by ``communication``;
* in a phase, the innermost running one is the segment's phase, back to its start (or the last
  collective boundary before, or the step's start); the segment is bound by ``communication``
  inside a collective, else, for a process with device activity, by ``compute`` where device
  compute covers at least half of it, by ``communication`` where collective device work does,
  and ``host`` otherwise (``host`` too for a process without device activity);
* before the process's window of the step, in a phase of an earlier step of its own (it was still
  finishing that step): that phase, back to its start or the step's start, bound by
  ``earlier step``;
* idle (in the step, or before the process's window of the step began) while a phase of another
  role ran and ended at or before the time: a hand-off. The walk moves to the process of that other
  role whose phase ended last, at that end; the idle gap is a segment of the waiting process,
  bound by ``waiting on <role>`` (its label, for a process of no role). Idle time without a
  hand-off is a segment bound by ``idle``;
* of such idle time (waiting on a role, or idle), the part before the process's first event
  (nothing of it recorded yet: its profiler, or the process itself, had not started) is a segment
  bound by ``not profiled``: whether it waited, and on what, is unknown.

Adjacent segments of one process, phase and bound are joined. The segments are contiguous and
cover exactly [step start, step end]. One pass per step over the pieces the walk visits, with
binary searches in the process's collectives and, per hand-off, in each other process's phase ends.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping

import msgspec

from tracemerge.core.model import Identity
from tracemerge.phases.device_time import Spans, covered
from tracemerge.phases.holdups import Timeline, last_arrivals, order_key

COMPUTE, COMMUNICATION, HOST, IDLE_BOUND = "compute", "communication", "host", "idle"
WAITING_ON = "waiting on "
NOT_PROFILED = "not profiled"
EARLIER_STEP = "earlier step"


class Segment(msgspec.Struct, frozen=True):
    """One piece of a step's critical path (ns, aligned)."""

    step: int
    ident: Identity
    phase: str
    start: int
    end: int
    bound_by: str

    @property
    def dur(self) -> int:
        return self.end - self.start


Devices = Mapping[Identity, tuple[Spans, Spans]]  # merged compute, comm (SpanUnion or sorted tuples)


def step_path(
    step: int,
    windows: dict[Identity, tuple[int, int]],
    timelines: dict[Identity, Timeline],
    devices: Devices,
    idle_name: str,
    first_events: dict[Identity, int] | None = None,
) -> list[Segment]:
    """The critical path of one step: each process's window of it and its timeline; ``devices``:
    the merged device compute and communication spans of the processes that have them;
    ``first_events``: each process's first event (:func:`first_events`; none known: its window)."""
    ids = sorted(windows, key=order_key)
    if not ids:
        return []
    walk = _Walk(step, ids, windows, timelines, devices, idle_name, first_events or {})
    cur = max(range(len(ids)), key=lambda n: (windows[ids[n]][1], -n))
    t = windows[ids[cur]][1]
    while t > walk.lo:
        cur, t = walk.back(cur, t)
    walk.out.reverse()
    return walk.out


class _Walk:
    """One step's walk back in time (see the module): from (process, time) to the next, each
    move leaving the segment it covered."""

    def __init__(
        self,
        step: int,
        ids: list[Identity],
        windows: dict[Identity, tuple[int, int]],
        timelines: dict[Identity, Timeline],
        devices: Devices,
        idle_name: str,
        first: dict[Identity, int],
    ) -> None:
        self.step, self.ids, self.windows, self.timelines = step, ids, windows, timelines
        self.devices, self.idle, self.first = devices, idle_name, first
        self.lo = min(a for a, _ in windows.values())
        entered = [timelines[i].entries(i.role, windows[i]) for i in ids]
        self.arrivals = last_arrivals(entered)
        self.spans = [_Collectives(found) for found in entered]
        # A process's pieces in its window, and its phases' ends, made when the walk first needs
        # them: most walks visit a few of the step's processes.
        self._pieces: list[list[tuple[int, int, str]] | None] = [None] * len(ids)
        self._ends: list[list[tuple[int, int]] | None] = [None] * len(ids)
        self.out: list[Segment] = []

    def pieces(self, n: int) -> list[tuple[int, int, str]]:
        """Process ``n``'s pieces within its window of the step (clipped), sorted."""
        found = self._pieces[n]
        if found is None:
            ident = self.ids[n]
            found = self._pieces[n] = _pieces_in(self.timelines[ident].pieces, self.windows[ident])
        return found

    def ends(self, n: int) -> list[tuple[int, int]]:
        """The ends of process ``n``'s phases in its window, sorted, each with ``-n``."""
        found = self._ends[n]
        if found is None:
            found = self._ends[n] = sorted((b, -n) for _, b, name in self.pieces(n) if name != self.idle)
        return found

    def add(self, n: int, phase: str, a: int, b: int, bound: str) -> None:
        """A segment of process ``n`` (joined to the last one when it goes on from it)."""
        if a >= b:
            return
        ident, out = self.ids[n], self.out
        last = out[-1] if out else None
        if last is not None and last.ident == ident and last.phase == phase and last.bound_by == bound:
            out[-1] = Segment(self.step, ident, phase, a, last.end, bound)
        else:
            out.append(Segment(self.step, ident, phase, a, b, bound))

    def back(self, cur: int, t: int) -> tuple[int, int]:
        """One move back from time ``t`` on process ``cur``: where the walk goes on."""
        ident, lo = self.ids[cur], self.lo
        w_lo = self.windows[ident][0]
        inside = self.spans[cur].at(t)
        if inside is not None:
            entry, _, gid = inside
            who, at = self.arrivals.get(gid, (cur, entry))
            if who != cur and entry < at < t:
                self.add(cur, _phase_at(self.pieces(cur), t, self.idle), at, t, COMMUNICATION)
                return who, at
        if t <= w_lo:
            name, a = _piece_at(self.timelines[ident].pieces, t, self.idle, lo)
            if name != self.idle:  # still in an earlier step of its own
                a = max(a, lo)
                self.add(cur, name, a, t, EARLIER_STEP)
                return cur, a
        else:
            name, a = _piece_at(self.pieces(cur), t, self.idle, w_lo)
        if name == self.idle:
            return self._idle(cur, a, t)
        a = max(a, self.spans[cur].last_boundary(t), lo)
        self.add(cur, name, a, t, _bound(ident, a, t, inside, self.devices))
        return cur, a

    def _idle(self, cur: int, a: int, t: int) -> tuple[int, int]:
        """Process ``cur`` idle in (a, t]: a hand-off from another role, or idle; the part before
        its first event is not profiled."""
        first = self.first.get(self.ids[cur], self.lo)
        handed = _hand_off(self.ids, self.ends, cur, a, t)
        if handed is not None:
            n, end = handed
            self.add(cur, self.idle, max(end, first), t, WAITING_ON + (self.ids[n].role or self.ids[n].label))
            self.add(cur, self.idle, end, min(first, t), NOT_PROFILED)
            return n, end
        a = max(a, self.lo)
        self.add(cur, self.idle, max(a, first), t, IDLE_BOUND)
        self.add(cur, self.idle, a, min(first, t), NOT_PROFILED)
        return cur, a


def first_events(
    scans: Iterable[object], offsets: dict, keep: Callable[[Identity], bool] | None = None
) -> dict[Identity, int]:
    """Per process, its first event on the aligned timeline (file time + the file's offset): its
    file's first event where the file holds no other process, else its first mark (step, phase,
    collective or device activity)."""
    out: dict[Identity, int] = {}
    for s in scans:
        marks: dict = getattr(s, "marks", {})
        shift = offsets.get(getattr(s, "path", None), 0)
        held = set(getattr(s, "counts", None) or marks)
        ts_min = getattr(s, "ts_min", None)
        for ident in held:
            if keep is not None and not keep(ident):
                continue
            if len(held) == 1 and ts_min is not None:
                first = ts_min
            else:
                starts = [a for found in marks.get(ident, {}).values() for a, _ in found]
                if not starts:
                    continue
                first = min(starts)
            out[ident] = min(out.get(ident, first + shift), first + shift)
    return out


def _pieces_in(pieces: list[tuple[int, int, str]], window: tuple[int, int]) -> list[tuple[int, int, str]]:
    """The pieces within ``window`` (clipped), sorted."""
    lo, hi = window
    k = max(0, bisect.bisect_right(pieces, (lo,)) - 1)
    out = []
    while k < len(pieces) and pieces[k][0] < hi:
        a, b, name = pieces[k]
        if min(b, hi) > max(a, lo):
            out.append((max(a, lo), min(b, hi), name))
        k += 1
    return out


def _piece_at(pieces: list[tuple[int, int, str]], t: int, idle_name: str, w_lo: int) -> tuple[str, int]:
    """What ran just before ``t`` (a < t <= b) and since when; idle since the window's start if
    no piece holds it."""
    k = bisect.bisect_left(pieces, (t,)) - 1
    while k >= 0:
        a, b, name = pieces[k]
        if a < t <= b:
            return name, a
        if b < t:
            return idle_name, b
        k -= 1
    return idle_name, w_lo


def _phase_at(pieces: list[tuple[int, int, str]], t: int, idle_name: str) -> str:
    return _piece_at(pieces, t, idle_name, 0)[0]


class _Collectives:
    """One process's collectives in its window, for the walk's look-ups in O(log n) (collectives
    of one process seldom overlap)."""

    def __init__(self, entered: list[tuple[int, int, tuple]]) -> None:
        self.by_entry = sorted(entered, key=lambda e: (e[0], e[1]))
        self.entries = [e[0] for e in self.by_entry]
        self.reach = list(itertools.accumulate((e[1] for e in self.by_entry), max))  # latest exit so far
        self.boundaries = sorted(x for a, b, _ in entered for x in (a, b))

    def at(self, t: int) -> tuple[int, int, tuple] | None:
        """The collective the process was in just before ``t`` (entry < t <= exit), the latest
        entered."""
        k = bisect.bisect_left(self.entries, t) - 1
        while k >= 0 and self.reach[k] >= t:
            if self.by_entry[k][1] >= t:
                return self.by_entry[k]
            k -= 1
        return None

    def last_boundary(self, t: int) -> int:
        """The latest collective entry or exit before ``t`` (0 if none)."""
        k = bisect.bisect_left(self.boundaries, t) - 1
        return self.boundaries[k] if k >= 0 else 0


def _hand_off(
    ids: list[Identity], ends: Callable[[int], list[tuple[int, int]]], cur: int, a: int, t: int
) -> tuple[int, int] | None:
    """The process of another role whose phase ended last in (a, t], and that end (``ends(n)``:
    process n's phase ends, sorted); the first in role and rank order on a tie."""
    best = None
    for n, ident in enumerate(ids):
        if ident.role == ids[cur].role:
            continue
        found = ends(n)
        k = bisect.bisect_right(found, (t, 0)) - 1
        if k >= 0 and found[k][0] > a and (best is None or found[k][0] > best[1]):
            best = (n, found[k][0])
    return best


def _bound(ident: Identity, a: int, b: int, inside: tuple | None, devices: Devices) -> str:
    if inside is not None:
        return COMMUNICATION
    if ident not in devices:
        return HOST
    compute, comm = devices[ident]
    if 2 * covered(compute, a, b) >= b - a:
        return COMPUTE
    if 2 * covered(comm, a, b) >= b - a:
        return COMMUNICATION
    return HOST
