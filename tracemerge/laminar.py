"""Well-nested threads laid out in numpy: the fast path of :meth:`~tracemerge.layout.FileLayout._walk`.

A list of a thread's entries whose slices nest (no instants, no overlaps) is emitted as the
general walk emits it, byte for byte, but with its BEGIN/END order, flow fields and packets built
column-wise; anything else makes :func:`walk_laminar` return None, having emitted nothing. A
thread too large to hold, or one that does not nest throughout, is cut into such lists where
every earlier entry has ended (:func:`closed_stretches`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from tracemerge.flow_targets import slice_times
from tracemerge.flows import ThreadAttachments
from tracemerge.plan import ThreadTrack
from tracemerge.spill import RunStore, SortedBuffer

# Times are summed in int64: threads with times beyond this take the general walk.
_TIME_LIMIT = 1 << 61


def walk_laminar(
    enc: Any,
    items: Iterable[tuple],
    track: ThreadTrack,
    attached: SortedBuffer | ThreadAttachments | None,
    store: RunStore,
    shift: int,
) -> tuple[int, int] | None:
    """What :meth:`~tracemerge.layout.FileLayout._walk` emits for a thread of well-nested slices, in numpy: returns
    (slices, latest time), or None, having emitted nothing, when the thread is anything else
    (instants, overlaps, spilled or filtered entries, times near the int64 limits)."""
    if not isinstance(items, list) or not items or any(map(_kind, items)):
        return None
    if not -_TIME_LIMIT < shift < _TIME_LIMIT:
        return None
    columns, flows = None, ()
    if isinstance(attached, ThreadAttachments):
        if attached.slices is not items:  # bound against another list of the slices: the loop walks it
            return None
        columns = attached
    elif attached is not None:
        if attached.runs:
            return None
        flows = attached.ordered(store)
    times = _slice_times(items, columns)
    if times is None:
        return None
    starts, ends = times
    nested = _nested_order(starts, ends)
    if nested is None or nested[0][0] + shift < 0:  # the general walk's encoder rejects these
        return None
    _, _, tail, end_event = enc.packets(track)
    if columns is not None:
        tails = _tails(enc, tail, len(items), columns.at, columns.ids, columns.phases)
    elif flows:
        tails = _flow_tails(enc, tail, items, flows)
        if tails is None:
            return None
    else:
        tails = [tail] * len(items), np.full(len(items), len(tail), np.int64)
    stamps, begin_slots, is_begin = nested
    stamps += shift
    _add_slices(enc, stamps, begin_slots, ~is_begin, list(map(_body, items)), tails, end_event)
    return len(items), int(ends.max())


def closed_stretches(items: Iterable[tuple], size: int, most: int) -> Iterator[list[tuple] | Iterator[tuple]]:
    """A thread's entries, in order, as lists of at least ``size`` (all but the last), each cut
    before an entry that starts when every entry before it has ended; when ``most`` entries pass
    without such a cut, the rest as one iterator."""
    entries = iter(items)
    held: list[tuple] = []
    while True:
        more = list(itertools.islice(entries, size))
        if not more:
            if held:
                yield held
            return
        held += more
        cut = _last_cut(held)
        if cut:
            yield held[:cut]
            held = held[cut:]
        elif len(held) >= most:
            yield itertools.chain(held, entries)
            return


def _last_cut(entries: list[tuple]) -> int:
    """The last position (0 for none) whose entry starts when every entry before it has ended."""
    try:
        starts, negdurs = slice_times(entries)
    except OverflowError:
        return 0
    reach = np.maximum.accumulate(starts - negdurs)
    cuts = np.flatnonzero(starts[1:] >= reach[:-1])
    return int(cuts[-1]) + 1 if len(cuts) else 0


def _slice_times(items: list[tuple], known: ThreadAttachments | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The starts and ends of a thread's slices (``known`` already holds them); None unless their
    times are well within int64."""
    try:
        starts, negdurs = (known.starts, known.negdurs) if known is not None else slice_times(items)
    except OverflowError:
        return None
    durations = -negdurs
    if durations.min() < 0 or durations.max() >= _TIME_LIMIT:
        return None
    if not -_TIME_LIMIT < starts.min() <= starts.max() < _TIME_LIMIT:
        return None
    return starts, starts + durations


