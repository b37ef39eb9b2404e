"""Flow points bound to their slices: the first half of :mod:`tracemerge.layout.flows.numbering`.

Each thread's points are taken in (time, phase, ordinal) order and bound to the innermost slice
enclosing them on their thread (or, for a Chrome ``f`` without ``bp: "e"``, to the next slice
starting there: :mod:`tracemerge.layout.flows.targets`), one run of its entries apart in time after
another; every file's points end up as columns, with their namespace (origin, cat, name)
numbered in the order of first appearance.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.layout.flows import point_chunks
from tracemerge.layout.flows.point_chunks import grouped_points, time_cuts
from tracemerge.layout.flows.targets import targets
from tracemerge.layout.nesting import SLICE, overlapping, parents
from tracemerge.store.entries import PointKeys, ThreadEntries, ThreadPoints, distinct, walk_order
from tracemerge.store.run_cuts import Run
from tracemerge.store.spill import RunStore

# Each thread's flow points, in the order the threads were first met in the file.
PointsInOrder = list[tuple[tuple[OriginKey, ThreadKey], ThreadPoints]]


class Points:
    """Every flow point of a file, bound, as columns (see :func:`bound_points`)."""

    def __init__(self) -> None:
        self.threads: list[tuple[OriginKey, ThreadKey]] = []
        self.origins: list[OriginKey] = []  # per namespace: an (origin, cat, name)
        self.parts: dict[str, list[np.ndarray]] = defaultdict(list)

    def add(self, **columns: np.ndarray) -> None:
        for name, values in columns.items():
            self.parts[name].append(values)

    def take(self, name: str, keep: bool = False) -> np.ndarray:
        """One column, whole; its parts let go unless ``keep``."""
        parts = self.parts[name] if keep else self.parts.pop(name)
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        return parts[0]


def bound_points(
    threads: PointsInOrder,
    entries_of: dict[tuple[OriginKey, ThreadKey], ThreadEntries],
    point_keys: PointKeys,
    store: RunStore,
    with_durations: bool,
) -> Points | None:
    """Each thread's points in (time, phase, ordinal) order with the slice each binds to (its
    start, its ordinal or -1 for none, and with ``with_durations`` its negated duration) and its
    namespace, numbered in the order of first appearance."""
    found = Points()
    for columns in bound_threads(threads, entries_of, point_keys, store, with_durations, found):
        found.add(**columns)
    if not found.threads:
        return None
    _rank_other_ids(found, point_keys)
    return found


def bound_threads(
    threads: PointsInOrder,
    entries_of: dict[tuple[OriginKey, ThreadKey], ThreadEntries],
    point_keys: PointKeys,
    store: RunStore,
    with_durations: bool,
    found: Points,
) -> Iterator[dict[str, np.ndarray]]:
    """One thread's bound points at a time, as :func:`bound_points` describes them (ids that are
    not int64 still by their codes); ``found`` gets the threads and namespaces (not the columns)."""
    namespaces: dict[tuple, int] = {}
    for (origin, thread), pts in threads:
        if not pts.total:
            continue
        entries = entries_of.get((origin, thread))
        slices = _ThreadSlices(entries, store)
        for cols, runs, later in _thread_parts(pts, entries, store):
            if not len(cols["ts"]):
                continue
            order = np.lexsort((cols.pop("ordinals"), cols["phases"], cols["ts"]))
            # Each column sorted as its original is let go: a thread's points may be millions.
            ts, bind_next = cols.pop("ts")[order], cols.pop("bind_next")[order]
            sorted_cols = {name: cols.pop(name)[order] for name in ("phases", "fids", "fid_kinds")}
            ns = _namespaces(namespaces, found.origins, origin, cols.pop("pairs")[order], point_keys)
            del cols, order
            bound = _bound(slices, runs, later, ts, bind_next, with_durations)
            del bind_next
            columns = {
                "ts": ts,
                "phase": sorted_cols.pop("phases"),
                "fid": sorted_cols.pop("fids"),
                "fid_kind": sorted_cols.pop("fid_kinds"),
                "ns": ns,
                "thread": np.full(len(ts), len(found.threads), np.int32),
                **bound.columns(),
            }
            del ts, ns, bound
            yield columns
        del slices
        found.threads.append((origin, thread))


def _thread_parts(
    pts: ThreadPoints, entries: ThreadEntries | None, store: RunStore
) -> Iterator[tuple[dict[str, np.ndarray], list[Run], list[Run]]]:
    """A thread's points whole, or with more than ``POINTS_AT_ONCE`` of them a part apart in time
    at a time (:mod:`tracemerge.layout.flows.point_chunks`): each part's columns in storage
    order, the runs of entries its time meets, and the runs after those."""
    runs = entries.chunks(store) if entries is not None and entries.total else []
    if pts.total <= point_chunks.POINTS_AT_ONCE:
        yield pts.columns(store), runs, []
        return
    cuts = time_cuts(pts, store, point_chunks.POINTS_AT_ONCE)
    earliest = [start for _, _, start in runs[1:]]
    bounds = [None, *cuts, None]
    for lo, hi, cols in zip(bounds[:-1], bounds[1:], grouped_points(pts, cuts, store), strict=True):
        # The runs whose points (from their earliest start to the next's) meet [lo, hi).
        first = 0 if lo is None else bisect_right(earliest, lo)
        end = len(runs) if hi is None else bisect_left(earliest, hi) + 1
        yield cols, runs[first:end], runs[end:]


def _bound(
    slices: _ThreadSlices,
    runs: list[Run],
    later: list[Run],
    ts: np.ndarray,
    bind_next: np.ndarray,
    with_durations: bool,
) -> _Bound:
    """Points (in time order) bound run by run; those bound to a next slice their runs lack take
    the first slice of the ``later`` runs."""
    bound = _Bound(len(ts), with_durations)
    for rows, lo, hi in _point_ranges(runs, ts):
        bound.bind(slices.of(rows), ts, bind_next, lo, hi)
    for lo, hi, _ in later:
        if not len(bound.waiting):
            break
        bound.bind(slices.of((lo, hi)), ts, bind_next, 0, 0)
    return bound


def _point_ranges(runs: list[Run], ts: np.ndarray) -> list[tuple[tuple[int, int] | None, int, int]]:
    """The thread's runs of entries apart in time (:meth:`ThreadEntries.chunks`), each with the
    range of points (in time order) that bind within it: from its earliest start to the next's."""
    if not runs:
        return [(None, 0, len(ts))]
    cuts = [0, *np.searchsorted(ts, [earliest for _, _, earliest in runs[1:]], "left").tolist(), len(ts)]
    return [((lo, hi), cuts[k], cuts[k + 1]) for k, (lo, hi, _) in enumerate(runs)]


