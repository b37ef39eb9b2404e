"""The plan's types: what each file's read summarised (:class:`FileScan`), the merged trace's
processes and tracks, and each file's small :class:`UnitPlan`, with the track ids every stage
agrees on.

:func:`tracemerge.plan.planner.make_plan` takes all summaries and fixes the merged trace's layout. A
:class:`UnitPlan` is all a file's encode step needs: no other state is shared, so files can be
encoded in any order, in worker processes or on other machines, and their outputs concatenated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from pathlib import Path

import msgspec
from msgspec import field

from tracemerge.clock import Alignment
from tracemerge.core.model import GROUP_HEADER, ClockDomain, Identity, OriginKey, SourceData, ThreadInfo, ThreadKey
from tracemerge.core.stats import Losses
from tracemerge.evidence.kernel_tally import KernelTimes
from tracemerge.naming.paths import PathFacts, role_sort_key, worker_from_name
from tracemerge.report.run_report import EventCounts


def stable_id(*parts: object) -> int:
    """A 63-bit id that depends only on ``parts`` (same input, same id, on any machine)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


class FileScan(msgspec.Struct, frozen=True):
    """What one file's read found, in the terms the stages after it need (the clocks, the phases,
    the plan): who is in it, its threads and series, its time range and clock, the evidence it
    noted. What encoding it gave is apart (:class:`tracemerge.plan.encoded.Encoded`)."""

    path: Path
    format: str
    clock: ClockDomain
    sequence_id: int
    origin_ns: int  # added to the file's own timestamps to give its clock's time (Kineto's base time)
    identities: dict[OriginKey, Identity]
    # Events per process as the read laid them out (none when it laid nothing out: Chrome JSON's first read)
    counts: dict[Identity, EventCounts]
    threads: dict[Identity, dict[ThreadKey, ThreadInfo]]
    # (thread key, series name) -> the name of the source process it came from ("" for the main one)
    counter_series: dict[Identity, dict[tuple[ThreadKey, str], str]]
    ts_min: int  # origin_ns included (a scan is made of a file that has events)
    ts_max: int
    local_min: int | None = None  # the file's own timestamps, before origin_ns
    dropped: Losses = field(default_factory=Losses)  # what the read could not keep
    metadata_records: int = 0
    # Clock evidence (see tracemerge.evidence.anchors): per process and tag, (start, end) on the file's
    # clock (origin_ns included), in time order; the host that wrote the file; its mtime.
    marks: dict[Identity, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)
    # Per process, per kernel or op name: its total device time (ns) and count (the busiest kernels).
    kernels: dict[Identity, dict[str, tuple[int, int]]] = field(default_factory=dict)
    # Per process, per stream: each kernel's or op's start (the file's own, before origin_ns) and
    # length, for each step's busiest kernels.
    kernel_times: dict[Identity, list[KernelTimes]] = field(default_factory=dict)
    host: str | None = None
    mtime_ns: int | None = None
    facts: PathFacts = field(default_factory=PathFacts)  # what the file's path says (tracemerge.naming.paths)
    series_descriptions: dict[str, str] = field(default_factory=dict)  # counter title -> full name


class ProcessTrack(msgspec.Struct, frozen=True):
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


