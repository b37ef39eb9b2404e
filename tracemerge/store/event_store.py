"""One file's events as a source hands them over, held by track until they are laid out.

Each slice or instant becomes an entry ``(start, -dur, kind, ordinal, body)`` of its (origin,
thread), where ``body`` is the writer's encoding of the event's name, category and args (made
once, while the strings are at hand; names are encoded once per pair); flow points and counter
samples are kept beside them. The entries are kept as columns in the order they were read
(:mod:`tracemerge.store.entries`), spilling to disk past a budget (:mod:`tracemerge.store.spill`); a store
can be saved for a second pass and loaded again.
"""

from __future__ import annotations

import itertools
import json
import pickle
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec
import numpy as np
import orjson

from tracemerge.core.model import FlowPhase, OriginKey, ThreadKey
from tracemerge.store.entries import Block, PointKeys, ThreadEntries, ThreadPoints, walk_order
from tracemerge.store.spill import RunStore, SortedBuffer

# Events a file's store may hold in memory before it spills to disk (about 100 bytes each once
# sealed into columns).
DEFAULT_BUDGET = 500_000
# Bytes of the events' bodies it may hold per event of the budget (128 MB with the default): a
# file whose events carry long args (call stacks, input shapes as text) spills by its bytes first.
BODY_BYTES_PER_EVENT = 256
Store = TypeVar("Store", bound="EventStore")


class BodyEncoder(Protocol):
    """What a store asks of the writer's encoder: an event's body, encoded as it is read. Every
    writer's :class:`~tracemerge.layout.types.Encoder` is one, and so is a part's
    :class:`~tracemerge.store.file_layout.PlaceholderEncoder`."""

    # ``args_heads[len(text)] + text`` encodes args text that ``args`` would not need to change.
    args_heads: tuple[bytes, ...]

    def prefix(self, name: str, cat: str) -> bytes:
        """A name and category, encoded (the store caches it per pair)."""
        ...

    def args(self, text: bytes) -> bytes:
        """An args object given as JSON text, encoded."""
        ...


def _no_tags(name: str) -> tuple[str, ...]:
    return ()


