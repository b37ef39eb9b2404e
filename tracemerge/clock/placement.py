"""What the clock stage takes and gives: what a file's summary says of its clock
(:class:`HasClock`), the options (:class:`AlignOptions`), and the placement of every file
(:class:`Alignment`, with a :class:`SourceClock` each saying how it was placed and how surely)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import msgspec
from msgspec import field

from tracemerge.clock.offsets import ManualOffset
from tracemerge.core.model import ClockDomain, Identity
from tracemerge.discovery.pins import PinnedFile
from tracemerge.evidence.anchors import PRESET_NAMES


class HasClock(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def clock(self) -> ClockDomain: ...
    @property
    def origin_ns(self) -> int: ...
    @property
    def ts_min(self) -> int: ...
    @property
    def ts_max(self) -> int: ...
    @property
    def host(self) -> str | None: ...
    @property
    def mtime_ns(self) -> int | None: ...
    @property
    def marks(self) -> dict[Identity, dict[str, list[tuple[int, int]]]]: ...
    @property
    def identities(self) -> dict: ...


class AlignOptions(msgspec.Struct, frozen=True):
    enabled: bool = True  # False: --no-align, every file keeps its raw clock
    offsets: tuple[ManualOffset, ...] = ()
    sync: tuple[str, ...] = ()  # --sync: span names that start at one instant in every process
    # The phase presets --phases named (all of them: auto): a preset's own sync spans are evidence
    # when it is the only one, or when a process's phases are the preset's (anchors.sync_presets).
    presets: tuple[str, ...] = PRESET_NAMES
    pinned: tuple[PinnedFile, ...] = ()  # files whose clock an archive's manifest relates to another's


AUTOMATIC = AlignOptions()


class SourceClock(msgspec.Struct):
    """How one file was placed on the trace's timeline."""

    path: Path
    clock: str  # the file's own clock
    method: str  # reference, exact, collectives, sync, session, manual, mtime, unrelated, raw
    offset_ns: int  # added to the file's clock time
    uncertainty_ns: int | None  # None: not known (hosts' NTP error, a guess from mtime)
    anchors: int  # evidence used (matched collectives, sync spans, sessions)
    against: str  # what it was aligned against
    confidence: str  # exact, high, medium, low, manual, none
    note: str = ""

    def as_dict(self) -> dict:
        return {
            "file": str(self.path),
            "clock": self.clock,
            "method": self.method,
            "offset_ns": self.offset_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "anchors": self.anchors,
            "against": self.against,
            "confidence": self.confidence,
            "note": self.note,
        }


class Alignment(msgspec.Struct):
    offsets: dict[Path, int]
    base_ns: int  # the trace's time zero, on the aligned timeline
    wall_clock: bool  # whether that timeline is Unix-epoch time
    sources: dict[Path, SourceClock] = field(default_factory=dict)
