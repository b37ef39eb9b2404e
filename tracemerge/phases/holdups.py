"""Who held a step up: how far apart the processes started and ended it, the one that started last,
and the one on the step's critical path, with the time the others waited on it.

A *group* is one step, or one phase of a step, as several processes ran it: each has its window
(from its first start to its last end in the group) and a :class:`Timeline` of the collectives it
took part in, its idle time and what it ran. The definitions:

* **start skew**, **end skew**: the latest start (end) in the group minus the earliest of the same
  role (roles of an RL step run one after another by design: a trainer starting when the rollout
  is done is not late), the largest over the roles;
* **late**: the process that started the most after the first of its role (the first in role and
  rank order on a tie); it started the start skew after that first;
* **critical path**: a walk back in time from the end of the process that ended last. Where the
  walk meets the end of a collective this process took part in, and another process of its role
  entered that collective later (but before this one left it), this process was waiting: the walk
  moves to the process that entered last, at its entry. It stops at the start of the window of the
  process it is on; the time from the first start in that process's role to there is that
  process's too (it had not started). The k-th collective of a kind in one process's window is the
  k-th in each other window of its role, and counts only where all of them were in it at one
  instant (each entered before any left): collectives of separate groups are not matched;
* **critical**: the process the walk spends most time on (the one that ended last, then the first
  in role and rank order, on a tie); with it, the phase it ran longest on the walk;
* **waited on it**: the longest time one other process of the critical one's role spent waiting
  on it (never longer than the step): in each collective it entered last, the other's time from
  its own entry to that entry (at most its time in the collective); if it ended last, the other's
  idle time from its own end to that end. A process waiting in a collective is thus never the one
  holding the others up: the one arriving last is;
* **cause**: how the critical process held the step up, what most of its time on the critical
  path was: ``started late`` (before its own start, from the first start of its role),
  ``slower phase`` (running a phase: :attr:`Holdup.phase`), or ``waiting`` (idle on the path:
  blocked on something outside the group, another role's work); with the time it took.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import cached_property
from operator import itemgetter

import msgspec
from msgspec import field

from tracemerge.core.model import Identity
from tracemerge.phases.device_time import covered

FOREVER = 1 << 62  # the end of the idle time after a process's last step
Entry = tuple[int, int, tuple]  # (entry, exit, collective id)


class Timeline(msgspec.Struct, dict=True):  # (a __dict__ for the cached properties)
    """What one process did, on the aligned timeline, each list sorted by start."""

    collectives: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, kind)
    idle: list[tuple[int, int]] = field(default_factory=list)  # in and between its steps, after its last
    pieces: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, innermost phase)

    def entries(self, role: str, window: tuple[int, int]) -> list[Entry]:
        """The collectives that start in ``window``, by end, each with an id shared by the k-th
        of a kind in each window of one ``role`` (once the collectives are all noted)."""
        key = (role, window)
        found = self._entered.get(key)
        if found is None:
            found = self._entered[key] = _entries(role, window, self.collectives, self._collective_starts)
        return found

    @cached_property
    def _entered(self) -> dict[tuple, list[Entry]]:
        """entries(role, window), kept: a step's holdup and its critical path ask for the same ones."""
        return {}

    def forget_entries(self) -> None:
        """Drops the kept :meth:`entries` (once the holdups and critical paths are made)."""
        self._entered.clear()

    @cached_property
    def _collective_starts(self) -> list[int]:
        return [a for a, _, _ in self.collectives]

    def idle_within(self, lo: int, hi: int) -> int:
        """Idle time between ``lo`` and ``hi``."""
        return covered(self.idle, lo, hi)

    @cached_property
    def _starts(self) -> list[int]:
        return [a for a, _, _ in self.pieces]

    def ran(self, spans: Iterable[tuple[int, int]]) -> Counter[str]:
        """Time per phase run within ``spans`` (once every piece is noted)."""
        found: Counter[str] = Counter()
        starts = self._starts
        for lo, hi in spans:
            k = max(0, bisect.bisect_right(starts, lo) - 1)
            while k < len(self.pieces) and self.pieces[k][0] < hi:
                a, b, name = self.pieces[k]
                if min(b, hi) > max(a, lo):
                    found[name] += min(b, hi) - max(a, lo)
                k += 1
        return found


class Holdup(msgspec.Struct, frozen=True):
    """One group's skews, the process that started last and the critical one."""

    start_skew: int
    end_skew: int
    late: Identity
    critical: Identity
    waited: int  # the longest time another process waited on the critical one
    phase: str | None = None  # what the critical process ran longest on the critical path
    cause: str = ""  # STARTED_LATE, SLOWER_PHASE or WAITING ("": a group of one process)
    cause_ns: int = 0  # the critical process's time on the path spent so


STARTED_LATE, SLOWER_PHASE, WAITING = "started late", "slower phase", "waiting"


def order_key(ident: Identity) -> tuple:
    return (ident.role, -1 if ident.rank is None else ident.rank, ident.tag)


