"""From what each file holds to the plan that encodes it: processes, tracks, ids and time shift.

:func:`scan` summarises one file's :class:`~tracemerge.model.SourceData`; :func:`make_plan`
takes all summaries and fixes the merged trace's layout. Each file then gets a small
:class:`UnitPlan`, which is all its encode step needs: no other state is shared, so files can be
encoded in any order, in worker processes or on other machines, and their outputs concatenated.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tracemerge.clock import Alignment, AlignOptions, align
from tracemerge.clock.unaligned import title, unaligned
from tracemerge.layouts import COORDINATE_ORDER, PathFacts, role_sort_key
from tracemerge.model import ClockDomain, Identity, OriginKey, SourceData, ThreadInfo, ThreadKey
from tracemerge.report import EventCounts
from tracemerge.stats import Losses
from tracemerge.thread_ids import listing_order, thread_ids


def stable_id(*parts: object) -> int:
    """A 63-bit id that depends only on ``parts`` (same input, same id, on any machine)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


@dataclass
class FileScan:
    """What one file holds, in the terms the plan needs; gathered while the file is encoded."""

    path: Path
    format: str
    clock: ClockDomain
    sequence_id: int
    origin_ns: int  # added to the file's own timestamps to give its clock's time (Kineto's base time)
    identities: dict[OriginKey, Identity]
    counts: dict[Identity, EventCounts]
    threads: dict[Identity, dict[ThreadKey, ThreadInfo]]
    # (thread key, series name) -> the name of the source process it came from ("" for the main one)
    counter_series: dict[Identity, dict[tuple[ThreadKey, str], str]]
    ts_min: int | None  # origin_ns included
    ts_max: int | None
    local_min: int | None = None  # the file's own timestamps, before origin_ns
    dropped: Losses = field(default_factory=Losses)
    metadata_records: int = 0
    # From encoding: what was written, the overlap lanes opened, and the salt the tracks used.
    written: dict[Identity, EventCounts] = field(default_factory=dict)
    lanes: list[ThreadTrack] = field(default_factory=list)
    moved_to_lanes: int = 0
    reversed_flows: int = 0
    salts: dict[Identity, str] = field(default_factory=dict)
    filtered: Counter[str] = field(default_factory=Counter)  # left out on request
    # Clock evidence (see tracemerge.anchors): per process and tag, (start, end) on the file's
    # clock (origin_ns included), in time order; the host that wrote the file; its mtime.
    marks: dict[Identity, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)
    host: str | None = None
    mtime_ns: int | None = None
    facts: PathFacts = field(default_factory=PathFacts)  # what the file's path says (tracemerge.layouts)
    series_descriptions: dict[str, str] = field(default_factory=dict)  # counter title -> full name


@dataclass(frozen=True)
class ProcessTrack:
    identity: Identity
    uuid: int
    pid: int
    name: str
    order: int
    # What the process's file names say of its place in the job ("tp 0", "dp 1", "replica 3"):
    # Perfetto's process labels, Chrome JSON's process_labels.
    labels: tuple[str, ...] = ()

    @property
    def is_group(self) -> bool:
        """A group of derived tracks (Pipeline), not a process of the job."""
        return is_first(self.identity)


@dataclass(frozen=True)
class ThreadTrack:
    """A thread (or device stream) track; ``lane`` > 0 marks an overlap lane beside thread ``parent``.

    ``as_thread``: `.pftrace` writes it as a thread of its process (pid, ``tid``), else as a track
    of its process titled by its name alone (:mod:`tracemerge.thread_ids` says which and why).
    """

    uuid: int
    pid: int
    tid: int
    name: str
    order: int
    process_uuid: int
    lane: int = 0
    parent_uuid: int = 0
    as_thread: bool = False


@dataclass(frozen=True)
class CounterTrack:
    uuid: int
    pid: int
    name: str
    process_uuid: int
    # Chrome JSON names a counter "<name> <arg key>"; these rebuild ``name`` that way.
    json_name: str
    json_key: str
    description: str = ""  # the series's full name, where its title is short


