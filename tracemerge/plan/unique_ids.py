"""Track uuids that no two tracks of the merged trace share, and what each file's chunk must be
copied with for them.

Files are encoded before the plan exists, each track named by a hash of what it is
(:func:`tracemerge.plan.types.track_id`, 35 bits), a file's own clashes settled by its encoder
(:class:`tracemerge.plan.types.LocalTracks` gives the second track :func:`free_id`'s uuid). The
plan takes every track in the trace's order, each keeping its hash unless an earlier one has it,
else getting the first free alternative: assigned in one pass, none shared, and where no hash is
shared (nearly always below 100,000 tracks) every uuid is its hash, the output unchanged. A file
whose chunk names a track otherwise than the plan is copied with those uuids given again
(:func:`unit_renames`, :func:`tracemerge.writers.perfetto_renames.copy_renamed`): nothing is
read twice. Only overlap lanes (their uuids hashed from their thread's, while the file is laid
out) are not settled so; a lane that shares a uuid makes the plan raise IdCollision. A group's
row on the group's own track (:data:`tracemerge.core.model.GROUP_HEADER`) keeps the group's uuid.
"""

from __future__ import annotations

from typing import TypeVar

from msgspec.structs import replace

from tracemerge.core.model import Identity, ThreadKey
from tracemerge.plan.encoded import Encoded
from tracemerge.plan.lanes import planned_lanes
from tracemerge.plan.types import (
    CounterTrack,
    ProcessTrack,
    ThreadTrack,
    UnitPlan,
    counter_uuid,
    free_id,
    thread_uuid,
)

K = TypeVar("K")


def unique_ids(
    processes: dict[Identity, ProcessTrack],
    threads: dict[K, ThreadTrack],
    counters: dict[tuple[Identity, ThreadKey, str], CounterTrack],
) -> tuple[dict[Identity, ProcessTrack], dict[K, ThreadTrack], dict[tuple[Identity, ThreadKey, str], CounterTrack]]:
    """The tracks (in the plan's order: processes, threads, counters), each with a uuid no other
    has: its own, or the first of its alternatives free when an earlier track has it."""
    taken: set[int] = set()

    def claim(uuid: int) -> int:
        if uuid in taken:
            uuid = free_id(uuid, taken)
        taken.add(uuid)
        return uuid

    moved: dict[int, int] = {}  # process uuids given again
    out_processes = {}
    for ident, proc in processes.items():
        uuid = claim(proc.uuid)
        out_processes[ident] = proc if uuid == proc.uuid else replace(proc, uuid=uuid)
        if uuid != proc.uuid:
            moved[proc.uuid] = uuid
    out_threads = {}
    for key, track in threads.items():
        parent = moved.get(track.process_uuid, track.process_uuid)
        # A group's row on the group's own track (GROUP_HEADER) shares the group's uuid.
        uuid = parent if track.uuid == track.process_uuid else claim(track.uuid)
        same = uuid == track.uuid and parent == track.process_uuid
        out_threads[key] = track if same else replace(track, uuid=uuid, process_uuid=parent)
    out_counters = {}
    for series, counter in counters.items():
        uuid, parent = claim(counter.uuid), moved.get(counter.process_uuid, counter.process_uuid)
        same = uuid == counter.uuid and parent == counter.process_uuid
        out_counters[series] = counter if same else replace(counter, uuid=uuid, process_uuid=parent)
    return out_processes, out_threads, out_counters


def unit_renames(unit: UnitPlan, encoded: Encoded, wide: bool) -> dict[int, int]:
    """Per uuid the file's chunk names a track by, where the plan names it otherwise: the plan's
    (its threads, its counters, and the overlap lanes beside a thread given again)."""
    renames: dict[int, int] = {}
    for (ident, key), track in unit.threads.items():
        local = chunk_thread_uuid(encoded, ident, key, wide)
        if local != track.uuid:
            renames[local] = track.uuid
    for (ident, key, name), counter in unit.counters.items():
        local = encoded.moved_ids.get(("counter", ident, key, name)) or counter_uuid(ident, key, name, wide)
        if local != counter.uuid:
            renames[local] = counter.uuid
    if renames:
        planned = {t.uuid: t for t in unit.threads.values()}
        given_again = {local: planned[uuid] for local, uuid in renames.items() if uuid in planned}
        for lane, beside in planned_lanes(encoded.lanes, given_again.get):
            renames[lane.uuid] = beside.uuid
    return renames


def chunk_thread_uuid(encoded: Encoded, ident: Identity, key: ThreadKey, wide: bool) -> int:
    """The uuid a chunk (what ``encoded`` says of it) names a thread by."""
    return encoded.moved_ids.get(("thread", ident, key)) or thread_uuid(ident, key, encoded.salts.get(ident, ""), wide)
