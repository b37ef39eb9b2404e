"""One thread of a file's layout worked out on its columns and handed to the writer's encoder.

A thread's entries (:mod:`tracemerge.store.entries`) are taken one run apart in time after another
(:meth:`~tracemerge.store.entries.ThreadEntries.chunks`: the entries starting in a range of time,
in the order they were read, from the blocks that hold them); in each,
:mod:`tracemerge.layout.nesting` gives the walk's order, the overlap lanes and the ties the order
of reading gets wrong. The encoder then gets the run in three parts: the ENDs of its slices, its
BEGINs and instants in the order they were read (a zero-length slice's END right after its BEGIN)
as :class:`Items`, a block of bodies at a time, and the wrong-order ties in the walk's order.
Perfetto sorts events by (timestamp, position in the file), so at one timestamp a track's ENDs
come before its BEGINs, and its BEGINs come in the walk's order: the nesting the walk says.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tracemerge.core.model import Identity, Kind
from tracemerge.core.stats import Stat
from tracemerge.layout.flows.attachments import ThreadAttachments
from tracemerge.layout.nesting import lanes, parents, tied_out_of_order
from tracemerge.layout.types import Encoder, Items, LayoutResult
from tracemerge.plan.lanes import lane_track
from tracemerge.plan.types import ThreadTrack
from tracemerge.select import TimeFilter
from tracemerge.store.entries import ThreadEntries, gathered, ranks, walk_order, with_prefixes
from tracemerge.store.spill import RunStore

SLICE, INSTANT = int(Kind.SLICE), int(Kind.INSTANT)
# Events handed to the encoder at once.
BATCH = 1 << 14


class ThreadWalk:
    """One thread laid out: its order, lanes and ties worked out on columns, then its events
    handed to the encoder in the three parts the module describes. ``runs`` holds what the
    entries spilled; ``part_prefixes`` (a file read in parts) the encoded names that take the
    place of the bodies' placeholders."""

    def __init__(
        self,
        enc: Encoder,
        runs: RunStore,
        part_prefixes: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
        entries: ThreadEntries,
        track: ThreadTrack,
        attached: Callable[[], ThreadAttachments | None],
        shift: int,
        result: LayoutResult,
        who: Identity,
    ) -> None:
        self.enc, self.runs, self.part_prefixes = enc, runs, part_prefixes
        self.entries, self.track = entries, track
        self.shift, self.result, self.who = shift, result, who
        self.attachments_of: Callable[[], ThreadAttachments | None] | None = attached  # called once, when first needed
        self.attached: ThreadAttachments | None = None
        self.tracks = [track]
        self.flow_ids = self.flow_phases = np.empty(0, np.int64)

    def run(self, times: TimeFilter | None) -> int:
        """Emits the thread, one run apart in time after another (each works out on its own:
        a slice left open across a cut holds all of the next run, so it bears on its nesting not
        at all); returns its latest time."""
        latest = -(1 << 63)
        for lo, hi, _ in self.entries.chunks(self.runs):
            latest = max(latest, self._run((lo, hi), times))
        return latest

    def _run(self, run: tuple[int, int], times: TimeFilter | None) -> int:
        enc, result = self.enc, self.result
        pieces: list[int] = []
        keys = self.entries.keys(self.runs, run, pieces)
        starts, negdurs, kinds, ordinals = keys["starts"], keys["negdurs"], keys["kinds"], keys["ordinals"]
        del keys
        n = len(starts)
        kept = self._kept(starts, negdurs, kinds, times) if times is not None else None
        order = walk_order(starts, negdurs, kinds, ordinals)
        if kept is not None:
            order = order[kept[order]]
        instants = kinds[order] != SLICE if kinds.any() else None
        sliced = order if instants is None else order[~instants]
        slice_starts = starts[sliced]
        slice_ends = slice_starts - negdurs[sliced]
        found = lanes(slice_starts, slice_ends, parents(slice_starts, slice_ends))
        latest = int(slice_ends.max(initial=-(1 << 63)))
        del slice_ends
        self.lane_of = None
        if found.any():
            self.lane_of = np.zeros(n, found.dtype)
            self.lane_of[sliced] = found
            for lane in range(len(self.tracks), int(found.max()) + 1):
                self.tracks.append(lane_track(self.track, lane))
                result.lanes.append(self.tracks[-1])
            result.moved_to_lanes += int(np.count_nonzero(found))
        del found
        written = result.written[self.who]
        written.slices += len(sliced)
        written.instants += len(order) - len(sliced)
        if not len(order):
            return latest
        if instants is not None and instants.any():
            latest = max(latest, int(starts[order[instants]].max()))
        self.flow_at, self.flow_counts = self._flows(ordinals, pieces)
        del ordinals
        also = None
        if enc.flows_bind_by_order and self.flow_at is not None:
            also = self.flow_counts[order] > 0
        in_order = slice_starts if instants is None else starts[order]
        del slice_starts, sliced
        lanes_in_order = self.lane_of[order] if self.lane_of is not None else None
        deferred = order[tied_out_of_order(in_order, lanes_in_order, order, also)]
        del in_order, lanes_in_order, order, also
        self.starts, self.negdurs, self.kinds = starts, negdurs, kinds
        chosen = kept if kept is not None else np.ones(n, bool)
        if enc.ends_apart:
            lasting = np.flatnonzero(chosen & (negdurs < 0))  # instants have no duration
            for at in range(0, len(lasting), BATCH):
                part = lasting[at : at + BATCH]
                enc.ends(self.tracks, self._lanes(part), starts[part] - negdurs[part] + self.shift)
            del lasting
        chosen[deferred] = False
        held = self._emit_as_read(run, chosen, np.sort(deferred))
        if len(deferred):
            parts = [held[p] for p in deferred.tolist()]
            lengths = np.fromiter(map(len, parts), np.int64, len(parts))
            self._emit(deferred, b"".join(parts), lengths, in_walk_order=True)
        return latest

    def _lanes(self, positions: np.ndarray) -> np.ndarray:
        if self.lane_of is None:
            return np.zeros(len(positions), np.int64)
        return self.lane_of[positions].astype(np.int64)

    def _kept(self, starts: np.ndarray, negdurs: np.ndarray, kinds: np.ndarray, times: TimeFilter) -> np.ndarray:
        """What ``times`` keeps (as :meth:`TimeFilter.keeps_slice` and ``keeps_point`` say),
        counting what it leaves out."""
        durs = -negdurs
        is_slice = kinds == SLICE
        keep = np.ones(len(starts), bool)
        if times.lo is not None:
            ends = starts + durs
            keep &= np.where(is_slice, (ends > times.lo) | ((ends == times.lo) & (durs == 0)), starts >= times.lo)
        if times.hi is not None:
            keep &= starts <= times.hi
        short = is_slice & (durs < times.min_dur)
        keep &= ~short
        left = ~keep
        filtered, read = self.result.filtered, self.result.read[self.who]
        shorts = int(np.count_nonzero(short))
        outside_slices = int(np.count_nonzero(left & is_slice)) - shorts
        outside_instants = int(np.count_nonzero(left & ~is_slice))
        if shorts:
            filtered[Stat.FILTERED_SHORT] += shorts
        if outside_slices + outside_instants:
            filtered[Stat.FILTERED_OUTSIDE_WINDOW] += outside_slices + outside_instants
        read.slices += shorts + outside_slices
        read.instants += outside_instants
        return keep

    def _flows(self, ordinals: np.ndarray, pieces: list[int]) -> tuple[np.ndarray | None, np.ndarray]:
        """Where the flow attachments of the run's entries lie (entry positions, in order, each
        slice's by flow id and phase; None for none), and how many each entry has; found a
        block's entries at a time (a run's entries may come from blocks far apart in the order
        read), their flow ids and phases kept in ``flow_ids`` and ``flow_phases``."""
        if self.attachments_of is not None:
            self.attached, self.attachments_of = self.attachments_of(), None
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        first = 0
        for size in pieces:
            got = self._flow_positions(ordinals[first : first + size])
            if got is not None:
                found.append((got[0] + first, got[1], got[2]))
            first += size
        counts = np.zeros(len(ordinals), np.int64)
        if not found:
            return None, counts
        at, self.flow_ids, self.flow_phases = (np.concatenate([f[k] for f in found]) for k in range(3))
        return at, np.bincount(at, minlength=len(ordinals))

    def _flow_positions(self, ordinals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The flow attachments of these entries (a block's of a run): their positions among
        them, in order, each slice's by flow id and phase; their flow ids and phases."""
        attached = self.attached
        if attached is None or not attached.total or not len(ordinals):
            return None
        # Attachments are sorted by ordinal: those of these entries lie in their ordinals' range.
        wanted, ids, phases = attached.within(int(ordinals.min()), int(ordinals.max()) + 1)
        if not len(wanted):
            return None
        last = len(ordinals) - 1
        increasing = not last or bool((ordinals[1:] > ordinals[:-1]).all())
        if increasing:
            at = np.minimum(np.searchsorted(ordinals, wanted), last)
        else:
            by_ordinal = np.argsort(ordinals)
            at = by_ordinal[np.minimum(np.searchsorted(ordinals, wanted, sorter=by_ordinal), last)]
        mine = ordinals[at] == wanted
        if not mine.all():  # those of entries of another run, within these ones' range
            at, ids, phases = at[mine], ids[mine], phases[mine]
        if not len(at):
            return None
        if not increasing:  # in position order, each slice's by flow id and phase
            order = np.lexsort((phases, ids, at))
            at, ids, phases = at[order], ids[order], phases[order]
        return at, ids, phases

    def _emit_as_read(self, run: tuple[int, int], chosen: np.ndarray, deferred: np.ndarray) -> dict[int, bytes]:
        """The chosen BEGINs and instants of the run in the order they were read, a block at a
        time; returns the bodies of the ``deferred`` positions (sorted), by position."""
        held: dict[int, bytes] = {}
        first = 0  # the position of the piece's first entry
        for (cols, bodies, block), rows in self.entries.pieces(self.runs, run, bodies=True):
            lengths = cols["lengths"]
            if block.prefixes is not None:  # read in parts: the names in place of their placeholders
                assert self.part_prefixes is not None
                bodies, lengths = with_prefixes(bodies, lengths, block.prefixes, self.part_prefixes)
            ends_at = np.cumsum(lengths)
            begins_at = ends_at - lengths
            count = block.n if rows is None else len(rows)
            for a in range(0, count, BATCH):
                b = min(a + BATCH, count)
                pick = np.flatnonzero(chosen[first + a : first + b]) + a
                if not len(pick):
                    continue
                at = pick if rows is None else rows[pick]  # the block's rows
                if int(at[-1]) - int(at[0]) == len(at) - 1:  # rows one after another: one range
                    part = bodies[int(begins_at[at[0]]) : int(ends_at[at[-1]])]
                else:
                    part = gathered(bodies, begins_at[at], lengths[at])
                self._emit(pick + first, part, lengths[at], in_walk_order=False)
            mine = deferred[np.searchsorted(deferred, first) : np.searchsorted(deferred, first + count)]
            for p in mine.tolist():
                k = p - first if rows is None else int(rows[p - first])
                held[p] = bodies[int(begins_at[k]) : int(ends_at[k])]
            first += count
        return held

    def _emit(self, positions: np.ndarray, bodies: bytes, lengths: np.ndarray, in_walk_order: bool) -> None:
        counts = self.flow_counts[positions]
        if self.flow_at is not None and counts.any():
            carrying = counts > 0
            lo = np.searchsorted(self.flow_at, positions[carrying], "left")
            rows = np.repeat(lo, counts[carrying]) + ranks(counts[carrying])
            ids, phases = self.flow_ids[rows], self.flow_phases[rows]
        else:
            ids = phases = np.empty(0, np.int64)
        items = Items(
            lanes=self._lanes(positions),
            stamps=self.starts[positions] + self.shift,
            durs=-self.negdurs[positions],
            instants=self.kinds[positions] == INSTANT,
            lengths=lengths,
            bodies=bodies,
            flow_counts=counts,
            flow_ids=ids,
            flow_phases=phases,
        )
        self.enc.items(self.tracks, items, in_walk_order)
