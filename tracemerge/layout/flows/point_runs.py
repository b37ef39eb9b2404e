"""A file's bound flow points on its run file, for files with more of them than are held at once.

Each thread's points (:func:`tracemerge.layout.flows.binding.bound_threads`) are written as one
run, sorted by their id key (namespace, kind of id and id in one int64), with every so many keys
kept in memory; :meth:`PointRuns.ranges` cuts the keys into ranges of about a given number of
points (every id's points in one range) and :meth:`PointRuns.load` reads one range back from
every run, in the order of the threads, as the columns numbering takes.
"""

from __future__ import annotations

import itertools

import numpy as np

from tracemerge.layout.flows.binding import Points, rank_by_text
from tracemerge.store.entries import PointKeys
from tracemerge.store.spill import RunStore

ID_BITS = 47


def one_key(fid: np.ndarray, kind: np.ndarray, ns: np.ndarray) -> np.ndarray | None:
    """Each point's namespace, kind of id and id as one int64, or None where they do not fit."""
    if not (len(fid) and fid.min() >= 0 and fid.max() < 1 << ID_BITS and ns.max() < 1 << 15):
        return None
    key = ns.astype(np.int64)  # built in place: this is the largest moment of the numbering
    key <<= 1
    key |= kind
    key <<= ID_BITS
    key |= fid
    return key


class _Run:
    """One thread's points on disk: where each column lies, its length and its sampled keys."""

    __slots__ = ("columns", "length", "samples")

    def __init__(self, columns: dict[str, tuple[int, np.dtype]], length: int, samples: np.ndarray | None) -> None:
        self.columns, self.length, self.samples = columns, length, samples


class PointRuns:
    """Every thread's bound points of a file, one run each; ``bound`` points are about what a
    range holds."""

    def __init__(self, store: RunStore, keys: PointKeys, bound: int) -> None:
        self.store, self.keys, self.bound = store, keys, bound
        self.step = max(1, bound // 16)  # one key kept of so many: ranges miss their size by less
        self.runs: list[_Run] = []
        self.fits = True  # every thread's ids fit one int64 key
        self.ranks: list[np.ndarray] = []
        self.types: dict[str, np.dtype] = {}

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """One thread's points (``cols`` is used up)."""
        kind, ns = cols.pop("fid_kind"), cols.pop("ns")
        fid = rank_by_text(cols.pop("fid"), kind, self.keys, self.ranks)
        self.types.update(fid=fid.dtype, fid_kind=kind.dtype, ns=ns.dtype)
        key = one_key(fid, kind, ns)
        samples = None
        order: np.ndarray | None = None
        if key is None:
            self.fits = False
            cols.update(fid=fid, fid_kind=kind, ns=ns)
        else:
            order = np.argsort(key, kind="stable")  # ties stay in time order
            cols["key"] = key
            samples = key[order[:: self.step]]
        del fid, kind, ns, key
        n = len(cols["ts"])
        places = {}
        for name in list(cols):  # one column sorted at a time: a thread's points may be millions
            values = cols.pop(name)
            values = np.ascontiguousarray(values if order is None else values[order])
            places[name] = (self.store.put(values.tobytes())[0], values.dtype)
            del values
        self.runs.append(_Run(places, n, samples))

    def ranges(self) -> list[tuple[int | None, int | None]]:
        """Key ranges [lo, hi) (None: unbounded) of about ``bound`` points each, in order."""
        keys = np.concatenate([run.samples for run in self.runs if run.samples is not None])
        weights = np.concatenate(
            [_weights(run.length, len(run.samples), self.step) for run in self.runs if run.samples is not None]
        )
        order = np.argsort(keys, kind="stable")
        cuts: list[int] = []
        held = 0
        for key, weight in zip(keys[order].tolist(), weights[order].tolist(), strict=True):
            if held and held + weight > self.bound and (not cuts or key > cuts[-1]):
                cuts.append(key)
                held = 0
            held += weight
        bounds: list[int | None] = [None, *cuts, None]
        return list(itertools.pairwise(bounds))

    def load(self, lo: int | None, hi: int | None) -> Points | None:
        """Every run's points with keys in [lo, hi), in the order of the runs; None if none."""
        found = Points()
        for run in self.runs:
            first, end = self._position(run, lo, 0), self._position(run, hi, run.length)
            if end > first:
                found.add(**self._columns(run, first, end))
        return found if found.parts else None

    def load_all(self) -> Points:
        """Every run's points, whole."""
        found = Points()
        for run in self.runs:
            found.add(**self._columns(run, 0, run.length))
        return found

    def _columns(self, run: _Run, first: int, end: int) -> dict[str, np.ndarray]:
        cols = {name: self._read(run, name, first, end) for name in run.columns}
        key = cols.pop("key", None)
        if key is not None:  # the id's parts, as the numbering takes them
            cols["ns"] = (key >> (ID_BITS + 1)).astype(self.types["ns"])
            cols["fid_kind"] = ((key >> ID_BITS) & 1).astype(self.types["fid_kind"])
            cols["fid"] = key & ((1 << ID_BITS) - 1)
        return cols

    def _read(self, run: _Run, name: str, first: int, end: int) -> np.ndarray:
        offset, dtype = run.columns[name]
        size = dtype.itemsize
        return np.frombuffer(self.store.get(offset + first * size, (end - first) * size), dtype)

    def _position(self, run: _Run, key: int | None, unbounded: int) -> int:
        """Where ``key`` would go in the run's sorted keys (the first of its equals)."""
        if key is None:
            return unbounded
        assert run.samples is not None
        i = int(np.searchsorted(run.samples, key, "left"))
        if i == 0:
            return 0
        # The sample before is below key, the sample at i (if any) is not.
        first, end = (i - 1) * self.step + 1, min(i * self.step, run.length)
        window = self._read(run, "key", first, end)
        return first + int(np.searchsorted(window, key, "left"))


def _weights(length: int, count: int, step: int) -> np.ndarray:
    """How many points each of a run's ``count`` sampled keys stands for."""
    weights = np.full(count, step, np.int64)
    weights[-1] = length - (count - 1) * step
    return weights
