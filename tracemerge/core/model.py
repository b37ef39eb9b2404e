"""The normalized event model every source produces and every later stage consumes.

A source reads one file, handing its events to the file's layout (:mod:`tracemerge.store.file_layout`) as
it goes, with timestamps in integer nanoseconds of the file's own clock; it returns a
:class:`SourceData` that says what that clock is and names the threads the events sit on. Sources
that build events one by one use :class:`Event`. Nothing here knows about output formats.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import Any

import msgspec
from msgspec import field

from tracemerge.core.stats import Losses


class Kind(IntEnum):
    """What an event becomes in the output."""

    SLICE = 0
    INSTANT = 1
    COUNTER = 2
    FLOW = 3


class FlowPhase(IntEnum):
    """Position of a flow point in its chain (Chrome's s / t / f)."""

    START = 0
    STEP = 1
    END = 2


# A source-local thread identity, e.g. ("cpu", pid, tid) or ("device", "GPU 0", stream).
ThreadKey = tuple
# Who produced an event, as far as the file itself says: (role or None, rank or None); metric
# series add a third part, the tag of a process without a rank (its instance, or "Metrics").
OriginKey = tuple

NO_ORIGIN: OriginKey = (None, None)


class Event(msgspec.Struct):
    """One input event, normalized.

    ``ts`` and ``dur`` are integer nanoseconds in the source's clock domain. For counters ``name``
    is the series name and ``value`` the sample. For flow points ``flow_id`` is the source-local
    id (unique only within the file) and ``flow_next`` says the point binds to the next slice that
    starts on its thread rather than to the enclosing one.
    """

    kind: Kind
    ts: int
    thread: ThreadKey
    name: str = ""
    cat: str = ""
    dur: int = 0
    args: dict[str, Any] | None = None
    # An OriginKey; a derived event's (tracemerge.phases) is its process's Identity, which the
    # derived unit's layout is keyed by.
    origin: Any = NO_ORIGIN
    value: float | int = 0
    flow_id: Any = None
    flow_phase: FlowPhase = FlowPhase.START
    flow_next: bool = False


class ClockDomain(msgspec.Struct, frozen=True):
    """The time base of a source's timestamps.

    ``anchored`` sources carry Unix-epoch time and can be placed on the common timeline as they
    are; unanchored ones (a per-process monotonic origin with no wall-clock reading) need an
    offset chosen by :mod:`tracemerge.clock`.
    """

    name: str
    anchored: bool


UNIX_EPOCH = ClockDomain("unix epoch", anchored=True)


# The thread key of a derived group's row drawn on the group's own track (the Pipeline's Steps):
# a UI draws a collapsed top-level group from the slices on its own track alone (Perfetto v52).
GROUP_HEADER: tuple = ("group header",)


class ThreadInfo(msgspec.Struct):
    """Display facts about a source thread: its name and where it sorts inside its process."""

    name: str
    sort_key: tuple = ()


class SourceData(msgspec.Struct):
    """What a source says about one file once it has handed over its events.

    ``clock`` None means the clock is told by the magnitude of the timestamps (Unix-epoch µs, or a
    relative origin). ``origin_ns`` is added to the file's timestamps to give its clock's time.
    """

    path: Path
    format: str
    clock: ClockDomain | None
    threads: dict[ThreadKey, ThreadInfo]
    origin_ns: int = 0
    # With ``clock`` None: the clock when the times are not at Unix-epoch magnitude.
    relative_clock: ClockDomain | None = None
    # What the file itself says about who wrote it; used when events carry no origin of their own.
    role_hint: str | None = None
    rank_hint: int | None = None
    # The machine that wrote the file, when the file or its name says: files of one host share a clock.
    host: str | None = None
    # The OS process that wrote the file, when the file says (a torch trace's one CPU pid).
    pid: int | None = None
    # What names the file's process when no rank is known (default: the file name); an Ascend run
    # directory's name, since every run's file is called trace_view.json.
    tag_hint: str | None = None
    # Input events that could not be kept, per statistic.
    dropped: Losses = field(default_factory=Losses)
    # Input records consumed as metadata (names, sort indexes): they are not events.
    metadata_records: int = 0
    # A counter series whose title is short: title -> its full name (the track's description).
    series_descriptions: dict[str, str] = field(default_factory=dict)
    # Values keyed by RL step rather than time (tracker scalars): step -> name -> value.
    step_values: dict[int, dict[str, float]] = field(default_factory=dict)


class Identity(msgspec.Struct, frozen=True):
    """A process in the merged trace: one role and rank of the training job.

    ``tag`` separates sources whose rank could not be determined (one process per file then),
    and role-less ranks of files that may be of several jobs (the OS process they state).
    """

    role: str
    rank: int | None
    tag: str = ""

    @property
    def label(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else (self.tag or "rank ?")
        if self.rank is not None and self.tag:  # a rank told apart by its process (no role to)
            who = f"{who} · {self.tag}"
        return f"{self.role} · {who}" if self.role else who


RANK_DIGITS = 40  # more digits than any rank has (2**128 has 39): such a value is not read as one


def as_rank(value: Any) -> int | None:
    """A rank from an int or a string of ASCII digits; None for anything else (``"²"``, a number of
    thousands of digits, a fraction). Never raises: one bad value costs that value, not the file."""
    if type(value) is int and 0 <= value < 10**RANK_DIGITS:
        return value
    if type(value) is str:
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= RANK_DIGITS:
            return int(text)
    return None


# What says "no rank" rather than a rank that cannot be read: Ascend writes rank_id -1 when not distributed.
NO_RANK = frozenset({-1, "-1", ""})


def rank_unreadable(value: Any) -> bool:
    """Whether a rank field gives a value (not null, not -1: no rank) that :func:`as_rank` cannot read."""
    if value is None or (type(value) in (int, str) and value in NO_RANK):
        return False
    return as_rank(value) is None
