"""Typed batches of Chrome trace events normalised column by column: the hot path of
:meth:`~tracemerge.sources.chrome.events.ChromeEvents.add_batch`.

Complete (``X``) events and flow points of a decoded batch are taken a field at a time (one
list comprehension per field, times checked and converted in numpy, names looked up through the
layout's cache), grouped by thread with one stable sort, and handed to the layout as blocks of
columns (:mod:`tracemerge.store.entries`): no Python object per event beyond what decoding made; a
slice whose name is watched as evidence is noted as its rows are handed over. What this path
does not take (other phases, a time or id of another type) goes through the per-event path,
which keeps or counts it as it always does.

A batch's ordinals are given out in one go, one per event by position. An event left to the
per-event path takes its own, and goes after the rows of its thread before it: each thread's
events are kept in file order, their ordinals in file order, and names interned in file order,
as the per-event path keeps them, whatever the batches.
"""

from __future__ import annotations

import itertools
from operator import eq, itemgetter
from typing import Any, Protocol

import numpy as np

from tracemerge.core.bounds import DEEP_FROM
from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.evidence.anchors import DEVICE_COMM, DEVICE_COMPUTE
from tracemerge.sources.chrome.column_times import INEXACT, micros_to_ns
from tracemerge.sources.chrome.values import as_text
from tracemerge.store.column_blocks import Block
from tracemerge.store.entries import ENTRY_SCHEMA, POINT_SCHEMA, equal_runs
from tracemerge.store.file_layout import FileLayout

_FLOW_CODES = {"s": 0, "t": 1, "f": 2}
_INSTANTS = frozenset({"i", "I", "R"})
_INTS = {int}  # the types of a column of ids that are all integers (bool is not)
# A batch with more events left to the per-event path than one in this many goes that way whole.
_SPARSE = 4


class BatchReader(Protocol):
    """What the columnar path needs of the reader it serves
    (:class:`~tracemerge.sources.chrome.events.ChromeEvents`): its layout, its threads as
    columns number them, the device notes, and its per-event path for what columns do not take."""

    layout: FileLayout
    thread_keys: list[ThreadKey]

    def add_each(self, batch: list, origin: OriginKey, plain_text: bool) -> None: ...

    def bounded(self, args: Any) -> Any: ...

    def thread_indexes(self, keys: list[tuple]) -> np.ndarray: ...

    def head_sizes(self, heads: tuple[bytes, ...]) -> np.ndarray: ...

    def device_rows(
        self, threads: np.ndarray, pairs: list[tuple], watched: np.ndarray | None, xs: list
    ) -> tuple[np.ndarray | None, np.ndarray | None]: ...

    def note_device_rows(self, threads: np.ndarray, cats: list[str]) -> None: ...


def add_columns(reader: BatchReader, batch: list, origin: OriginKey, plain_text: bool, bind_ids: bool) -> None:
    """Hands a typed batch to the layout: its complete events and flow points as columns, the
    rest one by one, each thread's in the order of the file."""
    n = len(batch)
    phs = [e.ph for e in batch]
    slices = _Slices(reader, batch, phs, plain_text, bind_ids)
    points = _Points(reader, batch, phs)
    taken = np.zeros(n, bool)
    taken[slices.at] = True
    taken[points.at] = True
    left = np.flatnonzero(~taken).tolist()
    if len(left) * _SPARSE > n:
        reader.add_each(batch, origin, plain_text)
        return
    layout = reader.layout
    base = layout.reserve(n)  # an event's ordinal: base + its position
    if left:
        # An event left to the per-event path goes after its thread's rows before it, and takes
        # the ordinal of its place (the rows of other threads go whenever: they do not mind).
        threads = reader.thread_indexes([(batch[i].pid, batch[i].tid) for i in left])
        for at, thread in zip(left, threads.tolist(), strict=True):
            slices.hand_over(thread, at, base, origin)
            points.hand_over(thread, at, base, origin)
            layout.take_ordinal(base + at)
            try:
                reader.add_each([batch[at]], origin, plain_text)
            finally:
                layout.take_ordinal(None)
    slices.hand_over_all(n, base, origin)
    points.hand_over_all(n, base, origin)


