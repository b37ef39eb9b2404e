"""From what each file holds to the plan that encodes it: processes, tracks, ids and time shift.

:func:`scan` summarises one file's :class:`~tracemerge.model.SourceData`; :func:`make_plan`
takes all summaries and fixes the merged trace's layout. Each file then gets a small
:class:`UnitPlan`, which is all its encode step needs: no other state is shared, so files can be
encoded in any order, in worker processes or on other machines, and their outputs concatenated.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tracemerge.clock import align
from tracemerge.model import ClockDomain, Event, FlowPhase, Identity, Kind, OriginKey, SourceData, ThreadInfo, ThreadKey
from tracemerge.report import EventCounts

# Roles in the order an RL step runs through them; other roles follow alphabetically.
ROLE_ORDER = (
    "master",
    "trainer",
    "driver",
    "controller",
    "rollout",
    "generator",
    "generation",
    "actor_rollout_ref",
    "actor-rollout-ref",
    "actor_rollout",
    "actor-rollout",
    "env",
    "reward",
    "rm",
    "ref",
    "reference",
    "teacher",
    "critic",
    "value-model",
    "actor",
    "policy",
    "learner",
)
TIDS_PER_PROCESS = 10_000


def stable_id(*parts: object) -> int:
    """A 63-bit id that depends only on ``parts`` (same input, same id, on any machine)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


@dataclass
class FileScan:
    """What one file holds, in the terms the plan needs."""

    path: Path
    format: str
    clock: ClockDomain
    identities: dict[OriginKey, Identity]
    counts: dict[Identity, EventCounts]
    threads: dict[Identity, dict[ThreadKey, ThreadInfo]]
    # (thread key, series name) -> the name of the source process it came from ("" for the main one)
    counter_series: dict[Identity, dict[tuple[ThreadKey, str], str]]
    ts_min: int | None
    ts_max: int | None
    dropped: Counter[str] = field(default_factory=Counter)
    metadata_records: int = 0


@dataclass(frozen=True)
class ProcessTrack:
    identity: Identity
    uuid: int
    pid: int
    name: str
    order: int


@dataclass(frozen=True)
class ThreadTrack:
    """A thread (or device stream) track; ``lane`` > 0 marks an overlap lane beside thread ``parent``."""

    uuid: int
    pid: int
    tid: int
    name: str
    order: int
    process_uuid: int
    lane: int = 0
    parent_uuid: int = 0


@dataclass(frozen=True)
class CounterTrack:
    uuid: int
    pid: int
    name: str
    process_uuid: int
    # Chrome JSON names a counter "<name> <arg key>"; these rebuild ``name`` that way.
    json_name: str
    json_key: str


@dataclass(frozen=True)
class UnitPlan:
    """All that encoding one file needs."""

    path: Path
    format: str
    sequence_id: int
    shift_ns: int  # added to the file's timestamps: clock offset minus the trace's time base
    flow_id_base: int
    identities: dict[OriginKey, Identity]
    threads: dict[tuple[Identity, ThreadKey], ThreadTrack]
    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack]


@dataclass
class MergePlan:
    units: list[UnitPlan]
    processes: list[ProcessTrack]
    threads: list[ThreadTrack]
    counters: list[CounterTrack]
    base_ns: int
    wall_clock: bool  # whether base_ns is a Unix-epoch time
    offsets: dict[Path, int]


def resolve_identity(origin: OriginKey, data: SourceData, role_hint: str | None, rank_hint: int | None) -> Identity:
    """Who wrote an event: the event's own role/rank first, then the file's, then its path's."""
    role = origin[0] or data.role_hint or role_hint or ""
    rank = next((r for r in (origin[1], data.rank_hint, rank_hint) if r is not None), None)
    tag = "" if rank is not None else data.path.name
    return Identity(role, rank, tag)


