"""The busiest kernels and ops of each process: the names that took the most device time.

The reads total each name's device time and count per process (:mod:`tracemerge.evidence.kernel_tally`:
the kernels, copies and sets, the collectives' device work and Ascend's tasks that the breakdown's
compute and communication are made of). Here each process keeps its :data:`TOP` names by total
device time, each with its share of the process's device busy time (the union of its compute and
communication). Over the whole profiled time, not per step: the tally keeps no times. Kernels run
at once on several streams can make the shares add up to more than 100%.
"""

from __future__ import annotations

import msgspec

from tracemerge.core.model import Identity
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.phases.device_time import Spans, intersection, merged

TOP = 10  # names kept per process


class Busiest(msgspec.Struct, frozen=True):
    """A process's busiest kernels and ops: (name, total device time in ns, count), the longest
    first; its device busy time and how many names it ran in all."""

    busy_ns: int
    top: list[tuple[str, int, int]]
    names: int


def busiest(
    kernels: dict[Identity, dict[str, tuple[int, int]]],
    units: dict[Identity, tuple[Spans, Spans]],
    top: int = TOP,
) -> dict[Identity, Busiest]:
    """Per process with a tally: its ``top`` names by total device time (then by name), and its
    busy time, the length of the union of its compute and communication (``units``)."""
    out = {}
    for ident, names in kernels.items():
        compute, comm = units.get(ident, ([], []))
        busy = _busy(compute, comm)
        ranked = sorted(names.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        out[ident] = Busiest(busy, [(name, total, count) for name, (total, count) in ranked], len(names))
    return out


def _busy(compute: Spans, comm: Spans) -> int:
    """The length of the union of two unions: |C| + |M| - |C ∩ M| from their columns when they
    are :class:`SpanUnion` (neither copied into a list of tuples nor into one joined union)."""
    if type(compute) is SpanUnion and type(comm) is SpanUnion:
        return _length(compute) + _length(comm) - _length(intersection(compute, comm))
    return sum(b - a for a, b in merged([*compute, *comm]) if b > a)


def _length(union: SpanUnion) -> int:
    """How much time the union covers."""
    starts, ends = union.columns()
    return int((ends - starts).sum())
