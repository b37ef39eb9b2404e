"""Clock alignment, the stage between reading the files and deriving phases: every file's
timestamps on one timeline, and how sure that is.

Input: what each file's read noted (per file its clock, first timestamp, modification time, and
per process the clock evidence of :mod:`tracemerge.evidence.anchors`: collectives, sync spans, sessions),
with the options (``--no-align``, ``--offset``/``--offsets`` rules, ``--sync`` names, the phase
presets whose own sync spans count). Output: each file's placement, an :class:`Alignment` (per
file the offset added to its clock, the trace's time zero, whether that timeline is epoch time,
and a :class:`SourceClock` saying how the file was placed and how sure that is).

* :func:`align` places the files (:mod:`tracemerge.clock.alignment`), relating two files' clocks
  by their matched evidence (:mod:`tracemerge.clock.matching`);
* :func:`parse_offset`, :func:`load_offsets` and :func:`unmatched` read and check the offsets
  given by hand (:mod:`tracemerge.clock.offsets`);
* :mod:`tracemerge.clock.unaligned` names the processes placed without any clock evidence.
"""

from tracemerge.clock.alignment import align
from tracemerge.clock.offsets import ManualOffset, load_offsets, parse_offset, unmatched
from tracemerge.clock.placement import AUTOMATIC, Alignment, AlignOptions, SourceClock

__all__ = [
    "AUTOMATIC",
    "AlignOptions",
    "Alignment",
    "ManualOffset",
    "SourceClock",
    "align",
    "load_offsets",
    "parse_offset",
    "unmatched",
]