def scan(data: SourceData, role_hint: str | None, rank_hint: int | None) -> FileScan:
    identities: dict[OriginKey, Identity] = {}
    counts: dict[Identity, EventCounts] = defaultdict(EventCounts)
    threads: dict[Identity, dict[ThreadKey, ThreadInfo]] = defaultdict(dict)
    series: dict[Identity, dict[tuple[ThreadKey, str], str]] = defaultdict(dict)
    ts_min: int | None = None
    ts_max: int | None = None
    for ev in data.events:
        ident = identities.get(ev.origin)
        if ident is None:
            ident = identities[ev.origin] = resolve_identity(ev.origin, data, role_hint, rank_hint)
        c = counts[ident]
        kind = ev.kind
        if kind == Kind.SLICE:
            c.slices += 1
        elif kind == Kind.INSTANT:
            c.instants += 1
        elif kind == Kind.COUNTER:
            c.counters += 1
            if (ev.thread, ev.name) not in series[ident]:
                info = data.threads.get(ev.thread)
                series[ident][(ev.thread, ev.name)] = info.name if info else ""
        if kind != Kind.COUNTER and kind != Kind.FLOW and ev.thread not in threads[ident]:
            threads[ident][ev.thread] = data.threads.get(ev.thread) or ThreadInfo(str(ev.thread))
        end = ev.ts + ev.dur
        if ts_min is None or ev.ts < ts_min:
            ts_min = ev.ts
        if ts_max is None or end > ts_max:
            ts_max = end
    dropped = Counter(data.dropped)
    chains, chain_drops = flow_chains(data.events)
    dropped.update(chain_drops)
    for chain in chains:
        counts[identities[chain[0].origin]].flows += len(chain) - 1
    return FileScan(
        path=data.path,
        format=data.format,
        clock=data.clock,
        identities=identities,
        counts=dict(counts),
        threads=dict(threads),
        counter_series=dict(series),
        ts_min=ts_min,
        ts_max=ts_max,
        dropped=dropped,
        metadata_records=data.metadata_records,
    )


def flow_chains(events: Iterable[Event]) -> tuple[list[list[Event]], Counter[str]]:
    """Group flow points into chains (s, t..., f) by source id; report points that form no link.

    An id with a single start is one flow whatever the timestamps say (a device task can be
    stamped before the host call that launched it), and every end beyond the first fans out from
    that start (one launch, two kernels). Ids reused for several flows are paired in time order.
    """
    by_id: dict[object, list[Event]] = defaultdict(list)
    for ev in events:
        if ev.kind == Kind.FLOW:
            by_id[(ev.origin, ev.flow_id)].append(ev)
    chains: list[list[Event]] = []
    dropped: Counter[str] = Counter()
    for points in by_id.values():
        points.sort(key=lambda e: (e.ts, e.flow_phase))
        starts = [p for p in points if p.flow_phase == FlowPhase.START]
        if len(starts) == 1:
            start = starts[0]
            steps = [p for p in points if p.flow_phase == FlowPhase.STEP]
            ends = [p for p in points if p.flow_phase == FlowPhase.END]
            chains.append([start, *steps, *ends[:1]])
            chains.extend([start, end] for end in ends[1:])
            continue
        current: list[Event] | None = None
        last_start: Event | None = None
        for p in points:
            if p.flow_phase == FlowPhase.START:
                if current is not None:
                    chains.append(current)
                current, last_start = [p], p
            elif current is not None:
                current.append(p)
                if p.flow_phase == FlowPhase.END:
                    chains.append(current)
                    current = None
            elif last_start is not None and p.flow_phase == FlowPhase.END:
                chains.append([last_start, p])
            else:
                dropped["flow step/end without a start"] += 1
        if current is not None:
            chains.append(current)
    kept = []
    for chain in chains:
        if len(chain) < 2:
            dropped["flow start without an end"] += 1
        else:
            kept.append(chain)
    return kept, dropped


def role_sort_key(role: str) -> tuple:
    low = role.lower()
    return (ROLE_ORDER.index(low), "") if low in ROLE_ORDER else (len(ROLE_ORDER), low)


def identity_sort_key(ident: Identity) -> tuple:
    return (role_sort_key(ident.role), ident.rank is None, ident.rank or 0, ident.tag)


