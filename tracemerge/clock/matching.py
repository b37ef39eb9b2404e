"""How two files' clocks relate, from the evidence both noted while read (:mod:`tracemerge.evidence.anchors`).

Each pair of matched events gives an anchor: the offset that would put one file's clock on the
other's, with hard bounds for collectives (neither rank ends before the other started).
:func:`estimate` turns a pool of anchors into one offset and how sure it is. Which files to
compare, and in what order, is :mod:`tracemerge.clock`'s business.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import COLLECTIVE, SESSION, SYNC, sync_source

# Matched pairs used per collective kind and pair of files: plenty for a median, spread over the run.
MAX_PAIRS_PER_TAG = 256
# Index shifts tried when two epoch-clock ranks hold different numbers of one collective.
MAX_INDEX_SHIFT = 3


class HasMarks(Protocol):
    @property
    def marks(self) -> dict[Identity, dict[str, list[tuple[int, int]]]]: ...


# A candidate offset of an unplaced group: (value, lo, hi), lo/hi the bounds the offset must
# respect (collectives) or None.
Anchor = tuple[int, int | None, int | None]


class Evidence:
    """The scans' marks by method, and the anchors of each pair of files, each computed once.
    ``presets``: the presets whose sync spans are evidence (those of the others are left aside)."""

    def __init__(self, presets: frozenset[str] = frozenset()) -> None:
        self.presets = presets
        self._marks: dict[tuple[int, str], dict[str, list[tuple[int, int]]]] = {}
        self._pairs: dict[tuple[int, int, str], list[Anchor]] = {}
        self._tried: dict[tuple[int, str], tuple[int, ...]] = {}

    def marks(self, s: HasMarks, method: str) -> dict[str, list[tuple[int, int]]]:
        key = (id(s), method)
        found = self._marks.get(key)
        if found is None:
            found = self._marks[key] = _file_marks(s, method)
            if method == SYNC:  # a preset's sync spans only where the preset applies
                usable = (None, *self.presets)
                found = self._marks[key] = {t: m for t, m in found.items() if sync_source(t)[0] in usable}
        return found

    def anchors(self, a: HasMarks, b: HasMarks, method: str, both_epoch: bool) -> list[Anchor]:
        key = (id(a), id(b), method)
        found = self._pairs.get(key)
        if found is None:
            found = self._pairs[key] = _anchors(self, a, b, method, both_epoch)
        return found

    def shared(self, a: HasMarks, b: HasMarks, method: str) -> list[str]:
        """The tags both files hold marks of (what their anchors pair)."""
        return sorted(self.marks(a, method).keys() & self.marks(b, method).keys())

    def preset_spans_missing(self, scans: Iterable[HasMarks]) -> str:
        """Said of a file left unrelated in a run whose preset's sync spans are evidence: that it
        has none in common with a placed file; empty when the run has none."""
        presets = sorted({p for s in scans for t in self.marks(s, SYNC) if (p := sync_source(t)[0])})
        if not presets:
            return ""
        kinds = " or ".join(_SYNC_SPANS.get(p, f"{p} preset sync") for p in presets)
        return f" (no {kinds} span in common with an aligned file)"

    def new_partners(self, g: object, method: str, partners: list[HasMarks]) -> bool:
        """Whether ``g`` was not yet compared with exactly these partners by ``method``."""
        key, ids = (id(g), method), tuple(id(s) for s in partners)
        if self._tried.get(key) == ids:
            return False
        self._tried[key] = ids
        return True


_PRESET_NAMES = {"areal": "AReaL", "verl": "verl", "skyrl": "SkyRL"}
_SYNC_SPANS = {"areal": "AReaL weight-update"}  # what a preset's sync spans are


def sync_text(tags: Iterable[str]) -> str:
    """The sync spans an estimate paired, and who said they start at one instant:
    ``weight_sync (AReaL preset)``, ``step_begin (--sync)``."""
    by_source: dict[str, list[str]] = {}
    for tag in sorted(tags):
        preset, name = sync_source(tag)
        source = f"{_PRESET_NAMES.get(preset, preset)} preset" if preset else "--sync"
        by_source.setdefault(source, []).append(name)
    return "; ".join(f"{', '.join(names)} ({source})" for source, names in by_source.items())


def _anchors(evidence: Evidence, a: HasMarks, b: HasMarks, method: str, both_epoch: bool) -> list[Anchor]:
    """Offsets that would put ``a`` on ``b``'s clock, one per matched pair of events (at most
    MAX_PAIRS_PER_TAG per tag, spread over the run)."""
    if method == SESSION:
        return _session_anchors(a, b)
    marks_a, marks_b = evidence.marks(a, method), evidence.marks(b, method)
    out: list[Anchor] = []
    for tag in sorted(marks_a.keys() & marks_b.keys()):
        pairs = _matched(marks_a[tag], marks_b[tag], both_epoch)
        if len(pairs) > MAX_PAIRS_PER_TAG:
            step = len(pairs) / MAX_PAIRS_PER_TAG
            pairs = [pairs[int(n * step)] for n in range(MAX_PAIRS_PER_TAG)]
        if method == COLLECTIVE:  # ends meet; neither may end before the other started
            out.extend((y[1] - x[1], y[0] - x[1], y[1] - x[0]) for x, y in pairs)
        else:
            out.extend((y[0] - x[0], None, None) for x, y in pairs)
    return out


def _file_marks(s: HasMarks, method: str) -> dict[str, list[tuple[int, int]]]:
    """Per tag of ``method``, the marks of the file's process that has most of them."""
    out: dict[str, list[tuple[int, int]]] = {}
    for tags in s.marks.values():
        for tag, found in tags.items():
            if tag.startswith(method) and len(found) > len(out.get(tag, ())):
                out[tag] = found
    return out


