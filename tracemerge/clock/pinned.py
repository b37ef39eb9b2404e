"""Files whose clock an archive's ``perfetto_manifest`` relates to another file's.

A manifest entry ``{"path": B, "clocks": {"sync_to": {"file": A}, "offset_ns": X}}`` says that
B's raw times plus X are A's raw times (Perfetto reads a JSON trace's times raw, without
Kineto's ``baseTimeNanoseconds``). Such a file is placed by that relation alone, once the file it
names is placed, and reported as a placement given by hand (method ``manual``, like
``--offset``); it is no evidence for the other files.
"""

from __future__ import annotations

from pathlib import Path

from tracemerge.clock.placement import HasClock, SourceClock
from tracemerge.discovery.pins import PinnedFile


def place_pinned(
    held: list[HasClock], pins: dict[Path, PinnedFile], scans: dict[Path, HasClock], sources: dict[Path, SourceClock]
) -> None:
    """Place each file of ``held`` by its pin, those pinned to a pinned file after it; a file
    pinned to no file of the run (or in a ring of pins) keeps its own clock, said in its note."""
    todo = list(held)
    while todo:
        ready = [
            s for s in todo if pins[s.path].against in sources or pins[s.path].against not in {t.path for t in todo}
        ]
        if not ready:  # a ring of pins: the first is placed by its own clock
            ready = todo[:1]
        for s in ready:
            pin = pins[s.path]
            target, placed = scans.get(pin.against), sources.get(pin.against)
            if target is None or placed is None:
                offset, note = 0, f"{pin.against.name} is not placed in this run: the file keeps its own clock"
            else:
                # B's clock time + offset = A's raw time + A's origin + A's offset (see the module).
                offset, note = placed.offset_ns + pin.ns + target.origin_ns - s.origin_ns, ""
            sources[s.path] = SourceClock(s.path, s.clock.name, "manual", offset, 0, 0, pin.text(), "manual", note)
            todo.remove(s)