class _Bound:
    """The slices a thread's points bind to, found one run of blocks at a time; a point bound to
    the next slice that finds none in its run takes the first slice of the next run."""

    def __init__(self, n: int, with_durations: bool) -> None:
        self.target = np.full(n, -1, np.int64)
        self.target_start = np.zeros(n, np.int64)
        self.target_negdur = np.zeros(n, np.int64) if with_durations else None
        self.waiting = np.empty(0, np.int64)  # points bound to a next slice their run lacks

    def bind(self, slices: _RunSlices, ts: np.ndarray, bind_next: np.ndarray, lo: int, hi: int) -> None:
        starts, negdurs, ordinals = slices.starts, slices.negdurs, slices.ordinals
        first = slices.skip  # the run's own first slice, after the spine
        if len(starts) > first and len(self.waiting):
            take = slice(first, first + 1)
            self._set(self.waiting, starts[take], negdurs[take], ordinals[take], np.zeros(len(self.waiting), np.int64))
            self.waiting = self.waiting[:0]
        if lo == hi:
            return
        ends, parent = slices.shape()
        at = targets(starts, ends, parent, ts[lo:hi], bind_next[lo:hi])
        points = np.arange(lo, hi)
        found = at < len(starts)
        self._set(points[found], starts, negdurs, ordinals, at[found])
        self.waiting = points[~found & (bind_next[lo:hi] != 0)]

    def _set(
        self, points: np.ndarray, starts: np.ndarray, negdurs: np.ndarray, ordinals: np.ndarray, at: np.ndarray
    ) -> None:
        self.target[points] = ordinals[at]
        self.target_start[points] = starts[at]
        if self.target_negdur is not None:
            self.target_negdur[points] = negdurs[at]

    def columns(self) -> dict[str, np.ndarray]:
        found = {"target": self.target, "target_start": self.target_start}
        if self.target_negdur is not None:
            found["target_negdur"] = self.target_negdur
        return found