def _matched(xs: list[tuple[int, int]], ys: list[tuple[int, int]], both_epoch: bool) -> list[tuple]:
    """Pair the k-th event of one file with the k-th of the other. When two epoch clocks (which
    agree to within NTP error) hold different numbers of them (one trace started or stopped a
    collective earlier), the pairing may be shifted by a few: the shift whose pairs allow one
    common offset (every pair's bounds overlap), then whose offsets are nearest zero."""
    if len(xs) == len(ys) or not both_epoch:
        return list(zip(xs, ys, strict=False))
    best: list[tuple] = []
    best_score: tuple | None = None
    need = max(1, min(len(xs), len(ys)) // 2)
    for k in range(-MAX_INDEX_SHIFT, MAX_INDEX_SHIFT + 1):
        pairs = [(xs[i], ys[i + k]) for i in range(max(0, -k), min(len(xs), len(ys) - k))]
        if len(pairs) < need:
            continue
        lo = max(y[0] - x[1] for x, y in pairs)
        hi = min(y[1] - x[0] for x, y in pairs)
        score = (lo > hi, abs(statistics.median_low([y[1] - x[1] for x, y in pairs])), abs(k))
        if best_score is None or score < best_score:
            best, best_score = pairs, score
    return best


def _session_anchors(a: HasMarks, b: HasMarks) -> list[Anchor]:
    """Sessions that one file records (wall clock) and the other names in perf-tracer spans."""
    out: list[Anchor] = []
    for ident in sorted(a.marks.keys() & b.marks.keys(), key=repr):
        times_a, times_b = _session_times(a.marks[ident]), _session_times(b.marks[ident])
        for sid in sorted(times_a.keys() & times_b.keys(), key=repr):
            pair = _session_pair(times_a[sid], times_b[sid])
            if pair is not None:
                out.append((pair[1] - pair[0], None, None))
    return out


def _session_times(tags: dict[str, list[tuple[int, int]]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for tag, found in tags.items():
        if tag.startswith(SESSION + " ") and found:
            _, sid, name = tag.split(" ", 2)
            out[sid][name] = found[0][0]
    return out


def _session_pair(x: dict[str, int], y: dict[str, int]) -> tuple[int, int] | None:
    """(time in x, time in y) of one session: a perf span named after a recorded phase starts
    with that phase; failing that, the session's first span starts when it was submitted."""
    records, spans, flip = (x, y, False) if any(k.startswith("@") for k in x) else (y, x, True)
    if not any(k.startswith("@") for k in records) or all(k.startswith("@") for k in spans):
        return None
    spans = {k: v for k, v in spans.items() if not k.startswith("@")}
    phases = sorted((k[1:] for k in records if k != "@submit"), key=len, reverse=True)
    pair = None
    for name, start in sorted(spans.items()):
        phase = next((p for p in phases if p and p in name), None)
        if phase is not None:
            pair = (records["@" + phase], start)
            break
    if pair is None and "@submit" in records:
        pair = (records["@submit"], min(spans.values()))
    if pair is None:
        return None
    return (pair[1], pair[0]) if flip else pair


def estimate(anchors: list[Anchor]) -> tuple[int, int | None, int] | None:
    """(offset, uncertainty, anchors used): the median after rejecting outliers (3 scaled MADs).
    With bounds (collectives) the uncertainty is three standard errors, never more than the
    distance to the farther bound the fitting anchors allow; without, at least the anchors'
    spread. None when too many anchors' bounds exclude the median: the events matched are not
    the same collectives."""
    values = sorted(a[0] for a in anchors)
    med = statistics.median_low(values)
    mad = statistics.median_low([abs(v - med) for v in values])
    limit = max(3 * 1.4826 * mad, 1000)
    kept = [a for a in anchors if abs(a[0] - med) <= limit]
    kept_values = sorted(a[0] for a in kept)
    offset = statistics.median_low(kept_values)
    n = len(kept)
    if n >= 3:
        spread = 1.4826 * statistics.median_low([abs(v - offset) for v in kept_values])
        uncertainty = math.ceil(3 * spread / math.sqrt(n))
    else:
        uncertainty = max(abs(v - offset) for v in kept_values)
    bounded = [(v, low, high) for v, low, high in kept if low is not None and high is not None]
    if not bounded:
        # Events meant to be simultaneous (a sync span, a session phase) are so only to within
        # their lag, which may be the same for all: as unsure as the pairs disagree.
        uncertainty = max(uncertainty, kept_values[-1] - kept_values[0])
    else:
        # A pair whose bounds exclude the consensus is no common collective (or a late record):
        # a few are dropped; many mean the files' events were not matched at all.
        fitting = [a for a in bounded if a[1] <= offset <= a[2]]
        if len(fitting) < 0.75 * len(bounded):
            return None
        lo, hi = max(a[1] for a in fitting), min(a[2] for a in fitting)
        uncertainty = min(uncertainty, max(offset - lo, hi - offset))
        n -= len(bounded) - len(fitting)
    return offset, uncertainty, n