def _picker(rows: np.ndarray) -> Any:
    """A function taking the items at ``rows`` (in order) out of a sequence, as a tuple."""
    if len(rows) == 1:
        row = int(rows[0])
        return lambda seq: (seq[row],)
    return itemgetter(*rows.tolist())


def _none_at(values: list, n: int) -> np.ndarray:
    return np.fromiter(map(eq, values, itertools.repeat(None)), bool, n)


class _Rows:
    """One kind of event of a batch, as columns: ``at`` the batch positions of the rows the
    columns take (the others are left to the per-event path), ``threads`` each row's thread."""

    reader: BatchReader
    at: np.ndarray
    threads: np.ndarray
    _groups: dict[int, list] | None = None  # per thread: its rows, and how many are handed over

    def hand_over(self, thread: int, before: int, base: int, origin: OriginKey) -> None:
        """The thread's rows at positions before ``before`` not yet handed over."""
        if not len(self.at):
            return
        group = self.groups().get(thread)
        if group is None:
            return
        rows, done = group
        upto = int(np.searchsorted(self.at[rows], before))
        if upto > done:
            group[1] = upto
            self.emit(self.reader.thread_keys[thread], rows[done:upto], base, origin)

    def hand_over_all(self, end: int, base: int, origin: OriginKey) -> None:
        for thread in list(self.groups()) if len(self.at) else ():
            self.hand_over(thread, end, base, origin)

    def groups(self) -> dict[int, list]:
        """Per thread index, its rows in order (and a count of those handed over)."""
        if self._groups is None:
            index = self.threads
            if not (index[1:] != index[:-1]).any():
                self._groups = {int(index[0]): [np.arange(len(index)), 0]}
            else:
                order = np.argsort(index, kind="stable")
                self._groups = {int(index[order[lo]]): [order[lo:hi], 0] for lo, hi in equal_runs(index[order])}
        return self._groups

    def emit(self, thread: Any, rows: np.ndarray, base: int, origin: OriginKey) -> None:
        raise NotImplementedError