class EventStore:
    """Collects one file's events by track while the source reads.

    Memory is bounded: when the buffers hold more than ``budget`` events, they are written to a
    temporary file (``store``, a :class:`~tracemerge.store.spill.RunStore`) and read back when laid
    out. Sources call :meth:`check_memory` between batches. The encodings of names ``watched``
    tags as evidence are kept apart (``watched_prefixes``): a source that looks a name up in
    ``prefixes`` and misses it meets it for the first time or notes it as evidence.
    """

    def __init__(
        self,
        enc: BodyEncoder,
        budget: int = DEFAULT_BUDGET,
        spill_dir: Path | None = None,
        store_path: Path | None = None,
        watched: Callable[[str], tuple[str, ...]] = _no_tags,
    ) -> None:
        self.enc = enc
        # What a source builds an event's body with, without seeing the writer (the seam where
        # bodies are encoded as they are read, which is faster than keeping events apart from
        # their encoding): ``args_heads[len(text)] + text`` is args text kept as written, and
        # ``encode_args(text)`` args text the writer must rewrite.
        self.args_heads: tuple[bytes, ...] = enc.args_heads
        self.encode_args: Callable[[bytes], bytes] = enc.args
        self.budget = budget
        self.store = RunStore(spill_dir, store_path)
        # Encoded (name, category) pairs, cached: those whose name is not watched as evidence, and apart those it is.
        self.prefixes: dict[tuple[str, str], bytes] = {}
        self.watched_prefixes: dict[tuple[str, str], bytes] = {}
        self._watched = watched
        self._ordinals = itertools.count()
        self.ordinal = self._ordinals.__next__
        # A file read in parts: how many parts were taken in, and the encodings by this store's
        # writer of their names (placeholders in bodies are replaced with these when laid out).
        self.parts_taken = 0
        self.part_prefixes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.point_keys = PointKeys()
        self.entries: dict[tuple[OriginKey, ThreadKey], ThreadEntries] = {}
        self.points: dict[tuple[OriginKey, ThreadKey], ThreadPoints] = PointsByThread(self.point_keys)
        self.samples: dict[tuple[OriginKey, ThreadKey, str], SortedBuffer] = defaultdict(SortedBuffer)

    def reserve(self, count: int) -> int:
        """The first of ``count`` ordinals given out at once (to a batch's events, by position)."""
        first = self.ordinal()
        if count > 1:
            next(itertools.islice(self._ordinals, count - 2, None))
        return first

    def take_ordinal(self, ordinal: int | None) -> None:
        """Until called again with None, every ordinal asked for is ``ordinal`` (one reserved
        for an event that hands over its parts one by one)."""
        self.ordinal = self._ordinals.__next__ if ordinal is None else itertools.repeat(ordinal).__next__

    def count_ordinals_from(self, first: int) -> None:
        """Ordinals go on from ``first`` (a part's own range, or after every part's)."""
        self._ordinals = itertools.count(first)
        self.ordinal = self._ordinals.__next__

    def prefix(self, name: str, cat: str) -> bytes:
        """The encoded name and category (cached: names repeat)."""
        found = self.prefixes.get((name, cat))
        if found is None:
            found = self.watched_prefixes.get((name, cat))
        if found is None:
            found = self.enc.prefix(name, cat)
            cache = self.watched_prefixes if self._watched(name) else self.prefixes
            cache[(name, cat)] = found
        return found

    def describe(self, name: str, cat: str, args: Any) -> bytes:
        """An event's encoded body; ``args`` is a dict, its raw JSON text, or None."""
        prefix = self.prefix(name, cat)
        if not args:
            return prefix
        if type(args) is msgspec.Raw:
            text = bytes(args)
        elif type(args) is dict:
            try:
                text = orjson.dumps(args, default=str, option=orjson.OPT_NON_STR_KEYS)
            except TypeError:  # an integer beyond 64 bits (a rank of 10**22): written exactly
                text = json.dumps(args, default=str, ensure_ascii=False, separators=(",", ":")).encode()
        else:
            return prefix
        return prefix + self.enc.args(text) if text != b"{}" else prefix

    def save(self, path: Path) -> None:
        """Keep the events for a second pass (:meth:`load`): every buffer is spilled to the named
        run file, and what indexes it is written to ``path``."""
        self.check_memory(0)
        points = {key: pts for key, pts in self.points.items()}
        state = (
            self.store.path,
            self.store.size,
            self.entries,
            points,
            dict(self.samples),
            self.point_keys,
            self.part_prefixes,
        )
        path.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        self.store.close()

    @classmethod
    def load(cls: type[Store], path: Path, enc: BodyEncoder, budget: int = DEFAULT_BUDGET) -> Store:
        """The store :meth:`save` kept, encoding with ``enc`` (its bodies were made by the same writer)."""
        store_path, size, entries, points, samples, point_keys, part_prefixes = pickle.loads(path.read_bytes())
        loaded = cls(enc, budget)
        loaded.store = RunStore(store_path.parent, store_path, size)
        loaded.entries = entries
        loaded.point_keys = point_keys
        loaded.points = PointsByThread(point_keys, points)
        loaded.samples = defaultdict(SortedBuffer, samples)
        loaded.part_prefixes = part_prefixes
        return loaded

    def reset(self) -> None:
        """Forget every event handed over so far (the source reads the file again)."""
        for buf in self._buffers():
            buf.discard()

    def _buffers(self) -> list[Any]:
        """Every buffer of the file: slices and instants, flow points, counter samples."""
        return [*self.entries.values(), *self.points.values(), *self.samples.values()]

    def buffer(self, origin: OriginKey, thread: ThreadKey) -> ThreadEntries:
        """The entry list of one (origin, thread); sources append ``(start, -dur, kind, ordinal, body)``."""
        key = (origin, thread)
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = ThreadEntries()
        return found

    def add_entries(self, origin: OriginKey, thread: ThreadKey, block: Block) -> None:
        """Entries given as columns (see :func:`tracemerge.store.entries.entry_block`)."""
        self.buffer(origin, thread).add_block(block)

    def flow_point(
        self, origin: OriginKey, thread: ThreadKey, ts: int, phase: FlowPhase, flow_key: Any, bind_next: bool
    ) -> None:
        """A flow point; ``bind_next`` binds it to the next slice starting on its thread."""
        self.points[(origin, thread)].append((ts, int(phase), self.ordinal(), flow_key, bind_next))

    def counter_sample(self, origin: OriginKey, thread: ThreadKey, series: str, ts: int, value: Any) -> None:
        self.samples[(origin, thread, series)].append((ts, self.ordinal(), value))

    def check_memory(self, limit: int | None = None) -> None:
        """Spill every buffer to disk when together they hold more than ``limit`` events (the
        budget), or more than :data:`BODY_BYTES_PER_EVENT` bytes of bodies per event of it."""
        buffers = self._buffers()
        events = self.budget if limit is None else limit
        held = sum(buf.held if hasattr(buf, "held") else len(buf) for buf in buffers)
        if held > events or sum(getattr(buf, "held_bytes", 0) for buf in buffers) > events * BODY_BYTES_PER_EVENT:
            for buf in buffers:
                buf.spill(self.store)
            return
        for buf in buffers:
            if hasattr(buf, "maybe_seal"):
                buf.maybe_seal()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key events whose origin is only known once the whole file is read (per-pid roles)."""
        self.entries = _regrouped(self.entries, lambda k: (origin_of(k[0], k[1]), k[1]))
        self.points = PointsByThread(self.point_keys, _regrouped(self.points, lambda k: (origin_of(k[0], k[1]), k[1])))
        self.samples = defaultdict(
            SortedBuffer, _regrouped(self.samples, lambda k: (origin_of(k[0], k[1]), k[1], k[2]))
        )

    def sorted_starts(self, origin: OriginKey, thread: ThreadKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A thread's entries in the walk's order, as (starts, kinds, ordinals)."""
        keys = self.buffer(origin, thread).keys(self.store)
        order = walk_order(keys["starts"], keys["negdurs"], keys["kinds"], keys["ordinals"])
        return keys["starts"][order], keys["kinds"][order], keys["ordinals"][order]

    def sorted_points(self, origin: OriginKey, thread: ThreadKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A thread's flow points in (time, phase, ordinal) order, as (times, phases, bind_next)."""
        cols = self.points[(origin, thread)].columns(self.store)
        order = np.lexsort((cols["ordinals"], cols["phases"], cols["ts"]))
        return cols["ts"][order], cols["phases"][order], cols["bind_next"][order]


def threads_in_order(buffers: dict) -> list[tuple[tuple[OriginKey, ThreadKey], Any]]:
    """The (key, buffer) pairs of a store's ``entries`` or ``points`` in the order their threads
    were first met in the file (whatever the order the source handed them over in)."""
    return sorted(buffers.items(), key=lambda item: item[1].first)


class PointsByThread(dict):
    """The flow points of each (origin, thread), made as first asked for."""

    def __init__(self, keys: PointKeys, items: dict | None = None) -> None:
        super().__init__(items or {})
        self.point_keys = keys

    def __missing__(self, key: tuple) -> ThreadPoints:
        found = self[key] = ThreadPoints(self.point_keys)
        return found


def _regrouped(buffers: dict, rekey: Callable[[tuple], tuple]) -> dict:
    out: dict[tuple, Any] = {}
    for key, buf in buffers.items():
        target = out.get(rekey(key))
        if target is None:
            out[rekey(key)] = buf
        else:
            target.absorb(buf)
    return out
