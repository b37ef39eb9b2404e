"""Flow attachments: per thread, the slices its flow points bind to, with the flow's id and the
point's phase there; held in memory (:class:`Attachments`) or, for a file with more flow points
than :mod:`tracemerge.layout.flows.numbering` holds at once, on its run file until the thread is
walked (:class:`AttachmentsOnDisk`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.store.spill import RunStore

# One part of a thread's attachments: slice ordinals, flow ids, phases.
Part = tuple[np.ndarray, np.ndarray, np.ndarray]
COLUMN_TYPES = (np.int64, np.int64, np.int8)


class Attachments:
    """One thread's flow attachments: per attachment the ordinal of its slice, the flow's id and
    the point's phase there."""

    __slots__ = ("ids", "ordinals", "phases")

    def __init__(self, ordinals: np.ndarray, ids: np.ndarray, phases: np.ndarray) -> None:
        self.ordinals, self.ids, self.phases = ordinals, ids, phases

    @property
    def total(self) -> int:
        return len(self.ordinals)


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
        places = [
            self.store.put(np.ascontiguousarray(column, dtype).tobytes())
            for column, dtype in zip(part, COLUMN_TYPES, strict=True)
        ]
        self.parts.setdefault(thread, []).append((kind, len(part[0]), places))

    def __getitem__(self, key: tuple[OriginKey, ThreadKey]) -> Attachments:
        n = self.index.get(key)
        if n is None or n not in self.parts:
            raise KeyError(key)
        stored = self.parts[n]
        # Each column read and joined in turn, so a column's parts are let go before the next.
        target, ids, phases = (
            np.concatenate([np.frombuffer(self.store.get(*places[k]), dtype) for _, _, places in stored])
            for k, dtype in enumerate(COLUMN_TYPES)
        )
        parts: list[Part] = [(target, ids, phases)]
        return joined(parts, len({kind for kind, _, _ in stored}) == 1)

    def __iter__(self) -> Iterator[tuple[OriginKey, ThreadKey]]:
        return (self.threads[n] for n in self.parts)

    def __len__(self) -> int:
        return len(self.parts)