CLOCK_NOTE = "clock alignment"
SUMMARY_NOTE = "phase summary"  # an instant on the Pipeline group whose arg "summary" holds the numbers


@dataclass(frozen=True)
class ClockNote:
    """How a file was placed, shown in the trace: an instant on its process at its first event."""

    process_uuid: int
    pid: int
    ts: int  # trace time (ns after the trace's zero)
    args: dict[str, str | int]


@dataclass(frozen=True)
class UnitPlan:
    """All that encoding one file needs."""

    path: Path
    format: str
    sequence_id: int
    shift_ns: int  # added to the file's own timestamps: origin plus clock offset minus the time base
    flow_id_base: int
    identities: dict[OriginKey, Identity]
    threads: dict[tuple[Identity, ThreadKey], ThreadTrack]
    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack]
    salts: dict[Identity, str] = field(default_factory=dict)


def flow_id_base(sequence_id: int) -> int:
    """Flow ids of a file's sequence: unique across the trace without knowing the other files."""
    return sequence_id << 32


@dataclass
class MergePlan:
    units: list[UnitPlan]
    processes: list[ProcessTrack]
    threads: list[ThreadTrack]
    counters: list[CounterTrack]
    base_ns: int
    wall_clock: bool  # whether base_ns is a Unix-epoch time
    offsets: dict[Path, int]
    alignment: Alignment
    clock_notes: list[ClockNote] = field(default_factory=list)
    phase_summary: dict = field(default_factory=dict)  # tracemerge.phases.step_summary.summary(), kept in the trace


def resolve_identity(origin: OriginKey, data: SourceData, facts: PathFacts) -> Identity:
    """Who wrote an event: the event's own role/rank first; then what the file says of itself,
    then its path, except where a framework's naming convention says the name wins (an engine
    trace holds its engine-local rank; the name its global rank or replica). Metric series say it
    all themselves: their origin's third part is the tag of a process without a rank (the path
    of a file of many engines' metrics says nothing of any one)."""
    if len(origin) > 2:
        return Identity(origin[0] or "", origin[1], "" if origin[1] is not None else origin[2])
    label = None
    if facts.names_win:
        role = origin[0] or facts.role or data.role_hint or ""
        rank = origin[1] if origin[1] is not None else facts.rank
        label = facts.label
        if rank is None and facts.file_rank_label is not None and data.rank_hint is not None:
            label = facts.file_rank_label.format(data.rank_hint)
        if rank is None and label is None:
            rank = data.rank_hint
    else:
        role = origin[0] or data.role_hint or facts.role or ""
        rank = next((r for r in (origin[1], data.rank_hint, facts.rank) if r is not None), None)
    tag = "" if rank is not None else (label or data.tag_hint or data.path.name)
    return Identity(role, rank, tag)


# Track uuids are hashes of what the track is, so that a file can be encoded before the plan
# exists. Every event names its track, so their size counts: 35 bits make 5-byte varints (63 bits
# make 9). A plan whose uuids collide is made again with 63-bit ones (IdCollision).
NARROW_ID_BITS = 35


class IdCollision(Exception):
    """Two tracks of the merged trace hashed to one narrow uuid."""


def track_id(wide: bool, *parts: object) -> int:
    uuid = stable_id(*parts)
    return uuid if wide else (uuid & ((1 << NARROW_ID_BITS) - 1)) or 1


def process_uuid(ident: Identity, wide: bool = False) -> int:
    return track_id(wide, "process", ident.role, ident.rank, ident.tag)


def thread_uuid(ident: Identity, key: ThreadKey, salt: str = "", wide: bool = False) -> int:
    return track_id(wide, "thread", process_uuid(ident, wide), key, salt)


def counter_uuid(ident: Identity, key: ThreadKey, name: str, wide: bool = False) -> int:
    return track_id(wide, "counter", process_uuid(ident, wide), key, name)