class ThreadTrack(msgspec.Struct, frozen=True):
    """A thread (or device stream) track; ``lane`` > 0 marks an overlap lane beside thread ``parent``.

    ``as_thread``: `.pftrace` writes it as a thread of its process (pid, ``tid``), else as a track
    of its process titled by its name alone (:mod:`tracemerge.plan.thread_ids` says which and why).
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


class CounterTrack(msgspec.Struct, frozen=True):
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


class ClockNote(msgspec.Struct, frozen=True):
    """How a file was placed, shown in the trace: an instant on its process at its first event."""

    process_uuid: int
    pid: int
    ts: int  # trace time (ns after the trace's zero)
    args: dict[str, str | int]


class Machines(msgspec.Struct, frozen=True):
    """The machines of a multi-host trace: ids from 1 (0 is the trace's own machine)."""

    names: dict[int, str]  # machine id -> the host it is
    of_process: dict[Identity, int]  # processes on a machine of their own (the others: 0)
    # Per file, the machine its chunk is on; the derived tracks' chunk (one per trace) holds a
    # sequence per machine: {sequence id: machine} for those not on machine 0.
    of_file: dict[Path, int]
    derived_sequences: dict[int, int]
    conflicts: dict[Identity, tuple[str, ...]]  # processes kept on machine 0: the hosts their files name


class UnitPlan(msgspec.Struct, frozen=True):
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
    # The unit's sequences on a machine of their own (tracemerge.plan.machines): (sequence id,
    # machine); empty in a run of one host.
    machines: tuple[tuple[int, int], ...] = ()


def flow_id_base(sequence_id: int) -> int:
    """Flow ids of a file's sequence: unique across the trace without knowing the other files."""
    return sequence_id << 32


class MergePlan(msgspec.Struct):
    units: list[UnitPlan]
    processes: list[ProcessTrack]
    threads: list[ThreadTrack]
    counters: list[CounterTrack]
    base_ns: int
    wall_clock: bool  # whether base_ns is a Unix-epoch time
    offsets: dict[Path, int]
    alignment: Alignment
    clock_notes: list[ClockNote] = field(default_factory=list)
    phase_summary: dict = field(default_factory=dict)  # tracemerge.analysis.steps.summary(), kept in the trace
    machines: Machines | None = None  # the hosts of a multi-host run (tracemerge.plan.machines)
    wide: bool = False  # the files were encoded with 63-bit uuids


def resolve_identity(origin: OriginKey, data: SourceData, facts: PathFacts) -> Identity:
    """Who wrote an event: the event's own role/rank first; then what the file says of itself,
    then its path, except where a framework's naming convention says the name wins (an engine
    trace holds its engine-local rank; the name its global rank or replica). Metric series say it
    all themselves: their origin's third part is the tag of a process without a rank (the path
    of a file of many engines' metrics says nothing of any one). A role-less rank of a file of no
    layout that may be another job's (``facts.apart``) is told apart by the OS process it states."""
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
    if not role and facts.apart is not None:  # a file of no layout: maybe another job's
        # Without a rank, one process per file as always, its name told from the others'.
        own = data.tag_hint if rank is None else _own_process(data, facts)
        tag = own or facts.apart
    return Identity(role, rank, tag)


def _own_process(data: SourceData, facts: PathFacts) -> str:
    """The OS process a file states it is, ``<host> · pid <pid>`` as far as it says ("" if not):
    what keeps apart role-less ranks of files that may be of several jobs. Not a folder: two
    files of one process (two steps' captures) still meet, two jobs' rank 0 do not."""
    host = data.host or facts.host
    pid = data.pid if data.pid is not None else facts.pid
    named = worker_from_name(data.path.name)
    if named is not None and named[0] == host and pid is not None and named[1] != pid:
        host = None  # a name only shaped like torch's {host}_{pid}: its pid is not the trace's
    return " · ".join(([host] if host else []) + [f"pid {pid}"] * (pid is not None))


# Track uuids are hashes of what the track is, so that a file can be encoded before the plan
# exists. Every event names its track, so their size counts: 35 bits make 5-byte varints (63 bits
# make 9). Two tracks may hash to one uuid (about even odds at 200,000 tracks): within a file,
# LocalTracks gives the second another (free_id); across files the plan does, and the chunk of a
# file whose uuid it changed is copied with it changed (tracemerge.writers.perfetto_renames).
NARROW_ID_BITS = 35


class IdCollision(Exception):
    """Two overlap lanes, or a lane and a track, of one file hashed to one narrow uuid (the only
    clash that file's chunk cannot tell apart), or the narrow ids are all taken: the files are
    read again with 63-bit uuids."""


def track_id(wide: bool, *parts: object) -> int:
    uuid = stable_id(*parts)
    return uuid if wide else (uuid & ((1 << NARROW_ID_BITS) - 1)) or 1


# Alternatives tried for a uuid another track has: with 35 bits the second is free but for odds
# of one in tens of thousands; none free means the id space is full (IdCollision: go wide).
MAX_ALTERNATIVES = 64


def free_id(uuid: int, taken: Container[int]) -> int:
    """The first of ``uuid``'s alternatives (hashes of it and a count) that ``taken`` lacks: the
    same sequence in every file and in the plan, so that a clash is mostly settled alike."""
    wide = uuid >= 1 << NARROW_ID_BITS
    for n in range(1, MAX_ALTERNATIVES + 1):
        found = track_id(wide, "again", uuid, n)
        if found not in taken:
            return found
    raise IdCollision(f"no free track uuid among {MAX_ALTERNATIVES} alternatives")


def process_uuid(ident: Identity, wide: bool = False) -> int:
    return track_id(wide, "process", ident.role, ident.rank, ident.tag)


def thread_uuid(ident: Identity, key: ThreadKey, salt: str = "", wide: bool = False) -> int:
    if key == GROUP_HEADER and is_first(ident):  # the group's own track: what it shows collapsed
        return process_uuid(ident, wide)
    return track_id(wide, "thread", process_uuid(ident, wide), key, salt)


def counter_uuid(ident: Identity, key: ThreadKey, name: str, wide: bool = False) -> int:
    return track_id(wide, "counter", process_uuid(ident, wide), key, name)


class LocalTracks:
    """Track identities a file can compute alone (Perfetto output): uuids derived from content.

    Names, pids and tids are settled later by the plan and written in the descriptors; events
    refer to tracks by uuid only. ``salts`` gives a file its own copy of a process's threads.
    """

    def __init__(self, salts: dict[Identity, str] | None = None, wide: bool = False) -> None:
        self.salts = salts or {}
        self.wide = wide
        self._threads: dict[tuple[Identity, ThreadKey], ThreadTrack] = {}
        self._counters: dict[tuple[Identity, ThreadKey, str], CounterTrack] = {}
        self._owners: dict[int, tuple] = {}  # each uuid handed out, and whose it is
        # The tracks given another uuid than their hash (it was another's): ("thread", ident,
        # key) or ("counter", ident, key, name) -> uuid. The plan reads them in what encoding gave (Encoded).
        self.moved: dict[tuple, int] = {}

    def thread(self, ident: Identity, key: ThreadKey) -> ThreadTrack:
        track = self._threads.get((ident, key))
        if track is None:
            uuid = self._own(("thread", ident, key), thread_uuid(ident, key, self.salts.get(ident, ""), self.wide))
            process = process_uuid(ident, self.wide)
            track = self._threads[(ident, key)] = ThreadTrack(uuid, 0, 0, "", 0, process)
        return track

    def counter(self, ident: Identity, key: ThreadKey, name: str) -> CounterTrack:
        track = self._counters.get((ident, key, name))
        if track is None:
            uuid = self._own(("counter", ident, key, name), counter_uuid(ident, key, name, self.wide))
            track = CounterTrack(uuid, 0, name, process_uuid(ident, self.wide), "", "")
            self._counters[(ident, key, name)] = track
        return track

    def _own(self, owner: tuple, uuid: int) -> int:
        """``uuid`` for ``owner``, or the first alternative no other track of the file has."""
        if self._owners.setdefault(uuid, owner) != owner:
            uuid = free_id(uuid, self._owners)
            self._owners[uuid] = owner
            self.moved[owner] = uuid
        return uuid


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
