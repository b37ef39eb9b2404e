"""What an archive's ``perfetto_manifest`` says of a file's clock: a :class:`PinnedFile`, found as
the archive is expanded (:mod:`tracemerge.discovery.archives`) and placed by the clock stage
(:mod:`tracemerge.clock.pinned`)."""

from __future__ import annotations

from pathlib import Path

import msgspec


class PinnedFile(msgspec.Struct, frozen=True):
    """A file placed by a given relation of its clock to another file's (a ``perfetto_manifest``'s
    ``clocks``): its raw times plus ``ns`` are ``against``'s raw times."""

    path: Path
    against: Path
    ns: int
    source: str  # how the report names where the relation was given

    def text(self) -> str:
        return f"{self.source}: {self.ns:+d}ns against {self.against.name}"
