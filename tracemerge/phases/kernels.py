"""The busiest kernels and ops of each process: the names that took the most device time.

The reads total each name's device time and count per process (:mod:`tracemerge.evidence.kernel_tally`:
the kernels, copies and sets, the collectives' device work and Ascend's tasks that the breakdown's
compute and communication are made of). Here each process keeps its :data:`TOP` names by total
device time, each with its share of the process's device busy time (the union of its compute and
communication), over its whole profiled time (:func:`busiest`) and in each of its steps
(:func:`busiest_per_step`, from each kernel's start and length). Kernels run at once on several
streams can make the shares add up to more than 100%.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np

from tracemerge.core.model import Identity
from tracemerge.evidence.kernel_tally import KernelTimes
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.phases.device_time import Spans, intersection

TOP = 10  # names kept per process


class Busiest(msgspec.Struct, frozen=True):
    """A process's busiest kernels and ops: (name, total device time in ns, count), the longest
    first; its device busy time and how many names it ran in all."""

    busy_ns: int
    top: list[tuple[str, int, int]]
    names: int


def busiest(
    kernels: dict[Identity, dict[str, tuple[int, int]]],
    units: Mapping[Identity, tuple[Spans, Spans]],
    top: int = TOP,
) -> dict[Identity, Busiest]:
    """Per process with a tally: its ``top`` names by total device time (then by name), and its
    busy time, the length of the union of its compute and communication (``units``)."""
    out = {}
    for ident, names in kernels.items():
        compute, comm = units.get(ident, ([], []))
        busy = _busy(compute, comm)
        ranked = sorted(names.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        out[ident] = Busiest(busy, [(name, total, count) for name, (total, count) in ranked], len(names))
    return out


def _busy(compute: Spans, comm: Spans) -> int:
    """The length of the union of two unions: |C| + |M| - |C ∩ M| from their columns (neither
    copied into a list of tuples nor into one joined union)."""
    return _length(SpanUnion.of(compute)) + _length(SpanUnion.of(comm)) - _length(intersection(compute, comm))


def _length(union: SpanUnion) -> int:
    """How much time the union covers (a chunk at a time when it is on disk)."""
    return sum(int((ends - starts).sum()) for starts, ends in union.chunks())


STEP_TOP = 5  # names kept per process and step
CHUNK = 1 << 20  # kernels taken at once: the passes' columns stay tens of MB whatever the count

# Per (window, name) pair, as columns: key (window * names + name number), time inside, count.
Sums = tuple[np.ndarray, np.ndarray, np.ndarray]


def busiest_per_step(
    times: dict[Identity, list[tuple[KernelTimes, int]]],
    windows: dict[Identity, list[tuple[int, int, int]]],
    busy: dict[Identity, list[int]],
    top: int = STEP_TOP,
) -> dict[Identity, list[tuple[int, Busiest]]]:
    """Per process with kernels and steps, per step window ((step, start, end), in order): its
    ``top`` names by device time in the window (then by name; a kernel running across a window's
    edge counts its part inside; the count is of the kernels with time in the window) and the
    step's device busy time (``busy``, the breakdown's compute and communication, window by
    window). A process's kernels come as columns (one per stream and file), each with the shift
    that puts its starts on the windows' timeline; none is copied whole."""
    out = {}
    for ident, found in windows.items():
        parts = times.get(ident)
        if not found or not parts:
            continue
        names, numbered = _numbered_names([k for k, _ in parts])
        sums = [
            window_sums(kernels, [(lo - shift, hi - shift) for _, lo, hi in found], remap, len(names))
            for (kernels, shift), remap in zip(parts, numbered, strict=True)
        ]
        joined = _reduced(*(np.concatenate(c) for c in zip(*sums, strict=True)))
        per_window = _ranked(joined, names, len(found), top)
        spent = busy.get(ident, [])
        out[ident] = [
            (step, Busiest(spent[w] if w < len(spent) else 0, *per_window.get(w, ([], 0))))
            for w, (step, _, _) in enumerate(found)
        ]
    return out


def _numbered_names(parts: list[KernelTimes]) -> tuple[list[str], list[np.ndarray]]:
    """The names of all ``parts`` in one list, and each part's name numbers in it."""
    names: list[str] = []
    index: dict[str, int] = {}
    numbered = []
    for part in parts:
        numbered.append(np.array([index.setdefault(n, len(index)) for n in part.names], np.int64))
    names.extend(index)  # in the order numbered
    return names, numbered


