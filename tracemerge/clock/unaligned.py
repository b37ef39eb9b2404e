"""Processes placed without clock evidence: nothing relates their clock to the rest of the run
(:mod:`tracemerge.clock`'s ``unrelated`` placement), so their times say nothing against the
others'. Their process title says so (``reward · rank 0 (unaligned)``), and the Pipeline group
has a warning row naming them (:mod:`tracemerge.phases.tracks`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tracemerge.clock.placement import Alignment
from tracemerge.core.model import Identity

# SourceClock methods that place a file on no evidence of its clock: nothing relates it, or only its
# modification time (its last event written about then, to within an hour).
WITHOUT_EVIDENCE = frozenset({"unrelated", "mtime"})
MARKER = " (unaligned)"


class HasProcesses(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def counts(self) -> dict: ...
    @property
    def threads(self) -> dict: ...
    @property
    def counter_series(self) -> dict: ...


def unaligned(scans: Iterable[HasProcesses], alignment: Alignment) -> dict[Identity, list[str]]:
    """Per process with a file placed without clock evidence, a line per such file: its name,
    why and where it was put."""
    out: dict[Identity, list[str]] = defaultdict(list)
    for s in scans:
        placed = alignment.sources.get(s.path)
        if placed is None or placed.method not in WITHOUT_EVIDENCE:
            continue
        line = f"{s.path.name}: {placed.against}" + (f", {placed.note}" if placed.note else "")
        for ident in sorted({*s.counts, *s.threads, *s.counter_series}, key=lambda i: (i.role, i.rank or 0, i.tag)):
            out[ident].append(line)
    return dict(out)


def title(ident: Identity, without_evidence: bool) -> str:
    """A process's title in the trace: its label, marked when it is not aligned."""
    return ident.label + MARKER if without_evidence else ident.label
