"""Clock alignment: every file's timestamps on one timeline, and how sure that is.

Files that share a clock form a group: the epoch-clock files of one host (ranks on one host share
one offset), or a single file (a per-process ``perf_counter`` origin, an epoch file whose host is
not known). One epoch group is the reference (the one holding the first process in role/rank
order); the others are placed against what is already placed, from the evidence noted while the
files were read (:mod:`tracemerge.evidence.anchors`), best method first:

* ``collectives``: the k-th collective of a kind ends at one instant on every rank that takes
  part. Each matched pair gives an offset (end against end) and a hard bound (neither rank can
  end before the other started); the offset is the median of the pairs left after outliers are
  rejected, clamped into the bounds all of them allow;
* ``sync``: the k-th ``--sync NAME`` span starts at one instant in every process that has it;
  so does a preset's own (AReaL's weight updates, :data:`tracemerge.phases.rules.AREAL`) in a run
  whose phases are that preset's;
* ``session``: AReaL session records (wall clock) and the perf-tracer spans of the same sessions.

A group with no evidence keeps its own clock if that is epoch time (``exact``, to within the
hosts' NTP error); a file with no anchor at all is placed by its modification time, taken as the
time of its last event (``mtime``, low confidence), when that lands near the rest of the run;
otherwise it is put at the run start and reported as ``unrelated``. ``--offset`` rules place
files by hand (``manual``). Every file gets a :class:`SourceClock` saying how it was placed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.clock.matching import Anchor, Evidence, estimate, sync_text
from tracemerge.clock.offsets import ManualOffset, rule_for
from tracemerge.clock.pinned import place_pinned
from tracemerge.clock.placement import Alignment, AlignOptions, HasClock, SourceClock
from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import COLLECTIVE, SESSION, SYNC, sync_presets

# Fewest matched collectives that place a clock (sync and session anchors: one is evidence).
MIN_COLLECTIVES = 3
# How many placed files an unplaced group is compared with (the earliest placed first).
MAX_PARTNERS = 8
# Anchors one estimate uses at most (pooled over the files of a group and its partners).
MAX_POOL = 4096
# Epoch clocks of two hosts disagree by NTP error; evidence for more than this matched events of
# different runs, not one collective seen from two hosts.
MAX_EPOCH_SKEW_NS = 10 * 10**9
# A file placed by its modification time must land within this much of the run's other files.
MTIME_SLACK_NS = 3600 * 10**9
# Methods in order of preference: a session record is the process's own wall-clock reading.
EVIDENCE = (COLLECTIVE, SESSION, SYNC)


class _Group(msgspec.Struct):
    key: tuple
    label: str
    scans: list
    anchored: bool
    offset: int | None = None
    uncertainty: int | None = None

    @property
    def shown(self) -> str:
        """How the reports name it: ``host node-a``; a file with its folder (AReaL's files are
        named by rank alone, in a folder per role)."""
        if self.key[0] == "host":
            return self.label
        path = self.scans[0].path
        return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def align(scans: Sequence[HasClock], options: AlignOptions, order: Callable[[Identity], tuple]) -> Alignment:
    """Place every file; ``order`` sorts processes (the first one's host is the reference)."""
    sources: dict[Path, SourceClock] = {}
    usable = [s for s in scans if s.ts_min is not None]
    if not options.enabled:
        for s in usable:
            sources[s.path] = SourceClock(s.path, s.clock.name, "raw", 0, None, 0, "--no-align", "none")
        return _finish(usable, sources, all(s.clock.anchored for s in usable))

    pins = {pin.path: pin for pin in options.pinned}
    # Files placed by their manifest alone, after the rest; when every file is (a ring of pins),
    # the first by name is placed as if it were not.
    held = sorted((s for s in usable if s.path in pins), key=lambda s: str(s.path))
    held = held[1:] if len(held) == len(usable) else held
    free = {s.path for s in usable} - {s.path for s in held}
    groups = _groups([s for s in usable if s.path in free], options)
    placed: list[_Group] = []
    reference = _place_reference_and_manual(groups, placed, sources, order)
    # Epoch clocks first, from evidence between epoch clocks only: an epoch clock is an anchor of
    # its own, better than a chain through files that have none.
    evidence = Evidence(sync_presets(((i, t) for s in usable for i, t in s.marks.items()), options.presets))
    _place_epoch_clocks(evidence, [g for g in groups if g.anchored], placed, sources, order)
    _refine(evidence, placed, sources)
    _place_by_evidence(evidence, groups, placed, sources, EVIDENCE)
    _refine(evidence, placed, sources)
    rest = [g for g in groups if g.offset is None]
    wall_clock = reference.anchored or _anchor_by_mtime(reference, placed, sources)
    unrelated = "nothing relates it to the other files" + evidence.preset_spans_missing(usable)
    _place_the_rest(rest, placed, sources, unrelated)
    place_pinned(held, pins, {s.path: s for s in usable}, sources)
    return _finish(usable, sources, wall_clock)


def _place_reference_and_manual(
    groups: list[_Group], placed: list[_Group], sources: dict[Path, SourceClock], order: Callable[[Identity], tuple]
) -> _Group:
    """The reference group placed at 0, and the groups ``--offset`` rules place; the reference."""
    anchored = [g for g in groups if g.anchored and g.key[0] != "manual"]
    candidates = anchored or [g for g in groups if g.key[0] != "manual"] or groups
    reference = min(candidates, key=lambda g: _reference_rank(g, order))
    _place(reference, 0, 0, placed, sources, "reference", 0, "its own clock", "exact")
    run_lo = min((s.ts_min for g in anchored for s in g.scans), default=None)
    for g in groups:
        if g.key[0] == "manual":
            rule: ManualOffset = g.key[2]
            if g is reference:
                placed.remove(g)
            start = 0 if g.anchored or run_lo is None else run_lo - g.scans[0].ts_min
            _place(g, start + rule.ns, 0, placed, sources, "manual", 0, f"--offset {rule.text()}", "manual")
    return reference


def _place_epoch_clocks(
    evidence: Evidence,
    epoch: list[_Group],
    placed: list[_Group],
    sources: dict[Path, SourceClock],
    order: Callable[[Identity], tuple],
) -> None:
    """Every epoch clock: by collectives and sync spans between epoch clocks, else its own time."""
    for g in epoch:  # nothing can relate a clock without evidence: it keeps its own
        if g.offset is None and not any(evidence.marks(s, m) for s in g.scans for m in (COLLECTIVE, SYNC)):
            _place(g, 0, None, placed, sources, "exact", 0, "its own clock (hosts agree to NTP accuracy)", "exact")
    while True:
        _place_by_evidence(evidence, epoch, placed, sources, (COLLECTIVE, SYNC))
        unplaced = [g for g in epoch if g.offset is None]
        if not unplaced:
            break
        # An epoch clock that nothing placed keeps its time, trusted to NTP accuracy; one at a
        # time, so that the clocks related to it are then placed against it.
        g = min(unplaced, key=lambda g: _reference_rank(g, order))
        _place(g, 0, None, placed, sources, "exact", 0, "its own clock (hosts agree to NTP accuracy)", "exact")


def _anchor_by_mtime(reference: _Group, placed: list[_Group], sources: dict[Path, SourceClock]) -> bool:
    """No epoch clock anywhere: the reference's modification time anchors the whole run (True
    when it could)."""
    shift = _mtime_offset(reference)
    if shift is None:
        return False
    for g in placed:
        g.offset = (g.offset or 0) + shift
        for s in g.scans:
            sources[s.path] = replace(sources[s.path], offset_ns=sources[s.path].offset_ns + shift)
    for s in reference.scans:
        sources[s.path] = replace(
            sources[s.path],
            method="mtime",
            uncertainty_ns=None,
            against="file modification time = its last event",
            confidence="low",
            note="no file in the run has a wall clock; the others are placed against this one",
        )
    return True


def _place_the_rest(rest: list[_Group], placed: list[_Group], sources: dict[Path, SourceClock], unrelated: str) -> None:
    """Groups no evidence placed: by their modification time when it falls near the run, else
    their first event at the run start (``unrelated`` says why)."""
    lo, hi = _placed_range(placed)
    for g in rest:
        shift = _mtime_offset(g)
        s0 = g.scans[0]
        # lo and hi are None together (nothing placed yet); without a shift the file is not near
        near = shift is not None and (
            lo is None
            or hi is None
            or (s0.ts_min + shift < hi + MTIME_SLACK_NS and s0.ts_max + shift > lo - MTIME_SLACK_NS)
        )
        if shift is not None and near:
            _place(g, shift, None, placed, sources, "mtime", 0, "file modification time = its last event", "low")
            continue
        start = lo if lo is not None else 0
        g.offset = start - min(s.ts_min for s in g.scans)
        for s in g.scans:
            sources[s.path] = SourceClock(
                s.path,
                s.clock.name,
                "unrelated",
                g.offset,
                None,
                0,
                unrelated,
                "none",
                "first event placed at the run start",
            )


def _finish(scans: list[HasClock], sources: dict[Path, SourceClock], wall_clock: bool) -> Alignment:
    offsets = {s.path: sources[s.path].offset_ns for s in scans}
    placed = [s.ts_min + offsets[s.path] for s in scans]
    base = min(placed) if placed else 0
    return Alignment(offsets, base, wall_clock, sources)


def _groups(scans: list[HasClock], options: AlignOptions) -> list[_Group]:
    by_key: dict[tuple, _Group] = {}
    for s in sorted(scans, key=lambda s: str(s.path)):
        rule = rule_for(s.identities.values(), options.offsets)
        if rule is not None:
            key: tuple = ("manual", str(s.path), rule)
            label = s.path.name
        elif s.clock.anchored and s.host:
            key, label = ("host", s.host), f"host {s.host}"
        else:
            key, label = ("file", str(s.path)), s.path.name
        group = by_key.get(key)
        if group is None:
            group = by_key[key] = _Group(key, label, [], s.clock.anchored)
        group.scans.append(s)
    return list(by_key.values())


def _reference_rank(g: _Group, order: Callable[[Identity], tuple]) -> tuple:
    """Groups that can anchor others come first: those with collectives, then the largest, then
    the one holding the first process in role/rank order."""
    collectives = any(tag.startswith(COLLECTIVE) for s in g.scans for tags in s.marks.values() for tag in tags)
    idents = {i for s in g.scans for i in s.identities.values()}
    keys = [order(i) for i in idents]
    return (not collectives, -len(idents), min(keys) if keys else (), g.label)


def _place(
    g: _Group,
    offset: int,
    uncertainty: int | None,
    placed: list[_Group],
    sources: dict[Path, SourceClock],
    method: str,
    anchors: int,
    against: str,
    confidence: str,
) -> None:
    g.offset, g.uncertainty = offset, uncertainty
    placed.append(g)
    for s in g.scans:
        sources[s.path] = SourceClock(s.path, s.clock.name, method, offset, uncertainty, anchors, against, confidence)


def _place_by_evidence(
    evidence: Evidence,
    groups: list[_Group],
    placed: list[_Group],
    sources: dict[Path, SourceClock],
    methods: tuple[str, ...],
) -> None:
    """Place groups from ``methods``' evidence (best first) until nothing more can be placed."""
    progress = True
    while progress:
        progress = False
        partner_group = {id(s): g for g in placed for s in g.scans}
        for method in methods:
            with_marks = [s for g in placed for s in g.scans if evidence.marks(s, method)]
            for g in groups:
                if g.offset is not None or not any(evidence.marks(s, method) for s in g.scans):
                    continue
                partners = with_marks[:MAX_PARTNERS]
                if method == SESSION:  # sessions are numbered per process: only its own records
                    mine = {i for s in g.scans for i in s.identities.values()}
                    partners = [s for s in with_marks if mine & set(s.identities.values())]
                if not partners or not evidence.new_partners(g, method, partners):
                    continue
                found = _estimate_against(evidence, g, partners, partner_group, method)
                if found is None:
                    continue
                offset, uncertainty, used, against = found
                confidence = "high" if uncertainty is not None and uncertainty <= 1_000_000 else "medium"
                name = "collectives" if method == COLLECTIVE else method
                _place(g, offset, uncertainty, placed, sources, name, used, against, confidence)
                progress = True
            if progress:
                break  # the better methods first again, now that more is placed


def _refine(evidence: Evidence, placed: list[_Group], sources: dict[Path, SourceClock], rounds: int = 2) -> None:
    """Placed one after the other, a group was compared only with those placed before it. Each
    group placed by collectives or sync spans is estimated again against every other placed group
    (their offsets as they stand): the ranks' individual delays in ending a collective average out."""
    first = {id(g): g.uncertainty for g in placed}  # partners' own uncertainty, before refining
    partner_group = {id(s): o for o in placed for s in o.scans}
    for _ in range(rounds):
        with_marks = {
            kind: [s for o in placed for s in o.scans if evidence.marks(s, kind)] for kind in (COLLECTIVE, SYNC)
        }
        for g in placed:
            method = sources[g.scans[0].path].method
            kind = COLLECTIVE if method == "collectives" else method
            if kind not in (COLLECTIVE, SYNC):
                continue
            mine = {id(s) for s in g.scans}
            others = [s for s in with_marks[kind][: MAX_PARTNERS + len(mine)] if id(s) not in mine][:MAX_PARTNERS]
            found = _estimate_against(evidence, g, others, partner_group, kind, lambda o: first.get(id(o)))
            if found is None:
                continue
            offset, uncertainty, used, against = found
            g.offset, g.uncertainty = offset, uncertainty
            for s in g.scans:
                sources[s.path] = replace(
                    sources[s.path], offset_ns=offset, uncertainty_ns=uncertainty, anchors=used, against=against
                )


def _estimate_against(
    evidence: Evidence,
    g: _Group,
    partners: list[HasClock],
    partner_group: dict[int, _Group],
    method: str,
    uncertainty_of: Callable[[_Group], int | None] = lambda o: o.uncertainty,
) -> tuple[int, int | None, int, str] | None:
    """The offset of ``g`` from its evidence against placed ``partners``; its uncertainty adds
    the partners' own (the median over the partners that gave evidence)."""
    pool: list[Anchor] = []
    inherited: list[int] = []
    against: list[str] = []
    tags: set[str] = set()
    for b in partners:
        pg = partner_group[id(b)]
        for a in g.scans:
            anchors = evidence.anchors(a, b, method, both_epoch=g.anchored and pg.anchored)
            if not anchors:
                continue
            if method == SYNC:
                tags.update(evidence.shared(a, b, method))
            delta = pg.offset or 0
            if method == COLLECTIVE:
                pool.extend((v + delta, lo + delta, hi + delta) for v, lo, hi in anchors)  # type: ignore[operator]
            else:
                pool.extend((v + delta, None, None) for v, _, _ in anchors)
            inherited.append(uncertainty_of(pg) or 0)
            if pg.shown not in against:
                against.append(pg.shown)
    if len(pool) < (MIN_COLLECTIVES if method == COLLECTIVE else 1):
        return None
    if len(pool) > MAX_POOL:  # many files on both sides: an even sample is as good, and bounded
        step = len(pool) / MAX_POOL
        pool = [pool[int(n * step)] for n in range(MAX_POOL)]
    found = estimate(pool)
    if found is None:
        return None
    offset, uncertainty, used = found
    if g.anchored and abs(offset) > MAX_EPOCH_SKEW_NS:
        return None
    worst = statistics.median_high(inherited) if inherited else 0
    partners_text = ", ".join(against[:3]) + (f" (+{len(against) - 3})" if len(against) > 3 else "")
    if tags:
        partners_text = f"{sync_text(tags)} starts in {partners_text}"
    return offset, (uncertainty + worst if uncertainty is not None else None), used, partners_text


def _mtime_offset(g: _Group) -> int | None:
    s = max(g.scans, key=lambda s: s.ts_max or 0)
    if s.mtime_ns is None or s.ts_max is None:
        return None
    return s.mtime_ns - s.ts_max


def _placed_range(placed: list[_Group]) -> tuple[int | None, int | None]:
    starts = [s.ts_min + (g.offset or 0) for g in placed for s in g.scans]
    ends = [(s.ts_max or s.ts_min) + (g.offset or 0) for g in placed for s in g.scans]
    return (min(starts), max(ends)) if starts else (None, None)
