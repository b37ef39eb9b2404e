"""Flow attachments: per thread, the slices its flow points bind to, with the flow's id and the
point's phase there; held in memory (:class:`Attachments`) or, for a file with more flow points
than :mod:`tracemerge.layout.flows.numbering` holds at once, on its run file until the thread is
walked (:class:`AttachmentsOnDisk`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.store.entries import grouped_rows
from tracemerge.store.spill import RunStore

# One part of a thread's attachments: slice ordinals, flow ids, phases.
Part = tuple[np.ndarray, np.ndarray, np.ndarray]
COLUMN_TYPES = (np.int64, np.int64, np.int8)
_EMPTY = tuple(np.empty(0, dtype) for dtype in COLUMN_TYPES)
# A thread's attachments past this many are read a bucket of ordinals at a time (AttachmentBuckets),
# the buckets' bounds taken from one ordinal in SAMPLE_EVERY.
BUCKET = 1 << 18
SAMPLE_EVERY = 64


class Attachments:
    """One thread's flow attachments: per attachment the ordinal of its slice, the flow's id and
    the point's phase there."""

    __slots__ = ("ids", "ordinals", "phases")

    def __init__(self, ordinals: np.ndarray, ids: np.ndarray, phases: np.ndarray) -> None:
        self.ordinals, self.ids, self.phases = ordinals, ids, phases

    @property
    def total(self) -> int:
        return len(self.ordinals)

    def within(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The attachments of the slices of ordinals lo..hi (excluded): ordinals, ids, phases."""
        a, b = np.searchsorted(self.ordinals, (lo, hi)).tolist()
        return self.ordinals[a:b], self.ids[a:b], self.phases[a:b]


def joined(parts: list[Part], one_kind: bool) -> Attachments:
    """A thread's parts in (slice ordinal, flow id, phase) order. ``one_kind``: the parts are all
    pairs' starts, all pairs' ends or all made one at a time, in the order they were numbered;
    sorted by slice, the order among ties is kept. ``parts`` is emptied: each column is sorted as
    its original is let go (a thread may have millions)."""
    if len(parts) == 1:
        target, ids, phases = parts.pop()
    else:
        target, ids, phases = (np.concatenate([p[k] for p in parts]) for k in range(3))
        parts.clear()
    order = np.argsort(target, kind="stable") if one_kind else np.lexsort((phases, ids, target))
    target = target[order]
    ids = ids[order]
    phases = phases[order]
    return Attachments(target, ids, phases)


class AttachmentsOnDisk(Mapping):
    """Per thread, attachments written to ``store`` part by part (each of a kind: pairs' starts,
    pairs' ends, made one at a time), read back and joined when the thread asks for them."""

    def __init__(self, store: RunStore, threads: list[tuple[OriginKey, ThreadKey]]) -> None:
        self.store = store
        self.threads = threads
        # Per thread index: each part's kind, length and where its three columns lie.
        self.parts: dict[int, list[tuple[int, int, list[tuple[int, int]]]]] = {}
        self.index = {key: n for n, key in enumerate(threads)}

    def add(self, thread: int, kind: int, part: Part) -> None:
        self.parts.setdefault(thread, []).append((kind, len(part[0]), _put(self.store, part)))

    def __getitem__(self, key: tuple[OriginKey, ThreadKey]) -> Attachments | AttachmentBuckets:
        n = self.index.get(key)
        if n is None or n not in self.parts:
            raise KeyError(key)
        stored = self.parts[n]
        one_kind = len({kind for kind, _, _ in stored}) == 1
        if sum(size for _, size, _ in stored) > BUCKET:
            return AttachmentBuckets(self.store, [places for _, _, places in stored], one_kind)
        return joined([_read(self.store, places) for _, _, places in stored], one_kind)

    def __iter__(self) -> Iterator[tuple[OriginKey, ThreadKey]]:
        return (self.threads[n] for n in self.parts)

    def __len__(self) -> int:
        return len(self.parts)


class AttachmentBuckets:
    """A thread's attachments of more than :data:`BUCKET`, as the walk asks for them a range of
    slice ordinals at a time: put back on the run file in buckets of ordinals of about that many
    each, every bucket read and sorted as it is first asked for (a few kept). Sorting a bucket
    gives its share of the thread's order (:func:`joined`), since ordinals order it first."""

    KEPT = 4

    def __init__(self, store: RunStore, parts: list[list[tuple[int, int]]], one_kind: bool) -> None:
        self.store, self.one_kind = store, one_kind
        sample = np.sort(np.concatenate([_column(store, places, 0)[::SAMPLE_EVERY].copy() for places in parts]))
        step = max(1, BUCKET // SAMPLE_EVERY)
        self.bounds = np.unique(sample[step::step])  # bucket b: ordinals from bounds[b - 1] on
        self.buckets: list[list[list[tuple[int, int]]]] = [[] for _ in range(len(self.bounds) + 1)]
        self.total = 0
        for places in parts:  # one part in memory at a time
            target, ids, phases = _read(store, places)
            self.total += len(target)
            for b, rows in grouped_rows(np.searchsorted(self.bounds, target, "right"), len(self.buckets)):
                self.buckets[b].append(_put(store, (target[rows], ids[rows], phases[rows])))
        self.loaded: dict[int, Attachments] = {}

    def within(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`Attachments.within`, from the buckets holding those ordinals."""
        first, last = np.searchsorted(self.bounds, (lo, hi - 1), "right").tolist()
        found = [self._bucket(b).within(lo, hi) for b in range(first, last + 1)]
        if len(found) == 1:
            return found[0]
        ordinals, ids, phases = (np.concatenate([f[k] for f in found]) for k in range(3))
        return ordinals, ids, phases

    def _bucket(self, b: int) -> Attachments:
        got = self.loaded.get(b)
        if got is None:
            if len(self.loaded) >= self.KEPT:
                del self.loaded[next(iter(self.loaded))]
            parts = [_read(self.store, places) for places in self.buckets[b]]
            got = self.loaded[b] = joined(parts, self.one_kind) if parts else Attachments(*_EMPTY)
        return got


def _put(store: RunStore, part: Part) -> list[tuple[int, int]]:
    """Where a part's three columns were written in ``store``."""
    columns = zip(part, COLUMN_TYPES, strict=True)
    return [store.put(np.ascontiguousarray(column, dtype).tobytes()) for column, dtype in columns]


def _column(store: RunStore, places: list[tuple[int, int]], k: int) -> np.ndarray:
    return np.frombuffer(store.get(*places[k]), COLUMN_TYPES[k])


def _read(store: RunStore, places: list[tuple[int, int]]) -> Part:
    """A part written by :func:`_put`, read back."""
    return _column(store, places, 0), _column(store, places, 1), _column(store, places, 2)


# What the walk gets of a thread: its attachments whole, or read a bucket at a time.
ThreadAttachments = Attachments | AttachmentBuckets