class _Slices(_Rows):
    """The batch's complete events."""

    watched: np.ndarray | None = None  # per row, whether its name is watched as evidence
    compute: np.ndarray | None = None  # per row, whether it is device compute (kernel, copy, set)
    comm: np.ndarray | None = None  # per row, whether it is a collective's device work
    names: np.ndarray | None = None  # per row, the name of device activity (None for the others)
    xs: list

    def __init__(self, reader: BatchReader, batch: list, phs: list, plain_text: bool, bind_ids: bool) -> None:
        self.reader = reader
        is_x = list(map(eq, phs, itertools.repeat("X")))
        xs = list(itertools.compress(batch, is_x))
        at = np.flatnonzero(is_x)
        n = len(xs)
        self.at = at[:0]
        if not n:
            return
        starts = micros_to_ns([e.ts for e in xs], n)
        lengths = micros_to_ns([e.dur for e in xs], n)
        pairs = [(e.name, e.cat) for e in xs]
        prefixes, watched = _prefixes(reader, batch, phs, pairs, at)
        if starts is None or lengths is None:
            return
        odd = _odd_rows(xs, starts, lengths, bind_ids)
        if odd.any():
            keep = np.flatnonzero(~odd)
            if not len(keep):
                return
            pick = _picker(keep)
            xs, at, starts, lengths = list(pick(xs)), at[keep], starts[keep], lengths[keep]
            prefixes, pairs = list(pick(prefixes)), list(pick(pairs))
            if watched is not None:
                watched = watched[keep]
        self.at, self.starts, self.negdurs = at, starts, -lengths
        self.threads = reader.thread_indexes([(e.pid, e.tid) for e in xs])
        self.compute, self.comm = reader.device_rows(self.threads, pairs, watched, xs)
        self.names = _activity_names(xs, self.compute, self.comm)
        if watched is not None and watched.any():
            self.watched, self.xs = watched, xs
            rows = np.flatnonzero(watched)
            reader.note_device_rows(self.threads[rows], [xs[row].cat for row in rows.tolist()])
        self._encode_args(xs, prefixes, plain_text)

    def _encode_args(self, xs: list, prefixes: list[bytes], plain_text: bool) -> None:
        """Each row's body after its ``prefixes``: ``fields`` (the args annotation's head, or the
        whole annotation) and ``args`` (raw args text written after its head, or empty), and
        ``body_sizes``, the length of each body."""
        reader, n = self.reader, len(xs)
        args = [e.args for e in xs]
        sizes = np.fromiter(map(len, args), np.int64, n)
        if int(sizes.max()) >= DEEP_FROM:  # long args may nest too deep (their length stays)
            for row in np.flatnonzero(sizes >= DEEP_FROM).tolist():
                args[row] = reader.bounded(args[row])
                sizes[row] = len(args[row])
        heads = reader.layout.args_heads
        if plain_text and int(sizes.max()) < len(heads):
            fields = list(map(heads.__getitem__, sizes.tolist()))
            empty = sizes <= 2
            if empty.any():  # "{}" or none: no annotation
                for i in np.flatnonzero(empty).tolist():
                    fields[i] = args[i] = b""
            field_sizes = np.where(empty, 0, reader.head_sizes(heads)[sizes] + sizes)
        else:
            encode = reader.layout.encode_args
            fields = [encode(bytes(a)) if len(a) > 2 else b"" for a in args]
            args = [b""] * n
            field_sizes = np.fromiter(map(len, fields), np.int64, n)
        self.prefixes, self.fields, self.args = prefixes, fields, args
        self.body_sizes = np.fromiter(map(len, prefixes), np.int64, n) + field_sizes

    def emit(self, thread: Any, rows: np.ndarray, base: int, origin: OriginKey) -> None:
        """Some of one thread's rows, in order, their ordinals ``base`` + position."""
        pick = _picker(rows)
        bodies = b"".join(
            itertools.chain.from_iterable(zip(pick(self.prefixes), pick(self.fields), pick(self.args), strict=True))
        )
        cols = {
            "starts": self.starts[rows],
            "negdurs": self.negdurs[rows],
            "ordinals": self.at[rows] + base,
            "lengths": self.body_sizes[rows],
            "kinds": np.zeros(len(rows), np.int8),
        }
        layout = self.reader.layout
        layout.add_entries(origin, thread, Block(ENTRY_SCHEMA, cols, bodies))
        for tag, on in ((DEVICE_COMPUTE, self.compute), (DEVICE_COMM, self.comm)):
            if on is not None:
                picked = rows[on[rows]]
                starts = self.starts[picked]
                layout.mark_device(tag, origin, thread, starts, starts - self.negdurs[picked])
        if self.names is not None:
            active = rows[self.names[rows] != None]  # noqa: E711 (element-wise)
            layout.tally_rows(origin, thread, self.names[active].tolist(), self.starts[active], -self.negdurs[active])
        if self.watched is not None:
            for row in rows[self.watched[rows]].tolist():
                length = -int(self.negdurs[row])
                layout.note(self.xs[row].name, origin, thread, int(self.starts[row]), length)


def _activity_names(xs: list, compute: np.ndarray | None, comm: np.ndarray | None) -> np.ndarray | None:
    """Per row, the name of a kernel, copy, set or collective's device work, for the busiest
    kernels (None for the other rows; None when the batch holds none)."""
    active = compute if comm is None else comm if compute is None else compute | comm
    if active is None:  # neither
        return None
    names = np.full(len(xs), None, object)
    rows = np.flatnonzero(active)
    names[rows] = [as_text(xs[row].name) for row in rows.tolist()]
    return names


def _prefixes(
    reader: BatchReader, batch: list, phs: list, pairs: list[tuple], at: np.ndarray
) -> tuple[list, np.ndarray | None]:
    """Each complete event's encoded name and category (``pairs``: theirs, at batch positions
    ``at``), and per row whether its name is watched as clock or phase evidence (None: no row
    is); names not seen before are interned in file order."""
    n = len(pairs)
    layout = reader.layout
    prefixes = list(map(layout.prefixes.get, pairs))
    watched: np.ndarray | None = None  # rows named as clock or phase evidence: noted when emitted
    if None in prefixes:  # pairs met for the first time, or watched ones (cached apart)
        missing = _none_at(prefixes, n)
        _intern_in_order(reader, batch, phs, at[missing])
        plain, evidence = layout.prefixes, layout.watched_prefixes
        watched = np.zeros(n, bool)
        for row in np.flatnonzero(missing).tolist():
            found = evidence.get(pairs[row])
            if found is None:
                found = plain[pairs[row]]
            else:
                watched[row] = True
            prefixes[row] = found
    return prefixes, watched


