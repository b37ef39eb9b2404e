"""Overlap lanes: the tracks beside a thread that hold its slices that do not nest
(:mod:`tracemerge.layout.nesting` says which), made here alone.

A file's lay-out opens its lanes beside the threads it is encoded on (:func:`lane_track`); once
the plan names those threads otherwise (a uuid given again, a file's own copy of a thread), the
same lanes are taken beside the planned threads (:func:`planned_lanes`): by the plan, which
checks their uuids, and by the output, which describes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tracemerge.plan.types import NARROW_ID_BITS, ThreadTrack, stable_id, track_id


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


def planned_lanes(
    opened: Iterable[ThreadTrack], planned_parent: Callable[[int], ThreadTrack | None]
) -> list[tuple[ThreadTrack, ThreadTrack]]:
    """Each lane a chunk ``opened``, with the same lane beside the planned thread of its parent
    (``planned_parent``: of the uuid the chunk names a thread by; None leaves its lanes out)."""
    found = []
    for lane in opened:
        parent = planned_parent(lane.parent_uuid)
        if parent is not None:
            found.append((lane, lane_track(parent, lane.lane)))
    return found