class _RunSlices:
    """A run's slices in the walk's order: starts, negated durations, ordinals, after the ``skip``
    slices of the spine left open across its start (:mod:`tracemerge.store.run_cuts`), to which
    its points may bind too; and, worked out once asked for, their ends and their parents when
    they nest throughout (else None)."""

    def __init__(self, starts: np.ndarray, negdurs: np.ndarray, ordinals: np.ndarray, skip: int = 0) -> None:
        self.starts, self.negdurs, self.ordinals, self.skip = starts, negdurs, ordinals, skip
        self.shaped: tuple[np.ndarray, np.ndarray | None] | None = None

    def shape(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self.shaped is None:
            ends = self.starts - self.negdurs
            parent = parents(self.starts, ends)
            nests = not overlapping(self.starts, ends, parent).any()
            self.shaped = (ends, parent if nests else None)
        return self.shaped


class _ThreadSlices:
    """A thread's slices one run at a time, the last run kept (a thread's points bound a part at
    a time may bind to one run in several parts)."""

    def __init__(self, entries: ThreadEntries | None, store: RunStore) -> None:
        self.entries, self.store = entries, store
        self.last: tuple[tuple[int, int] | None, _RunSlices] | None = None

    def of(self, rows: tuple[int, int] | None) -> _RunSlices:
        if self.last is None or self.last[0] != rows:
            self.last = (rows, self._read(rows))
        return self.last[1]

    def _read(self, rows: tuple[int, int] | None) -> _RunSlices:
        if rows is None:
            empty = np.empty(0, np.int64)
            return _RunSlices(empty, empty, empty)
        assert self.entries is not None
        keys = self.entries.keys(self.store, rows)
        order = walk_order(keys["starts"], keys["negdurs"], keys["kinds"], keys["ordinals"])
        order = order[keys["kinds"][order] == SLICE]
        found = [keys["starts"][order], keys["negdurs"][order], keys["ordinals"][order]]
        spine = self.entries.spine(self.store, rows[0])
        if spine is None:
            return _RunSlices(*found)
        # The spine started before the run: first in the walk's order.
        starts, negdurs, ordinals = (np.concatenate([spine[k], found[k]]) for k in range(3))
        return _RunSlices(starts, negdurs, ordinals, len(spine[0]))


def _namespaces(
    namespaces: dict[tuple, int], origins: list[OriginKey], origin: OriginKey, pairs: np.ndarray, keys: PointKeys
) -> np.ndarray:
    """Each point's namespace (its origin, cat and name), numbered in order of first appearance."""
    found, firsts = np.unique(pairs, return_index=True)
    lookup = np.empty(int(found.max()) + 1, np.int32)
    for pair in found[np.argsort(firsts)].tolist():
        cat, name = keys.pair_list[pair]
        ns = namespaces.get((origin, cat, name))
        if ns is None:
            ns = namespaces[(origin, cat, name)] = len(origins)
            origins.append(origin)
        lookup[pair] = ns
    return lookup[pairs]


def _rank_other_ids(points: Points, keys: PointKeys) -> None:
    """Ids that are not int64 sort among themselves by their text, as written."""
    fids, kinds = points.take("fid"), points.take("fid_kind")
    others = kinds == 1
    if others.any():
        used = distinct(fids[others])
        by_text = sorted(used.tolist(), key=lambda code: repr(keys.id_list[code]))
        rank = np.empty(int(used.max()) + 1, np.int64)
        rank[by_text] = np.arange(len(by_text))
        fids = fids.copy()
        fids[others] = rank[fids[others]]
    points.parts["fid"], points.parts["fid_kind"] = [fids], [kinds]


def rank_by_text(fids: np.ndarray, kinds: np.ndarray, keys: PointKeys, ranks: list[np.ndarray]) -> np.ndarray:
    """``fids`` with the ids that are not int64 replaced by their rank by text among every such id
    of the file (``ranks`` caches it): the same order as :func:`_rank_other_ids` gives them."""
    others = kinds == 1
    if not others.any():
        return fids
    if not ranks:
        by_text = sorted(range(len(keys.id_list)), key=lambda code: repr(keys.id_list[code]))
        rank = np.empty(len(by_text), np.int64)
        rank[by_text] = np.arange(len(by_text))
        ranks.append(rank)
    fids = fids.copy()
    fids[others] = ranks[0][fids[others]]
    return fids
