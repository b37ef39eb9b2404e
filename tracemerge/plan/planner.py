"""Making the plan: from every file's summary to the merged trace's processes, tracks, ids and
each file's time shift (:class:`~tracemerge.plan.types.MergePlan`), once the clocks are aligned.

:func:`make_plan` is the plan stage: a plain function of the summaries and the alignment. The
plan's types, and the track ids every stage agrees on, are in :mod:`tracemerge.plan.types`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from msgspec.structs import replace

from tracemerge.clock import Alignment
from tracemerge.clock.unaligned import title, unaligned
from tracemerge.core.model import Identity, ThreadInfo, ThreadKey
from tracemerge.naming.paths import COORDINATE_ORDER
from tracemerge.plan.encoded import Encoded
from tracemerge.plan.lanes import planned_lanes
from tracemerge.plan.machines import assign_machines, unit_machines
from tracemerge.plan.thread_ids import listing_order, thread_ids
from tracemerge.plan.types import (
    ClockNote,
    CounterTrack,
    FileScan,
    IdCollision,
    MergePlan,
    ProcessTrack,
    ThreadTrack,
    UnitPlan,
    counter_uuid,
    flow_id_base,
    identity_sort_key,
    process_uuid,
    thread_uuid,
)
from tracemerge.plan.unique_ids import chunk_thread_uuid, unique_ids


def make_plan(
    scans: list[FileScan],
    wide: bool = False,
    *,
    alignment: Alignment,
    encoded: Mapping[Path, Encoded] | None = None,
) -> MergePlan:
    """Fix pids, track ids, names and time shifts for the whole merged trace.

    ``alignment`` is the clock stage's placement of the files (scans it does not place keep their
    clock: the derived phase tracks are on the aligned timeline already). ``encoded`` is what
    laying each file out gave, by path (the overlap lanes its chunk opened). Track uuids are made
    unique here (:mod:`tracemerge.plan.unique_ids`); raises :class:`IdCollision` when an overlap
    lane's uuid is another track's (then encode with ``wide``).
    """
    alignment = placing_every_file(alignment, scans)
    offsets, base_ns = alignment.offsets, alignment.base_ns
    scans = sorted(scans, key=lambda s: (s.ts_min is None, (s.ts_min or 0) + offsets[s.path], str(s.path)))
    processes = _process_tracks(scans, alignment, wide)
    # Files of one process that overlap in time and share a thread get their own copy of it.
    salts = _overlap_salts(scans, offsets)
    threads = _thread_tracks(scans, processes, salts, wide)
    counters = _counter_tracks(scans, processes, wide)
    processes, threads, counters = unique_ids(processes, threads, counters)
    lanes = _planned_lanes(scans, encoded or {}, threads, salts, wide)
    uuids = {p.uuid for p in processes.values()} | {t.uuid for t in threads.values()}
    uuids |= {c.uuid for c in counters.values()}
    if len(set(lanes.values())) < len(lanes) or uuids & set(lanes.values()):
        raise IdCollision("an overlap lane's uuid is another track's")
    machines = assign_machines(scans, {ident: proc.order for ident, proc in processes.items()})
    units = [_unit(s, threads, counters, salts, offsets[s.path] - base_ns) for s in scans]
    if machines is not None:
        units = [replace(u, machines=unit_machines(machines, s)) for u, s in zip(units, scans, strict=True)]
    return MergePlan(
        units=units,
        processes=list(processes.values()),
        threads=sorted(threads.values(), key=lambda t: (t.pid, t.order)),
        counters=list(counters.values()),
        base_ns=base_ns,
        wall_clock=alignment.wall_clock,
        offsets=offsets,
        alignment=alignment,
        clock_notes=_clock_notes(scans, alignment, processes),
        machines=machines,
        wide=wide,
    )


def placing_every_file(alignment: Alignment, scans: list[FileScan]) -> Alignment:
    """``alignment`` with an offset for each of ``scans``: 0 for those it does not place (their
    own clock is the trace's)."""
    unplaced = {s.path: 0 for s in scans if s.path not in alignment.offsets}
    return replace(alignment, offsets={**alignment.offsets, **unplaced}) if unplaced else alignment


def _process_tracks(scans: list[FileScan], alignment: Alignment, wide: bool) -> dict[Identity, ProcessTrack]:
    """A process per identity, in the trace's order, titled (and marked when placed without
    clock evidence), with the coordinates its files' names give."""
    identities = sorted({i for s in scans for i in (*s.counts, *s.threads, *s.counter_series)}, key=identity_sort_key)
    coords = process_coords(scans)
    adrift = unaligned(scans, alignment)  # placed without clock evidence: said in their title
    return {
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


def _thread_tracks(
    scans: list[FileScan],
    processes: dict[Identity, ProcessTrack],
    salts: dict[tuple[Path, Identity], str],
    wide: bool,
) -> dict[tuple[Identity, ThreadKey, str], ThreadTrack]:
    """Every thread of every process (a file's own copy where ``salts`` gives one), named, in
    listing order, with its tid."""
    thread_infos: dict[Identity, dict[tuple[ThreadKey, str], ThreadInfo]] = defaultdict(dict)
    for s in scans:
        for ident, threads in s.threads.items():
            for key, info in threads.items():
                salt = salts.get((s.path, ident), "")
                name = f"{info.name} ({salt})" if salt else info.name
                thread_infos[ident].setdefault((key, salt), ThreadInfo(name, info.sort_key))
    found: dict[tuple[Identity, ThreadKey, str], ThreadTrack] = {}
    for ident, proc in processes.items():
        ordered = _sorted_threads(thread_infos[ident])
        ordered = [ordered[n] for n in listing_order([(k, i.name, i.sort_key) for (k, _), i in ordered])]
        ids = thread_ids(proc.pid, [(key, info.name) for (key, _), info in ordered], proc.is_group)
        for n, (((key, salt), info), (tid, as_thread)) in enumerate(zip(ordered, ids, strict=True)):
            uuid = thread_uuid(ident, key, salt, wide)
            found[(ident, key, salt)] = ThreadTrack(uuid, proc.pid, tid, info.name, n, proc.uuid, as_thread=as_thread)
    return found


def _counter_tracks(
    scans: list[FileScan], processes: dict[Identity, ProcessTrack], wide: bool
) -> dict[tuple[Identity, ThreadKey, str], CounterTrack]:
    """Every counter series of every process, titled after its source unless its name says it."""
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
    return counters


def _unit(
    s: FileScan,
    threads: dict[tuple[Identity, ThreadKey, str], ThreadTrack],
    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack],
    salts: dict[tuple[Path, Identity], str],
    shift_ns: int,
) -> UnitPlan:
    """One file's part of the plan: its tracks and how far its clock moves (``shift_ns``, beside
    its own origin)."""
    return UnitPlan(
        path=s.path,
        format=s.format,
        sequence_id=s.sequence_id,
        shift_ns=s.origin_ns + shift_ns,
        flow_id_base=flow_id_base(s.sequence_id),
        identities=s.identities,
        threads={
            (ident, key): threads[(ident, key, salts.get((s.path, ident), ""))]
            for ident, ts in s.threads.items()
            for key in ts
        },
        counters={
            (ident, key, name): counters[(ident, key, name)]
            for ident, series in s.counter_series.items()
            for key, name in series
        },
        salts={ident: salt for (path, ident), salt in salts.items() if path == s.path},
    )


def _clock_notes(
    scans: list[FileScan], alignment: Alignment, processes: dict[Identity, ProcessTrack]
) -> list[ClockNote]:
    """Per file and process, an instant where the file starts saying how its clock was placed."""
    notes = []
    offsets, base_ns = alignment.offsets, alignment.base_ns
    for s in scans:
        placed = alignment.sources.get(s.path)
        if placed is None or s.ts_min is None:
            continue
        args = {k: v if v is not None else "unknown" for k, v in placed.as_dict().items() if v != ""}
        args["file"] = s.path.name
        for ident in sorted({*s.counts, *s.threads, *s.counter_series}, key=identity_sort_key):
            proc = processes[ident]
            notes.append(ClockNote(proc.uuid, proc.pid, s.ts_min + offsets[s.path] - base_ns, args))
    return notes


def _planned_lanes(
    scans: list[FileScan],
    encoded: Mapping[Path, Encoded],
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
        chunk = encoded.get(s.path)
        if chunk is None or not chunk.lanes:
            continue
        parent_of = {
            chunk_thread_uuid(chunk, ident, key, wide): threads[(ident, key, salts.get((s.path, ident), ""))]
            for ident, keys in s.threads.items()
            for key in keys
        }
        for _, lane in planned_lanes(chunk.lanes, parent_of.get):
            lanes.setdefault((lane.parent_uuid, lane.lane), lane.uuid)
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