def _odd_rows(xs: list, starts: np.ndarray, lengths: np.ndarray, bind_ids: bool) -> np.ndarray:
    """The complete events left to the per-event path: times with more decimals than ns, a negative
    duration, or a flow (v2) bound to the slice."""
    odd = (starts == INEXACT) | (lengths == INEXACT) | (lengths < 0)
    if bind_ids:
        binds = [e.bind_id for e in xs]
        if binds.count(None) != len(xs):
            odd |= ~_none_at(binds, len(xs))
    return odd


def _intern_in_order(reader: BatchReader, batch: list, phs: list, missing: np.ndarray) -> None:
    """Interns the names of the batch's slices not seen before (at ``missing``) and of its
    instants, in file order: the order the per-event path interns them in, whatever the batches."""
    layout = reader.layout
    plain, evidence, prefix = layout.prefixes, layout.watched_prefixes, layout.prefix
    instants = []
    if any(map(phs.__contains__, _INSTANTS)):
        instants = [n for n, ph in enumerate(phs) if ph in _INSTANTS]
    for n in sorted([*missing.tolist(), *instants]):
        e = batch[n]
        if (e.name, e.cat) not in plain and (e.name, e.cat) not in evidence:
            prefix(e.name, e.cat)


class _Points(_Rows):
    """The batch's flow points with integer ids."""

    def __init__(self, reader: BatchReader, batch: list, phs: list) -> None:
        self.reader = reader
        flowing = list(map(_FLOW_CODES.__contains__, phs))
        fs = list(itertools.compress(batch, flowing))
        at = np.flatnonzero(flowing)
        self.at = at[:0]
        n = len(fs)
        if not n:
            return
        ts = micros_to_ns([e.ts for e in fs], n)
        ids = [e.id for e in fs]
        if ts is None or set(map(type, ids)) != _INTS:
            return
        try:
            fids = np.fromiter(ids, np.int64, n)
        except OverflowError:
            return
        phs = list(itertools.compress(phs, flowing))
        odd = ts == INEXACT
        if odd.any():
            keep = np.flatnonzero(~odd)
            if not len(keep):
                return
            pick = _picker(keep)
            fs, at, ts, fids, phs = list(pick(fs)), at[keep], ts[keep], fids[keep], list(pick(phs))
            n = len(fs)
        keys = reader.layout.point_keys
        pairs = list(map(keys.pairs.get, [(e.cat, e.name) for e in fs]))
        if None in pairs:
            pairs = [keys.pair(e.cat, e.name) for e in fs]
        self.at, self.ts, self.fids = at, ts, fids
        self.pairs = np.array(pairs, np.int32)
        self.phases = np.fromiter(map(_FLOW_CODES.__getitem__, phs), np.int8, n)
        ends = self.phases == 2
        if ends.any():
            loose = np.fromiter(map(eq, [e.bp for e in fs], itertools.repeat("e")), bool, n) == 0
            self.bind_next = (ends & loose).astype(np.int8)
        else:
            self.bind_next = np.zeros(n, np.int8)
        self.threads = reader.thread_indexes([(e.pid, e.tid) for e in fs])

    def emit(self, thread: Any, rows: np.ndarray, base: int, origin: OriginKey) -> None:
        """Some of one thread's rows, in order, their ordinals ``base`` + position."""
        cols = {
            "ts": self.ts[rows],
            "ordinals": self.at[rows] + base,
            "fids": self.fids[rows],
            "pairs": self.pairs[rows],
            "phases": self.phases[rows],
            "bind_next": self.bind_next[rows],
            "fid_kinds": np.zeros(len(rows), np.int8),
        }
        self.reader.layout.points[(origin, thread)].add_block(Block(POINT_SCHEMA, cols))