def lane_track(track: ThreadTrack, n: int) -> ThreadTrack:
    """Overlap lane ``n`` beside ``track``."""
    # Chrome JSON has no child tracks, so a lane there is a thread of its own: its tid is drawn
    # from the upper half of the uint32 range, away from the planned tids.
    tid = (1 << 31) | (stable_id("lane-tid", track.uuid, n) & 0x7FFFFFFF)
    return ThreadTrack(
        uuid=track_id(track.uuid >= 1 << NARROW_ID_BITS, "lane", track.uuid, n),
        pid=track.pid,
        tid=tid,
        name=f"{track.name} (overlap {n})",
        order=track.order,
        process_uuid=track.process_uuid,
        lane=n,
        parent_uuid=track.uuid,
    )


class LocalTracks:
    """Track identities a file can compute alone (Perfetto output): uuids derived from content.

    Names, pids and tids are settled later by the plan and written in the descriptors; events
    refer to tracks by uuid only. ``salts`` gives a file its own copy of a process's threads.
    """

    def __init__(self, salts: dict[Identity, str] | None = None, wide: bool = False) -> None:
        self.salts = salts or {}
        self.wide = wide
        self._threads: dict[tuple[Identity, ThreadKey], ThreadTrack] = {}

    def thread(self, ident: Identity, key: ThreadKey) -> ThreadTrack:
        track = self._threads.get((ident, key))
        if track is None:
            uuid = thread_uuid(ident, key, self.salts.get(ident, ""), self.wide)
            process = process_uuid(ident, self.wide)
            track = self._threads[(ident, key)] = ThreadTrack(uuid, 0, 0, "", 0, process)
        return track

    def counter(self, ident: Identity, key: ThreadKey, name: str) -> CounterTrack:
        uuid = counter_uuid(ident, key, name, self.wide)
        return CounterTrack(uuid, 0, name, process_uuid(ident, self.wide), "", "")


class PlannedTracks:
    """Track identities from a :class:`UnitPlan` (Chrome JSON output: pids and tids are needed)."""

    def __init__(self, unit: UnitPlan) -> None:
        self.unit = unit

    def thread(self, ident: Identity, key: ThreadKey) -> ThreadTrack:
        return self.unit.threads[(ident, key)]

    def counter(self, ident: Identity, key: ThreadKey, name: str) -> CounterTrack:
        return self.unit.counters[(ident, key, name)]


# The derived Pipeline group (tracemerge.phases.PIPELINE) comes before every process.
FIRST_TAG = "Pipeline"


def is_first(ident: Identity) -> bool:
    return not ident.role and ident.rank is None and ident.tag == FIRST_TAG


def identity_sort_key(ident: Identity) -> tuple:
    if is_first(ident):
        return ((-1,), False, 0, ())
    return (role_sort_key(ident.role), ident.rank is None, ident.rank or 0, natural_key(ident.tag))


