"""What laying out a file hands around: the writer's :class:`Encoder` (a
:class:`~tracemerge.store.event_store.BodyEncoder` of names and args, what a file's store needs as
events are read; the :class:`ChunkEncoder` a writer makes), the :class:`Tracks` a file's keys land
on, a thread's :class:`Items` for the encoder and the :class:`LayoutResult`.

Kept apart from :mod:`tracemerge.store.file_layout` so that the modules that work a file out
(:mod:`tracemerge.layout.flows.numbering`, :mod:`tracemerge.layout.thread_walk`) need nothing of the layout itself.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Protocol

import msgspec
import numpy as np
from msgspec import field

from tracemerge.core.model import Identity, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.plan.types import CounterTrack, ThreadTrack
from tracemerge.report.run_report import EventCounts
from tracemerge.store.event_store import BodyEncoder


class Items(msgspec.Struct):
    """Slices and instants of one thread for the encoder, in the order they are to be written:
    per item its lane (an index into the tracks handed over with it), its timestamp and
    duration, whether it is an instant, its body (``bodies`` holds them joined, ``lengths``
    long), and its flows (``flow_counts`` per item; their ids and phases in item order)."""

    lanes: np.ndarray
    stamps: np.ndarray
    durs: np.ndarray
    instants: np.ndarray
    lengths: np.ndarray
    bodies: bytes
    flow_counts: np.ndarray
    flow_ids: np.ndarray
    flow_phases: np.ndarray


class Encoder(BodyEncoder, Protocol):
    """What a writer implements to receive one file's laid-out events.

    What a slice or instant says is encoded once, when the event is read (the store's
    :class:`~tracemerge.store.event_store.BodyEncoder`): ``prefix`` encodes a name and category,
    ``args`` an args object given as JSON text; an event's body is the two concatenated.
    """

    # Whether the order of a tie matters once one of its slices carries a flow (Chrome JSON binds
    # a flow event to the slice on top of the stack when it is read).
    flows_bind_by_order: bool
    # Whether ENDs are written apart (:meth:`ends`), or a slice carries its duration.
    ends_apart: bool

    def default_track(self, uuid: int) -> None:
        """The track most events will be on (an encoder may leave it out of them)."""

    def ends(self, tracks: list[ThreadTrack], lanes: np.ndarray, stamps: np.ndarray) -> None:
        """The ENDs of a thread's slices that last (a zero-length one's END follows its BEGIN)."""

    def items(self, tracks: list[ThreadTrack], items: Items, in_walk_order: bool) -> None:
        """A thread's BEGINs and instants; ``in_walk_order`` for ties in the walk's order."""

    def counter(self, track: CounterTrack, ts: int, value: float | int) -> None: ...

    def close(self) -> None:
        """The file's events are all handed over: its chunk is ended."""


class ChunkEncoder(Encoder, Protocol):
    """A writer's encoder of one file's chunk."""

    def end(self) -> None:
        """Stops what it runs beside (a file given up)."""


class Tracks(Protocol):
    """Where a file's (identity, thread) keys land in the merged trace."""

    def thread(self, ident: Identity, key: ThreadKey) -> ThreadTrack: ...

    def counter(self, ident: Identity, key: ThreadKey, name: str) -> CounterTrack: ...


class LayoutResult(msgspec.Struct):
    """What laying out one file produced: counts read and written, lanes opened, losses."""

    read: dict[Identity, EventCounts] = field(default_factory=lambda: defaultdict(EventCounts))
    written: dict[Identity, EventCounts] = field(default_factory=lambda: defaultdict(EventCounts))
    threads: dict[Identity, set[ThreadKey]] = field(default_factory=lambda: defaultdict(set))
    counter_series: dict[Identity, set[tuple[ThreadKey, str]]] = field(default_factory=lambda: defaultdict(set))
    lanes: list[ThreadTrack] = field(default_factory=list)
    dropped: Losses = field(default_factory=Losses)
    filtered: Counter[Stat] = field(default_factory=Counter)  # left out on request: not a loss
    moved_to_lanes: int = 0
    reversed_flows: int = 0
    ts_min: int | None = None  # in the file's own clock
    ts_max: int | None = None
