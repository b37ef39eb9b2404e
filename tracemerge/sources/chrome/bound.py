"""Flow v2 for :class:`~tracemerge.sources.chrome.events.ChromeEvents`: flow ends a slice binds
by its ``bind_id`` (with ``flow_in`` / ``flow_out``), as Perfetto's JSON importer binds them.

:class:`BoundFlows` is mixed into the reader. :meth:`~BoundFlows._bind` notes a slice's flow end
while the file is read; :meth:`~BoundFlows._place_bound`, once every slice is known, places each
as a flow point at its slice's start where the importer's binding finds that slice, and counts
under a reason in ``dropped`` each it would not bind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tracemerge.core.model import FlowPhase, OriginKey, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.chrome.kinds import SLICE
from tracemerge.sources.chrome.values import as_bind_id, as_flow_flag
from tracemerge.store.file_layout import FileLayout

# Flow v2: a slice's bind_id with (flow_in, flow_out), as Perfetto's JSON importer binds it.
_BOUND_PHASES = {(False, True): FlowPhase.START, (True, True): FlowPhase.STEP, (True, False): FlowPhase.END}


class BoundFlows:
    """The flow v2 ends of a file's slices (the reader's state, as ``ChromeEvents`` keeps it)."""

    layout: FileLayout
    dropped: Losses
    _bound: list[tuple[OriginKey, ThreadKey, int, int, FlowPhase, int]]

    def _bind(self, e: Any, origin: OriginKey, thread: ThreadKey, start: int, ordinal: int) -> None:
        """Notes the flow v2 end of a slice (its ``bind_id``), placed by :meth:`_place_bound`."""
        phase = _BOUND_PHASES.get((as_flow_flag(e.flow_in), as_flow_flag(e.flow_out)))
        fid = as_bind_id(e.bind_id)
        if phase is None:
            self.dropped.add(Stat.FLOW_WITHOUT_DIRECTION, 1, "bind_id flow on a slice without flow_in or flow_out")
        elif fid is None:
            self.dropped.add(
                Stat.FLOW_WITHOUT_ID,
                1,
                "bind_id flow event without id (bind_id neither an integer nor hexadecimal text)",
            )
        else:
            self._bound.append((origin, thread, start, ordinal, phase, fid))

    def _place_bound(self) -> None:
        """Flow v2 points, each at its slice's start where the flow binding finds that slice: bound
        to the innermost slice open there when it is that one, else to the next slice starting
        there when it is the outermost of those (and no point bound to the innermost one at that
        time comes first and takes them). A slice between others that start with it is not bound to."""
        by_thread: dict[tuple, list[tuple]] = defaultdict(list)
        for origin, thread, start, ordinal, phase, fid in self._bound:
            by_thread[(origin, thread)].append((start, ordinal, phase, fid))
        self._bound.clear()
        for (origin, thread), flows in by_thread.items():
            outermost, innermost = self._slices_starting(origin, thread, {start for start, *_ in flows})
            inner = [(start, phase, fid) for start, ordinal, phase, fid in flows if innermost[start] == ordinal]
            outer = [
                (start, phase, fid)
                for start, ordinal, phase, fid in flows
                if outermost[start] == ordinal != innermost[start]
            ]
            unbound = len(flows) - len(inner) - len(outer)
            if outer:
                # Points sort by (time, phase, ordinal): the inner ones, added after, come first only
                # with a lower phase; points read before, with a phase as low.
                first = self._taken_times(origin, thread)
                for start, phase, _ in inner:
                    first[start].append(phase + 1)  # blocks only a higher phase
                for start, phase, fid in outer:
                    if any(p <= phase for p in first.get(start, ())):
                        unbound += 1
                    else:
                        self.layout.flow_point(origin, thread, start, phase, (None, None, fid), True)
            for start, phase, fid in inner:
                self.layout.flow_point(origin, thread, start, phase, (None, None, fid), False)
            if unbound:
                self.dropped.add(
                    Stat.FLOW_V2_UNBOUND,
                    unbound,
                    "bind_id flow on a slice nested in one that starts with it (not bound)",
                )

    def _slices_starting(self, origin: OriginKey, thread: ThreadKey, starts: set[int]) -> tuple[dict, dict]:
        """Per start in ``starts``: the ordinal of the first slice (in order, the outermost) and of
        the last (the innermost) starting then on the thread."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for start, kind, ordinal in zip(*(c.tolist() for c in self.layout.sorted_starts(origin, thread)), strict=True):
            if kind == SLICE and start in starts:
                first.setdefault(start, ordinal)
                last[start] = ordinal
        return first, last

    def _taken_times(self, origin: OriginKey, thread: ThreadKey) -> dict[int, list[int]]:
        """The phases of the thread's flow points bound to the innermost slice open at their time,
        per time: such a point takes the slices starting then from a later one bound to the next."""
        taken: dict[int, list[int]] = defaultdict(list)
        for ts, phase, bind_next in zip(*(c.tolist() for c in self.layout.sorted_points(origin, thread)), strict=True):
            if not bind_next:
                taken[ts].append(phase)
        return taken