def natural_key(text: str) -> tuple:
    """``replica 10`` after ``replica 2``: the numbers in a text compared as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


_DIGITS = re.compile(r"(\d+)")


def make_plan(
    scans: list[FileScan],
    wide: bool = False,
    clocks: AlignOptions | None = None,
    alignment: Alignment | None = None,
) -> MergePlan:
    """Fix pids, track ids, names and time shifts for the whole merged trace.

    ``alignment`` reuses clock offsets already found (scans it does not place keep their clock:
    the derived phase tracks are on the aligned timeline already). Raises :class:`IdCollision`
    when two tracks share a narrow uuid (then encode with ``wide``).
    """
    if alignment is None:
        alignment = align(scans, clocks or AlignOptions(), identity_sort_key)
    offsets, base_ns, wall_clock = alignment.offsets, alignment.base_ns, alignment.wall_clock
    offsets.update({s.path: 0 for s in scans if s.path not in offsets})
    scans = sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + offsets[s.path], str(s.path)))

    identities = sorted({i for s in scans for i in (*s.counts, *s.threads, *s.counter_series)}, key=identity_sort_key)
    coords = process_coords(scans)
    adrift = unaligned(scans, alignment)  # placed without clock evidence: said in their title
    processes = {
        ident: ProcessTrack(
            ident,
            process_uuid(ident, wide),
            n + 1,
            title(ident, ident in adrift),
            n,
            tuple(f"{k} {v}" for k, v in coords[ident]),
        )
        for n, ident in enumerate(identities)
    }

    # Files of one process that overlap in time and share a thread get their own copy of it.
    salts = _overlap_salts(scans, offsets)

    thread_infos: dict[Identity, dict[tuple[ThreadKey, str], ThreadInfo]] = defaultdict(dict)
    for s in scans:
        for ident, threads in s.threads.items():
            for key, info in threads.items():
                salt = salts.get((s.path, ident), "")
                name = f"{info.name} ({salt})" if salt else info.name
                thread_infos[ident].setdefault((key, salt), ThreadInfo(name, info.sort_key))

    threads: dict[tuple[Identity, ThreadKey, str], ThreadTrack] = {}
    for ident in identities:
        proc = processes[ident]
        ordered = _sorted_threads(thread_infos[ident])
        ordered = [ordered[n] for n in listing_order([(k, i.name, i.sort_key) for (k, _), i in ordered])]
        ids = thread_ids(proc.pid, [(key, info.name) for (key, _), info in ordered], proc.is_group)
        for n, (((key, salt), info), (tid, as_thread)) in enumerate(zip(ordered, ids, strict=True)):
            uuid = thread_uuid(ident, key, salt, wide)
            threads[(ident, key, salt)] = ThreadTrack(uuid, proc.pid, tid, info.name, n, proc.uuid, as_thread=as_thread)

    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack] = {}
    for s in scans:
        for ident, series in s.counter_series.items():
            proc = processes[ident]
            # Series come from sets: sorted, so that the descriptors' order is the same every run
            # (a key holding None hashes by address).
            for (key, name), prefix in sorted(series.items(), key=lambda kv: (repr(kv[0][0]), kv[0][1])):
                if (ident, key, name) not in counters:
                    json_name, _, json_key = name.rpartition(" ")
                    # A series named after its source already says where it comes from.
                    prefix = "" if name.startswith(prefix) else prefix
                    full = f"{prefix}: {name}" if prefix else name
                    counters[(ident, key, name)] = CounterTrack(
                        counter_uuid(ident, key, name, wide),
                        proc.pid,
                        full,
                        proc.uuid,
                        f"{prefix}: {json_name}" if prefix else json_name,
                        json_key,
                        s.series_descriptions.get(name, ""),
                    )

    units = []
    for s in scans:
        unit_threads = {
            (ident, key): threads[(ident, key, salts.get((s.path, ident), ""))]
            for ident, ts in s.threads.items()
            for key in ts
        }
        unit_counters = {
            (ident, key, name): counters[(ident, key, name)]
            for ident, series in s.counter_series.items()
            for key, name in series
        }
        units.append(
            UnitPlan(
                path=s.path,
                format=s.format,
                sequence_id=s.sequence_id,
                shift_ns=s.origin_ns + offsets[s.path] - base_ns,
                flow_id_base=flow_id_base(s.sequence_id),
                identities=s.identities,
                threads=unit_threads,
                counters=unit_counters,
                salts={ident: salt for (path, ident), salt in salts.items() if path == s.path},
            )
        )
    planned = {t.uuid: t for t in threads.values()}
    lanes = _planned_lanes(scans, threads, salts, wide)
    uuids = [p.uuid for p in processes.values()] + list(planned) + [c.uuid for c in counters.values()]
    uuids += lanes.values()
    if len(set(uuids)) < len(uuids) or len(planned) < len(threads):
        raise IdCollision("two tracks share a uuid")
    notes = []
    for s in scans:
        placed = alignment.sources.get(s.path)
        if placed is None or s.ts_min is None:
            continue
        args = {k: v if v is not None else "unknown" for k, v in placed.as_dict().items() if v != ""}
        args["file"] = s.path.name
        for ident in sorted({*s.counts, *s.threads, *s.counter_series}, key=identity_sort_key):
            proc = processes[ident]
            notes.append(ClockNote(proc.uuid, proc.pid, s.ts_min + offsets[s.path] - base_ns, args))
    return MergePlan(
        units=units,
        processes=list(processes.values()),
        threads=sorted(threads.values(), key=lambda t: (t.pid, t.order)),
        counters=list(counters.values()),
        base_ns=base_ns,
        wall_clock=wall_clock,
        offsets=offsets,
        alignment=alignment,
        clock_notes=notes,
    )


def _planned_lanes(
    scans: list[FileScan],
    threads: dict[tuple[Identity, ThreadKey, str], ThreadTrack],
    salts: dict[tuple[Path, Identity], str],
    wide: bool,
) -> dict[tuple[int, int], int]:
    """The uuid of every overlap lane the files opened, by (planned thread, lane number).

    A file's lanes were opened beside the threads it was encoded with: a file the plan gives a
    salt now (it overlaps another file of its process) opened them beside the unsalted threads it
    shares with that file, and is encoded again, its lanes beside its own copies. Each lane is
    therefore taken beside the planned thread of its file. Files of one process apart in time
    share a thread and may open the same lane of it: one track, counted once.
    """
    lanes: dict[tuple[int, int], int] = {}
    for s in scans:
        if not s.lanes:
            continue
        parent_of: dict[int, ThreadTrack] = {}
        for ident, keys in s.threads.items():
            encoded, plan_salt = s.salts.get(ident, ""), salts.get((s.path, ident), "")
            for key in keys:
                parent_of[thread_uuid(ident, key, encoded, wide)] = threads[(ident, key, plan_salt)]
        for lane in s.lanes:
            parent = parent_of.get(lane.parent_uuid)
            if parent is not None and (parent.uuid, lane.lane) not in lanes:
                lanes[(parent.uuid, lane.lane)] = lane_track(parent, lane.lane).uuid
    return lanes


def process_coords(scans: list[FileScan]) -> dict[Identity, tuple[tuple[str, int], ...]]:
    """Per process, the parallel coordinates its files' names give (the first file's value of each
    wins; a replica's frontend file carries its GPU's)."""
    found: dict[Identity, dict[str, int]] = defaultdict(dict)
    for s in scans:
        for ident in (*s.counts, *s.threads, *s.counter_series):
            for key, value in s.facts.coords:
                found[ident].setdefault(key, value)
    shown = {key: n for n, key in enumerate(COORDINATE_ORDER)}
    return defaultdict(
        tuple,
        {ident: tuple(sorted(values.items(), key=lambda kv: shown.get(kv[0], 99))) for ident, values in found.items()},
    )


def _sorted_threads(infos: dict[tuple[ThreadKey, str], ThreadInfo]) -> list:
    items = list(infos.items())
    try:
        return sorted(items, key=lambda kv: (kv[1].sort_key, kv[0][1], kv[1].name, repr(kv[0][0])))
    except TypeError:  # sort keys from different formats need not compare
        return sorted(items, key=lambda kv: (repr(kv[1].sort_key), kv[0][1], kv[1].name, repr(kv[0][0])))


def _overlap_salts(scans: list[FileScan], offsets: dict[Path, int]) -> dict[tuple[Path, Identity], str]:
    """Per (file, process) whose threads overlap another file's, a salt for its track ids: the
    file's path below the inputs' common folder (the same run elsewhere gives the same bytes)."""
    salts: dict[tuple[Path, Identity], str] = {}
    try:
        root = os.path.commonpath([str(s.path.parent) for s in scans]) if scans else ""
    except ValueError:  # paths on different drives
        root = ""
    seen: dict[Identity, list[tuple[int, int, set]]] = defaultdict(list)
    for s in scans:
        if s.ts_min is None or s.ts_max is None:
            continue
        lo, hi = s.ts_min + offsets[s.path], s.ts_max + offsets[s.path]
        for ident, threads in s.threads.items():
            keys = set(threads)
            clash = any(lo < p_hi and p_lo < hi and keys & p_keys for p_lo, p_hi, p_keys in seen[ident])
            if clash:
                salts[(s.path, ident)] = os.path.relpath(s.path, root) if root else str(s.path)
            seen[ident].append((lo, hi, keys))
    return salts