def holdup(
    windows: dict[Identity, tuple[int, int]], timelines: dict[Identity, Timeline], idle_name: str = ""
) -> Holdup:
    """The :class:`Holdup` of one group: each process's window and timeline (see the module).
    Processes are numbered in role and rank order: on a tie, the lower number is named."""
    ids = sorted(windows, key=order_key)
    if len(ids) == 1:  # (the common case of one process, at a fraction of the cost)
        return _alone(ids[0], windows[ids[0]], timelines[ids[0]], idle_name)
    win = [windows[i] for i in ids]
    roles = [i.role for i in ids]
    role_start = {r: min(w[0] for n, w in enumerate(win) if roles[n] == r) for r in set(roles)}
    role_end = {r: min(w[1] for n, w in enumerate(win) if roles[n] == r) for r in set(roles)}
    late = max(range(len(ids)), key=lambda n: (win[n][0] - role_start[roles[n]], -n))
    last = max(range(len(ids)), key=lambda n: (win[n][1], -n))
    entered = [timelines[ids[n]].entries(roles[n], win[n]) for n in range(len(ids))]
    arrivals = last_arrivals(entered)
    waited = [[0] * len(ids) for _ in ids]  # waited[who][n]: process n's wait on process who
    for n, mine in enumerate(entered):
        for entry, leave, gid in mine:
            who, at = arrivals.get(gid, (n, entry))
            if who != n and at > entry:
                waited[who][n] += min(at, leave) - entry
    for n in range(len(ids)):
        if n != last and roles[n] == roles[last]:
            waited[last][n] += timelines[ids[n]].idle_within(win[n][1], win[last][1])
    path, stop = _walk(last, win, entered, arrivals)
    time_on = [sum(b - a for a, b in path.get(n, ())) for n in range(len(ids))]
    late_start = win[stop][0] - role_start[roles[stop]]
    time_on[stop] += late_start
    critical = min(range(len(ids)), key=lambda n: (-time_on[n], n != last, n))
    ran = timelines[ids[critical]].ran(path.get(critical, []))
    idle = ran.get(idle_name, 0)
    phase = _longest(ran, idle_name)
    causes = [(late_start if critical == stop else 0, STARTED_LATE)]
    causes += [(ran[phase] if phase is not None else 0, SLOWER_PHASE), (idle, WAITING)]
    cause_ns, cause = max(causes, key=lambda c: c[0])  # (the first listed on a tie)
    start_skew = win[late][0] - role_start[roles[late]]
    end_skew = max(w[1] - role_end[roles[n]] for n, w in enumerate(win))
    return Holdup(start_skew, end_skew, ids[late], ids[critical], max(waited[critical]), phase, cause, cause_ns)


def _alone(ident: Identity, window: tuple[int, int], timeline: Timeline, idle_name: str) -> Holdup:
    """The :class:`Holdup` of a group of one process: no skew, no wait, the critical path its
    whole window."""
    return Holdup(0, 0, ident, ident, 0, _longest(timeline.ran([window]), idle_name))


def _longest(ran: Counter[str], idle_name: str) -> str | None:
    """The phase run longest (the first by name on a tie), idle aside."""
    ran.pop(idle_name, None)
    return min(ran, key=lambda name: (-ran[name], name)) if ran else None


def _entries(role: str, window: tuple[int, int], found: list[tuple[int, int, str]], starts: list[int]) -> list[Entry]:
    """:meth:`Timeline.entries` of the collectives ``found`` (sorted by start, ``starts`` theirs)."""
    lo, hi = bisect.bisect_left(starts, window[0]), bisect.bisect_left(starts, window[1])
    seen: dict[str, int] = {}
    mine = []
    for a, b, kind in found[lo:hi]:
        k = seen.get(kind, 0)
        mine.append((a, b, (role, kind, k)))
        seen[kind] = k + 1
    mine.sort(key=_BY_END)
    return mine


_BY_END = itemgetter(1, 0)


def last_arrivals(entered: list[list[Entry]]) -> dict[tuple, tuple[int, int]]:
    """Per collective that more than one process was in at one instant: the process entering it
    last (the lowest numbered on a tie), and when."""
    if len(entered) < 2:  # one process waits on no one
        return {}
    members: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    exits: dict[tuple, int] = {}
    for n, mine in enumerate(entered):
        for entry, leave, gid in mine:
            members[gid].append((entry, -n))
            exits[gid] = min(exits.get(gid, leave), leave)
    out = {}
    for gid, found in members.items():
        entry, who = max(found)
        if len(found) > 1 and entry < exits[gid]:  # all in it at once
            out[gid] = (-who, entry)
    return out


def _walk(
    last: int, win: list[tuple[int, int]], entered: list[list[Entry]], arrivals: dict[tuple, tuple[int, int]]
) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """The critical path, back from the end of ``last``: per process, the spans the walk is on it
    (within its window); and the process it stops on."""
    path: dict[int, list[tuple[int, int]]] = defaultdict(list)
    cur, t = last, win[last][1]
    exits = [[e[1] for e in mine] for mine in entered]
    while True:
        jump = None
        k = bisect.bisect_right(exits[cur], t) - 1
        while k >= 0 and jump is None:
            entry, leave, gid = entered[cur][k]
            who, at = arrivals.get(gid, (cur, entry))
            if who != cur and entry < at < min(leave, t):
                jump = (leave, who, at)
            k -= 1
        if jump is None:
            path[cur].append((win[cur][0], t))
            return path, cur
        leave, who, at = jump
        if leave < t:
            path[cur].append((leave, t))
        cur, t = who, at