def window_sums(kernels: KernelTimes, windows: list[tuple[int, int]], remap: np.ndarray, n_names: int) -> Sums:
    """The kernels' time and count in each window (windows in ``kernels``' own times; each name
    numbered by ``remap`` among ``n_names``), a chunk of :data:`CHUNK` kernels at a time (those on
    disk read a chunk at a time). Windows in start order that do not overlap are taken in one
    vectorised pass (a kernel in two windows, rare, one by one); overlapping ones (a step captured
    twice) window by window."""
    lo = np.array([a for a, _ in windows], np.int64)
    hi = np.array([b for _, b in windows], np.int64)
    disjoint = len(windows) < 2 or bool(np.all(lo[1:] >= hi[:-1]) and np.all(hi >= lo))
    found: list[Sums] = []
    for all_starts, all_durs, raw_codes in kernels.chunks():
        all_codes = remap[np.asarray(raw_codes, np.int64)] if len(remap) else np.zeros(0, np.int64)
        for at in range(0, len(all_starts), CHUNK):
            starts, codes = all_starts[at : at + CHUNK], all_codes[at : at + CHUNK]
            ends = starts + all_durs[at : at + CHUNK]
            pieces = _disjoint(starts, ends, lo, hi) if disjoint else _each_window(starts, ends, windows)
            for win, inside, which in pieces:
                found.append(_reduced(win * n_names + codes[which], inside, np.ones(len(which), np.int64)))
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return _reduced(*(np.concatenate(c) for c in zip(*found, strict=True)))


def _disjoint(
    starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Over disjoint windows in start order (``lo``, ``hi``): (window, time inside, kernel row)
    of each kernel with time in a window, as columns."""
    first = np.searchsorted(hi, starts, side="right")  # the first window ending after the start
    last = np.searchsorted(lo, ends, side="left") - 1  # the last window starting before the end
    instant = ends == starts  # a kernel of no length: in the window it starts in
    if instant.any():
        last[instant] = np.searchsorted(lo, starts[instant], side="right") - 1
    which = np.flatnonzero((first == last) & (first < len(lo)))
    w = first[which]
    pieces = [(w, np.minimum(ends[which], hi[w]) - np.maximum(starts[which], lo[w]), which)]
    for k in np.flatnonzero(last > first).tolist():  # across a window's edge, one by one
        span = np.arange(int(first[k]), min(int(last[k]), len(lo) - 1) + 1)
        inside = np.minimum(ends[k], hi[span]) - np.maximum(starts[k], lo[span])
        pieces.append((span, inside, np.full(len(span), k)))
    return pieces


def _each_window(
    starts: np.ndarray, ends: np.ndarray, windows: list[tuple[int, int]]
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`_disjoint` window by window (windows that overlap)."""
    pieces = []
    for win, (a, b) in enumerate(windows):
        inside = np.minimum(ends, b) - np.maximum(starts, a)
        which = np.flatnonzero((inside > 0) | ((inside == 0) & (starts >= a) & (starts < b)))
        pieces.append((np.full(len(which), win), inside[which], which))
    return pieces


def _reduced(keys: np.ndarray, inside: np.ndarray, counts: np.ndarray) -> Sums:
    """The sums per key, keys in order (exact: integer sums, never floats)."""
    if not len(keys):
        return keys.astype(np.int64), inside.astype(np.int64), counts.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, inside, counts = keys[order], inside[order].astype(np.int64), counts[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.add.reduceat(inside, starts), np.add.reduceat(counts, starts)


def _ranked(sums: Sums, names: list[str], n_windows: int, top: int) -> dict[int, tuple[list, int]]:
    """Per window with kernels: its ``top`` names ((name, time, count), the longest first, then by
    name) and how many names it has, ranked in numpy (python touches the kept rows alone)."""
    keys, inside, counts = sums
    if not len(keys):
        return {}
    win, code = np.divmod(keys, len(names))
    by_name = np.empty(len(names), np.int64)
    by_name[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    order = np.lexsort((by_name[code], -inside, win))
    win, code, inside, counts = win[order], code[order], inside[order], counts[order]
    first_of = np.searchsorted(win, win, side="left")
    kept = np.flatnonzero(np.arange(len(win)) - first_of < top)
    per_window = np.bincount(win, minlength=n_windows)
    out: dict[int, tuple[list, int]] = {}
    columns = (win[kept].tolist(), code[kept].tolist(), inside[kept].tolist(), counts[kept].tolist())
    for w, c, t, n in zip(*columns, strict=True):
        if w not in out:
            out[w] = ([], int(per_window[w]))
        out[w][0].append((names[c], t, n))
    return out
