"""What encoding a file gave, apart from what its read found (:class:`~tracemerge.plan.types.FileScan`).

A file's work returns both: the read summary the stages after it (clocks, phases, the plan) take,
and :class:`Encoded`, what its chunk holds. A file encoded again once the plan is made gives a
new :class:`Encoded` (and, read again, a new summary); nothing of the first is changed.
:class:`EncodedFile` is a unit of the output as the writing stage takes it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
from msgspec import field

from tracemerge.core.model import Identity
from tracemerge.core.stats import Losses, Stat
from tracemerge.plan.types import FileScan, ThreadTrack
from tracemerge.report.run_report import EventCounts


class Encoded(msgspec.Struct, frozen=True):
    """What a file's (or the derived tracks') chunk holds: per process the events read and
    written (``counts``: read, including what was left out on request), every loss of the file
    (its read's too), what was left out on request, the overlap lanes opened, and the uuids the
    chunk names tracks by (``salts`` its threads were hashed with; ``moved_ids``, tracks given
    another uuid than their hash: tracemerge.plan.types.LocalTracks.moved)."""

    counts: dict[Identity, EventCounts] = field(default_factory=dict)
    written: dict[Identity, EventCounts] = field(default_factory=dict)
    dropped: Losses = field(default_factory=Losses)
    filtered: Counter[Stat] = field(default_factory=Counter)
    lanes: list[ThreadTrack] = field(default_factory=list)
    moved_to_lanes: int = 0
    reversed_flows: int = 0
    salts: dict[Identity, str] = field(default_factory=dict)
    moved_ids: dict[tuple, int] = field(default_factory=dict)


class EncodedFile(msgspec.Struct, frozen=True):
    """A unit of the output once encoded: its summary, what its chunk holds, and where it is."""

    scan: FileScan
    encoded: Encoded
    chunk: Path