def make_plan(scans: list[FileScan]) -> MergePlan:
    """Fix pids, track ids, names and time shifts for the whole merged trace."""
    offsets, base_ns, wall_clock = align(scans)
    scans = sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + offsets[s.path], str(s.path)))

    identities = sorted({i for s in scans for i in s.counts}, key=identity_sort_key)
    processes = {
        ident: ProcessTrack(ident, stable_id("process", ident.role, ident.rank, ident.tag), n + 1, ident.label, n)
        for n, ident in enumerate(identities)
    }

    # Files of one process that overlap in time and share a thread get their own copy of it.
    salts = _overlap_salts(scans, offsets)

    thread_infos: dict[Identity, dict[tuple[ThreadKey, str], ThreadInfo]] = defaultdict(dict)
    for s in scans:
        for ident, threads in s.threads.items():
            for key, info in threads.items():
                salt = salts.get((s.path, ident), "")
                name = f"{info.name} ({s.path.name})" if salt else info.name
                thread_infos[ident].setdefault((key, salt), ThreadInfo(name, info.sort_key))

    threads: dict[tuple[Identity, ThreadKey, str], ThreadTrack] = {}
    for ident in identities:
        proc = processes[ident]
        if len(thread_infos[ident]) >= TIDS_PER_PROCESS:
            raise OverflowError(f"{ident.label}: more than {TIDS_PER_PROCESS - 1} threads")
        ordered = _sorted_threads(thread_infos[ident])
        for n, ((key, salt), info) in enumerate(ordered):
            uuid = stable_id("thread", proc.uuid, key, salt)
            threads[(ident, key, salt)] = ThreadTrack(
                uuid, proc.pid, proc.pid * TIDS_PER_PROCESS + n + 1, info.name, n, proc.uuid
            )

    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack] = {}
    for s in scans:
        for ident, series in s.counter_series.items():
            proc = processes[ident]
            for (key, name), prefix in series.items():
                if (ident, key, name) not in counters:
                    json_name, _, json_key = name.rpartition(" ")
                    # A series named after its source already says where it comes from.
                    prefix = "" if name.startswith(prefix) else prefix
                    full = f"{prefix}: {name}" if prefix else name
                    counters[(ident, key, name)] = CounterTrack(
                        stable_id("counter", proc.uuid, key, name),
                        proc.pid,
                        full,
                        proc.uuid,
                        f"{prefix}: {json_name}" if prefix else json_name,
                        json_key,
                    )

    units = []
    for n, s in enumerate(scans):
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
                sequence_id=n + 2,  # sequence 1 carries the descriptors
                shift_ns=offsets[s.path] - base_ns,
                flow_id_base=(n + 1) << 32,
                identities=s.identities,
                threads=unit_threads,
                counters=unit_counters,
            )
        )
    return MergePlan(
        units=units,
        processes=list(processes.values()),
        threads=sorted(threads.values(), key=lambda t: (t.pid, t.order)),
        counters=list(counters.values()),
        base_ns=base_ns,
        wall_clock=wall_clock,
        offsets=offsets,
    )


def _sorted_threads(infos: dict[tuple[ThreadKey, str], ThreadInfo]) -> list:
    items = list(infos.items())
    try:
        return sorted(items, key=lambda kv: (kv[1].sort_key, kv[0][1], kv[1].name))
    except TypeError:  # sort keys from different formats need not compare
        return sorted(items, key=lambda kv: (repr(kv[1].sort_key), kv[0][1], kv[1].name))


def _overlap_salts(scans: list[FileScan], offsets: dict[Path, int]) -> dict[tuple[Path, Identity], str]:
    salts: dict[tuple[Path, Identity], str] = {}
    seen: dict[Identity, list[tuple[int, int, set]]] = defaultdict(list)
    for s in scans:
        if s.ts_min is None or s.ts_max is None:
            continue
        lo, hi = s.ts_min + offsets[s.path], s.ts_max + offsets[s.path]
        for ident, threads in s.threads.items():
            keys = set(threads)
            clash = any(lo < p_hi and p_lo < hi and keys & p_keys for p_lo, p_hi, p_keys in seen[ident])
            if clash:
                salts[(s.path, ident)] = str(s.path)
            seen[ident].append((lo, hi, keys))
    return salts