def _add_slices(
    enc: Any,
    stamps: np.ndarray,
    begin_slots: np.ndarray,
    is_end: np.ndarray,
    bodies: list[bytes],
    tails: tuple[list[bytes], np.ndarray],
    end: bytes,
) -> None:
    """Hands the packets over in batches: per slice a BEGIN (its body, then its tail), ``end``
    where ``is_end`` holds."""
    lengths = np.fromiter(map(len, bodies), np.int64, len(bodies)) + tails[1]
    step = enc.batch
    for lo in range(0, len(stamps), step):
        hi = min(lo + step, len(stamps))
        first, last = np.searchsorted(begin_slots, (lo, hi)).tolist()
        begins = b"".join(itertools.chain.from_iterable(zip(bodies[first:last], tails[0][first:last], strict=True)))
        enc.add_slices(stamps[lo:hi], is_end[lo:hi], end, lengths[first:last], begins)


def _nested_order(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The timestamps of a thread's BEGINs and ENDs in the walk's order, where its BEGINs are in
    it and which are; None when the slices are not well nested (the walk would open a lane).

    An END goes just before the first later BEGIN at or after it (or at the end), ENDs that go
    to one place innermost first. That order is the walk's exactly when it is well nested: time
    never goes back and each END closes the slice opened last.
    """
    n = len(starts)
    at = np.maximum(np.arange(1, n + 1), np.searchsorted(starts, ends, "left"))
    end_order = (n - 1) - np.argsort(at[::-1], kind="stable")
    begin_slots = np.arange(n) + np.cumsum(np.bincount(at, minlength=n + 1))[:n]
    is_begin = np.zeros(2 * n, bool)
    is_begin[begin_slots] = True
    end_slots = np.flatnonzero(~is_begin)
    stamps = np.empty(2 * n, np.int64)
    stamps[begin_slots] = starts
    stamps[end_slots] = ends[end_order]
    if (stamps[1:] < stamps[:-1]).any():
        return None
    depth = np.cumsum(is_begin.astype(np.int64) * 2 - 1)
    if (depth[end_slots] + 1 != depth[begin_slots][end_order]).any():
        return None
    return stamps, begin_slots, is_begin


def _flow_tails(
    enc: Any, tail: bytes, items: list[tuple], attached: list[tuple] | SortedBuffer
) -> tuple[list[bytes], np.ndarray] | None:
    """:func:`_tails` of attachment tuples; None when one is not for one of ``items`` or out of their order."""
    n = len(items)
    ordinals = np.fromiter(map(_ordinal, items), np.int64, n)
    try:
        wanted = np.fromiter(map(_ordinal, attached), np.int64, len(attached))
        ids = np.fromiter(map(_flow_id, attached), np.uint64, len(attached))
    except OverflowError:
        return None
    sorter = np.argsort(ordinals)
    at = sorter[np.minimum(np.searchsorted(ordinals, wanted, sorter=sorter), n - 1)]
    if (ordinals[at] != wanted).any() or (at[1:] < at[:-1]).any():
        return None
    return _tails(enc, tail, n, at, ids, np.fromiter(map(_flow_phase, attached), np.int64, len(attached)))


def _tails(
    enc: Any, tail: bytes, n: int, at: np.ndarray, ids: np.ndarray, phases: np.ndarray
) -> tuple[list[bytes], np.ndarray]:
    """Per slice of ``n``, what follows its body in its BEGIN (``tail`` and the fields of its
    flows) and its length; flow ``i`` is on slice ``at[i]`` (``at`` in order)."""
    if not len(at):
        return [tail] * n, np.full(n, len(tail), np.int64)
    fields = enc.flow_field_run(ids, phases)
    size = enc.flow_field_size
    firsts = np.flatnonzero(np.r_[True, at[1:] != at[:-1]])
    bounds = zip((firsts * size).tolist(), (np.r_[firsts[1:], len(at)] * size).tolist(), strict=True)
    tails = np.full(n, tail, object)
    tails[at[firsts]] = [tail + fields[lo:hi] for lo, hi in bounds]
    return tails.tolist(), len(tail) + size * np.bincount(at, minlength=n)


_kind, _ordinal, _body = itemgetter(2), itemgetter(3), itemgetter(4)
_flow_id, _flow_phase = itemgetter(4), itemgetter(5)
